package benchcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/raftnode"
	"github.com/cohortlabs/cohort/rpc"
	"github.com/cohortlabs/cohort/server"
)

// InProcessOptions configure an in-process cluster.
type InProcessOptions struct {
	// Size is the number of nodes (default 3).
	Size int
	// Dir holds node<i>/ data dirs. Required.
	Dir string
	// Coordinator is every node's engine configuration: start from
	// coordinator.DefaultConfig.
	Coordinator coordinator.Config
	// Raft adjusts node i's raft configuration; by default each node runs
	// raftnode's defaults, the ones cohortd uses.
	Raft func(i int, c *raftnode.Config)
	// PKI, when set, makes every node run mutual TLS on Raft and gRPC
	// with a node/<id> certificate from it (client certificates required,
	// as cohortd with --tls-*); callers need its admin or client
	// certificate. Nil: plaintext, no authorization.
	PKI *PKI
	// Kafka gives every node a Kafka listener (package kafka) on
	// 127.0.0.1:0; KafkaAddrs names them. False: gRPC only.
	Kafka  bool
	Logger *slog.Logger
}

// InProcess is a cluster of server.Server nodes in this process.
type InProcess struct {
	opts       InProcessOptions
	addrs      []string
	kafkaAddrs []string
	cfgs       []server.Config

	mu    sync.Mutex
	nodes []*server.Server
}

var _ Cluster = (*InProcess)(nil)

// StartInProcess forms a cluster with bootstrap-expect and waits until its
// leader serves.
func StartInProcess(ctx context.Context, opts InProcessOptions) (*InProcess, error) {
	if opts.Size == 0 {
		opts.Size = 3
	}
	if opts.Dir == "" {
		return nil, errors.New("benchcluster: Dir is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &InProcess{opts: opts, nodes: make([]*server.Server, opts.Size)}
	lis := make([]net.Listener, opts.Size)
	for i := range opts.Size {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.closeListeners(lis)
			return nil, fmt.Errorf("listen for node %d's gRPC: %w", i+1, err)
		}
		lis[i] = l
		c.addrs = append(c.addrs, l.Addr().String())
	}
	kafkaLis := make([]net.Listener, opts.Size)
	if opts.Kafka {
		for i := range opts.Size {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				c.closeListeners(lis)
				c.closeListeners(kafkaLis)
				return nil, fmt.Errorf("listen for node %d's Kafka: %w", i+1, err)
			}
			kafkaLis[i] = l
			c.kafkaAddrs = append(c.kafkaAddrs, l.Addr().String())
		}
	}
	for i := range opts.Size {
		rc := raftnode.DefaultConfig()
		rc.NodeID = fmt.Sprintf("node%d", i+1)
		rc.DataDir = filepath.Join(opts.Dir, fmt.Sprintf("node%d", i+1))
		rc.RaftBind = "127.0.0.1:0"
		rc.Logger = opts.Logger
		if opts.Raft != nil {
			opts.Raft(i, &rc)
		}
		var sec rpc.Security
		if opts.PKI != nil {
			f, err := opts.PKI.Node(rc.NodeID)
			if err == nil {
				sec.TLS, err = auth.LoadCredentials(f)
			}
			if err != nil {
				c.closeListeners(lis)
				return nil, err
			}
			rc.TLS = sec.TLS
		}
		cc := cluster.DefaultConfig()
		cc.BootstrapExpect = opts.Size
		cc.Join = c.addrs
		cc.PollInterval = 50 * time.Millisecond
		cc.Logger = opts.Logger
		c.cfgs = append(c.cfgs, server.Config{Raft: rc, Cluster: cc, Coordinator: opts.Coordinator, GRPC: rpc.DefaultLimits(), Security: sec, Logger: opts.Logger})
	}
	for i := range opts.Size {
		if err := c.start(i, lis[i], kafkaLis[i]); err != nil {
			c.closeListeners(lis[i+1:])
			c.closeListeners(kafkaLis[i+1:])
			_ = c.Close()
			return nil, err
		}
	}
	probe, err := startProbe(c.addrs, opts.PKI)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	defer probe.Close()
	if _, err := probe.WaitServing(ctx, c.Live); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *InProcess) closeListeners(ls []net.Listener) {
	for _, l := range ls {
		if l != nil {
			_ = l.Close()
		}
	}
}

// start starts node i on its listeners; kafkaLis is nil without
// InProcessOptions.Kafka.
func (c *InProcess) start(i int, lis, kafkaLis net.Listener) error {
	cfg := c.cfgs[i]
	cfg.GRPCListener = lis
	if kafkaLis != nil {
		cfg.KafkaListener = kafkaLis
	}
	s, err := server.Start(cfg)
	if err != nil {
		_ = lis.Close()
		if kafkaLis != nil {
			_ = kafkaLis.Close()
		}
		return fmt.Errorf("start node %d: %w", i+1, err)
	}
	c.mu.Lock()
	c.nodes[i] = s
	// A restart must bind the raft address its peers know.
	c.cfgs[i].Raft.RaftBind = s.Node.RaftAddress()
	c.mu.Unlock()
	return nil
}

// Addrs are the nodes' gRPC addresses.
func (c *InProcess) Addrs() []string { return append([]string(nil), c.addrs...) }

// KafkaAddrs are the nodes' Kafka addresses, in node order; none without
// InProcessOptions.Kafka.
func (c *InProcess) KafkaAddrs() []string { return append([]string(nil), c.kafkaAddrs...) }

// Server is node i's server, or nil if it is down.
func (c *InProcess) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Leader is the node that leads right now (nil if none).
func (c *InProcess) Leader() *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.nodes {
		if s != nil && s.Node.IsLeader() {
			return s
		}
	}
	return nil
}

// Live reports whether node i runs.
func (c *InProcess) Live(i int) bool { return c.Server(i) != nil }

func (c *InProcess) take(i int) (*server.Server, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.nodes[i]
	if s == nil {
		return nil, fmt.Errorf("node %d: %w", i+1, errNotRunning)
	}
	c.nodes[i] = nil
	return s, nil
}

// Kill crashes node i (no leadership transfer).
func (c *InProcess) Kill(i int) error {
	s, err := c.take(i)
	if err != nil {
		return err
	}
	s.Kill()
	return nil
}

// Stop shuts node i down gracefully (a leader transfers leadership first).
func (c *InProcess) Stop(ctx context.Context, i int) error {
	s, err := c.take(i)
	if err != nil {
		return err
	}
	return s.Shutdown(ctx)
}

// Restart starts node i again on its data dir and addresses.
func (c *InProcess) Restart(ctx context.Context, i int) error {
	if c.Live(i) {
		return fmt.Errorf("node %d is already running", i+1)
	}
	for {
		lis, err := net.Listen("tcp", c.addrs[i])
		if err == nil {
			var kafkaLis net.Listener
			if c.opts.Kafka {
				if kafkaLis, err = net.Listen("tcp", c.kafkaAddrs[i]); err != nil {
					_ = lis.Close()
				}
			}
			if err == nil {
				return c.start(i, lis, kafkaLis)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rebind %s for node %d: %w (last: %v)", c.addrs[i], i+1, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close shuts every live node down.
func (c *InProcess) Close() error {
	var errs []error
	for i := range c.nodes {
		if !c.Live(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, c.Stop(ctx, i))
		cancel()
	}
	return errors.Join(errs...)
}
