package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestProcess_RunCluster_FormsOneClusterAndStopsCleanly runs what
// `make run` runs: scripts/run-cluster.sh with a freshly built cohortd. The
// three processes must form one cluster (one leader, three voters) and
// exit cleanly on SIGTERM.
func TestProcess_RunCluster_FormsOneClusterAndStopsCleanly(t *testing.T) {
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
	bin := cohortdBinary(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "run-cluster.sh"))
	if err != nil {
		t.Fatal(err)
	}

	raftBase, grpcBase, httpBase := proc.PortRunT(t, 3), proc.PortRunT(t, 3), proc.PortRunT(t, 3)
	// Own process group, so that the cleanup kills the nodes too.
	cluster := proc.StartT(t, proc.Spec{Name: "run-cluster.sh", Path: bash, Args: []string{script, bin, filepath.Join(dir, "data")},
		Env: append(os.Environ(),
			fmt.Sprintf("COHORT_RAFT_PORT_BASE=%d", raftBase),
			fmt.Sprintf("COHORT_GRPC_PORT_BASE=%d", grpcBase),
			fmt.Sprintf("COHORT_HTTP_PORT_BASE=%d", httpBase),
		),
		OwnGroup: true,
	})

	grpcAddrs := make([]string, 3)
	httpAddrs := make([]string, 3)
	for i := range 3 {
		grpcAddrs[i] = proc.LoopbackAddr(grpcBase + i)
		httpAddrs[i] = proc.LoopbackAddr(httpBase + i)
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

	var last string
	proc.WaitFor(t, 60*time.Second, "the cluster to form", func() (bool, string) {
		if cluster.Exited() {
			t.Fatalf("run-cluster.sh exited early: %v (last check: %s)", cluster.Err(), last)
		}
		ok, detail := clusterFormed(clients, httpAddrs)
		last = detail
		return ok, detail
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cluster.Stop(ctx); err != nil {
		t.Fatalf("run-cluster.sh after SIGTERM: %v, want exit 0", err)
	}
	if n := strings.Count(cluster.Log().String(), "cohortd stopped cleanly"); n != 3 {
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
		// The leader's configured budgets are replicated to every node.
		if want := fmt.Sprintf("\ncohort_budget_limit{budget=\"topics\"} %d\n", fsm.DefaultBudgets().Topics); !strings.Contains(metrics, want) {
			return false, fmt.Sprintf("%s/metrics: no %q", addr, strings.TrimSpace(want))
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
