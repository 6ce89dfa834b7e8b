package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// retryable reports an error a client retries on another node: the node
// does not lead (any more), or cannot be reached.
func retryable(err error) bool {
	return reason(err) == "NOT_LEADER" || (status.Code(err) == codes.Unavailable && reason(err) == "")
}

// onLiveNode retries fn across the live nodes of c until it returns
// something other than a retryable error.
func (m *member) onLiveNode(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
		for i := 1; i <= len(m.c.Nodes); i++ {
			next := (m.node + i) % len(m.c.Nodes)
			if m.c.Live(next) {
				m.node = next
				break
			}
		}
	}
}

// liveFollower is a live node other than the leader.
func liveFollower(c *testcluster.Cluster) int {
	l := c.Leader()
	for i := range c.Nodes {
		if i != l && c.Live(i) {
			return i
		}
	}
	return -1
}

type snapshotView struct {
	generation int32
	leader     string
	owned      map[string][]string
}

func view(t *testing.T, c *testcluster.Cluster, node int, group string) snapshotView {
	t.Helper()
	d := describe(t, c, node, group)
	v := snapshotView{generation: d.GetGeneration(), leader: d.GetLeaderId(), owned: map[string][]string{}}
	for _, m := range d.GetMembers() {
		var tps []string
		for _, tp := range m.GetAssignment().GetTopics() {
			for _, p := range tp.GetPartitions() {
				tps = append(tps, fmt.Sprintf("%s/%d", tp.GetTopic(), p))
			}
		}
		v.owned[m.GetMemberId()] = tps
	}
	return v
}

func TestFailover_Stable_KillLeader_KeepsGenerationAssignmentsAndOffsets(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	groups := map[string][]*member{}
	before := map[string]snapshotView{}
	committed := map[string]int64{}
	for g := range 3 {
		id := fmt.Sprintf("group-%d", g)
		var ms []*member
		for range 5 {
			m := newMember(t, c, id, "t")
			m.node = liveFollower(c)
			ms = append(ms, m)
		}
		rebalance(t, ctx, ms...)
		for _, m := range ms {
			for _, tp := range m.owned() {
				var p int32
				fmt.Sscanf(strings.TrimPrefix(tp, "t/"), "%d", &p)
				off := int64(100*g) + int64(p)
				if resp, err := m.commit(ctx, "t", p, off); err != nil || resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
					t.Fatalf("commit %s %s: %v %v", id, tp, resp, err)
				}
				committed[id+"/"+tp] = off
			}
		}
		groups[id] = ms
		before[id] = view(t, c, liveFollower(c), id)
	}

	old := c.Leader()
	c.Kill(old)
	newLeader := c.WaitServing()
	if newLeader == old {
		t.Fatalf("the killed node still leads")
	}

	// Every member keeps heartbeating: no rebalance, same generation.
	for id, ms := range groups {
		for _, m := range ms {
			if err := m.onLiveNode(ctx, func() error { return m.heartbeat(ctx) }); err != nil {
				t.Fatalf("%s member %s heartbeat after failover: %v", id, m.id, err)
			}
		}
		after := view(t, c, newLeader, id)
		if after.generation != before[id].generation || after.leader != before[id].leader {
			t.Fatalf("%s: generation %d leader %s after failover, was %d %s", id, after.generation, after.leader, before[id].generation, before[id].leader)
		}
		for mid, owned := range before[id].owned {
			if !slices.Equal(after.owned[mid], owned) {
				t.Fatalf("%s member %s owns %v after failover, had %v", id, mid, after.owned[mid], owned)
			}
		}
	}
	// Every commit made before the kill is readable, and commits resume.
	for id, ms := range groups {
		resp, err := c.Groups(newLeader).OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: id})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, p := range resp.GetPartitions() {
			got[fmt.Sprintf("%s/%s/%d", id, p.GetTopic(), p.GetPartition())] = p.GetOffset()
		}
		for k, v := range committed {
			if strings.HasPrefix(k, id+"/") && got[k] != v {
				t.Fatalf("offset %s = %d after failover, committed %d", k, got[k], v)
			}
		}
		m := ms[0]
		var p int32
		fmt.Sscanf(strings.TrimPrefix(m.owned()[0], "t/"), "%d", &p)
		err = m.onLiveNode(ctx, func() error {
			resp, err := m.commit(ctx, "t", p, 99999)
			if err == nil && resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
				return fmt.Errorf("%v", resp.GetPartitions()[0])
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s commit on the new leader: %v", id, err)
		}
	}
	// Sessions were re-armed, not lost: members heartbeating every 200 ms
	// are all still there after more than a session timeout (2 s). The
	// ticker is the members' heartbeat interval, not a wait for the
	// cluster.
	heartbeats := time.NewTicker(200 * time.Millisecond)
	defer heartbeats.Stop()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-heartbeats.C {
		for id, ms := range groups {
			for _, m := range ms {
				if err := m.onLiveNode(ctx, func() error { return m.heartbeat(ctx) }); err != nil {
					t.Fatalf("%s member %s heartbeat: %v", id, m.id, err)
				}
			}
		}
	}
}

func TestFailover_MidJoinBarrier_OneNewGeneration(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	ms := []*member{newMember(t, c, "g", "t"), newMember(t, c, "g", "t"), newMember(t, c, "g", "t")}
	for _, m := range ms {
		m.node = liveFollower(c)
		m.rebalMs = 20000 // the barrier must not close by timeout during the test
	}
	rebalance(t, ctx, ms...)
	gen := ms[0].generation

	// ms[0] rejoins with a new subscription (the barrier opens) and is
	// parked on the leader; kill it.
	createTopic(t, c, "u", 2)
	ms[0].topics = []string{"t", "u"}
	parked := make(chan error, 1)
	go func() { parked <- ms[0].tryJoin(ctx) }()
	testcluster.WaitFor(t, 10*time.Second, "the barrier to open", func() (bool, string) {
		d := describe(t, c, liveFollower(c), "g")
		return d.GetState() == "PreparingRebalance", d.GetState()
	})
	old := c.Leader()
	c.Kill(old)
	if err := <-parked; !retryable(err) {
		t.Fatalf("the parked join on the killed leader: %v, want NOT_LEADER or Unavailable", err)
	}
	c.WaitServing()

	// Everyone retries on the new leader and the barrier completes once.
	if err := all(ms, "join", func(m *member) error { return m.onLiveNode(ctx, func() error { return m.tryJoin(ctx) }) }); err != nil {
		t.Fatal(err)
	}
	if err := all(ms, "sync", func(m *member) error { return m.onLiveNode(ctx, func() error { return m.trySync(ctx) }) }); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.generation != gen+1 {
			t.Fatalf("member %s at generation %d, want exactly one new generation (%d)", m.id, m.generation, gen+1)
		}
	}
	checkAssignment(t, "t", 6, ms...)
	if d := describe(t, c, c.Leader(), "g"); d.GetGeneration() != gen+1 || d.GetState() != "Stable" {
		t.Fatalf("after failover mid-join: %s generation %d, want Stable %d", d.GetState(), d.GetGeneration(), gen+1)
	}
}

func TestFailover_MidSyncBarrier_SameGenerationEverywhere(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	ms := []*member{newMember(t, c, "g", "t"), newMember(t, c, "g", "t"), newMember(t, c, "g", "t")}
	for _, m := range ms {
		m.node = liveFollower(c)
	}
	// Join only: the group waits in CompletingRebalance for the plan.
	if err := joinAll(ctx, ms...); err != nil {
		t.Fatal(err)
	}
	gen := ms[0].generation
	var leader *member
	var followers []*member
	for _, m := range ms {
		if m.isLeader() {
			leader = m
		} else {
			followers = append(followers, m)
		}
	}
	// Followers park in SyncGroup; the leader node dies before the plan.
	results := make(chan error, len(followers))
	for _, f := range followers {
		go func() { results <- f.trySync(ctx) }()
	}
	// The kill lands while the syncs wait at the barrier on the leader.
	waitSyncParked(t, c, len(followers))
	old := c.Leader()
	c.Kill(old)
	for range followers {
		if err := <-results; !retryable(err) {
			t.Fatalf("a parked sync on the killed leader: %v, want NOT_LEADER or Unavailable", err)
		}
	}
	c.WaitServing()
	for _, f := range followers {
		go func() { results <- f.onLiveNode(ctx, func() error { return f.trySync(ctx) }) }()
	}
	if err := leader.onLiveNode(ctx, func() error { return leader.trySync(ctx) }); err != nil {
		t.Fatalf("leader's sync on the new leader: %v", err)
	}
	for range followers {
		if err := <-results; err != nil {
			t.Fatalf("follower sync after failover: %v", err)
		}
	}
	for _, m := range ms {
		if m.generation != gen {
			t.Fatalf("member %s at generation %d, want %d", m.id, m.generation, gen)
		}
	}
	checkAssignment(t, "t", 6, ms...)
	if d := describe(t, c, c.Leader(), "g"); d.GetGeneration() != gen || d.GetState() != "Stable" {
		t.Fatalf("after failover mid-sync: %s generation %d, want Stable %d", d.GetState(), d.GetGeneration(), gen)
	}
}
