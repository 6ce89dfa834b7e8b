// Package benchcluster starts three-node Cohort clusters on loopback for
// the load generator (cmd/cohort-bench): either in-process nodes (package
// server: real Raft over TCP, real bolt files, real gRPC) or real cohortd
// processes that can be killed with SIGKILL, either in plaintext or with
// mutual TLS on Raft and gRPC from a throwaway CA (PKI). It is for measurements, not
// tests: nothing here takes a testing.TB, and every wait is bounded by a
// context. It must never listen on or dial anything but loopback.
package benchcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Cluster is a running cluster the benchmarks can crash and restart.
type Cluster interface {
	// Addrs are the nodes' gRPC addresses, in node order.
	Addrs() []string
	// Kill crashes node i: SIGKILL for a process, server.Kill in-process
	// (no leadership transfer either way).
	Kill(i int) error
	// Stop shuts node i down gracefully: a leader hands leadership over
	// first (SIGTERM for a process, server.Shutdown in-process). It returns
	// once the node has stopped.
	Stop(ctx context.Context, i int) error
	// Restart starts a crashed or stopped node again on its data dir.
	Restart(ctx context.Context, i int) error
	// Live reports whether node i runs.
	Live(i int) bool
	// Close stops every node and removes nothing on disk.
	Close() error
}

// Probe asks nodes about their Raft state over the ClusterService NodeInfo
// RPC. It works on any cluster, including one given by --endpoints.
type Probe struct {
	addrs []string
	dial  []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewProbe returns a probe of the nodes at addrs (loopback only). dial
// are its connections' options, e.g. DialOptions of an admin certificate
// for a cluster with TLS (the probe's connections serve the callers' admin
// calls too); none: plaintext.
func NewProbe(addrs []string, dial ...grpc.DialOption) (*Probe, error) {
	for _, a := range addrs {
		if err := CheckLoopback(a); err != nil {
			return nil, err
		}
	}
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return &Probe{addrs: addrs, dial: dial, conns: map[string]*grpc.ClientConn{}}, nil
}

// Close closes the probe's connections.
func (p *Probe) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}

// Conn is a gRPC connection to addr with the probe's options, shared by
// the probe's callers.
func (p *Probe) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.dial...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// Info is node i's NodeInfo.
func (p *Probe) Info(ctx context.Context, i int) (*cohortv1.NodeInfoResponse, error) {
	c, err := p.Conn(p.addrs[i])
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return cohortv1.NewClusterServiceClient(c).NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
}

// Leader returns the index of the node among live that says it leads, or
// -1.
func (p *Probe) Leader(ctx context.Context, live func(int) bool) int {
	for i := range p.addrs {
		if live != nil && !live(i) {
			continue
		}
		info, err := p.Info(ctx, i)
		if err == nil && info.GetState() == cohortv1.RaftState_RAFT_STATE_LEADER {
			return i
		}
	}
	return -1
}

// WaitServing waits until one live node leads, answers a linearizable
// ListTopics, and every live node names it leader and has applied what it
// knows to be committed. It returns the leader's index.
func (p *Probe) WaitServing(ctx context.Context, live func(int) bool) (int, error) {
	var last string
	for {
		leader, detail := p.serving(ctx, live)
		if leader >= 0 {
			return leader, nil
		}
		last = detail
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("waiting for a serving leader: %w (last: %s)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *Probe) serving(ctx context.Context, live func(int) bool) (int, string) {
	leader := p.Leader(ctx, live)
	if leader < 0 {
		// Say why when a node does not answer at all (e.g. plaintext
		// against TLS, or a certificate the nodes refuse).
		for i := range p.addrs {
			if live != nil && !live(i) {
				continue
			}
			if _, err := p.Info(ctx, i); err != nil {
				return -1, fmt.Sprintf("no leader (node %s: %v)", p.addrs[i], err)
			}
		}
		return -1, "no leader"
	}
	c, err := p.Conn(p.addrs[leader])
	if err != nil {
		return -1, err.Error()
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = cohortv1.NewTopicsClient(c).ListTopics(lctx, &cohortv1.ListTopicsRequest{})
	cancel()
	if err != nil {
		return -1, fmt.Sprintf("leader %s does not serve: %v", p.addrs[leader], err)
	}
	linfo, err := p.Info(ctx, leader)
	if err != nil {
		return -1, err.Error()
	}
	for i := range p.addrs {
		if live != nil && !live(i) {
			continue
		}
		info, err := p.Info(ctx, i)
		switch {
		case err != nil:
			return -1, fmt.Sprintf("node %s: %v", p.addrs[i], err)
		case info.GetLeaderGrpcAddress() != p.addrs[leader]:
			return -1, fmt.Sprintf("node %s names leader %q, want %s", p.addrs[i], info.GetLeaderGrpcAddress(), p.addrs[leader])
		case info.GetAppliedIndex() < linfo.GetCommitIndex():
			return -1, fmt.Sprintf("node %s applied %d < leader commit %d", p.addrs[i], info.GetAppliedIndex(), linfo.GetCommitIndex())
		}
	}
	return leader, ""
}

// CheckLoopback refuses any address that is not a loopback IP: benchmark
// traffic stays on this machine.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("address %q is not a loopback address; cohort-bench only targets loopback", addr)
}

var errNotRunning = errors.New("node is not running")

// startProbe is the probe a starting cluster waits with: plaintext, or
// with pki's admin certificate.
func startProbe(addrs []string, pki *PKI) (*Probe, error) {
	if pki == nil {
		return NewProbe(addrs)
	}
	dial, err := DialOptions(pki.Admin())
	if err != nil {
		return nil, err
	}
	return NewProbe(addrs, dial...)
}
