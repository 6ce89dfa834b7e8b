package raftnode

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fastTimeouts lets a test use a short idle timeout (at least 10×
// the heartbeat timeout).
func fastTimeouts(idle time.Duration) clusterOpt {
	return func(_ int, c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		c.IdleTimeout = idle
	}
}

// dialRaft opens a raw TCP connection to a node's Raft port.
func dialRaft(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial raft port %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readUntilClosed reads from c until the server closes it (EOF or reset)
// or within fails the test.
func readUntilClosed(t *testing.T, c net.Conn, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(within))
	_, err := c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("connection %s still open after %s", c.LocalAddr(), within)
	case err == nil:
		t.Fatalf("read a byte from the raft port without sending a request")
	}
	return time.Since(start)
}

func TestTransport_ConnectionsBeyondMaxConns_Refused(t *testing.T) {
	const maxConns = 4
	cfg := testConfig(t, "n1")
	cfg.MaxConns = maxConns
	tn := newSingleNode(t, cfg)
	addr := tn.node.RaftAddress()

	var held []net.Conn
	for range maxConns {
		held = append(held, dialRaft(t, addr))
	}
	waitFor(t, 10*time.Second, "the held connections accepted", func() (bool, string) {
		n := tn.node.stream.OpenConns()
		return n == maxConns, fmt.Sprintf("%d open", n)
	})
	// One more: accepted by the kernel, closed by the node at once.
	readUntilClosed(t, dialRaft(t, addr), 10*time.Second)
	if got := tn.node.stream.RefusedConns(); got != 1 {
		t.Fatalf("refused connections = %d, want 1", got)
	}
	if got := tn.node.stream.OpenConns(); got != maxConns {
		t.Fatalf("open connections after the refusal = %d, want %d (held ones untouched)", got, maxConns)
	}

	// A slot given back is usable again.
	_ = held[0].Close()
	waitFor(t, 10*time.Second, "a slot freed", func() (bool, string) {
		n := tn.node.stream.OpenConns()
		return n == maxConns-1, fmt.Sprintf("%d open", n)
	})
	dialRaft(t, addr)
	waitFor(t, 10*time.Second, "the new connection accepted", func() (bool, string) {
		n := tn.node.stream.OpenConns()
		return n == maxConns, fmt.Sprintf("%d open", n)
	})
	if got := tn.node.stream.RefusedConns(); got != 1 {
		t.Fatalf("refused connections = %d, want still 1", got)
	}
	// The node still serves.
	(&testCluster{t: t, nodes: []*testNode{tn}}).leader().apply(t, createTopic("t", 1))
}

func TestTransport_IdleConnection_Closed(t *testing.T) {
	const idle = 500 * time.Millisecond
	cfg := testConfig(t, "n1")
	fastTimeouts(idle)(0, &cfg)
	tn := newSingleNode(t, cfg)

	c := dialRaft(t, tn.node.RaftAddress())
	took := readUntilClosed(t, c, 20*time.Second)
	if took < idle/2 {
		t.Fatalf("closed after %s, before the idle timeout %s", took, idle)
	}
	waitFor(t, 10*time.Second, "the slot given back", func() (bool, string) {
		n := tn.node.stream.OpenConns()
		return n == 0, fmt.Sprintf("%d open", n)
	})
	if got := tn.node.stream.IdleClosedConns(); got != 1 {
		t.Fatalf("idle-closed connections = %d, want 1", got)
	}
}

// A pooled outbound connection that the peer closed for idleness is
// re-dialled on its next use instead of failing the request.
func TestTransport_OutboundIdlePastPeerTimeout_Redials(t *testing.T) {
	const idle = 300 * time.Millisecond
	server, err := newStreamLayer("127.0.0.1:0", nil, 4, idle, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	// An echo server: one byte in, one byte out, until the connection ends.
	go func() {
		for {
			c, err := server.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	client, err := newStreamLayer("127.0.0.1:0", nil, 4, idle, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	c, err := client.Dial(raft.ServerAddress(server.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	roundTrip := func(b byte) error { return echo(c, b) }
	if err := roundTrip(1); err != nil {
		t.Fatalf("first round trip: %v", err)
	}
	waitFor(t, 10*time.Second, "the server to close the idle connection", func() (bool, string) {
		n := server.IdleClosedConns()
		return n == 1 && server.OpenConns() == 0, fmt.Sprintf("%d idle-closed, %d open", n, server.OpenConns())
	})
	if err := roundTrip(2); err != nil {
		t.Fatalf("round trip after the peer's idle close: %v", err)
	}
}

// Raft's own connections outlive quiet spells: after leadership moves
// away and back, the connections the first leader pooled have been idle
// past the followers' timeout; replication goes on.
func TestMultiNode_IdleTimeout_KeepsReplicating(t *testing.T) {
	const idle = 500 * time.Millisecond
	c := newTestCluster(t, 3, fastTimeouts(idle))
	first := c.leader()
	first.apply(t, createTopic("before", 1))

	var second *testNode
	for _, tn := range c.nodes {
		if tn != first {
			second = tn
			break
		}
	}
	transferLeadership(t, c, first, second)
	c.leader()
	waitFor(t, 20*time.Second, "a follower to close a connection the first leader left idle", func() (bool, string) {
		var closed uint64
		for _, tn := range c.nodes {
			if tn != first {
				closed += tn.node.stream.IdleClosedConns()
			}
		}
		return closed > 0, fmt.Sprintf("%d idle-closed", closed)
	})
	leader := c.leader()
	if leader != first {
		transferLeadership(t, c, leader, first)
	}
	leader = c.leader()
	for i := range 20 {
		leader.apply(t, createTopic(fmt.Sprintf("after-%d", i), 1))
	}
	waitConverged(t, leader, c.nodes...)
}

// transferLeadership moves leadership from one node to another. A transfer
// times out when the target does not win its election within the election
// timeout (the short one of fastTimeouts, on a loaded machine); it is
// asked again, from whichever node leads, up to five times.
func transferLeadership(t *testing.T, c *testCluster, from, to *testNode) {
	t.Helper()
	var err error
	for range 5 {
		err = from.node.Raft().LeadershipTransferToServer(raft.ServerID(to.node.ID()), raft.ServerAddress(to.node.RaftAddress())).Error()
		if c.leader() == to {
			return
		}
		from = c.leader()
	}
	t.Fatalf("transfer leadership to %s: still %s after five tries (last: %v)", to.node.ID(), c.leader().node.ID(), err)
}
