package raftnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	"github.com/cohortlabs/cohort/offsets"
)

func TestMultiNode_ApplyReplicatesToAllFSMs(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.leader()
	for i := range 20 {
		leader.apply(t, createTopic(fmt.Sprintf("topic-%02d", i), int32(i%4+1)))
	}
	leader.apply(t, commitOffsets("standalone", -1, "", "topic-03", 7, 0, 1, 2, 3))
	waitConverged(t, leader, c.nodes...)
	for _, tn := range c.nodes {
		if s := tn.fsm.Stats(); s.Topics != 20 || s.Offsets != 4 || s.Groups != 1 {
			t.Fatalf("%s FSM stats %+v, want 20 topics, 1 group, 4 offsets", tn.node.ID(), s)
		}
	}

	// A follower refuses to propose: the caller must go to the leader.
	var follower *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	_, err := follower.node.Apply(context.Background(), createTopic("from-follower", 1))
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("apply on follower: err %v, want ErrNotLeader", err)
	}

	// A refused command is a typed result, not an error, and changes nothing.
	res, err := leader.node.Apply(context.Background(), createTopic("topic-00", 3))
	if err != nil {
		t.Fatalf("apply duplicate topic: %v", err)
	}
	if !errors.Is(res.Err, errcode.ErrTopicAlreadyExists) {
		t.Fatalf("duplicate topic result %v, want TOPIC_ALREADY_EXISTS", res.Err)
	}
	waitConverged(t, leader, c.nodes...)
}

// groupView is what must survive a failover: generation, leader, members,
// assignments and committed offsets.
type groupView struct {
	Generation int32
	Leader     string
	State      fsm.GroupState
	Members    map[string]fsm.Assignment
	Offsets    []offsets.Entry
}

func viewGroup(t *testing.T, f *fsm.FSM, id string) groupView {
	t.Helper()
	g, ok := f.Group(id)
	if !ok {
		t.Fatalf("group %q missing", id)
	}
	v := groupView{Generation: g.Generation, Leader: g.LeaderID, State: g.State, Members: map[string]fsm.Assignment{}}
	for _, m := range g.Members.All() {
		v.Members[m.ID] = m.Assignment
	}
	f.Read(func(s *fsm.State) { v.Offsets = s.Offsets(id) })
	return v
}

func TestMultiNode_LeaderFailover_KeepsGeneration(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.leader()

	// A group through a full rebalance: a joins (generation 1), b joins,
	// a rejoins (generation 2), a syncs the plan, both commit.
	leader.apply(t, createTopic("orders", 4))
	leader.apply(t, joinMember("g", "a", true, "orders"))
	leader.apply(t, joinMember("g", "b", true, "orders"))
	if res := leader.apply(t, joinMember("g", "a", false, "orders")); !res.JoinCompleted {
		t.Fatalf("join barrier did not complete when a rejoined")
	}
	leader.apply(t, syncAssignment("g", 2, "a", map[string][]int32{"a": {0, 1}, "b": {2, 3}}, "orders"))
	leader.apply(t, commitOffsets("g", 2, "a", "orders", 100, 0, 1))
	leader.apply(t, commitOffsets("g", 2, "b", "orders", 200, 2, 3))
	waitConverged(t, leader, c.nodes...)
	before := viewGroup(t, leader.fsm, "g")
	if before.Generation != 2 || before.State != fsm.Stable || len(before.Members) != 2 || len(before.Offsets) != 4 {
		t.Fatalf("group before failover: %+v, want Stable generation 2 with 2 members and 4 offsets", before)
	}

	var survivors []*testNode
	var subs []*LeadershipSubscription
	for _, tn := range c.nodes {
		if tn != leader {
			survivors = append(survivors, tn)
			s := tn.node.SubscribeLeadership()
			t.Cleanup(s.Close)
			subs = append(subs, s)
		}
	}
	leader.crash()

	newLeader := c.leader(survivors...)
	if newLeader.node.ID() == leader.node.ID() {
		t.Fatalf("the crashed node is still the leader")
	}
	// The new leader's subscription saw it become leader.
	for i, tn := range survivors {
		if tn != newLeader {
			continue
		}
		deadline := time.After(10 * time.Second)
		for gotLeader := false; !gotLeader; {
			select {
			case ev := <-subs[i].C():
				gotLeader = ev.IsLeader
			case <-deadline:
				t.Fatalf("leadership subscription of %s never reported leadership", tn.node.ID())
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := newLeader.node.Barrier(ctx); err != nil {
		t.Fatalf("barrier on new leader: %v", err)
	}
	for _, tn := range survivors {
		if got := viewGroup(t, tn.fsm, "g"); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Fatalf("%s after failover: %+v\nwant %+v", tn.node.ID(), got, before)
		}
	}
	// The generation is live on the new leader: the owner commits in it.
	res := newLeader.apply(t, commitOffsets("g", 2, "b", "orders", 201, 3))
	if err := res.Partitions[0].Err; err != nil {
		t.Fatalf("commit in generation 2 after failover: %v", err)
	}
	waitConverged(t, newLeader, survivors...)
}

func TestNode_RestartFromDataDir_CatchesUp(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.leader()
	for i := range 10 {
		leader.apply(t, createTopic(fmt.Sprintf("before-%d", i), 1))
	}
	waitConverged(t, leader, c.nodes...)

	var follower *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	// The follower snapshots, so its restart restores a snapshot and then
	// replays the log entries after it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := follower.node.Snapshot(ctx); err != nil {
		t.Fatalf("snapshot on %s: %v", follower.node.ID(), err)
	}
	leader.apply(t, createTopic("after-snapshot", 1))
	waitConverged(t, leader, c.nodes...)
	follower.stop()

	for i := range 10 {
		leader.apply(t, createTopic(fmt.Sprintf("while-down-%d", i), 2))
	}
	restarted := follower.restart(t)
	if !restarted.node.HadExistingState() {
		t.Fatalf("restarted node did not find its raft state")
	}
	if got := restarted.node.Stats().Restores; got != 1 {
		t.Fatalf("restarted node restored %d snapshots on start, want 1", got)
	}
	waitConverged(t, leader, leader, restarted)
	if s := restarted.fsm.Stats(); s.Topics != 21 {
		t.Fatalf("restarted node has %d topics, want 21", s.Topics)
	}
	// It rejoined the existing configuration instead of bootstrapping a new one.
	if got := voters(t, restarted.node); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Fatalf("restarted node sees voters %v, want [n1 n2 n3]", got)
	}
}

func TestMultiNode_SnapshotInstall_AfterCompaction(t *testing.T) {
	c := newTestCluster(t, 3, func(_ int, cfg *Config) {
		cfg.TrailingLogs = 4
		cfg.SnapshotThreshold = 16
	})
	leader := c.leader()
	leader.apply(t, createTopic("first", 1))
	waitConverged(t, leader, c.nodes...)

	var follower *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	follower.stop()
	for i := range 40 {
		leader.apply(t, createTopic(fmt.Sprintf("t-%02d", i), 1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.node.Snapshot(ctx); err != nil {
		t.Fatalf("snapshot on leader: %v", err)
	}
	st := leader.node.Stats()
	first, err := leader.node.store.FirstIndex()
	if err != nil {
		t.Fatalf("first index: %v", err)
	}
	if first <= follower.node.LastIndex() {
		t.Fatalf("leader's log starts at %d, not past the follower's last index %d: no compaction", first, follower.node.LastIndex())
	}

	restarted := follower.restart(t)
	if got := restarted.node.Stats().Restores; got != 0 {
		t.Fatalf("follower restored %d snapshots at start, want 0 (it never snapshotted)", got)
	}
	waitConverged(t, leader, leader, restarted)
	rs := restarted.node.Stats()
	if rs.Restores != 1 {
		t.Fatalf("follower restored %d snapshots, want 1 (InstallSnapshot)", rs.Restores)
	}
	if rs.LastSnapshot < st.LastSnapshot {
		t.Fatalf("follower's last snapshot index %d, want at least the leader's %d", rs.LastSnapshot, st.LastSnapshot)
	}
	if s := restarted.fsm.Stats(); s.Topics != 41 {
		t.Fatalf("follower has %d topics after install, want 41", s.Topics)
	}
}
