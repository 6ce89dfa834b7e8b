package ops

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
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
	"google.golang.org/grpc/metadata"
)

// Binaries built once by TestMain.
var cohortdBin, cohortctlBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "cohort-ops-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cohortdBin, cohortctlBin = filepath.Join(dir, "cohortd"), filepath.Join(dir, "cohortctl")
	for bin, pkg := range map[string]string{cohortdBin: "../../cmd/cohortd", cohortctlBin: "../../cmd/cohortctl"} {
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fastRaft are raft timings for tests: quick elections on loopback.
var fastRaft = []string{
	"--raft-heartbeat-timeout", "300ms", "--raft-election-timeout", "300ms", "--raft-leader-lease-timeout", "150ms",
	"--initial-rebalance-delay", "0", "--shutdown-timeout", "5s",
}

// node is one cohortd process.
type node struct {
	id                   string
	dir                  string
	raft, grpcAddr, http string
	args                 []string

	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// cluster is a set of cohortd processes of one test.
type cluster struct {
	t      *testing.T
	common []string // flags every node gets
	token  string   // admin token the harness and cohortctl send

	mu    sync.Mutex
	nodes map[string]*node
	order []string
}

func newCluster(t *testing.T, common ...string) *cluster {
	c := &cluster{t: t, common: append(append([]string{}, fastRaft...), common...), nodes: map[string]*node{}}
	t.Cleanup(func() {
		for _, id := range c.order {
			n := c.nodes[id]
			if n.cmd != nil && !n.exited() {
				_ = n.cmd.Process.Kill()
				<-n.done
			}
			if t.Failed() {
				t.Logf("---- %s output ----\n%s", id, tail(n.out.String(), 60))
			}
		}
	})
	return c
}

// form starts n nodes n1..nN that bootstrap together and waits for a leader.
func (c *cluster) form(n int, extra ...string) {
	c.t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("n%d", i+1)
		c.alloc(ids[i])
	}
	for _, id := range ids {
		c.start(id, append([]string{"--bootstrap-expect", fmt.Sprint(n), "--join", strings.Join(c.grpcAddrs(ids...), ",")}, extra...)...)
	}
	c.waitVoters(ids...)
}

// alloc reserves a node's ports and data dir (kept across restarts).
func (c *cluster) alloc(id string) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.nodes[id]; ok {
		return n
	}
	n := &node{id: id, dir: filepath.Join(c.t.TempDir(), id), raft: freeAddr(c.t), grpcAddr: freeAddr(c.t), http: freeAddr(c.t), out: &syncBuffer{}}
	c.nodes[id] = n
	c.order = append(c.order, id)
	return n
}

// start starts (or restarts) a node's process with the common flags and args.
func (c *cluster) start(id string, args ...string) *node {
	c.t.Helper()
	n := c.alloc(id)
	if n.cmd != nil && !n.exited() {
		c.t.Fatalf("start %s: already running", id)
	}
	all := append([]string{"--node-id", id, "--data-dir", n.dir, "--raft-addr", n.raft, "--grpc-addr", n.grpcAddr, "--http-addr", n.http}, c.common...)
	all = append(all, args...)
	n.args = all
	fmt.Fprintf(n.out, "==== start %s %s\n", id, strings.Join(all, " "))
	cmd := exec.Command(cohortdBin, all...)
	cmd.Stdout, cmd.Stderr = n.out, n.out
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() {
		n.err = cmd.Wait()
		close(n.done)
	}()
	return n
}

func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// kill stops a node like a crash.
func (c *cluster) kill(id string) {
	c.t.Helper()
	n := c.nodes[id]
	_ = n.cmd.Process.Kill()
	<-n.done
}

func (c *cluster) signal(id string, sig syscall.Signal) {
	c.t.Helper()
	if err := c.nodes[id].cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %s %v: %v", id, sig, err)
	}
}

// waitExit waits for a node's process to exit on its own.
func (c *cluster) waitExit(id string, within time.Duration) {
	c.t.Helper()
	select {
	case <-c.nodes[id].done:
	case <-time.After(within):
		c.t.Fatalf("%s did not exit within %s", id, within)
	}
}

func (c *cluster) grpcAddrs(ids ...string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, c.nodes[id].grpcAddr)
	}
	return out
}

// live are the gRPC addresses of running nodes.
func (c *cluster) live() []string {
	var out []string
	for _, id := range c.order {
		if n := c.nodes[id]; n.cmd != nil && !n.exited() {
			out = append(out, n.grpcAddr)
		}
	}
	return out
}

// ctlResult is one cohortctl run.
type ctlResult struct {
	stdout, stderr string
	code           int
}

func (r ctlResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs cohortctl against the live nodes.
func (c *cluster) ctl(args ...string) ctlResult {
	c.t.Helper()
	env := []string{"COHORT_ENDPOINTS=" + strings.Join(c.live(), ",")}
	if c.token != "" {
		env = append(env, "COHORT_ADMIN_TOKEN="+c.token)
	}
	return runCtlEnv(c.t, env, args...)
}

func runCtl(t *testing.T, endpoints string, args ...string) ctlResult {
	t.Helper()
	return runCtlEnv(t, []string{"COHORT_ENDPOINTS=" + endpoints}, args...)
}

// runCtlEnv runs cohortctl with extra environment variables.
func runCtlEnv(t *testing.T, env []string, args ...string) ctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cohortctlBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run cohortctl %v: %v", args, err)
	}
	return ctlResult{so.String(), se.String(), code}
}

// mustCtl runs cohortctl and fails the test on a non-zero exit.
func (c *cluster) mustCtl(args ...string) string {
	c.t.Helper()
	r := c.ctl(args...)
	if r.code != 0 {
		c.t.Fatalf("cohortctl %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// status asks the live nodes for the cluster status.
func (c *cluster) status() (*cohortv1.StatusResponse, error) {
	var lastErr error
	for _, addr := range c.live() {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if c.token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
		}
		st, err := cohortv1.NewClusterServiceClient(conn).Status(ctx, &cohortv1.StatusRequest{})
		cancel()
		conn.Close()
		if err == nil {
			return st, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("no node answered Status: %w", lastErr)
}

// describe summarises a status for messages.
func describe(st *cohortv1.StatusResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "leader %s term %d:", st.GetLeaderId(), st.GetTerm())
	for _, s := range st.GetServers() {
		fmt.Fprintf(&b, " %s(voter=%t healthy=%t lag=%d ap=%s %s)", s.GetNodeId(), s.GetVoter(), s.GetHealthy(), s.GetLag(), s.GetAutopilotState(), s.GetReason())
	}
	return b.String()
}

// waitVoters waits until the configuration is exactly these healthy
// voters (no non-voters) and returns the status.
func (c *cluster) waitVoters(ids ...string) *cohortv1.StatusResponse {
	c.t.Helper()
	var st *cohortv1.StatusResponse
	waitFor(c.t, 60*time.Second, fmt.Sprintf("voters exactly %v, all healthy", ids), func() (bool, string) {
		for _, id := range ids {
			if n := c.nodes[id]; n.cmd != nil && n.exited() {
				c.t.Fatalf("%s exited unexpectedly (%v):\n%s", id, n.err, tail(n.out.String(), 20))
			}
		}
		var err error
		st, err = c.status()
		if err != nil {
			return false, err.Error()
		}
		if len(st.GetServers()) != len(ids) {
			return false, describe(st)
		}
		for _, s := range st.GetServers() {
			if !s.GetVoter() || !s.GetHealthy() || !contains(ids, s.GetNodeId()) {
				return false, describe(st)
			}
		}
		return true, ""
	})
	return st
}

// server finds a server in a status.
func server(st *cohortv1.StatusResponse, id string) *cohortv1.ServerStatus {
	for _, s := range st.GetServers() {
		if s.GetNodeId() == id {
			return s
		}
	}
	return nil
}

// waitFor polls cond every 50ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", within, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var (
	portsMu sync.Mutex
	used    = map[int]bool{}
)

// freeAddr picks a free loopback port below the kernel's ephemeral range
// (32768 and up on Linux), so that no outgoing connection of this or
// another process takes it between the check and cohortd's listen.
func freeAddr(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		if used[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		used[p] = true
		return l.Addr().String()
	}
	t.Fatalf("no free port found")
	return ""
}

// cleanEnv is the environment without COHORT_* variables, so that the
// developer's settings do not leak into the processes.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COHORT_") {
			out = append(out, kv)
		}
	}
	return out
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
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
