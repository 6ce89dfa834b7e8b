package client

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cohortlabs/cohort/assign"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func TestMember_Mode_CooperativeOnlyWithCooperativeStickyAlone(t *testing.T) {
	for _, tc := range []struct {
		protocols   []string
		server      string
		cooperative bool
	}{
		{[]string{"cooperative-sticky"}, "", true},
		{[]string{"cooperative-sticky", "range"}, "", false},
		{[]string{"sticky"}, "", false},
		{nil, "sticky", false},
	} {
		cfg := testConfig(&recorder{}, "127.0.0.1:1")
		cfg.Protocols, cfg.ServerSideAssignor = tc.protocols, tc.server
		m, err := NewMember(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if m.cooperative != tc.cooperative || m.serverSide != (tc.server != "") {
			t.Errorf("%v/%q: cooperative=%v serverSide=%v", tc.protocols, tc.server, m.cooperative, m.serverSide)
		}
		_ = m.conn.Close()
	}
}

// The member alone holds all three partitions; a second member appears.
// Round one (cooperative-sticky, computed by this member as leader)
// withholds the partition that moves: only it is revoked, nothing else
// stops, and the member rejoins at once (no heartbeat in between) for round
// two, which hands it to the other member. OnAssigned gets only additions.
func TestMember_Cooperative_RevokesOnlyWhatMovesAndDrivesTheSecondRound(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	rec := &recorder{}
	cfg := testConfig(rec, n.addr)
	cfg.Protocols = []string{"cooperative-sticky"}
	m, _ := startMember(t, cfg)
	waitFor(t, "first assignment", func() bool { return len(rec.get()) == 1 })

	other, err := assign.EncodeSubscription(assign.Subscription{Topics: []string{"orders"}, Generation: assign.NoGeneration})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.members = []*cohortv1.JoinGroupMember{{MemberId: "member-1", Topics: []string{"orders"}}, {MemberId: "other", Metadata: other}}
	c.mu.Unlock()
	c.fail("Heartbeat", errRebalance)
	waitFor(t, "generation 3", func() bool { return len(rec.get()) == 4 })

	kept := m.Assignment()
	if len(kept) != 2 {
		t.Fatalf("after two rounds the member holds %v", kept)
	}
	moved := diffPartitions([]TopicPartition{{"orders", 0}, {"orders", 1}, {"orders", 2}}, kept)
	want := []string{
		"assigned g1 [orders/0 orders/1 orders/2]",
		fmt.Sprintf("revoked %v", moved),
		"assigned g2 []",
		"assigned g3 []",
	}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Fatalf("callbacks:\n got %q\nwant %q", got, want)
	}
	// Round one gave the moved partition to nobody; round two to "other".
	syncs := c.callsOf("SyncGroup")
	planOf := func(call fakeCall, id string) []TopicPartition {
		for _, a := range syncReq(call).Assignments {
			if a.MemberId == id {
				return fromProto(a.Assignment)
			}
		}
		return nil
	}
	if len(syncs) < 3 || len(planOf(syncs[1], "other")) != 0 || !slices.Equal(planOf(syncs[2], "other"), moved) {
		t.Fatalf("plans: round one %v, round two %v", planOf(syncs[1], "other"), planOf(syncs[2], "other"))
	}
	// The follow-up join came straight after round one's sync.
	c.mu.Lock()
	calls := slices.Clone(c.calls)
	c.mu.Unlock()
	for i, call := range calls {
		if call.method == "SyncGroup" && syncReq(call).Generation == 2 {
			if i+1 >= len(calls) || calls[i+1].method != "JoinGroup" {
				t.Fatalf("after round one's sync: %v", calls[i+1:])
			}
		}
	}
}

// Losing the membership (UNKNOWN_MEMBER_ID) revokes everything even in the
// cooperative protocol: the partitions may already be someone else's.
func TestMember_Cooperative_LostMembershipRevokesEverything(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	rec := &recorder{}
	cfg := testConfig(rec, n.addr)
	cfg.Protocols = []string{"cooperative-sticky"}
	startMember(t, cfg)
	waitFor(t, "first assignment", func() bool { return len(rec.get()) == 1 })
	c.fail("Heartbeat", errRebalance)
	waitFor(t, "second generation", func() bool { return len(rec.get()) == 2 })
	c.fail("Heartbeat", errUnknownMember)
	waitFor(t, "third generation", func() bool { return len(rec.get()) == 4 })
	want := []string{
		"assigned g1 [orders/0 orders/1 orders/2]",
		"assigned g2 []", // a rebalance that moves nothing stops nothing
		"revoked [orders/0 orders/1 orders/2]",
		"assigned g3 [orders/0 orders/1 orders/2]",
	}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Fatalf("callbacks:\n got %q\nwant %q", got, want)
	}
}

// Server-side mode: protocol type "server", the assignor as the only
// protocol (with subscription metadata the coordinator can read), and no
// plan from the member even when it is the group leader.
func TestMember_ServerSide_SendsNoPlanAndTakesTheCoordinatorsAssignment(t *testing.T) {
	c := newFakeCluster(t)
	c.plan = map[string]*cohortv1.Assignment{"member-1": {Topics: []*cohortv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0, 2}}}}}
	n := c.node()
	rec := &recorder{}
	cfg := testConfig(rec, n.addr)
	cfg.Protocols, cfg.ServerSideAssignor = nil, "sticky"
	m, _ := startMember(t, cfg)
	waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })
	if got := m.Assignment(); !slices.Equal(got, []TopicPartition{{"orders", 0}, {"orders", 2}}) {
		t.Fatalf("assignment %v", got)
	}
	j := joinReq(c.callsOf("JoinGroup")[1])
	if j.ProtocolType != "server" || len(j.Protocols) != 1 || j.Protocols[0].Name != "sticky" {
		t.Fatalf("join request %v", j)
	}
	if sub, err := assign.DecodeSubscription(j.Protocols[0].Metadata); err != nil || !slices.Equal(sub.Topics, []string{"orders"}) {
		t.Fatalf("metadata %v %v", sub, err)
	}
	if s := syncReq(c.callsOf("SyncGroup")[0]); len(s.Assignments) != 0 {
		t.Fatalf("a server-side leader sent a plan: %v", s.Assignments)
	}
	// The next join claims what it owns, so the coordinator can fall back
	// on it.
	c.fail("Heartbeat", errRebalance)
	waitFor(t, "second generation", func() bool { return len(rec.get()) == 3 })
	j = joinReq(c.callsOf("JoinGroup")[2])
	if sub, err := assign.DecodeSubscription(j.Protocols[0].Metadata); err != nil || sub.Generation != 1 || len(sub.Owned) != 1 || !slices.Equal(sub.Owned[0].Partitions, []int32{0, 2}) {
		t.Fatalf("rejoin metadata %+v %v", sub, err)
	}
}
