package ops

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
)

// Binaries built once by TestMain.
var cohortdBin, cohortctlBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(0)
	}
	var builds proc.Builds
	ctx, cancel := context.WithTimeout(context.Background(), proc.BuildTimeout)
	bins, err := builds.Build(ctx, "github.com/cohortlabs/cohort/cmd/cohortd", "github.com/cohortlabs/cohort/cmd/cohortctl")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = builds.Close()
		os.Exit(1)
	}
	cohortdBin, cohortctlBin = bins[0], bins[1]
	code := m.Run()
	_ = builds.Close()
	os.Exit(code)
}

// fastRaft are raft timings for tests: quick elections on loopback.
var fastRaft = []string{
	"--raft-heartbeat-timeout", "300ms", "--raft-election-timeout", "300ms", "--raft-leader-lease-timeout", "150ms",
	"--initial-rebalance-delay", "0", "--shutdown-timeout", "5s",
}

// node is one cohortd, across restarts.
type node struct {
	id                   string
	dir                  string
	raft, grpcAddr, http string
	// kafka is the node's Kafka listener address, served when the
	// cluster's kafka is set.
	kafka string
	args  []string

	out  *proc.Log     // every start's output
	proc *proc.Process // the latest start; nil before the first
}

// running reports whether the node's process was started and has not exited.
func (n *node) running() bool { return n.proc != nil && !n.proc.Exited() }

// cluster is a set of cohortd processes of one test.
type cluster struct {
	t      *testing.T
	common []string // flags every node gets
	token  string   // admin token the harness and cohortctl send
	// pki, when set, is the directory of the cluster's CA: every node runs
	// with a node certificate issued from it, and the harness and
	// cohortctl call with the admin certificate.
	pki string
	ca  *auth.CA
	// tlsMode is how nodes start from now on: "on", "permissive" (TLS and
	// plaintext, the migration mode) or "off"; callerTLS whether the
	// harness and cohortctl call with TLS.
	tlsMode   string
	callerTLS bool
	// kafka gives every node a Kafka listener (--kafka-addr).
	kafka bool

	mu    sync.Mutex
	nodes map[string]*node
	order []string
}

// newCluster makes an empty cluster; every process it starts is killed,
// and its output shown if the test failed, by t.Cleanup.
func newCluster(t *testing.T, common ...string) *cluster {
	return &cluster{t: t, common: append(append([]string{}, fastRaft...), common...), nodes: map[string]*node{}}
}

// newSecureCluster makes an empty cluster whose nodes run with mutual
// TLS: a CA in a temporary directory, a node certificate per node, and
// admin.crt and client.crt for the callers.
func newSecureCluster(t *testing.T, common ...string) *cluster {
	c := newCluster(t, common...)
	c.pki = t.TempDir()
	ca, err := auth.NewCA("ops test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(c.pki); err != nil {
		t.Fatal(err)
	}
	c.ca = ca
	c.tlsMode, c.callerTLS = "on", true
	for _, p := range []auth.Principal{{Role: auth.RoleAdmin, Name: "admin"}, {Role: auth.RoleClient, Name: "client"}} {
		if _, err := ca.IssueFiles(c.pki, p.Name, p, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// files are the PEM files of a certificate issued as base in the PKI.
func (c *cluster) files(base string) auth.Files {
	return auth.Files{Cert: filepath.Join(c.pki, base+".crt"), Key: filepath.Join(c.pki, base+".key"), CA: filepath.Join(c.pki, auth.CACertFile)}
}

// creds are a caller's credentials with the certificate issued as base
// (admin, client, a node ID); plaintext for a cluster without PKI.
func (c *cluster) creds(base string) client.Credentials {
	c.t.Helper()
	if c.pki == "" || !c.callerTLS {
		return client.Credentials{Token: c.token}
	}
	f := c.files(base)
	tc, err := client.LoadTLS(f.Cert, f.Key, f.CA)
	if err != nil {
		c.t.Fatal(err)
	}
	return client.Credentials{TLS: tc}
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
	ports := proc.PortsT(c.t, 4)
	n := &node{id: id, dir: filepath.Join(c.t.TempDir(), id), out: proc.NewLog(proc.DefaultKeep),
		raft: proc.LoopbackAddr(ports[0]), grpcAddr: proc.LoopbackAddr(ports[1]), http: proc.LoopbackAddr(ports[2]), kafka: proc.LoopbackAddr(ports[3])}
	if c.pki != "" {
		if _, err := c.ca.IssueFiles(c.pki, id, auth.Principal{Role: auth.RoleNode, Name: id}, []string{"127.0.0.1"}, time.Hour); err != nil {
			c.t.Fatal(err)
		}
	}
	proc.DumpOnFailure(c.t, id, n.out, 60)
	c.nodes[id] = n
	c.order = append(c.order, id)
	return n
}

// start starts (or restarts) a node's process with the common flags and args.
func (c *cluster) start(id string, args ...string) *node {
	c.t.Helper()
	n := c.alloc(id)
	if n.running() {
		c.t.Fatalf("start %s: already running", id)
	}
	all := append([]string{"--node-id", id, "--data-dir", n.dir, "--raft-addr", n.raft, "--grpc-addr", n.grpcAddr, "--http-addr", n.http}, c.common...)
	if c.kafka {
		all = append(all, "--kafka-addr", n.kafka)
	}
	if c.pki != "" && c.tlsMode != "off" {
		f := c.files(id)
		all = append(all, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)
		if c.tlsMode == "permissive" {
			all = append(all, "--tls-permissive")
		}
	}
	all = append(all, args...)
	n.args = all
	n.proc = proc.StartT(c.t, proc.Spec{Name: id, Path: cohortdBin, Args: all, Env: cleanEnv(), Log: n.out})
	return n
}

// kill stops a node like a crash.
func (c *cluster) kill(id string) {
	c.t.Helper()
	if err := c.nodes[id].proc.Kill(); err != nil {
		c.t.Fatal(err)
	}
}

// signal sends a node's process a signal; SIGSTOP and SIGCONT pause and
// resume it.
func (c *cluster) signal(id string, sig syscall.Signal) {
	c.t.Helper()
	if err := c.nodes[id].proc.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// waitExit waits for a node's process to exit on its own.
func (c *cluster) waitExit(id string, within time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := c.nodes[id].proc.Wait(ctx); errors.Is(err, proc.ErrRunning) {
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
		if n := c.nodes[id]; n.running() {
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
	return runCtlEnv(c.t, append(env, c.tlsEnv("admin")...), args...)
}

// tlsEnv is cohortctl's environment for the certificate issued as base.
func (c *cluster) tlsEnv(base string) []string {
	if c.pki == "" || !c.callerTLS {
		return nil
	}
	f := c.files(base)
	return []string{"COHORT_TLS_CERT=" + f.Cert, "COHORT_TLS_KEY=" + f.Key, "COHORT_TLS_CA=" + f.CA}
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
		conn, err := grpc.NewClient(addr, c.creds("admin").DialOptions()...)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
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
	proc.WaitFor(c.t, 60*time.Second, fmt.Sprintf("voters exactly %v, all healthy", ids), func() (bool, string) {
		for _, id := range ids {
			if n := c.nodes[id]; n.proc != nil && n.proc.Exited() {
				c.t.Fatalf("%s exited unexpectedly (%v):\n%s", id, n.proc.Err(), n.out.Tail(20))
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
			if !s.GetVoter() || !s.GetHealthy() || !slices.Contains(ids, s.GetNodeId()) {
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
