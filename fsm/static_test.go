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
