// Package testcluster starts in-process Cohort clusters for tests: real
// Raft over loopback TCP with real bolt files, the real engine and the real
// gRPC server per node. Everything it starts is stopped by t.Cleanup.
package testcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/fsm"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cohortlabs/cohort/coordinator"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"github.com/cohortlabs/cohort/raftnode"
	"github.com/cohortlabs/cohort/rpc"
	"github.com/cohortlabs/cohort/server"
)

// Options tune a cluster.
type Options struct {
	// Coordinator is each node's engine configuration: start from
	// DefaultCoordinator (a short tick, a low session-timeout bound) and
	// change what the test needs.
	Coordinator coordinator.Config
	// Raft adjusts each node's raft configuration before start.
	Raft func(i int, c *raftnode.Config)
	// Cluster adjusts each node's cluster configuration before start.
	Cluster func(i int, c *cluster.Config)
	// GRPC adjusts every node's gRPC limits (rpc.DefaultLimits).
	GRPC func(l *rpc.Limits)
	// Kafka gives every node a Kafka listener on loopback (KafkaAddr).
	Kafka bool
	// MaxCommandRules, when set, is node i's server.Config.MaxCommandRules
	// (0: the binary's): a node standing in for an older cohortd.
	MaxCommandRules func(i int) uint32
}

func (o Options) grpcLimits() rpc.Limits {
	l := rpc.DefaultLimits()
	if o.GRPC != nil {
		o.GRPC(&l)
	}
	return l
}

// DefaultCoordinator is an engine configuration for fast tests: the
// engine's defaults with no initial delay, 10 ms deadline precision,
// sessions from 100 ms, and logs through Logger.
func DefaultCoordinator() coordinator.Config {
	c := coordinator.DefaultConfig()
	c.InitialRebalanceDelay = 0
	c.Tick = 10 * time.Millisecond
	c.MinSessionTimeout = 100 * time.Millisecond
	c.Logger = Logger()
	return c
}

// RaftConfig is a node's raft configuration for tests: loopback, a
// random port, and Raft's own 1 s timeouts rather than cohortd's LAN
// defaults: test binaries share two cores under the race detector, and a
// starved leader must not lose its lease in the middle of a test that is
// not about elections.
func RaftConfig(id, dataDir string) raftnode.Config {
	rc := raftnode.DefaultConfig()
	rc.NodeID = id
	rc.DataDir = dataDir
	rc.RaftBind = "127.0.0.1:0"
	rc.HeartbeatTimeout = time.Second
	rc.ElectionTimeout = time.Second
	rc.LeaderLeaseTimeout = 500 * time.Millisecond
	rc.Logger = Logger()
	return rc
}

// ClusterConfig is a node's cluster configuration for tests: polls every
// 50 ms.
func ClusterConfig() cluster.Config {
	cc := cluster.DefaultConfig()
	cc.PollInterval = 50 * time.Millisecond
	cc.Logger = Logger()
	return cc
}

// Node is one member of a test cluster.
type Node struct {
	*server.Server
	ID   string
	addr string
	// kafkaAddr is the Kafka listener's address ("" without one).
	kafkaAddr string
	cfg       server.Config
}

// Cluster is a running test cluster.
type Cluster struct {
	t     testing.TB
	opts  Options
	Nodes []*Node

	mu    sync.Mutex // guards conns and which nodes are live
	conns map[string]*grpc.ClientConn
}

// Logger discards logs unless COHORT_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("COHORT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Start forms a cluster of size nodes with bootstrap-expect and waits for a
// leader that serves.
func Start(t testing.TB, size int, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t, opts: opts, conns: map[string]*grpc.ClientConn{}}
	lis := make([]net.Listener, size)
	var join []string
	for i := range size {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		lis[i] = l
		join = append(join, l.Addr().String())
	}
	for i := range size {
		rc := RaftConfig(fmt.Sprintf("n%d", i+1), t.TempDir())
		if opts.Raft != nil {
			opts.Raft(i, &rc)
		}
		cc := ClusterConfig()
		cc.BootstrapExpect = size
		cc.Join = join
		if opts.Cluster != nil {
			opts.Cluster(i, &cc)
		}
		n := &Node{ID: rc.NodeID, addr: join[i], cfg: server.Config{Raft: rc, Cluster: cc, Coordinator: opts.Coordinator, GRPC: opts.grpcLimits(), Logger: Logger()}}
		if opts.MaxCommandRules != nil {
			n.cfg.MaxCommandRules = opts.MaxCommandRules(i)
		}
		if opts.Kafka {
			kl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			n.kafkaAddr = kl.Addr().String()
			n.cfg.KafkaListener = kl
		}
		c.start(n, lis[i])
		c.Nodes = append(c.Nodes, n)
	}
	t.Cleanup(func() {
		for _, cc := range c.conns {
			_ = cc.Close()
		}
		for _, n := range c.Nodes {
			c.stop(n)
		}
	})
	c.WaitServing()
	// Every node states the command rules it applies when it registers;
	// until the leader has them all it writes under rules 1
	// (fsm/rules.go), and a test expects today's rules.
	WaitFor(c.t, 30*time.Second, "the leader to write under the rules every node applies", func() (bool, string) {
		l := c.Leader()
		if l < 0 {
			return false, "no leader"
		}
		want := uint32(fsm.CommandVersion)
		for _, n := range c.Nodes {
			want = min(want, n.Node.MaxCommandRules())
		}
		got := c.Nodes[l].Node.CommandRules()
		return got == want, fmt.Sprintf("rules %d, want %d", got, want)
	})
	return c
}

func (c *Cluster) start(n *Node, lis net.Listener) {
	c.t.Helper()
	n.cfg.GRPCListener = lis
	s, err := server.Start(n.cfg)
	if err != nil {
		_ = lis.Close()
		c.t.Fatalf("start %s: %v", n.ID, err)
	}
	c.mu.Lock()
	n.Server = s
	c.mu.Unlock()
	// A restart must bind the raft address its peers know.
	n.cfg.Raft.RaftBind = s.Node.RaftAddress()
}

func (c *Cluster) stop(n *Node) {
	if n.Server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.Shutdown(ctx)
}

// KafkaAddr is node i's Kafka listener address (Options.Kafka).
func (c *Cluster) KafkaAddr(i int) string { return c.Nodes[i].kafkaAddr }

// KafkaAddrs are every node's Kafka listener address.
func (c *Cluster) KafkaAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.kafkaAddr)
	}
	return out
}

// Addr is node i's gRPC address.
func (c *Cluster) Addr(i int) string { return c.Nodes[i].addr }

// Addrs are every node's gRPC address.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.addr)
	}
	return out
}

// Conn is a client connection to node i.
func (c *Cluster) Conn(i int) *grpc.ClientConn {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := c.Addr(i)
	if cc, ok := c.conns[addr]; ok {
		return cc
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		// NewClient does not connect: it fails only on a malformed target
		// or options, a bug of this harness. Conn is called from members'
		// goroutines, where t.Fatal would end only the goroutine; a panic
		// ends the test binary with the stack.
		panic(fmt.Sprintf("testcluster: grpc.NewClient(%q): %v", addr, err))
	}
	c.conns[addr] = cc
	return cc
}

// Groups is a GroupCoordinator client of node i.
func (c *Cluster) Groups(i int) cohortv1.GroupCoordinatorClient {
	return cohortv1.NewGroupCoordinatorClient(c.Conn(i))
}

// Topics is a Topics client of node i.
func (c *Cluster) Topics(i int) cohortv1.TopicsClient { return cohortv1.NewTopicsClient(c.Conn(i)) }

// Leader is the index of the node that leads and serves, or -1.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.Nodes {
		if n.Server != nil && n.Node.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitServing waits until one live node leads, its engine serves and every
// live node knows the leader's gRPC address.
func (c *Cluster) WaitServing() int {
	c.t.Helper()
	var leader int
	WaitFor(c.t, 30*time.Second, "a serving leader", func() (bool, string) {
		leader = c.Leader()
		if leader < 0 {
			return false, "no leader"
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := c.Topics(leader).ListTopics(ctx, &cohortv1.ListTopicsRequest{}); err != nil {
			return false, fmt.Sprintf("leader %s does not serve: %v", c.Nodes[leader].ID, err)
		}
		for i, n := range c.Nodes {
			if c.Live(i) && n.Cluster.LeaderGRPCAddress() != c.Addr(leader) {
				return false, fmt.Sprintf("%s does not know the leader's gRPC address yet", n.ID)
			}
		}
		return true, ""
	})
	return leader
}

// Kill crashes node i (no leadership transfer); Restart brings it back on
// the same data dir and addresses.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	n.Server.Kill()
	c.mu.Lock()
	defer c.mu.Unlock()
	n.Server = nil
	if cc, ok := c.conns[n.addr]; ok {
		_ = cc.Close()
		delete(c.conns, n.addr)
	}
}

// Live reports whether node i runs.
func (c *Cluster) Live(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[i].Server != nil
}

// Restart starts a killed node again.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	var lis net.Listener
	var err error
	WaitFor(c.t, 10*time.Second, "the node's gRPC port to be free", func() (bool, string) {
		lis, err = net.Listen("tcp", n.addr)
		return err == nil, fmt.Sprint(err)
	})
	if n.kafkaAddr != "" {
		WaitFor(c.t, 10*time.Second, "the node's Kafka port to be free", func() (bool, string) {
			n.cfg.KafkaListener, err = net.Listen("tcp", n.kafkaAddr)
			return err == nil, fmt.Sprint(err)
		})
	}
	c.start(n, lis)
}

// RestartWith starts a killed node again after mod changed its
// configuration (a new raft address, say).
func (c *Cluster) RestartWith(i int, mod func(*server.Config)) {
	c.t.Helper()
	mod(&c.Nodes[i].cfg)
	c.Restart(i)
}

// Add starts a new node with an empty data dir and no formation flags:
// mod sets what it needs (Join to join the running cluster). It is
// stopped with the others.
func (c *Cluster) Add(id string, mod func(*cluster.Config)) *Node {
	c.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatalf("listen: %v", err)
	}
	cc := ClusterConfig()
	if mod != nil {
		mod(&cc)
	}
	n := &Node{ID: id, addr: lis.Addr().String(), cfg: server.Config{
		Raft: RaftConfig(id, c.t.TempDir()), Cluster: cc, Coordinator: c.opts.Coordinator, GRPC: c.opts.grpcLimits(), Logger: Logger(),
	}}
	c.start(n, lis)
	c.mu.Lock()
	c.Nodes = append(c.Nodes, n)
	c.mu.Unlock()
	return n
}

// WaitFor polls cond until it holds or timeout passes: proc.WaitFor, the
// tree's one polling wait, under the name the in-process tests know.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	proc.WaitFor(t, timeout, what, cond)
}
