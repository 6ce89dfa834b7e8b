package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/offsets"
)

// FuzzApplyEntry feeds arbitrary log entry bytes to an FSM holding a stable
// group: nothing may panic, and a refused entry must leave the state as it was.
// The seed corpus is every command kind in valid form plus the kept corpus in
// testdata/fuzz/FuzzApplyEntry.
func FuzzApplyEntry(f *testing.F) {
	seeds := []isKind{
		createTopic{"t", 4}, deleteTopic("t"), addPartitions{"t", 8},
		join{group: "g", member: "c", topics: []string{"t"}, newMember: true, instance: "i-1"},
		join{group: "g", member: "a", topics: []string{"t"}},
		completeJoin{"g", 2, false},
		syncCmd{"g", 2, "a", plan{"a": {"t": {0, 1}}, "b": {"t": {2, 3}}}},
		remove{group: "g", members: []string{"a", "b"}},
		commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0, 1}, offset: 9},
		commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0}, offset: 9},
		deleteGroups{"g", "solo"}, expire(1000), registerNode{"n1", "127.0.0.1:1", "127.0.0.1:2"},
		batch{commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0}, offset: 1},
			commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{2}, offset: 1}},
	}
	for _, k := range seeds {
		data, err := EncodeCommand(at(100, k))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h := stableGroupTB(t)
		before := snapshotBytes(t, h.f)
		res := h.f.ApplyEntry(100, data)
		if res.Err != nil && !bytes.Equal(before, snapshotBytes(t, h.f)) {
			t.Fatalf("refused entry (%v) changed the state", res.Err)
		}
		// Whatever was applied must survive a snapshot round trip.
		after := snapshotBytes(t, h.f)
		f2 := New()
		if err := f2.Restore(bytes.NewReader(after)); err != nil {
			t.Fatalf("state after entry does not restore: %v", err)
		}
		if !bytes.Equal(after, snapshotBytes(t, f2)) {
			t.Fatalf("state after entry does not round-trip")
		}
	})
}

// FuzzReadSnapshot feeds arbitrary bytes to Restore: an error, or a state
// that round-trips (restore → snapshot → restore gives the same state, and
// the second snapshot the same bytes as the first), never a panic. A field
// the writer forgets or the reader drops is lost in one of the trips.
// Before fuzzing, each seed written from a known state must restore to
// that very state, which also catches a field dropped on both trips.
func FuzzReadSnapshot(f *testing.F) {
	for _, h := range []*harness{stableGroupTB(f), everyFieldTB(f), newHarness(f)} {
		data := snapshotBytes(f, h.f)
		restored := New()
		if err := restored.Restore(bytes.NewReader(data)); err != nil {
			f.Fatalf("seed does not restore: %v", err)
		}
		if diff := stateDiff(h.f, restored); diff != "" {
			f.Fatalf("seed state restored differently: %s", diff)
		}
		f.Add(data)
	}
	f.Add([]byte("COHORTSN"))
	f.Fuzz(func(t *testing.T, data []byte) {
		first := New()
		if err := first.Restore(bytes.NewReader(data)); err != nil {
			return
		}
		written := snapshotBytes(t, first)
		second := New()
		if err := second.Restore(bytes.NewReader(written)); err != nil {
			t.Fatalf("the snapshot of a restored state does not restore: %v", err)
		}
		if diff := stateDiff(first, second); diff != "" {
			t.Fatalf("restore → snapshot → restore changed the state: %s", diff)
		}
		if again := snapshotBytes(t, second); !bytes.Equal(written, again) {
			t.Fatalf("the same state snapshots to different bytes (%d, then %d)", len(written), len(again))
		}
	})
}

// everyFieldTB is a state with every kind of record and the fields that
// are not always set: a static member, a standalone group, offsets with
// metadata, a node, budgets, a group in a rebalance with an initial delay.
func everyFieldTB(t testing.TB) *harness {
	h := stableGroupTB(t)
	h.ok(at(6, commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{0, 1}, offset: 42}))
	h.ok(at(7, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{3}, offset: 7}))
	h.ok(at(8, registerNode{"n1", "127.0.0.1:1", "127.0.0.1:2"}))
	h.ok(at(9, join{group: "g", member: "s", instance: "i-1", topics: []string{"t"}, newMember: true, sessionMs: 7000, rebalanceMs: 9000, metadata: "md"}))
	h.ok(at(10, join{group: "h", member: "x", topics: []string{"t"}, newMember: true, delayMs: 3000, rebalanceMs: 5000}))
	b := DefaultBudgets()
	h.ok(&fsmv1.Command{TimestampMs: 11, Kind: &fsmv1.Command_SetBudgets{SetBudgets: &fsmv1.SetBudgets{Budgets: b.Proto()}}})
	return h
}

// stateDiff names the first part of the replicated state in which a and b
// differ, or returns "". Epochs and cached sizes are bookkeeping, not
// state: a snapshot bumps them.
func stateDiff(a, b *FSM) string {
	var sa, sb *State
	a.Read(func(s *State) { sa = s })
	b.Read(func(s *State) { sb = s })
	switch {
	case !maps.Equal(sa.topics, sb.topics):
		return fmt.Sprintf("topics %v vs %v", sa.topics, sb.topics)
	case !maps.Equal(sa.nodes, sb.nodes):
		return fmt.Sprintf("nodes %+v vs %+v", sa.nodes, sb.nodes)
	case sa.budgets != sb.budgets:
		return fmt.Sprintf("budgets %+v vs %+v", sa.budgets, sb.budgets)
	case sa.rulesSeen != sb.rulesSeen:
		return fmt.Sprintf("rules seen %d vs %d", sa.rulesSeen, sb.rulesSeen)
	case sa.members != sb.members:
		return fmt.Sprintf("member count %d vs %d", sa.members, sb.members)
	case len(sa.groups) != len(sb.groups):
		return fmt.Sprintf("%d groups vs %d", len(sa.groups), len(sb.groups))
	}
	for id, ga := range sa.groups {
		gb, ok := sb.groups[id]
		if !ok {
			return fmt.Sprintf("group %q missing", id)
		}
		if da, db := groupContent(ga), groupContent(gb); da != db {
			return fmt.Sprintf("group %q:\n%s\nvs\n%s", id, da, db)
		}
	}
	var oa, ob []offsets.Entry
	sa.offsets.Range(func(e offsets.Entry) bool { oa = append(oa, e); return true })
	sb.offsets.Range(func(e offsets.Entry) bool { ob = append(ob, e); return true })
	if !slices.Equal(oa, ob) {
		return fmt.Sprintf("offsets %+v vs %+v", oa, ob)
	}
	return ""
}

// groupContent prints a group's replicated fields, members included.
func groupContent(g *Group) string {
	c := *g
	c.epoch, c.ix, c.counted, c.Members = 0, groupIndex{}, 0, MemberList{}
	out := fmt.Sprintf("%+v", c)
	for _, m := range g.Members.All() {
		mc := *m
		mc.epoch = 0
		out += fmt.Sprintf("\n  %+v", mc)
	}
	return out
}

// stableGroupTB is stableGroup for fuzz targets (testing.TB).
func stableGroupTB(t testing.TB) *harness {
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	h.ok(at(2, join{group: "g", member: "a", topics: []string{"t"}, newMember: true}))
	h.ok(at(3, join{group: "g", member: "b", topics: []string{"t"}, newMember: true}))
	h.ok(at(4, join{group: "g", member: "a", topics: []string{"t"}}))
	h.ok(at(5, syncCmd{"g", 2, "a", plan{"a": {"t": {0, 1}}, "b": {"t": {2, 3}}}}))
	return h
}
