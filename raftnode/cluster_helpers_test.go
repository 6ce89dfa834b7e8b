package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
)

// testLogger discards logs unless COHORT_TEST_LOG is set: raft logs from
// goroutines that may outlive a test's t.Log.
func testLogger() *slog.Logger {
	if os.Getenv("COHORT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testNode is one in-process cohort node: a raftnode.Node with its FSM and
// a gRPC server for ClusterService, all on loopback.
type testNode struct {
	t    testing.TB
	cfg  Config
	node *Node
	fsm  *fsm.FSM
	srv  *grpc.Server
	lis  net.Listener
}

// testCluster is a set of nodes formed with bootstrap-expect through the
// gRPC NodeInfo path, as cohortd forms them.
type testCluster struct {
	t     testing.TB
	nodes []*testNode
}

type clusterOpt func(i int, c *Config)

func newTestCluster(t testing.TB, size int, opts ...clusterOpt) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	lis := make([]net.Listener, size)
	var join []string
	for i := range size {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen for gRPC: %v", err)
		}
		lis[i] = l
		join = append(join, l.Addr().String())
	}
	for i := range size {
		cfg := Config{
			NodeID:          fmt.Sprintf("n%d", i+1),
			DataDir:         t.TempDir(),
			RaftBind:        "127.0.0.1:0",
			GRPCAdvertise:   lis[i].Addr().String(),
			BootstrapExpect: size,
			Join:            join,
			PollInterval:    50 * time.Millisecond,
			Logger:          testLogger(),
		}
		for _, o := range opts {
			o(i, &cfg)
		}
		c.nodes = append(c.nodes, startTestNode(t, cfg, lis[i]))
	}
	return c
}

func startTestNode(t testing.TB, cfg Config, lis net.Listener) *testNode {
	t.Helper()
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("listen for gRPC: %v", err)
		}
		cfg.GRPCAdvertise = lis.Addr().String()
	}
	f := fsm.New()
	n, err := New(cfg, f)
	if err != nil {
		lis.Close()
		t.Fatalf("start node %s: %v", cfg.NodeID, err)
	}
	srv := grpc.NewServer()
	cohortv1.RegisterClusterServiceServer(srv, NewClusterService(n))
	go srv.Serve(lis)
	tn := &testNode{t: t, cfg: cfg, node: n, fsm: f, srv: srv, lis: lis}
	// Pin the raft address so a restart binds the same one the peers know.
	tn.cfg.RaftBind = n.RaftAddress()
	t.Cleanup(func() { tn.stop() })
	return tn
}

// stop shuts the node down gracefully; idempotent.
func (tn *testNode) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tn.node.Shutdown(ctx); err != nil {
		tn.t.Errorf("shutdown %s: %v", tn.node.ID(), err)
	}
	tn.srv.Stop()
}

// crash stops the node without a leadership transfer.
func (tn *testNode) crash() {
	if err := tn.node.kill(); err != nil {
		tn.t.Errorf("kill %s: %v", tn.node.ID(), err)
	}
	tn.srv.Stop()
}

// restart starts a new process-equivalent on the same data dir and raft
// address; the gRPC port is new, as after a real restart it may be.
func (tn *testNode) restart(t testing.TB) *testNode {
	t.Helper()
	return startTestNode(t, tn.cfg, nil)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leader waits until exactly one of the running nodes leads and every
// running node agrees on it.
func (c *testCluster) leader(running ...*testNode) *testNode {
	c.t.Helper()
	if len(running) == 0 {
		running = c.nodes
	}
	var leader *testNode
	waitFor(c.t, 20*time.Second, "one agreed leader", func() (bool, string) {
		leader = nil
		var leaders []string
		for _, tn := range running {
			if tn.node.IsLeader() {
				leaders = append(leaders, tn.node.ID())
				leader = tn
			}
		}
		if len(leaders) != 1 {
			return false, fmt.Sprintf("leaders %v", leaders)
		}
		for _, tn := range running {
			if id, _ := tn.node.Leader(); id != leader.node.ID() {
				return false, fmt.Sprintf("%s thinks the leader is %q", tn.node.ID(), id)
			}
		}
		return true, ""
	})
	return leader
}

// apply applies cmd on tn and fails the test on an error or refusal.
func (tn *testNode) apply(t testing.TB, cmd *fsmv1.Command) *fsm.ApplyResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := tn.node.Apply(ctx, cmd)
	if err != nil {
		t.Fatalf("apply %v on %s: %v", cmd, tn.node.ID(), err)
	}
	if res.Err != nil {
		t.Fatalf("apply %v on %s: refused: %v", cmd, tn.node.ID(), res.Err)
	}
	return res
}

func snapshotBytes(t testing.TB, f *fsm.FSM) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&b); err != nil {
		t.Fatalf("write snapshot: %v", err)
	}
	return b.Bytes()
}

// waitConverged waits until every given node has applied the leader's
// last index and holds a byte-identical FSM snapshot.
func waitConverged(t testing.TB, leader *testNode, nodes ...*testNode) {
	t.Helper()
	waitFor(t, 20*time.Second, "FSMs to converge", func() (bool, string) {
		want := leader.node.LastIndex()
		for _, tn := range nodes {
			if got := tn.node.AppliedIndex(); got < want {
				return false, fmt.Sprintf("%s applied %d < leader's last index %d", tn.node.ID(), got, want)
			}
		}
		ref := snapshotBytes(t, leader.fsm)
		for _, tn := range nodes {
			if !bytes.Equal(snapshotBytes(t, tn.fsm), ref) {
				return false, fmt.Sprintf("%s's snapshot differs from the leader's", tn.node.ID())
			}
		}
		return true, ""
	})
}

func voters(t testing.TB, n *Node) []string {
	t.Helper()
	c, err := n.Configuration()
	if err != nil {
		t.Fatalf("configuration of %s: %v", n.ID(), err)
	}
	var out []string
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	return out
}

// Command builders.

func createTopic(name string, partitions int32) *fsmv1.Command {
	return &fsmv1.Command{Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: name, Partitions: partitions}}}
}

func joinMember(group, member string, newMember bool, topics ...string) *fsmv1.Command {
	return &fsmv1.Command{Kind: &fsmv1.Command_JoinMember{JoinMember: &fsmv1.JoinMember{
		GroupId: group, ProtocolType: "consumer", NewMember: newMember,
		Member: &fsmv1.MemberSpec{
			MemberId: member, ClientId: "client-" + member, ClientHost: "127.0.0.1",
			SessionTimeoutMs: 10000, RebalanceTimeoutMs: 30000,
			Protocols: []*fsmv1.Protocol{{Name: "range", Metadata: []byte("m")}},
			Topics:    topics,
		},
	}}}
}

func syncAssignment(group string, generation int32, leader string, plan map[string][]int32, topic string) *fsmv1.Command {
	s := &fsmv1.SyncAssignment{GroupId: group, Generation: generation, MemberId: leader}
	for _, m := range sortedKeys(plan) {
		s.Assignments = append(s.Assignments, &fsmv1.MemberAssignment{MemberId: m, Assignment: &fsmv1.Assignment{
			Topics: []*fsmv1.TopicPartitions{{Topic: topic, Partitions: plan[m]}},
		}})
	}
	return &fsmv1.Command{Kind: &fsmv1.Command_SyncAssignment{SyncAssignment: s}}
}

func commitOffsets(group string, generation int32, member, topic string, offset int64, partitions ...int32) *fsmv1.Command {
	c := &fsmv1.CommitOffsets{GroupId: group, Generation: generation, MemberId: member}
	for _, p := range partitions {
		c.Offsets = append(c.Offsets, &fsmv1.OffsetCommit{Topic: topic, Partition: p, Offset: offset})
	}
	return &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: c}}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
