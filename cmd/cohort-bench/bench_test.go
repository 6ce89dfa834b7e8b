package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// benchTarget starts an in-process three-node cluster for a benchmark.
func benchTarget(b *testing.B) (*target, *globalOptions) {
	b.Helper()
	g := &globalOptions{cluster: "inprocess", dir: b.TempDir(), timeout: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t, err := g.openTarget(ctx, "")
	if err != nil {
		b.Fatalf("start cluster: %v", err)
	}
	b.Cleanup(func() { _ = t.Close() })
	return t, g
}

func reportLoad(b *testing.B, r loadResult) {
	b.Helper()
	if r.errors > 0 {
		b.Fatalf("%d of %d operations failed; first: %v", r.errors, r.ops+r.errors, r.firstErr)
	}
	b.ReportMetric(r.rate(), "ops/s")
	b.ReportMetric(float64(r.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
}

// BenchmarkCommits measures, on one in-process three-node cluster, raw
// replicated apply (Node.Apply on the leader) and offset commits through
// the client library (Member.Commit from 16 members, and a standalone
// committer on client.Dial) at concurrency 1, 16 and 256.
//
//	go test -run '^$' -bench BenchmarkCommits -benchtime 5000x ./cmd/cohort-bench/
func BenchmarkCommits(b *testing.B) {
	t, g := benchTarget(b)
	ctx := context.Background()
	loads := map[string]func(context.Context, int, int64) error{}
	for _, mode := range []string{"member", "conn"} {
		op, _, closeLoad, err := commitLoad(ctx, g, t, commitOptions{mode: mode, members: 16, partitions: 256})
		if err != nil {
			b.Fatalf("prepare %s commits: %v", mode, err)
		}
		b.Cleanup(closeLoad)
		loads[mode] = op
	}
	for _, conc := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("path=raw/conc=%d", conc), func(b *testing.B) {
			r, err := rawPhase(ctx, t, conc, limit{ops: int64(b.N)}, 256)
			if err != nil {
				b.Fatal(err)
			}
			reportLoad(b, r)
		})
		for _, mode := range []string{"member", "conn"} {
			b.Run(fmt.Sprintf("path=client-%s/conc=%d", mode, conc), func(b *testing.B) {
				reportLoad(b, runLoad(ctx, conc, limit{ops: int64(b.N)}, loads[mode]))
			})
		}
	}
}

// TestTLSCost_RunsBothSidesWithoutErrors runs tls-cost at the smallest
// scale (in-process clusters throughout): every phase and round on the
// plaintext and the TLS cluster succeeds, so members' client certificates
// and the admin certificate of topic creation, member-less commits and
// TransferLeadership are each accepted where they are used.
func TestTLSCost_RunsBothSidesWithoutErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four clusters")
	}
	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"tls-cost", "--dir", t.TempDir(), "--timeout", "5m",
		"--concurrency", "1,4", "--duration", "200ms", "--warmup", "100ms", "--pairs", "1", "--members", "2",
		"--failover-cluster", "inprocess", "--failover-modes", "kill,transfer", "--kills", "1", "--failover-members", "2"})
	err := root.ExecuteContext(context.Background())
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	phases, rounds := 0, 0
	for _, line := range strings.Split(out.String(), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.Contains(line, " pair ") && strings.Contains(line, " TLS "):
			phases++
			if !strings.HasSuffix(line, "errors 0") {
				t.Errorf("a commit phase failed: %s", line)
			}
		case strings.Contains(line, " round ") && strings.Contains(line, " TLS "):
			rounds++
			if !strings.HasSuffix(line, "new generations 0, reassignments 0") {
				t.Errorf("a failover round rebalanced: %s", line)
			}
		}
	}
	// 3 paths × 2 concurrencies × 1 pair × 2 sides; 2 modes × 1 round × 2 sides.
	if phases != 12 || rounds != 4 {
		t.Errorf("%d commit phases and %d failover rounds, want 12 and 4", phases, rounds)
	}
	for _, want := range []string{"ops on/off", "commit on/off", "tls-cost done in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestTLSTarget_CallersHoldTheirRoles checks the started TLS cluster
// enforces authorization and that the target's credentials are a client's
// and an admin's: plaintext is refused, the members' certificate may not
// create topics, the admin's may, and --mode conn's member-less commits
// (an admin's) succeed.
func TestTLSTarget_CallersHoldTheirRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	g := &globalOptions{cluster: "inprocess", dir: t.TempDir(), timeout: time.Minute, tls: true}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tg, err := g.openTarget(ctx, "")
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	defer tg.Close()
	if !tg.tls || tg.member.TLS == nil || tg.admin.TLS == nil {
		t.Fatalf("target without TLS credentials: %+v", tg)
	}
	create := func(creds client.Credentials, name string) error {
		conn, err := client.Dial(client.ConnConfig{Endpoints: tg.addrs, Credentials: creds, RetryBackoffMax: 100 * time.Millisecond, RequestTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = conn.Topics().CreateTopic(cctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: 1})
		return err
	}
	if err := create(client.Credentials{}, "plain"); err == nil {
		t.Error("a plaintext caller created a topic on the TLS cluster")
	}
	if err := create(tg.member, "member"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the members' certificate creating a topic: %v, want PermissionDenied", err)
	}
	if err := create(tg.admin, "admin"); err != nil {
		t.Errorf("the admin certificate creating a topic: %v", err)
	}
	op, _, closeLoad, err := commitLoad(ctx, g, tg, commitOptions{mode: "conn", partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLoad()
	if r := runLoad(ctx, 2, limit{ops: 20}, op); r.errors > 0 || r.ops != 20 {
		t.Errorf("member-less commits with the admin certificate: %d ok, %d failed (first: %v)", r.ops, r.errors, r.firstErr)
	}
}

// TestTLSFlags_FitTheCluster: --tls is for a started cluster, --tls-* for
// --endpoints, and the files go together.
func TestTLSFlags_FitTheCluster(t *testing.T) {
	ep := []string{"127.0.0.1:1"}
	files := auth.Files{Cert: "c", Key: "k", CA: "ca"}
	for _, tc := range []struct {
		name string
		g    globalOptions
		want string
	}{
		{"--tls, own cluster", globalOptions{tls: true}, ""},
		{"--tls-*, endpoints", globalOptions{endpoints: ep, tlsFiles: files}, ""},
		{"--tls-admin-*, endpoints", globalOptions{endpoints: ep, tlsFiles: files, tlsAdmin: auth.Files{Cert: "a", Key: "ak"}}, ""},
		{"--tls with endpoints", globalOptions{endpoints: ep, tls: true}, "--tls starts a cluster"},
		{"--tls-* without endpoints", globalOptions{tlsFiles: files}, "for a running cluster"},
		{"no key", globalOptions{endpoints: ep, tlsFiles: auth.Files{Cert: "c", CA: "ca"}}, "go together"},
		{"admin cert without key", globalOptions{endpoints: ep, tlsFiles: files, tlsAdmin: auth.Files{Cert: "a"}}, "--tls-admin-key"},
		{"admin cert alone", globalOptions{endpoints: ep, tlsAdmin: auth.Files{Cert: "a", Key: "ak"}}, "needs --tls-cert"},
	} {
		err := tc.g.checkTLS()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
