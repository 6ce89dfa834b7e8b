package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Test_Process_RunCluster_FormsOneClusterAndStopsCleanly runs what
// `make run` runs: scripts/run-cluster.sh with a freshly built cohortd. The
// three processes must form one cluster (one leader, three voters) and
// exit cleanly on SIGTERM.
func Test_Process_RunCluster_FormsOneClusterAndStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the cohortd binary")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bash is required to run scripts/run-cluster.sh: %v", err)
		}
		t.Skip("bash not found: ", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "cohortd")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build cohortd: %v\n%s", err, out)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "run-cluster.sh"))
	if err != nil {
		t.Fatal(err)
	}

	raftBase, grpcBase, httpBase := freePortRuns(t, 3)
	var out syncBuffer
	cmd := exec.Command(bash, script, bin, filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(),
		fmt.Sprintf("COHORT_RAFT_PORT_BASE=%d", raftBase),
		fmt.Sprintf("COHORT_GRPC_PORT_BASE=%d", grpcBase),
		fmt.Sprintf("COHORT_HTTP_PORT_BASE=%d", httpBase),
	)
	cmd.Stdout, cmd.Stderr = &out, &out
	// Own process group, so a failed test can kill the nodes too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start run-cluster.sh: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("cluster output:\n%s", out.String())
		}
	})

	grpcAddrs := make([]string, 3)
	httpAddrs := make([]string, 3)
	for i := range 3 {
		grpcAddrs[i] = fmt.Sprintf("127.0.0.1:%d", grpcBase+i)
		httpAddrs[i] = fmt.Sprintf("127.0.0.1:%d", httpBase+i)
	}
	clients := make([]cohortv1.ClusterServiceClient, 3)
	for i, addr := range grpcAddrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[i] = cohortv1.NewClusterServiceClient(conn)
	}

	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		ok, detail := clusterFormed(clients, httpAddrs)
		if ok {
			break
		}
		last = detail
		select {
		case err := <-exited:
			t.Fatalf("run-cluster.sh exited early: %v (last check: %s)", err, last)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster did not form: %s", last)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM run-cluster.sh: %v", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("run-cluster.sh after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("run-cluster.sh did not exit within 60s of SIGTERM")
	}
	if n := strings.Count(out.String(), "cohortd stopped cleanly"); n != 3 {
		t.Fatalf("%d nodes logged a clean stop, want 3", n)
	}
}

// clusterFormed reports whether the three nodes agree on exactly one
// leader, each has three voters in its raft configuration, and each is ready.
func clusterFormed(clients []cohortv1.ClusterServiceClient, httpAddrs []string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	leaders := map[string]bool{}
	var known []string
	for i, c := range clients {
		info, err := c.NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
		if err != nil {
			return false, fmt.Sprintf("node %d: %v", i+1, err)
		}
		if info.GetState() == cohortv1.RaftState_RAFT_STATE_LEADER {
			leaders[info.GetNodeId()] = true
		}
		known = append(known, info.GetLeaderId())
	}
	if len(leaders) != 1 {
		return false, fmt.Sprintf("leaders %v", leaders)
	}
	for _, k := range known {
		if !leaders[k] {
			return false, fmt.Sprintf("nodes see leaders %v, leader is %v", known, leaders)
		}
	}
	for _, addr := range httpAddrs {
		if code, body := httpGet(ctx, "http://"+addr+"/readyz"); code != http.StatusOK {
			return false, fmt.Sprintf("%s/readyz: %d %s", addr, code, body)
		}
		_, metrics := httpGet(ctx, "http://"+addr+"/metrics")
		if !strings.Contains(metrics, "\ncohort_raft_voters{") || !hasMetric(metrics, "cohort_raft_voters", "3") {
			return false, fmt.Sprintf("%s/metrics: cohort_raft_voters is not 3", addr)
		}
	}
	return true, ""
}

func hasMetric(text, name, value string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") && strings.HasSuffix(line, " "+value) {
			return true
		}
	}
	return false
}

func httpGet(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freePortRuns finds three bases, each starting n consecutive free ports
// on 127.0.0.1 (the script numbers node ports base, base+1, ...).
func freePortRuns(t *testing.T, n int) (int, int, int) {
	t.Helper()
	var bases []int
	used := map[int]bool{}
	for tries := 0; len(bases) < 3 && tries < 200; tries++ {
		base := 20000 + rand.IntN(30000)
		ok := true
		for p := base; p < base+n; p++ {
			if used[p] || !portFree(p) {
				ok = false
				break
			}
		}
		if ok {
			for p := base; p < base+n; p++ {
				used[p] = true
			}
			bases = append(bases, base)
		}
	}
	if len(bases) < 3 {
		t.Fatalf("no free port runs found")
	}
	return bases[0], bases[1], bases[2]
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// syncBuffer is a bytes.Buffer safe for the two output streams of a process.
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
