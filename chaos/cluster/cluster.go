// Package cluster runs real cohortd processes for the chaos suite and
// injects faults from outside them: kill -9, restart, SIGSTOP/SIGCONT, and
// (in netns mode) network partitions with iptables inside each node's own
// network namespace.
//
// Two modes:
//   - netns: each node in its own network namespace (cch<I>-n<k>) with its
//     own address 10.77.<I>.<10+k> on a bridge (cch<I>-br) the cluster
//     creates; partitions drop packets on a node's INPUT chain. Needs root,
//     ip(8) and iptables(8).
//   - local: nodes on 127.0.0.1 with their own ports; kill and pause only.
//
// With Config.TLS (the runner's default) the cluster runs with mutual TLS:
// New makes a CA and a certificate per node (node/<id>, valid for the
// node's address) and for two callers, an admin (cluster operations, the
// nemeses, cohortctl) and a client (group members), and every cohortd gets
// --tls-cert, --tls-key and --tls-ca, so Raft and gRPC speak TLS 1.3 and
// every gRPC caller must show a certificate of that CA.
//
// What it must never do: send traffic anywhere but loopback and the
// 10.77.<I>.0/24 network it creates, or leave a namespace, link, iptables
// rule, process or directory behind. Everything it makes is named with the
// instance's prefix, and New first removes whatever a crashed run with the
// same prefix left.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// Mode is how nodes are isolated.
type Mode string

const (
	ModeNetns Mode = "netns"
	ModeLocal Mode = "local"
)

// Config configures a cluster.
type Config struct {
	Mode  Mode
	Nodes int // 3 or 5
	// Instance separates concurrent runs on one machine: it picks the name
	// prefix (cch<Instance>) and the subnet (10.77.<Instance>.0/24).
	Instance int
	// Binary is the cohortd to run; CtlBinary the cohortctl (membership
	// faults; optional).
	Binary    string
	CtlBinary string
	// LogDir receives one log file per node (appended across restarts).
	LogDir string
	// ExtraArgs are passed to every cohortd.
	ExtraArgs []string
	// TLS runs the cluster with mutual TLS (a PKI made by New). Without
	// it the nodes run in plaintext, with --insecure in netns mode.
	TLS    bool
	Logger *slog.Logger
}

// Node is one cohortd.
type Node struct {
	ID       string // n1..n5, also the raft server ID
	Index    int    // 1-based
	IP       string
	RaftAddr string
	GRPCAddr string
	HTTPAddr string
	// KafkaAddr is the node's Kafka listener (--kafka-addr); with TLS it
	// serves the node's certificate, as gRPC does.
	KafkaAddr string
	NetNS     string // "" in local mode
	DataDir   string
	LogPath   string

	mu      sync.Mutex
	proc    *proc.Process // the latest start; nil before the first
	log     *proc.Log     // LogPath, across restarts; nil before the first start
	removed bool          // taken out of the raft configuration by the nemesis
	// joinOnly: the node lost its data and joins the running cluster
	// through --join (no --bootstrap-expect), as an operator's fresh node.
	joinOnly bool
}

// Running reports whether the node's process is alive (paused counts).
func (n *Node) Running() bool {
	p := n.process()
	return p != nil && !p.Exited()
}

// Paused reports whether the node is stopped with SIGSTOP.
func (n *Node) Paused() bool {
	p := n.process()
	return p != nil && p.Paused()
}

// process is the node's latest process, or nil.
func (n *Node) process() *proc.Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// Cluster is a set of cohortd processes and the network between them.
type Cluster struct {
	cfg     Config
	prefix  string
	subnet  string // "10.77.<I>"
	dataDir string
	log     *slog.Logger
	Nodes   []*Node

	// pki is the directory of the CA and the certificates ("" without
	// TLS); admin and client are the callers' credentials (plaintext
	// without TLS).
	pki           string
	admin, client caller

	mu          sync.Mutex
	partitioned bool
	netUp       bool
	lock        *os.File
	ports       *proc.Reservation // local mode
}

// lockInstance takes an exclusive lock on the instance, so that a second
// run with the same instance fails instead of cleaning up the first one's
// network and processes as leftovers.
func lockInstance(instance int) (*os.File, error) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("cohort-chaos-%s.lock", Prefix(instance)))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster: instance %d is in use by another run (lock %s); pick another --instance", instance, path)
	}
	return f, nil
}

// Prefix is the name prefix of everything an instance creates.
func Prefix(instance int) string { return fmt.Sprintf("cch%d", instance) }

// New prepares a cluster: removes leftovers of a crashed run of the same
// instance, creates the data directories and, in netns mode, the network.
// Nothing is started yet. Close undoes everything.
func New(cfg Config) (*Cluster, error) {
	if cfg.Nodes < 1 || cfg.Nodes > 9 {
		return nil, fmt.Errorf("cluster: %d nodes: want 1 to 9", cfg.Nodes)
	}
	if cfg.Instance < 0 || cfg.Instance > 200 {
		return nil, fmt.Errorf("cluster: instance %d: want 0 to 200", cfg.Instance)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg, prefix: Prefix(cfg.Instance), subnet: fmt.Sprintf("10.77.%d", cfg.Instance), log: cfg.Logger}
	lock, err := lockInstance(cfg.Instance)
	if err != nil {
		return nil, err
	}
	c.lock = lock
	if err := Cleanup(cfg.Instance, cfg.Logger); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cluster: remove leftovers of an earlier run: %w", err)
	}
	dir, err := os.MkdirTemp("", dataDirPrefix(cfg.Instance))
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	c.dataDir = dir
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("cluster: log dir: %w", err)
	}
	if cfg.Mode == ModeLocal {
		if c.ports, err = proc.ReservePorts(portsPerNode * cfg.Nodes); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	for i := 1; i <= cfg.Nodes; i++ {
		n := &Node{ID: fmt.Sprintf("n%d", i), Index: i, DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			LogPath: filepath.Join(cfg.LogDir, fmt.Sprintf("n%d.log", i))}
		switch cfg.Mode {
		case ModeNetns:
			n.IP = fmt.Sprintf("%s.%d", c.subnet, 10+i)
			n.NetNS = fmt.Sprintf("%s-n%d", c.prefix, i)
			n.RaftAddr, n.GRPCAddr, n.HTTPAddr, n.KafkaAddr = n.IP+":7000", n.IP+":9000", n.IP+":8000", n.IP+":9092"
		case ModeLocal:
			n.IP = "127.0.0.1"
			base := portsPerNode * (i - 1)
			n.RaftAddr, n.GRPCAddr, n.HTTPAddr, n.KafkaAddr = c.ports.Addr(base), c.ports.Addr(base+1), c.ports.Addr(base+2), c.ports.Addr(base+3)
		default:
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("cluster: unknown mode %q", cfg.Mode)
		}
		c.Nodes = append(c.Nodes, n)
	}
	if cfg.TLS {
		if err := c.makePKI(filepath.Join(dir, "pki")); err != nil {
			_ = os.RemoveAll(dir)
			if c.ports != nil {
				c.ports.Release()
			}
			lock.Close()
			return nil, err
		}
	}
	if cfg.Mode == ModeNetns {
		if err := c.setupNetwork(); err != nil {
			c.teardownNetwork()
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	return c, nil
}

// portsPerNode are a node's ports in local mode: Raft, gRPC, HTTP, Kafka.
const portsPerNode = 4

func dataDirPrefix(instance int) string { return fmt.Sprintf("cohort-chaos-%s-", Prefix(instance)) }

// Mode of the cluster.
func (c *Cluster) Mode() Mode { return c.cfg.Mode }

// Endpoints are the nodes' gRPC addresses.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.GRPCAddr
	}
	return out
}

// KafkaEndpoints are the nodes' Kafka addresses, the seeds of a Kafka
// client.
func (c *Cluster) KafkaEndpoints() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.KafkaAddr
	}
	return out
}

// Node by ID.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

func (c *Cluster) args(n *Node) []string {
	var others []string
	for _, o := range c.Nodes {
		if o != n {
			others = append(others, o.GRPCAddr)
		}
	}
	a := []string{
		"--node-id", n.ID, "--data-dir", n.DataDir,
		"--raft-addr", n.RaftAddr, "--grpc-addr", n.GRPCAddr, "--http-addr", n.HTTPAddr,
		"--kafka-addr", n.KafkaAddr,
	}
	if n.joinOnly {
		a = append(a, "--join", strings.Join(others, ","))
	} else {
		a = append(a, "--bootstrap-expect", strconv.Itoa(len(c.Nodes)), "--join", strings.Join(c.Endpoints(), ","))
	}
	switch f := c.nodeFiles(n); {
	case c.pki != "":
		a = append(a, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)
	case c.cfg.Mode == ModeNetns:
		// Plaintext on the namespaces' addresses is refused without it.
		a = append(a, "--insecure")
	}
	return append(a, c.cfg.ExtraArgs...)
}

// StartAll starts every node and waits until the cluster has a leader.
func (c *Cluster) StartAll(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.Start(n); err != nil {
			return err
		}
	}
	_, err := c.WaitLeader(ctx)
	return err
}

// Start starts (or restarts) a node's process. It returns once the process
// runs; the node may take a moment to serve.
func (c *Cluster) Start(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.Exited() {
		return nil
	}
	if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	if n.log == nil {
		log, err := proc.OpenLog(n.LogPath, 0)
		if err != nil {
			return fmt.Errorf("start %s: %w", n.ID, err)
		}
		n.log = log
	}
	spec := proc.Spec{Name: n.ID, Path: c.cfg.Binary, Args: c.args(n), Log: n.log, Logger: c.log,
		// Own process group: a Ctrl-C to the harness reaches the harness
		// only, which then stops the nodes itself.
		OwnGroup: true}
	if n.NetNS != "" {
		spec.Wrapper = []string{"ip", "netns", "exec", n.NetNS}
	}
	p, err := proc.Start(spec)
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// Kill sends SIGKILL and waits for the process to go.
func (c *Cluster) Kill(n *Node) error {
	if !n.Running() {
		return nil
	}
	return n.process().Kill()
}

// Stop sends SIGTERM (graceful: a leader hands over first) and waits, then
// kills what is left after 20 s.
func (c *Cluster) Stop(n *Node) error {
	if !n.Running() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return n.process().Stop(ctx)
}

// Pause stops the node's process with SIGSTOP.
func (c *Cluster) Pause(n *Node) error { return c.signal(n, syscall.SIGSTOP) }

// Resume continues a paused node with SIGCONT.
func (c *Cluster) Resume(n *Node) error { return c.signal(n, syscall.SIGCONT) }

// signal sends sig to a running node; a node that is gone needs none.
func (c *Cluster) signal(n *Node, sig syscall.Signal) error {
	if !n.Running() {
		return nil
	}
	if err := n.process().Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Wipe deletes a stopped node's data directory (its raft state and ID);
// its next start joins the running cluster as a fresh node.
func (c *Cluster) Wipe(n *Node) error {
	if n.Running() {
		return fmt.Errorf("wipe %s: still running", n.ID)
	}
	n.mu.Lock()
	n.joinOnly = true
	n.mu.Unlock()
	if err := os.RemoveAll(n.DataDir); err != nil {
		return fmt.Errorf("wipe %s: %w", n.ID, err)
	}
	return nil
}

// SetRemoved marks a node as out of the raft configuration (or back in).
func (n *Node) SetRemoved(v bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removed = v
}

// Removed reports whether the nemesis took the node out of the cluster.
func (n *Node) Removed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.removed
}

// NodeInfo asks one node who it is and whom it follows.
func (c *Cluster) NodeInfo(ctx context.Context, n *Node) (*cohortv1.NodeInfoResponse, error) {
	conn, err := grpc.NewClient(n.GRPCAddr, c.admin.creds.DialOptions()...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return cohortv1.NewClusterServiceClient(conn).NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
}

// Leader returns the node that claims leadership in the highest term among
// the running, unpaused nodes, or nil when none does.
func (c *Cluster) Leader(ctx context.Context) *Node {
	n, _ := c.LeaderTerm(ctx)
	return n
}

// LeaderTerm is Leader with the term it leads in (0 with no leader).
func (c *Cluster) LeaderTerm(ctx context.Context) (*Node, uint64) {
	type claim struct {
		n    *Node
		term uint64
	}
	var mu sync.Mutex
	var best *claim
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		if !n.Running() || n.Paused() {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			info, err := c.NodeInfo(cctx, n)
			if err != nil || info.GetState() != cohortv1.RaftState_RAFT_STATE_LEADER {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if best == nil || info.GetTerm() > best.term {
				best = &claim{n, info.GetTerm()}
			}
		})
	}
	wg.Wait()
	if best == nil {
		return nil, 0
	}
	return best.n, best.term
}

// WaitLeaderAfterStart starts every node and waits for a leader.
func (c *Cluster) WaitLeaderAfterStart(ctx context.Context) (*Node, error) {
	for _, n := range c.Nodes {
		if err := c.Start(n); err != nil {
			return nil, err
		}
	}
	return c.WaitLeader(ctx)
}

// WaitLeader polls until a leader is known and every running node is ready.
func (c *Cluster) WaitLeader(ctx context.Context) (*Node, error) {
	var leader *Node
	err := proc.Poll(ctx, 200*time.Millisecond, 0, "a leader and every running node ready", func() (bool, string) {
		if leader = c.Leader(ctx); leader == nil {
			return false, "no leader"
		}
		return c.ready(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return leader, nil
}

// ready reports whether every running node that is not paused or removed
// answers /readyz with 200, and if not, which does not.
func (c *Cluster) ready(ctx context.Context) (bool, string) {
	for _, n := range c.Nodes {
		if !n.Running() || n.Paused() || n.Removed() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+n.HTTPAddr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", n.ID, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("%s: /readyz %d", n.ID, resp.StatusCode)
		}
	}
	return true, ""
}

// HasCtl reports whether membership faults can run (cohortctl given).
func (c *Cluster) HasCtl() bool { return c.cfg.CtlBinary != "" }

// Ctl runs cohortctl against the cluster's endpoints, as an operator would
// (membership faults).
func (c *Cluster) Ctl(ctx context.Context, args ...string) (string, error) {
	return c.CtlVia(ctx, c.Endpoints(), args...)
}

// CtlVia runs cohortctl against the given endpoints.
func (c *Cluster) CtlVia(ctx context.Context, endpoints []string, args ...string) (string, error) {
	if c.cfg.CtlBinary == "" {
		return "", errors.New("no cohortctl binary configured")
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	args = append(append([]string{"--endpoints", strings.Join(endpoints, ",")}, c.admin.ctlArgs()...), args...)
	out, err := exec.CommandContext(cctx, c.cfg.CtlBinary, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cohortctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Close stops every node (SIGCONT first for paused ones, then SIGTERM,
// SIGKILL if they linger), heals and removes the network, and deletes the
// data directories. Safe to call more than once.
func (c *Cluster) Close() error {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(func() {
			_ = c.Resume(n)
			if err := c.Stop(n); err != nil {
				c.log.Warn("stop node", "node", n.ID, "err", err)
			}
		})
	}
	wg.Wait()
	for _, n := range c.Nodes {
		n.mu.Lock()
		if n.log != nil {
			if err := n.log.Close(); err != nil {
				c.log.Warn("node log", "node", n.ID, "err", err)
			}
		}
		n.mu.Unlock()
	}
	if c.ports != nil {
		c.ports.Release()
	}
	c.teardownNetwork()
	defer func() {
		if c.lock != nil {
			_ = os.Remove(c.lock.Name())
			c.lock.Close()
			c.lock = nil
		}
	}()
	if c.dataDir != "" {
		if err := os.RemoveAll(c.dataDir); err != nil {
			return fmt.Errorf("cluster: remove %s: %w", c.dataDir, err)
		}
	}
	return nil
}

// CleanupIdle removes the leftovers of a crashed run of the instance, and
// refuses while a run holds the instance.
func CleanupIdle(instance int, log *slog.Logger) error {
	lock, err := lockInstance(instance)
	if err != nil {
		return err
	}
	defer func() {
		_ = os.Remove(lock.Name())
		lock.Close()
	}()
	return Cleanup(instance, log)
}

// Cleanup removes what a crashed run of the instance left behind: its
// processes (found by their namespace or their data directory), namespaces,
// links, iptables rules and data directories.
func Cleanup(instance int, log *slog.Logger) error {
	prefix := Prefix(instance)
	var errs []error
	// Processes in our namespaces.
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			ns := strings.Fields(line)
			if len(ns) == 0 || !strings.HasPrefix(ns[0], prefix+"-") {
				continue
			}
			if pids, err := exec.Command("ip", "netns", "pids", ns[0]).Output(); err == nil {
				for _, p := range strings.Fields(string(pids)) {
					if pid, err := strconv.Atoi(p); err == nil {
						log.Warn("killing leftover process", "netns", ns[0], "pid", pid)
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			if out, err := exec.Command("ip", "netns", "del", ns[0]).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", ns[0], err, out))
			}
		}
	}
	// Processes by data directory (local mode, or a namespace already gone).
	dirPrefix := filepath.Join(os.TempDir(), dataDirPrefix(instance))
	for _, pid := range pidsWithArg(dirPrefix) {
		log.Warn("killing leftover process", "pid", pid)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if matches, _ := filepath.Glob(dirPrefix + "*"); len(matches) > 0 {
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := exec.LookPath("ip"); err == nil {
		for _, link := range links(prefix + "-") {
			_ = exec.Command("ip", "link", "del", link).Run()
		}
	}
	removeForwardRules(prefix)
	return errors.Join(errs...)
}

func links(prefix string) []string {
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		name, _, _ = strings.Cut(name, "@")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// pidsWithArg lists processes with an argument starting with prefix.
func pidsWithArg(prefix string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if strings.HasPrefix(arg, prefix) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
