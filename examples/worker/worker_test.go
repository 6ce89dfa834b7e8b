package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// TestProcess_Worker_JoinsCommitsAndLeavesOnSIGINT runs the README's first
// consumer the way a newcomer does: `make run` (scripts/run-cluster.sh with
// a built cohortd, on reserved ports instead of 9001-9003), then the worker
// binary creating its topic. The worker must print its assignment, commit
// offsets the cluster then serves back, and on SIGINT exit 0 having left the
// group: the group is Empty right after the exit, long before the 10 s
// session timeout could have expired the member.
func TestProcess_Worker_JoinsCommitsAndLeavesOnSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cohortd and the worker")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bash is required to run scripts/run-cluster.sh: %v", err)
		}
		t.Skip("bash not found: ", err)
	}
	var builds proc.Builds
	t.Cleanup(func() { _ = builds.Close() })
	bins, err := builds.Build(context.Background(), "github.com/cohortlabs/cohort/cmd/cohortd", "github.com/cohortlabs/cohort/examples/worker")
	if err != nil {
		t.Fatal(err)
	}
	cohortd, worker := bins[0], bins[1]
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "run-cluster.sh"))
	if err != nil {
		t.Fatal(err)
	}

	raftBase, grpcBase, httpBase := proc.PortRunT(t, 3), proc.PortRunT(t, 3), proc.PortRunT(t, 3)
	cluster := proc.StartT(t, proc.Spec{
		Name: "run-cluster.sh", Path: bash, Args: []string{script, cohortd, filepath.Join(t.TempDir(), "data")},
		Env: append(os.Environ(),
			fmt.Sprintf("COHORT_RAFT_PORT_BASE=%d", raftBase),
			fmt.Sprintf("COHORT_GRPC_PORT_BASE=%d", grpcBase),
			fmt.Sprintf("COHORT_HTTP_PORT_BASE=%d", httpBase),
		),
		OwnGroup: true, // a SIGKILL at cleanup reaches the nodes too
	})
	// Before StartT's kill: the script stops its nodes cleanly on SIGTERM.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(ctx); err != nil {
			t.Errorf("stop run-cluster.sh: %v", err)
		}
	})
	endpoints := fmt.Sprintf("%s,%s,%s", proc.LoopbackAddr(grpcBase), proc.LoopbackAddr(grpcBase+1), proc.LoopbackAddr(grpcBase+2))

	conn, err := client.Dial(client.ConnConfig{Endpoints: strings.Split(endpoints, ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	proc.WaitFor(t, 60*time.Second, "the cluster to serve", func() (bool, string) {
		if cluster.Exited() {
			t.Fatalf("run-cluster.sh exited early: %v", cluster.Err())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := conn.Topics().ListTopics(ctx, &cohortv1.ListTopicsRequest{})
		return err == nil, fmt.Sprint(err)
	})

	w := proc.StartT(t, proc.Spec{Name: "worker", Path: worker, Args: []string{
		"--endpoints", endpoints, "--group", "g", "--topic", "t",
		"--create-topic-partitions", "4", "--commit-interval", "200ms",
	}})
	waitOutput(t, w, `generation \d+: assigned t/0 t/1 t/2 t/3 \(4 partitions\)`)
	committed := waitOutput(t, w, `generation \d+: committed t/0=(\d+) t/1=(\d+) t/2=(\d+) t/3=(\d+)`)

	// The cluster serves what the worker said it committed (or more: it
	// keeps committing).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fetched, err := conn.Groups().OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g"})
	if err != nil {
		t.Fatalf("OffsetFetch g: %v", err)
	}
	got := map[int32]int64{}
	for _, p := range fetched.GetPartitions() {
		got[p.GetPartition()] = p.GetOffset()
	}
	for i, s := range committed[1:] {
		printed, _ := strconv.ParseInt(s, 10, 64)
		if printed <= 0 || got[int32(i)] < printed {
			t.Errorf("t/%d: worker printed committed offset %d, cluster has %d", i, printed, got[int32(i)])
		}
	}
	if g := describe(t, conn); g.GetState() != "Stable" || len(g.GetMembers()) != 1 || g.GetMembers()[0].GetClientId() != "examples/worker" {
		t.Fatalf("group g while the worker runs: state %s, members %v; want Stable with the worker", g.GetState(), g.GetMembers())
	}

	if err := w.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelWait()
	if err := w.Wait(waitCtx); err != nil {
		t.Fatalf("worker after SIGINT: %v, want exit 0", err)
	}
	if !strings.Contains(w.Log().String(), "left group g") {
		t.Fatalf("worker did not report leaving:\n%s", w.Log().String())
	}
	// A linearizable read right after the exit: only a LeaveGroup explains
	// an empty group this soon.
	if g := describe(t, conn); g.GetState() != "Empty" || len(g.GetMembers()) != 0 {
		t.Fatalf("group g after the worker exited: state %s, %d members; want Empty (the member left)", g.GetState(), len(g.GetMembers()))
	}
	t.Logf("worker output:\n%s", w.Log().String())
}

func describe(t *testing.T, conn *client.Conn) *cohortv1.GroupDescription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := conn.Groups().DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
	if err != nil || len(resp.GetGroups()) != 1 {
		t.Fatalf("DescribeGroups g: %v (%d groups)", err, len(resp.GetGroups()))
	}
	return resp.GetGroups()[0]
}

// waitOutput waits for p's output to match pattern and returns the match
// and its submatches.
func waitOutput(t *testing.T, p *proc.Process, pattern string) []string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var m []string
	proc.WaitFor(t, 30*time.Second, fmt.Sprintf("%s output /%s/", p.Name(), pattern), func() (bool, string) {
		if p.Exited() {
			t.Fatalf("%s exited: %v", p.Name(), p.Err())
		}
		m = re.FindStringSubmatch(p.Log().String())
		return m != nil, "last lines: " + p.Log().Tail(3)
	})
	return m
}
