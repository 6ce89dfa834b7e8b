package workload

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cohortlabs/cohort/chaos/cluster"
	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/internal/proc"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// sendEach sends every probe of w once to each endpoint, with the probe's
// caller's credential, and judges the answers as Run does (Run picks them
// at random).
func sendEach(t *testing.T, ctx context.Context, w *Hostile, endpoints []string) {
	t.Helper()
	asked := 0
	connect, err := w.connector(&asked)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range endpoints {
		for _, p := range w.probes {
			h, err := connect(ep, p.as)
			if err != nil {
				t.Fatal(err)
			}
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			w.judge(p, p.send(pctx, h, nil))
			pcancel()
			h.conn.Close()
		}
	}
}

// checkVerdict fails the test on a broken promise or a probe that was
// never refused (or answered) as promised.
func checkVerdict(t *testing.T, w *Hostile) {
	t.Helper()
	summary, violations := w.Verdict()
	t.Log(summary)
	if len(violations) > 0 {
		t.Fatalf("broken promises:\n%s", strings.Join(violations, "\n"))
	}
	for _, p := range w.probes {
		if p.accept {
			continue // a flood: below its budget it is accepted
		}
		if w.kept[p.name] == 0 {
			t.Errorf("probe %q was never refused (or answered) as promised (sent %d)", p.name, w.sent[p.name])
		}
	}
}

// Against a real cluster with the hostile run's budgets, every hostile
// probe is refused with the promised code and none is accepted.
func TestHostile_EveryProbeRefusedAsPromised(t *testing.T) {
	cfg := testcluster.DefaultCoordinator()
	cfg.Budgets.Topics, cfg.Budgets.MembersPerGroup = 24, 16
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := createTopic(ctx, c.Addrs(), client.Credentials{}, GroupsTopic, 6); err != nil {
		t.Fatal(err)
	}
	w := &Hostile{Endpoints: c.Addrs(), Log: slog.New(slog.DiscardHandler)}
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	sendEach(t, ctx, w, c.Addrs())
	checkVerdict(t, w)
	if summary, _ := w.Verdict(); !strings.Contains(summary, "no authorization probes") {
		t.Fatalf("a plaintext run's summary does not say it sent no authorization probes: %s", summary)
	}
}

// With mutual TLS (a cohortd cluster of chaos/cluster, in local mode):
// the consumer's probes sent with the client credential still reach the
// limits and are refused as before; a client calling admin RPCs, a caller
// without a certificate and one with an admin certificate of another CA
// are refused by authorization, a client sees no member IDs, and the
// refused calls changed nothing.
func TestHostile_TLS_AuthorizationProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
	var builds proc.Builds
	defer builds.Close()
	cohortd := builds.BuildT(t, "github.com/cohortlabs/cohort/cmd/cohortd")
	cl, err := cluster.New(cluster.Config{Mode: cluster.ModeLocal, Nodes: 3, Instance: 198, Binary: cohortd,
		LogDir: filepath.Join(t.TempDir(), "logs"), TLS: true,
		ExtraArgs: append([]string{"--initial-rebalance-delay", "0", "--shutdown-timeout", "5s"}, HostileBudgetFlags...)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			for _, n := range cl.Nodes {
				if b, err := os.ReadFile(n.LogPath); err == nil {
					t.Logf("%s:\n%s", n.ID, b)
				}
			}
		}
		if err := cl.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cl.WaitLeaderAfterStart(ctx); err != nil {
		t.Fatal(err)
	}
	creds := Credentials{Client: cl.ClientCredentials(), Admin: cl.AdminCredentials()}
	if err := createTopic(ctx, cl.Endpoints(), creds.Admin, GroupsTopic, 6); err != nil {
		t.Fatal(err)
	}
	w := &Hostile{Endpoints: cl.Endpoints(), Log: slog.New(slog.DiscardHandler), Creds: creds}
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	// A member, so that a client has member IDs to be shown.
	m, err := client.NewMember(client.Config{Endpoints: cl.Endpoints(), GroupID: "hostile-seen", Topics: []string{GroupsTopic},
		SessionTimeout: 6 * time.Second, Credentials: creds.Client})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- m.Run(mctx) }()
	defer func() { stop(); <-ran }()
	for m.MemberID() == "" || m.Generation() < 1 {
		select {
		case <-ctx.Done():
			t.Fatal("the member never joined")
		case err := <-ran:
			t.Fatalf("member: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	sendEach(t, ctx, w, cl.Endpoints())
	w.Final(ctx)
	checkVerdict(t, w)
	if summary, _ := w.Verdict(); !strings.Contains(summary, "final check: the refused calls changed nothing") {
		t.Fatalf("the final check did not run or found a change: %s", summary)
	}
	authz := 0
	for _, p := range w.probes {
		if p.denied {
			authz++
		}
	}
	if authz == 0 {
		t.Fatal("no authorization probes in a TLS run")
	}
}

// The topic flood reaches the topics budget and is refused there.
func TestHostile_TopicFloodStopsAtTheBudget(t *testing.T) {
	cfg := testcluster.DefaultCoordinator()
	cfg.Budgets.Topics = 24
	c := testcluster.Start(t, 1, testcluster.Options{Coordinator: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &Hostile{Endpoints: c.Addrs(), Log: slog.New(slog.DiscardHandler)}
	w.init()
	cc, err := grpc.NewClient(c.Addr(0), dialOptions(client.Credentials{})...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	asked := 0
	h := newHostileConn(cc, &asked)
	var flood probe
	for _, p := range w.probes {
		if p.name == "topic flood" {
			flood = p
		}
	}
	for range hostileTopics {
		w.judge(flood, flood.send(ctx, h, nil))
	}
	if _, v := w.Verdict(); len(v) > 0 || w.kept[flood.name] != hostileTopics-24 {
		t.Fatalf("%d of %d flood topics refused (want %d), violations %v", w.kept[flood.name], hostileTopics, hostileTopics-24, v)
	}
}
