package offsets

import (
	"testing"
)

func TestTable_PutGetDeleteCounts(t *testing.T) {
	t.Parallel()
	tb := New()
	tb.Put("g", Key{"t", 1}, Value{Offset: 5})
	tb.Put("g", Key{"t", 0}, Value{Offset: 3})
	tb.Put("g", Key{"t", 0}, Value{Offset: 4}) // overwrite: same count
	tb.Put("h", Key{"u", 0}, Value{Offset: 1})
	if tb.Len() != 3 || tb.GroupLen("g") != 2 {
		t.Fatalf("len %d, g %d; want 3 and 2", tb.Len(), tb.GroupLen("g"))
	}
	if v, ok := tb.Get("g", Key{"t", 0}); !ok || v.Offset != 4 {
		t.Fatalf("g t/0 = %+v %v, want 4", v, ok)
	}
	got := tb.Group("g")
	if len(got) != 2 || got[0].Key != (Key{"t", 0}) || got[1].Key != (Key{"t", 1}) {
		t.Fatalf("Group not sorted by key: %+v", got)
	}
	if n := tb.DeleteTopic("t"); n != 2 || tb.Len() != 1 || tb.GroupLen("g") != 0 {
		t.Fatalf("DeleteTopic removed %d, len %d", n, tb.Len())
	}
	if n := tb.DeleteGroup("h"); n != 1 || tb.Len() != 0 {
		t.Fatalf("DeleteGroup removed %d, len %d", n, tb.Len())
	}
}

func TestTable_CloneIsCopyOnWrite(t *testing.T) {
	t.Parallel()
	tb := New()
	tb.Put("g", Key{"t", 0}, Value{Offset: 1})
	tb.Put("g", Key{"t", 1}, Value{Offset: 1})
	snap := tb.Clone()
	tb.Put("g", Key{"t", 0}, Value{Offset: 2})
	tb.Put("g2", Key{"t", 0}, Value{Offset: 9})
	tb.DeletePartitionsFrom("t", 1)
	if v, _ := snap.Get("g", Key{"t", 0}); v.Offset != 1 {
		t.Fatalf("a write after Clone reached the clone: %+v", v)
	}
	if _, ok := snap.Get("g", Key{"t", 1}); !ok || snap.Len() != 2 || snap.GroupLen("g2") != 0 {
		t.Fatalf("clone changed: len %d", snap.Len())
	}
	if v, _ := tb.Get("g", Key{"t", 0}); v.Offset != 2 || tb.Len() != 2 {
		t.Fatalf("live table: t/0 %+v len %d", v, tb.Len())
	}
	// A second clone and more writes: each sees its own moment.
	snap2 := tb.Clone()
	tb.Expire("g", func(Key, Value) bool { return true })
	if snap2.GroupLen("g") != 1 || tb.GroupLen("g") != 0 || snap.GroupLen("g") != 2 {
		t.Fatalf("clones not independent: %d %d %d", snap2.GroupLen("g"), tb.GroupLen("g"), snap.GroupLen("g"))
	}
}

func TestExpired_CountsFromLaterOfCommitAndEmpty(t *testing.T) {
	t.Parallel()
	cases := []struct {
		commit, emptySince, now, retention int64
		want                               bool
	}{
		{commit: 100, emptySince: 0, now: 1099, retention: 1000, want: false},
		{commit: 100, emptySince: 0, now: 1100, retention: 1000, want: true},
		{commit: 100, emptySince: 500, now: 1100, retention: 1000, want: false}, // empty later than the commit
		{commit: 100, emptySince: 500, now: 1500, retention: 1000, want: true},
	}
	for _, c := range cases {
		if got := Expired(Value{CommitTimestampMs: c.commit}, c.emptySince, c.now, c.retention); got != c.want {
			t.Errorf("Expired(commit %d, empty since %d, now %d, retention %d) = %v, want %v", c.commit, c.emptySince, c.now, c.retention, got, c.want)
		}
	}
}
