package fsm

import (
	"bytes"
	"testing"
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

// FuzzReadSnapshot feeds arbitrary bytes to Restore: an error or a state
// that snapshots back, never a panic.
func FuzzReadSnapshot(f *testing.F) {
	f.Add(snapshotBytes(f, stableGroupTB(f).f))
	f.Add(snapshotBytes(f, New()))
	f.Add([]byte("COHORTSN"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := New()
		if err := fsm.Restore(bytes.NewReader(data)); err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := fsm.Snapshot().WriteTo(&buf); err != nil {
			t.Fatalf("restored state does not snapshot: %v", err)
		}
	})
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
