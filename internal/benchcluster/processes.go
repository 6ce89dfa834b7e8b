package benchcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/internal/proc"
)

// ProcessOptions configure a cluster of real cohortd processes.
type ProcessOptions struct {
	// Binary is a built cohortd. Required.
	Binary string
	// Size is the number of nodes (default 3).
	Size int
	// Dir holds node<i>/ data dirs and node<i>.log. Required.
	Dir string
	// Args are extra cohortd flags for every node, e.g.
	// --initial-rebalance-delay=0.
	Args []string
	// PKI, when set, gives every node --tls-cert/--tls-key/--tls-ca with
	// a node/<id> certificate from it: mutual TLS on Raft and gRPC, client
	// certificates required. Nil: plaintext.
	PKI *PKI
	// Kafka gives every node a Kafka protocol listener (--kafka-addr) on
	// a port of its own: KafkaAddrs.
	Kafka bool
	// LogLevel is every node's --log-level (default warn).
	LogLevel string
}

// Processes is a cluster of cohortd processes on loopback.
type Processes struct {
	opts       ProcessOptions
	addrs      []string
	kafkaAddrs []string
	args       [][]string
	ports      *proc.Reservation
	logs       []*proc.Log // node<i>.log, across restarts

	mu    sync.Mutex
	procs []*proc.Process
}

var _ Cluster = (*Processes)(nil)

// StartProcesses starts Size cohortd processes forming one cluster with
// --bootstrap-expect and waits until its leader serves. Each process gets
// SIGKILL if this process dies (proc's parent-death signal), so a crashed
// benchmark leaves no nodes behind.
func StartProcesses(ctx context.Context, opts ProcessOptions) (*Processes, error) {
	if opts.Size == 0 {
		opts.Size = 3
	}
	if opts.Binary == "" || opts.Dir == "" {
		return nil, errors.New("benchcluster: Binary and Dir are required")
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("cohortd binary: %w (run `make build`)", err)
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "warn"
	}
	// Each node's ports: gRPC, Raft, HTTP and, with Kafka, Kafka.
	stride := 3
	if opts.Kafka {
		stride = 4
	}
	ports, err := proc.ReservePorts(stride * opts.Size)
	if err != nil {
		return nil, err
	}
	c := &Processes{opts: opts, ports: ports, procs: make([]*proc.Process, opts.Size)}
	for i := range opts.Size {
		c.addrs = append(c.addrs, ports.Addr(stride*i))
		if opts.Kafka {
			c.kafkaAddrs = append(c.kafkaAddrs, ports.Addr(stride*i+3))
		}
	}
	for i := range opts.Size {
		args := []string{
			"--node-id", nodeName(i),
			"--data-dir", filepath.Join(opts.Dir, nodeName(i)),
			"--raft-addr", ports.Addr(stride*i + 1),
			"--grpc-addr", c.addrs[i],
			"--http-addr", ports.Addr(stride*i + 2),
			"--bootstrap-expect", fmt.Sprint(opts.Size),
			"--join", strings.Join(c.addrs, ","),
			"--log-level", opts.LogLevel,
		}
		if opts.Kafka {
			args = append(args, "--kafka-addr", c.kafkaAddrs[i])
		}
		if opts.PKI != nil {
			f, err := opts.PKI.Node(nodeName(i))
			if err != nil {
				_ = c.Close()
				return nil, err
			}
			args = append(args, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)
		}
		c.args = append(c.args, append(args, opts.Args...))
		log, err := proc.OpenLog(c.logPath(i), 0)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.logs = append(c.logs, log)
	}
	for i := range opts.Size {
		if _, err := c.start(i); err != nil {
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
		return nil, fmt.Errorf("%w (node logs in %s)", err, opts.Dir)
	}
	return c, nil
}

func nodeName(i int) string { return fmt.Sprintf("node%d", i+1) }

func (c *Processes) logPath(i int) string {
	return filepath.Join(c.opts.Dir, nodeName(i)+".log")
}

func (c *Processes) start(i int) (*proc.Process, error) {
	p, err := proc.Start(proc.Spec{Name: nodeName(i), Path: c.opts.Binary, Args: c.args[i], Log: c.logs[i]})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
	return p, nil
}

// Addrs are the nodes' gRPC addresses.
func (c *Processes) Addrs() []string { return append([]string(nil), c.addrs...) }

// KafkaAddrs are the nodes' Kafka listener addresses (none without
// ProcessOptions.Kafka).
func (c *Processes) KafkaAddrs() []string { return append([]string(nil), c.kafkaAddrs...) }

// LogPaths are the nodes' log files, node1's first (they stay in Dir
// after Close).
func (c *Processes) LogPaths() []string {
	paths := make([]string, len(c.procs))
	for i := range paths {
		paths[i] = c.logPath(i)
	}
	return paths
}

// Pid is node i's process ID (0 if it is down).
func (c *Processes) Pid(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[i]; p != nil {
		return p.Pid()
	}
	return 0
}

// Live reports whether node i's process runs.
func (c *Processes) Live(i int) bool {
	c.mu.Lock()
	p := c.procs[i]
	c.mu.Unlock()
	return p != nil && !p.Exited()
}

func (c *Processes) take(i int) (*proc.Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[i]
	if p == nil {
		return nil, fmt.Errorf("node %d: %w", i+1, errNotRunning)
	}
	c.procs[i] = nil
	return p, nil
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (c *Processes) Kill(i int) error {
	p, err := c.take(i)
	if err != nil {
		return err
	}
	return p.Kill()
}

// Stop sends SIGTERM to node i (a leader transfers leadership, then the
// node stops cleanly) and waits for it to exit; when ctx ends first it
// sends SIGKILL.
func (c *Processes) Stop(ctx context.Context, i int) error {
	p, err := c.take(i)
	if err != nil {
		return err
	}
	return p.Stop(ctx)
}

// Restart starts node i again with the same flags and data dir.
func (c *Processes) Restart(ctx context.Context, i int) error {
	if c.Live(i) {
		return fmt.Errorf("node %d is already running", i+1)
	}
	// The process is gone, but its ports may linger a moment.
	for {
		p, err := c.start(i)
		if err != nil {
			return err
		}
		select {
		case <-p.Done():
			c.mu.Lock()
			c.procs[i] = nil
			c.mu.Unlock()
		case <-time.After(300 * time.Millisecond):
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restart node %d: %w (see %s)", i+1, ctx.Err(), c.logPath(i))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close stops every live node with SIGTERM (SIGKILL after 15 s), closes
// the node logs and gives the ports back.
func (c *Processes) Close() error {
	var errs []error
	for i := range c.procs {
		if !c.Live(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		errs = append(errs, c.Stop(ctx, i))
		cancel()
	}
	for _, l := range c.logs {
		errs = append(errs, l.Close())
	}
	c.ports.Release()
	return errors.Join(errs...)
}
