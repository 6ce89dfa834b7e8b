package fsm

import (
	"testing"

	"github.com/cohortlabs/cohort/errcode"
)

// A replaced static member's older incarnation that commits with its old
// member ID and its instance ID is FENCED_INSTANCE_ID, as its heartbeats
// and joins are (KIP-345), so that any client stops rather than rejoining
// and fencing the newer incarnation in turn. Without the instance ID the
// old ID is simply unknown.
func TestCommit_AReplacedStaticMembersOldIncarnationIsFenced(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 2}))
	h.ok(at(2, join{group: "g", member: "s-old", instance: "i-1", topics: []string{"t"}, newMember: true}))
	h.ok(at(3, syncCmd{"g", 1, "s-old", plan{"s-old": {"t": {0, 1}}}}))
	h.ok(at(4, join{group: "g", member: "s-new", instance: "i-1", topics: []string{"t"}, newMember: true}))

	h.refused(at(5, commit{group: "g", generation: 1, member: "s-old", instance: "i-1", topic: "t", partitions: []int32{0}}), errcode.FencedInstanceID)
	h.refused(at(6, commit{group: "g", generation: 1, member: "s-old", topic: "t", partitions: []int32{0}}), errcode.UnknownMemberID)
	h.refused(at(7, commit{group: "g", generation: 1, member: "s-other", instance: "i-2", topic: "t", partitions: []int32{0}}), errcode.UnknownMemberID)
	h.f.Read(func(s *State) {
		if _, stored := s.Offset("g", "t", 0); stored {
			t.Fatal("a refused commit stored an offset")
		}
	})
}

// TestRules5_AStaticRestartWithNewMetadataKeepsTheGroupStable: a static
// member restarted with the same protocols and topics but other metadata
// (a Kafka consumer's owned partitions and generation) takes its slot
// without a rebalance under rules 5; under rules 4 the group rebalances.
func TestRules5_AStaticRestartWithNewMetadataKeepsTheGroupStable(t *testing.T) {
	t.Parallel()
	for _, rules := range []uint32{4, 5} {
		h := newHarness(t)
		h.ok(under(rules, at(1, createTopic{"t", 2})))
		h.ok(under(rules, at(2, join{group: "g", member: "a", instance: "i-a", topics: []string{"t"}, newMember: true})))
		h.ok(under(rules, at(3, syncCmd{"g", 1, "a", plan{"a": {"t": {0, 1}}}})))
		cmd := under(rules, at(4, join{group: "g", member: "a2", instance: "i-a", topics: []string{"t"}, newMember: true}))
		cmd.GetJoinMember().GetMember().Protocols[0].Metadata = []byte("owned nothing, generation -1")
		h.ok(cmd)
		g := h.group("g")
		want := map[uint32]struct {
			state GroupState
			gen   int32
		}{4: {CompletingRebalance, 2}, 5: {Stable, 1}}[rules]
		if g.State != want.state || g.Generation != want.gen {
			t.Fatalf("rules %d: %s at generation %d after the restart, want %s at %d", rules, g.State, g.Generation, want.state, want.gen)
		}
		if m, ok := g.Member("a2"); !ok || rules == 5 && m.Assignment.Len() != 2 {
			t.Fatalf("rules %d: the restarted instance %+v, want its old assignment", rules, m)
		}
	}
}
