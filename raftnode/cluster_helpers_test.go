package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/internal/proc"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/hashicorp/raft"
)

// testLogger discards logs unless COHORT_TEST_LOG is set: raft logs from
// goroutines that may outlive a test's t.Log.
func testLogger() *slog.Logger {
	if os.Getenv("COHORT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testNode is one in-process replica: a Node with its FSM on loopback.
type testNode struct {
	t    testing.TB
	cfg  Config
	node *Node
	fsm  *fsm.FSM
}

// testCluster is a set of replicas bootstrapped with one static
// configuration of all of them as voters (formation through peers is the
// cluster package's).
type testCluster struct {
	t     testing.TB
	nodes []*testNode
}

type clusterOpt func(i int, c *Config)

// testConfig is a node's configuration for tests: loopback, a random
// port, logs through testLogger.
func testConfig(t testing.TB, id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.RaftBind = "127.0.0.1:0"
	cfg.Logger = testLogger()
	return cfg
}

func newTestCluster(t testing.TB, size int, opts ...clusterOpt) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	var servers []raft.Server
	for i := range size {
		cfg := testConfig(t, fmt.Sprintf("n%d", i+1))
		for _, o := range opts {
			o(i, &cfg)
		}
		tn := startTestNode(t, cfg)
		c.nodes = append(c.nodes, tn)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(tn.node.ID()), Address: raft.ServerAddress(tn.node.RaftAddress())})
	}
	for _, tn := range c.nodes {
		tn.bootstrap(t, servers)
	}
	return c
}

// newSingleNode starts one node that bootstraps itself as the only voter.
func newSingleNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	tn := startTestNode(t, cfg)
	tn.bootstrap(t, []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(tn.node.ID()), Address: raft.ServerAddress(tn.node.RaftAddress())}})
	return tn
}

// bootstrap gives a fresh node its first configuration.
func (tn *testNode) bootstrap(t testing.TB, servers []raft.Server) {
	t.Helper()
	if err := tn.node.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatalf("bootstrap %s: %v", tn.node.ID(), err)
	}
}

func startTestNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	f := fsm.New()
	n, err := New(cfg, f)
	if err != nil {
		t.Fatalf("start node %s: %v", cfg.NodeID, err)
	}
	tn := &testNode{t: t, cfg: cfg, node: n, fsm: f}
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
}

// crash stops the node without a leadership transfer.
func (tn *testNode) crash() {
	if err := tn.node.kill(); err != nil {
		tn.t.Errorf("kill %s: %v", tn.node.ID(), err)
	}
}

// restart starts a new process-equivalent on the same data dir and raft
// address.
func (tn *testNode) restart(t testing.TB) *testNode {
	t.Helper()
	return startTestNode(t, tn.cfg)
}

// waitFor polls cond until it holds or the timeout passes.
var waitFor = proc.WaitFor

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

// followerOf is a node of c other than leader.
func (c *testCluster) followerOf(leader *testNode) *testNode {
	for _, tn := range c.nodes {
		if tn != leader {
			return tn
		}
	}
	c.t.Fatal("the cluster has no follower")
	return nil
}

// runningWith is c's nodes with old replaced by its restarted self.
func (c *testCluster) runningWith(old, restarted *testNode) []*testNode {
	running := []*testNode{restarted}
	for _, tn := range c.nodes {
		if tn != old {
			running = append(running, tn)
		}
	}
	return running
}
