package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// Test_Process_Worker_JoinsCommitsAndLeavesOnSIGINT runs the README's first
// consumer the way a newcomer does: `make run` (scripts/run-cluster.sh with
// a built cohortd, on free ports instead of 9001-9003), then the worker
// binary creating its topic. The worker must print its assignment, commit
// offsets the cluster then serves back, and on SIGINT exit 0 having left the
// group: the group is Empty right after the exit, long before the 10 s
// session timeout could have expired the member.
func Test_Process_Worker_JoinsCommitsAndLeavesOnSIGINT(t *testing.T) {
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
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/cohortd", "./examples/worker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build cohortd and worker: %v\n%s", err, out)
	}

	raftBase, grpcBase, httpBase := freePortRuns(t, 3)
	cluster := exec.Command(bash, filepath.Join(root, "scripts", "run-cluster.sh"), filepath.Join(dir, "cohortd"), filepath.Join(dir, "data"))
	cluster.Env = append(os.Environ(),
		fmt.Sprintf("COHORT_RAFT_PORT_BASE=%d", raftBase),
		fmt.Sprintf("COHORT_GRPC_PORT_BASE=%d", grpcBase),
		fmt.Sprintf("COHORT_HTTP_PORT_BASE=%d", httpBase),
	)
	clusterProc := start(t, "run-cluster.sh", cluster)
	endpoints := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", grpcBase, grpcBase+1, grpcBase+2)

	conn, err := client.Dial(client.ConnConfig{Endpoints: strings.Split(endpoints, ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	testcluster.WaitFor(t, 60*time.Second, "the cluster to serve", func() (bool, string) {
		if clusterProc.hasExited() {
			t.Fatalf("run-cluster.sh exited early:\n%s", clusterProc.out.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := conn.Topics().ListTopics(ctx, &cohortv1.ListTopicsRequest{})
		return err == nil, fmt.Sprint(err)
	})

	worker := start(t, "worker", exec.Command(filepath.Join(dir, "worker"),
		"--endpoints", endpoints, "--group", "g", "--topic", "t",
		"--create-topic-partitions", "4", "--commit-interval", "200ms"))
	waitOutput(t, worker, `generation \d+: assigned t/0 t/1 t/2 t/3 \(4 partitions\)`)
	committed := waitOutput(t, worker, `generation \d+: committed t/0=(\d+) t/1=(\d+) t/2=(\d+) t/3=(\d+)`)

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

	if err := worker.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT worker: %v", err)
	}
	select {
	case <-worker.exited:
		if worker.err != nil {
			t.Fatalf("worker after SIGINT: %v, want exit 0\n%s", worker.err, worker.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("worker did not exit within 20s of SIGINT\n%s", worker.out.String())
	}
	if !strings.Contains(worker.out.String(), "left group g") {
		t.Fatalf("worker did not report leaving:\n%s", worker.out.String())
	}
	// A linearizable read right after the exit: only a LeaveGroup explains
	// an empty group this soon.
	if g := describe(t, conn); g.GetState() != "Empty" || len(g.GetMembers()) != 0 {
		t.Fatalf("group g after the worker exited: state %s, %d members; want Empty (the member left)", g.GetState(), len(g.GetMembers()))
	}
	t.Logf("worker output:\n%s", worker.out.String())
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

// waitOutput waits for a line of p's output matching pattern and returns
// the match and its submatches.
func waitOutput(t *testing.T, p *process, pattern string) []string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var m []string
	testcluster.WaitFor(t, 30*time.Second, fmt.Sprintf("%s output /%s/", p.name, pattern), func() (bool, string) {
		if p.hasExited() {
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.out.String())
		}
		m = re.FindStringSubmatch(p.out.String())
		return m != nil, "output so far:\n" + p.out.String()
	})
	return m
}

// process is a started command with its combined output.
type process struct {
	name   string
	cmd    *exec.Cmd
	out    syncBuffer
	exited chan struct{} // closed once Wait returned; err is then set
	err    error
}

func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// start runs cmd in its own process group. Cleanup sends the group SIGTERM
// (run-cluster.sh then stops its nodes cleanly), SIGKILL after 30 s, and
// waits for the exit, so the test's directories are free when removed.
func start(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{name: name, cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		if !p.hasExited() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s of SIGTERM; killing it", name)
		}
		// The group may outlive its leader (the nodes of a killed script).
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// freePortRuns finds three bases, each starting n consecutive free ports on
// 127.0.0.1 (run-cluster.sh numbers node ports base, base+1, ...), below
// Linux's ephemeral range so no outgoing connection takes them meanwhile.
func freePortRuns(t *testing.T, n int) (raft, grpc, http int) {
	t.Helper()
	var bases []int
	used := map[int]bool{}
	for tries := 0; len(bases) < 3 && tries < 200; tries++ {
		base := 20000 + rand.IntN(12000)
		free := true
		for p := base; p < base+n && free; p++ {
			free = !used[p] && portFree(p)
		}
		if free {
			for p := base; p < base+n; p++ {
				used[p] = true
			}
			bases = append(bases, base)
		}
	}
	if len(bases) < 3 {
		t.Fatalf("no three runs of %d free ports found", n)
	}
	return bases[0], bases[1], bases[2]
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	return l.Close() == nil
}

// syncBuffer is a bytes.Buffer safe for a process's two output streams and
// the test reading them.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
