package fsm

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// stableGroup builds group "g" with members a and b subscribed to topic "t"
// (4 partitions), through one full rebalance: generation 1, leader a,
// a owns t/0,1 and b owns t/2,3.
func stableGroup(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	h.ok(at(2, join{group: "g", member: "a", topics: []string{"t"}, newMember: true}))
	// a alone completed the join at once (no initial delay): generation 1.
	h.ok(at(3, join{group: "g", member: "b", topics: []string{"t"}, newMember: true}))
	g := h.group("g")
	if g.State != PreparingRebalance || g.Generation != 1 {
		t.Fatalf("after b joins: %s gen %d, want PreparingRebalance gen 1", g.State, g.Generation)
	}
	res := h.ok(at(4, join{group: "g", member: "a", topics: []string{"t"}}))
	if !res.JoinCompleted {
		t.Fatalf("join barrier did not complete when every member rejoined")
	}
	g = h.group("g")
	if g.State != CompletingRebalance || g.Generation != 2 || g.LeaderID != "a" {
		t.Fatalf("after rejoin: %s gen %d leader %q, want CompletingRebalance gen 2 leader a", g.State, g.Generation, g.LeaderID)
	}
	h.ok(at(5, syncCmd{"g", 2, "a", plan{"a": {"t": {1, 0}}, "b": {"t": {2, 3}}}}))
	return h
}

func TestJoinSyncCommit_FullRebalanceFlow(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	g := h.group("g")
	if g.State != Stable || g.Protocol != "range" {
		t.Fatalf("state %s protocol %q, want Stable range", g.State, g.Protocol)
	}
	a, _ := g.Member("a")
	if !a.Assignment.Owns("t", 0) || !a.Assignment.Owns("t", 1) || a.Assignment.Owns("t", 2) {
		t.Fatalf("a's assignment %+v, want t/0,1 (sorted)", a.Assignment)
	}
	res := h.ok(at(6, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0, 2}, offset: 42}))
	wantCode(t, res.Partitions[0].Err, errcode.None)
	wantCode(t, res.Partitions[1].Err, errcode.NotOwner)
	h.f.Read(func(s *State) {
		if v, ok := s.Offset("g", "t", 0); !ok || v.Offset != 42 || v.Generation != 2 || v.CommitTimestampMs != 6 {
			t.Fatalf("offset t/0 = %+v %v, want 42 at generation 2 time 6", v, ok)
		}
		if _, ok := s.Offset("g", "t", 2); ok {
			t.Fatalf("a's fenced commit for t/2 was stored")
		}
	})
}

func TestJoin_ProtocolRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cmd  *fsmv1.Command
		code errcode.Code
	}{
		{"unknown member id", at(10, join{group: "g", member: "zz", topics: []string{"t"}}), errcode.UnknownMemberID},
		{"other protocol type", at(10, join{group: "g", member: "c", newMember: true, protocolType: "connect"}), errcode.InconsistentGroupProtocol},
		{"no common protocol", at(10, join{group: "g", member: "c", newMember: true, protocols: []string{"sticky"}}), errcode.InconsistentGroupProtocol},
		{"empty member id", at(10, join{group: "g", member: "", newMember: true}), errcode.InvalidArgument},
		{"empty group id", at(10, join{group: "", member: "c", newMember: true}), errcode.InvalidArgument},
		{"no protocols", at(10, join{group: "g", member: "c", newMember: true, protocols: []string{}}), errcode.InvalidArgument},
		{"duplicate protocol", at(10, join{group: "g", member: "c", newMember: true, protocols: []string{"range", "range"}}), errcode.InvalidArgument},
		{"negative session timeout", at(10, join{group: "g", member: "c", newMember: true, sessionMs: -1}), errcode.InvalidArgument},
		{"instance mismatch", at(10, join{group: "g", member: "a", instance: "i-9", topics: []string{"t"}}), errcode.FencedInstanceID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := stableGroup(t)
			h.refused(tc.cmd, tc.code)
		})
	}
}

func TestJoin_StableFollowerRejoinKeepsGeneration(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	res := h.ok(at(10, join{group: "g", member: "b", topics: []string{"t"}}))
	if res.Group.State != Stable || res.Group.Generation != 2 || res.JoinCompleted {
		t.Fatalf("follower rejoin with same metadata: %s gen %d, want Stable gen 2", res.Group.State, res.Group.Generation)
	}
	// The leader's rejoin, or a follower with a new subscription, rebalances.
	h.ok(at(11, createTopic{"u", 1}))
	res = h.ok(at(12, join{group: "g", member: "b", topics: []string{"t", "u"}}))
	if res.Group.State != PreparingRebalance {
		t.Fatalf("rejoin with a new subscription: %s, want PreparingRebalance", res.Group.State)
	}
	res = h.ok(at(13, join{group: "g", member: "a", topics: []string{"t"}}))
	if !res.JoinCompleted || res.Group.Generation != 3 || res.Group.LeaderID != "a" {
		t.Fatalf("barrier: completed=%v gen %d leader %q, want true 3 a", res.JoinCompleted, res.Group.Generation, res.Group.LeaderID)
	}
}

func TestJoin_CompletingRebalanceRetryIsIdempotent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 2}))
	h.ok(at(2, join{group: "g", member: "a", topics: []string{"t"}, newMember: true}))
	before := snapshotBytes(t, h.f)
	res := h.ok(at(3, join{group: "g", member: "a", topics: []string{"t"}}))
	if res.Group.Generation != 1 || res.Group.State != CompletingRebalance {
		t.Fatalf("retried join: gen %d %s, want gen 1 CompletingRebalance", res.Group.Generation, res.Group.State)
	}
	if !bytes.Equal(before, snapshotBytes(t, h.f)) {
		t.Fatalf("a retried join of a completed generation changed the state")
	}
}

func TestJoin_InitialDelayHoldsBarrier(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1000, join{group: "g", member: "a", newMember: true, delayMs: 3000, rebalanceMs: 5000}))
	g := h.group("g")
	if g.State != PreparingRebalance || g.InitialDelayUntilMs != 4000 {
		t.Fatalf("first member: %s delay until %d, want PreparingRebalance 4000", g.State, g.InitialDelayUntilMs)
	}
	// Each new member extends the delay, never past the rebalance timeout.
	h.ok(at(2000, join{group: "g", member: "b", newMember: true, delayMs: 3000, rebalanceMs: 5000}))
	if g = h.group("g"); g.InitialDelayUntilMs != 5000 {
		t.Fatalf("second member: delay until %d, want 5000", g.InitialDelayUntilMs)
	}
	h.ok(at(3500, join{group: "g", member: "c", newMember: true, delayMs: 3000, rebalanceMs: 5000}))
	if g = h.group("g"); g.InitialDelayUntilMs != 6000 {
		t.Fatalf("third member: delay until %d, want 6000 (capped at start+rebalance timeout)", g.InitialDelayUntilMs)
	}
	h.refused(at(5999, completeJoin{"g", 0, true}), errcode.StaleCommand)
	res := h.ok(at(6000, completeJoin{"g", 0, true}))
	if !res.JoinCompleted || res.Group.Generation != 1 || res.Group.Members.Len() != 3 || res.Group.LeaderID != "a" {
		t.Fatalf("delay end: gen %d members %d leader %q", res.Group.Generation, res.Group.Members.Len(), res.Group.LeaderID)
	}
}

func TestCompleteJoin_TimeoutDropsDynamicKeepsStatic(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, join{group: "g", member: "s1", instance: "i-1", topics: []string{"t"}, newMember: true}))
	// Everyone rejoins but b; then the rebalance times out.
	h.ok(at(11, join{group: "g", member: "a", topics: []string{"t"}}))
	h.ok(at(12, join{group: "g", member: "s1", instance: "i-1", topics: []string{"t"}}))
	res := h.ok(at(50000, completeJoin{"g", 2, false}))
	var ids []string
	for _, m := range res.Group.Members.All() {
		ids = append(ids, m.ID)
	}
	if res.Group.Generation != 3 || len(ids) != 2 || ids[0] != "a" || ids[1] != "s1" {
		t.Fatalf("after timeout: gen %d members %v, want gen 3 [a s1]", res.Group.Generation, ids)
	}
	h.refused(at(50001, completeJoin{"g", 2, false}), errcode.StaleCommand)
	if st := h.f.Stats(); st.Members != 2 {
		t.Fatalf("member count %d, want 2", st.Members)
	}
}

func TestStaticMember_ReplacementKeepsAssignmentWithoutRebalance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 2}))
	h.ok(at(2, join{group: "g", member: "s-old", instance: "i-1", topics: []string{"t"}, newMember: true}))
	h.ok(at(3, syncCmd{"g", 1, "s-old", plan{"s-old": {"t": {0, 1}}}}))
	// The static member restarts with a new member ID.
	res := h.ok(at(4, join{group: "g", member: "s-new", instance: "i-1", topics: []string{"t"}, newMember: true}))
	g := res.Group
	m, ok := g.Member("s-new")
	if !ok || g.State != Stable || g.Generation != 1 || g.LeaderID != "s-new" || !m.Assignment.Owns("t", 1) {
		t.Fatalf("replacement: %s gen %d leader %q member %+v", g.State, g.Generation, g.LeaderID, m)
	}
	// The old ID is fenced.
	h.refused(at(5, commit{group: "g", generation: 1, member: "s-old", topic: "t", partitions: []int32{0}}), errcode.UnknownMemberID)
	h.refused(at(6, join{group: "g", member: "s-old", instance: "i-1", topics: []string{"t"}}), errcode.FencedInstanceID)
}

func TestSync_ValidationNamesFirstFault(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		sync syncCmd
		code errcode.Code
	}{
		{"wrong generation", syncCmd{"g", 1, "a", plan{}}, errcode.IllegalGeneration},
		{"unknown member", syncCmd{"g", 2, "zz", plan{}}, errcode.UnknownMemberID},
		{"not the leader", syncCmd{"g", 2, "b", plan{}}, errcode.InvalidAssignment},
		{"partition out of range", syncCmd{"g", 2, "a", plan{"a": {"t": {4}}}}, errcode.InvalidAssignment},
		{"partition twice", syncCmd{"g", 2, "a", plan{"a": {"t": {0}}, "b": {"t": {0}}}}, errcode.InvalidAssignment},
		{"unknown topic", syncCmd{"g", 2, "a", plan{"a": {"nope": {0}}}}, errcode.InvalidAssignment},
		{"unsubscribed topic", syncCmd{"g", 2, "a", plan{"a": {"u": {0}}}}, errcode.InvalidAssignment},
		{"member not in group", syncCmd{"g", 2, "a", plan{"x": {"t": {0}}}}, errcode.InvalidAssignment},
		{"unknown group", syncCmd{"nope", 2, "a", plan{}}, errcode.UnknownMemberID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(at(1, createTopic{"t", 4}))
			h.ok(at(1, createTopic{"u", 1}))
			h.ok(at(2, join{group: "g", member: "a", topics: []string{"t"}, newMember: true}))
			h.ok(at(3, join{group: "g", member: "b", topics: []string{"t"}, newMember: true}))
			h.ok(at(4, join{group: "g", member: "a", topics: []string{"t"}}))
			h.refused(at(5, tc.sync), tc.code)
			if g := h.group("g"); g.State != CompletingRebalance {
				t.Fatalf("after a refused plan: %s, want CompletingRebalance", g.State)
			}
		})
	}
}

func TestSync_MembersLeftOutGetEmptyAndRetryAnswers(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, join{group: "g", member: "a", topics: []string{"t"}}))
	h.ok(at(11, join{group: "g", member: "b", topics: []string{"t"}}))
	h.ok(at(12, syncCmd{"g", 3, "a", plan{"a": {"t": {0, 1, 2, 3}}}}))
	g := h.group("g")
	b, _ := g.Member("b")
	if g.State != Stable || b.Assignment.Len() != 0 {
		t.Fatalf("b left out: state %s b owns %d", g.State, b.Assignment.Len())
	}
	// A retried sync for the completed generation is answered, not re-applied.
	before := snapshotBytes(t, h.f)
	h.ok(at(13, syncCmd{"g", 3, "b", plan{}}))
	if !bytes.Equal(before, snapshotBytes(t, h.f)) {
		t.Fatalf("a retried sync changed the state")
	}
	h.refused(at(14, syncCmd{"g", 2, "a", plan{}}), errcode.IllegalGeneration)
}

func TestCommit_Fencing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		setup  func(h *harness)
		commit commit
		code   errcode.Code
		// partCode is the expected per-partition code when the commit is
		// accepted as a whole.
		partCode errcode.Code
	}{
		{name: "owner current generation", commit: commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{3}}},
		{name: "not owner", commit: commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{0}}, partCode: errcode.NotOwner},
		{name: "old generation", commit: commit{group: "g", generation: 1, member: "b", topic: "t", partitions: []int32{3}}, code: errcode.IllegalGeneration},
		{name: "unknown member", commit: commit{group: "g", generation: 2, member: "zz", topic: "t", partitions: []int32{3}}, code: errcode.UnknownMemberID},
		{name: "instance mismatch", commit: commit{group: "g", generation: 2, member: "b", instance: "i-1", topic: "t", partitions: []int32{3}}, code: errcode.FencedInstanceID},
		{name: "standalone on a group with members", commit: commit{group: "g", generation: -1, topic: "t", partitions: []int32{3}}, code: errcode.IllegalGeneration},
		{name: "no member at a generation", commit: commit{group: "g", generation: 2, topic: "t", partitions: []int32{3}}, code: errcode.UnknownMemberID},
		{name: "unknown partition", commit: commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{9}}, partCode: errcode.UnknownTopicOrPartition},
		{name: "negative offset", commit: commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{3}, offset: -5}, partCode: errcode.InvalidArgument},
		{name: "no offsets", commit: commit{group: "g", generation: 2, member: "b", topic: "t"}, code: errcode.InvalidArgument},
		{
			name:   "preparing rebalance accepts current generation",
			setup:  func(h *harness) { h.ok(at(9, join{group: "g", member: "a", topics: []string{"t"}})) },
			commit: commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{3}},
		},
		{
			name: "completing rebalance refuses",
			setup: func(h *harness) {
				h.ok(at(9, join{group: "g", member: "a", topics: []string{"t"}}))
				h.ok(at(9, join{group: "g", member: "b", topics: []string{"t"}}))
			},
			commit: commit{group: "g", generation: 3, member: "b", topic: "t", partitions: []int32{3}},
			code:   errcode.RebalanceInProgress,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := stableGroup(t)
			if tc.setup != nil {
				tc.setup(h)
			}
			if tc.code != errcode.None {
				h.refused(at(10, tc.commit), tc.code)
				return
			}
			res := h.ok(at(10, tc.commit))
			wantCode(t, res.Partitions[0].Err, tc.partCode)
			h.f.Read(func(s *State) {
				_, stored := s.Offset("g", "t", tc.commit.partitions[0])
				if stored != (tc.partCode == errcode.None) {
					t.Fatalf("offset stored=%v, per-partition code %s", stored, tc.partCode)
				}
			})
		})
	}
}

func TestCommit_StandaloneCreatesEmptyGroup(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 1}))
	res := h.ok(at(2, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0}, offset: 7}))
	if res.Group == nil || res.Group.State != Empty {
		t.Fatalf("standalone commit: group %+v, want an Empty group", res.Group)
	}
	// A standalone commit that stores nothing creates nothing.
	res = h.ok(at(3, commit{group: "ghost", generation: -1, topic: "t", partitions: []int32{5}}))
	wantCode(t, res.Partitions[0].Err, errcode.UnknownTopicOrPartition)
	if _, ok := h.f.Group("ghost"); ok {
		t.Fatalf("a commit that stored nothing created group ghost")
	}
}

func TestRemoveMembers_LeaveRebalancesThenEmpties(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	res := h.ok(at(10, remove{group: "g", members: []string{"b", "zz"}, reason: fsmv1.RemoveReason_REMOVE_REASON_LEAVE}))
	wantCode(t, res.Members[0].Err, errcode.None)
	wantCode(t, res.Members[1].Err, errcode.UnknownMemberID)
	if res.Group.State != PreparingRebalance {
		t.Fatalf("after b leaves: %s, want PreparingRebalance", res.Group.State)
	}
	res = h.ok(at(11, remove{group: "g", members: []string{"a"}}))
	if res.Group.State != Empty || res.Group.Generation != 3 || res.Group.LeaderID != "" {
		t.Fatalf("after everyone leaves: %s gen %d leader %q, want Empty 3 \"\"", res.Group.State, res.Group.Generation, res.Group.LeaderID)
	}
	// Offsets survive the group going empty; deletion takes them.
	h.ok(at(12, commit{group: "g", generation: -1, topic: "t", partitions: []int32{0}, offset: 1}))
	res = h.ok(at(13, deleteGroups{"g", "nope"}))
	wantCode(t, res.Groups[0].Err, errcode.None)
	wantCode(t, res.Groups[1].Err, errcode.GroupIDNotFound)
	if st := h.f.Stats(); st.Groups != 0 || st.Offsets != 0 || st.Members != 0 {
		t.Fatalf("after delete: %+v, want nothing left", st)
	}
}

func TestRemoveMembers_LastRejoinCompletesBarrier(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, join{group: "g", member: "a", topics: []string{"t"}}))
	// b never rejoins but leaves: the barrier now has everyone.
	res := h.ok(at(11, remove{group: "g", members: []string{"b"}}))
	if !res.JoinCompleted || res.Group.Generation != 3 || res.Group.State != CompletingRebalance {
		t.Fatalf("leave of the missing member: completed=%v gen %d %s", res.JoinCompleted, res.Group.Generation, res.Group.State)
	}
}

func TestDeleteGroups_RefusesNonEmpty(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	res := h.ok(at(10, deleteGroups{"g"}))
	wantCode(t, res.Groups[0].Err, errcode.NonEmptyGroup)
	h.group("g")
}

func TestExpireOffsets_OnlyEmptyGroupsAfterRetention(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 1}))
	h.ok(at(10, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0}, offset: 1}))
	h.ok(at(20, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{1}, offset: 1}))
	h.ok(at(1010, expire(1000)))
	h.f.Read(func(s *State) {
		if _, ok := s.Offset("g", "t", 0); !ok {
			t.Fatalf("offset of a group with members expired")
		}
		if _, ok := s.Offset("solo", "t", 0); ok {
			t.Fatalf("solo t/0 (committed at 10) did not expire at 1010 with retention 1000")
		}
		if _, ok := s.Offset("solo", "t", 1); !ok {
			t.Fatalf("solo t/1 (committed at 20) expired too early")
		}
	})
	h.ok(at(2020, expire(1000)))
	if _, ok := h.f.Group("solo"); ok {
		t.Fatalf("an empty group with no offsets left was not removed")
	}
	h.refused(at(2021, expire(0)), errcode.InvalidArgument)
}

// Retention counts from the later of the commit and the moment the group
// went empty (KIP-211): an offset committed long ago by a member of a group
// that emptied recently is kept for the whole retention after the group
// emptied, and the group with it.
func TestExpireOffsets_CountFromWhenTheGroupWentEmpty(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 1}))
	h.ok(at(50_000, remove{group: "g", members: []string{"a", "b"}, reason: fsmv1.RemoveReason_REMOVE_REASON_LEAVE}))
	if g := h.group("g"); g.State != Empty || g.StateChangedMs != 50_000 {
		t.Fatalf("after both left: %s since %d, want Empty since 50000", g.State, g.StateChangedMs)
	}
	h.ok(at(60_000, expire(20_000))) // 59,990 ms after the commit, 10,000 after the group emptied
	if _, ok := h.f.state.Offset("g", "t", 0); !ok {
		t.Fatal("an offset expired 10 s after its group went empty, with a retention of 20 s (counted from the commit)")
	}
	h.ok(at(70_000, expire(20_000)))
	if _, ok := h.f.state.Offset("g", "t", 0); ok {
		t.Fatal("the offset outlived the retention counted from when its group went empty")
	}
	if _, ok := h.f.Group("g"); ok {
		t.Fatal("the empty group without offsets was kept")
	}
}

func TestTopics_ChangesRebalanceSubscribersAndDropOffsets(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 1}))
	h.ok(at(11, createTopic{"t", 4})) // retry of the same create succeeds
	h.refused(at(12, createTopic{"t", 5}), errcode.TopicAlreadyExists)
	h.refused(at(12, createTopic{"z", 0}), errcode.InvalidPartitions)
	h.refused(at(12, addPartitions{"t", 3}), errcode.InvalidPartitions)
	h.refused(at(12, addPartitions{"nope", 3}), errcode.UnknownTopicOrPartition)
	h.ok(at(13, addPartitions{"t", 6}))
	if g := h.group("g"); g.State != PreparingRebalance {
		t.Fatalf("after add-partitions: %s, want PreparingRebalance", g.State)
	}
	h.ok(at(14, deleteTopic("t")))
	if st := h.f.Stats(); st.Offsets != 0 || st.Topics != 0 {
		t.Fatalf("after delete-topic: %+v, want no offsets and no topics", st)
	}
	h.refused(at(15, deleteTopic("t")), errcode.UnknownTopicOrPartition)
}

func TestRegisterNode_Upserts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, registerNode{"n2", "127.0.0.1:2", "127.0.0.1:12"}))
	h.ok(at(1, registerNode{"n1", "127.0.0.1:1", "127.0.0.1:11"}))
	h.ok(at(2, registerNode{"n2", "127.0.0.1:3", "127.0.0.1:12"}))
	h.refused(at(3, registerNode{"", "x", "y"}), errcode.InvalidArgument)
	nodes := h.f.Nodes()
	if len(nodes) != 2 || nodes[0].ID != "n1" || nodes[1].GRPCAddress != "127.0.0.1:3" {
		t.Fatalf("nodes %+v", nodes)
	}
}

func TestApply_GarbageIsTypedError(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	before := snapshotBytes(t, h.f)
	// An empty entry decodes (to a command with no kind) but is refused
	// all the same, with the same code.
	for i, data := range [][]byte{{0xff, 0xff, 0xff}, {}, []byte("not a protobuf at all")} {
		index := uint64(99 + i)
		res := h.f.ApplyEntry(index, data)
		wantCode(t, res.Err, errcode.InvalidArgument)
		// The entry is consumed: Raft must not hand it over again.
		if got := h.f.AppliedIndex(); got != index {
			t.Fatalf("garbage %q at index %d: applied index %d", data, index, got)
		}
	}
	if !bytes.Equal(before, snapshotBytes(t, h.f)) {
		t.Fatalf("garbage changed the state")
	}
}

func TestSnapshot_RoundTripAndCorruption(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0, 1}, offset: 5}))
	h.ok(at(11, registerNode{"n1", "127.0.0.1:1", "127.0.0.1:11"}))
	data := snapshotBytes(t, h.f)

	f2 := New()
	if err := f2.Restore(bytes.NewReader(data)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := snapshotBytes(t, f2); !bytes.Equal(got, data) {
		t.Fatalf("restored state snapshots differently")
	}
	if f2.Stats() != h.f.Stats() {
		t.Fatalf("stats %+v after restore, want %+v", f2.Stats(), h.f.Stats())
	}

	// Every single-byte corruption and every truncation is refused and
	// leaves the FSM as it was.
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x41
		if err := f2.Restore(bytes.NewReader(bad)); err == nil {
			t.Fatalf("corruption at byte %d accepted", i)
		}
	}
	for n := 0; n < len(data); n += 7 {
		if err := f2.Restore(bytes.NewReader(data[:n])); err == nil {
			t.Fatalf("truncation to %d bytes accepted", n)
		}
	}
	if got := snapshotBytes(t, f2); !bytes.Equal(got, data) {
		t.Fatalf("failed restores changed the state")
	}
}

func TestSnapshot_SharesStateCopyOnWrite(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	h.ok(at(10, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 5}))
	snap := h.f.Snapshot()
	var before bytes.Buffer
	if _, err := snap.WriteTo(&before); err != nil {
		t.Fatal(err)
	}
	// Changes after the snapshot must not reach it.
	h.ok(at(11, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 6}))
	h.ok(at(12, join{group: "g", member: "c", newMember: true, topics: []string{"t"}}))
	h.ok(at(13, deleteTopic("t")))
	var after bytes.Buffer
	if _, err := snap.WriteTo(&after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before.Bytes(), after.Bytes()) {
		t.Fatalf("applies after Snapshot changed the snapshot")
	}
}

type batch []isKind

func (b batch) set(c *fsmv1.Command) {
	bt := &fsmv1.Batch{}
	for _, k := range b {
		sub := &fsmv1.Command{}
		k.set(sub)
		bt.Commands = append(bt.Commands, sub)
	}
	c.Kind = &fsmv1.Command_Batch{Batch: bt}
}

func TestBatch_AppliesEachInOrderWithOwnResult(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	res := h.ok(at(10, batch{
		commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 1},
		commit{group: "g", generation: 1, member: "b", topic: "t", partitions: []int32{2}, offset: 1}, // stale: refused alone
		commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 2}, // later in the batch wins
	}))
	if len(res.Batch) != 3 {
		t.Fatalf("batch results: %d, want 3", len(res.Batch))
	}
	wantCode(t, res.Batch[0].Err, errcode.None)
	wantCode(t, res.Batch[1].Err, errcode.IllegalGeneration)
	wantCode(t, res.Batch[2].Err, errcode.None)
	h.f.Read(func(s *State) {
		if v, _ := s.Offset("g", "t", 0); v.Offset != 2 || v.CommitTimestampMs != 10 {
			t.Fatalf("t/0 = %+v, want offset 2 at the batch's timestamp 10", v)
		}
	})
	h.refused(at(11, batch{}), errcode.InvalidArgument)
	h.refused(at(11, batch{batch{createTopic{"x", 1}}}), errcode.InvalidArgument)
}

func TestGroups_FrozenViewsNeverChange(t *testing.T) {
	t.Parallel()
	h := stableGroup(t)
	// A view handed out earlier must not see later changes to its members,
	// however the group is copied.
	view := h.group("g")
	a, _ := view.Member("a")
	before := fmt.Sprintf("%+v", *a)
	h.ok(at(10, join{group: "g", member: "a", topics: []string{"t"}})) // leader rejoin: rebalance, a joined
	h.ok(at(11, join{group: "g", member: "b", topics: []string{"t"}})) // completes: assignments cleared
	if a2, _ := view.Member("a"); fmt.Sprintf("%+v", *a2) != before || view.Generation != 2 || view.State != Stable {
		t.Fatalf("a frozen view changed: member %+v (was %s), generation %d, %s", a2, before, view.Generation, view.State)
	}
	now := h.group("g")
	if now.Generation != 3 || now.State != CompletingRebalance {
		t.Fatalf("live group: generation %d %s", now.Generation, now.State)
	}
	if na, _ := now.Member("a"); na.Assignment.Len() != 0 || !na.Joined {
		t.Fatalf("live member a: %+v", na)
	}
}

// A plan's validation costs the size of the plan, not the partition counts
// of the topics it names: every replica applies (and re-applies after a
// restart) every SyncAssignment, so a small plan over huge topics must
// stay a small apply. Not parallel: it measures this goroutine's
// allocation through the process-wide counter.
func TestSync_ValidationCostIsThePlansSize(t *testing.T) {
	h := newHarness(t)
	var topics []string
	for i := range 8 {
		name := fmt.Sprintf("huge-%d", i)
		topics = append(topics, name)
		h.ok(at(1, createTopic{name, 1 << 20}))
	}
	h.ok(at(2, join{group: "g", member: "a", topics: topics, newMember: true}))
	h.ok(at(3, join{group: "g", member: "a", topics: topics}))
	p := plan{"a": {}}
	for _, name := range topics {
		p["a"][name] = []int32{7}
	}
	cmd := at(4, syncCmd{"g", 1, "a", p})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h.ok(cmd)
	runtime.ReadMemStats(&after)
	// Eight topics of 2^20 partitions: a per-partition table would be
	// 8 × 16 MiB. The plan names eight partitions.
	const bound = 256 << 10
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Fatalf("validating an 8-partition plan over 8 topics of 2^20 partitions allocated %d bytes, over %d", got, bound)
	}
}
