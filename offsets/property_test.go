package offsets

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// Random puts and deletions, with clones taken along the way: the table's
// count and byte estimate always equal a fresh sum over its rows, and a
// clone never changes after it was taken.
func TestProperty_CountAndBytesMatchTheRows(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tb := New()
		type frozen struct {
			c    *Table
			rows []Entry
		}
		var clones []frozen
		rows := func(x *Table) []Entry {
			var out []Entry
			x.Range(func(e Entry) bool { out = append(out, e); return true })
			return out
		}
		group := rapid.SampledFrom([]string{"g1", "g2", "g3"})
		topic := rapid.SampledFrom([]string{"a", "bb", "ccc"})
		part := rapid.Int32Range(0, 5)
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				tb.Put(group.Draw(t, "group"), Key{topic.Draw(t, "topic"), part.Draw(t, "partition")},
					Value{Offset: 1, Metadata: rapid.StringN(0, 20, -1).Draw(t, "metadata")})
			case 2:
				tb.DeleteTopic(topic.Draw(t, "topic"))
			case 3:
				tb.DeletePartitionsFrom(topic.Draw(t, "topic"), part.Draw(t, "from"))
			case 4:
				tb.DeleteGroup(group.Draw(t, "group"))
			case 5:
				c := tb.Clone()
				clones = append(clones, frozen{c, rows(c)})
			}
			var n int
			var bytes int64
			for _, e := range rows(tb) {
				n++
				bytes += EntryBytes(e.Key, e.Value)
			}
			if n != tb.Len() || bytes != tb.Bytes() {
				t.Fatalf("count %d, bytes %d; the rows say %d and %d", tb.Len(), tb.Bytes(), n, bytes)
			}
		}
		for i, f := range clones {
			if got := rows(f.c); fmt.Sprint(got) != fmt.Sprint(f.rows) {
				t.Fatalf("clone %d changed after it was taken", i)
			}
		}
	})
}
