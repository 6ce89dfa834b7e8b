package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// listEntry is what the model remembers of a member: its ID and a field
// the test changes.
type listEntry struct {
	id  string
	seq int64
}

func listEntries(l *MemberList) []listEntry {
	out := make([]listEntry, 0, l.Len())
	for _, m := range l.All() {
		out = append(out, listEntry{m.ID, m.JoinSeq})
	}
	return out
}

// checkChunks checks the list's shape: chunks non-empty, within chunkMax,
// in ID order, neighbours together over chunkMax/2, and the count right.
func checkChunks(l *MemberList) error {
	n := 0
	for c, ch := range l.chunks {
		switch {
		case len(ch.members) == 0 || len(ch.members) > chunkMax:
			return fmt.Errorf("chunk %d holds %d members", c, len(ch.members))
		case c > 0 && len(l.chunks[c-1].members)+len(ch.members) <= chunkMax/2:
			return fmt.Errorf("chunks %d and %d hold %d and %d members: not merged", c-1, c, len(l.chunks[c-1].members), len(ch.members))
		case c > 0 && l.chunks[c-1].members[len(l.chunks[c-1].members)-1].ID >= ch.members[0].ID:
			return fmt.Errorf("chunk %d starts at %q, not after the previous chunk", c, ch.members[0].ID)
		}
		if !slices.IsSortedFunc(ch.members, func(a, b *Member) int { return strings.Compare(a.ID, b.ID) }) {
			return fmt.Errorf("chunk %d not sorted", c)
		}
		n += len(ch.members)
	}
	if n != l.Len() {
		return fmt.Errorf("Len %d, chunks hold %d", l.Len(), n)
	}
	return nil
}

// TestMemberList_MatchesSortedSliceAndFrozenCopiesStay drives a list with
// random inserts, removals, edits and copy-on-write copies, against a
// sorted slice: after every step the list holds what the slice holds, and
// every copy frozen earlier still holds what it held when it was frozen.
func TestMemberList_MatchesSortedSliceAndFrozenCopiesStay(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		var l MemberList
		var model []listEntry
		epoch := uint64(1)
		type frozen struct {
			list MemberList
			want []listEntry
		}
		var frozenLists []frozen
		next := 0
		ids := func() []string {
			out := make([]string, len(model))
			for i, e := range model {
				out[i] = e.id
			}
			return out
		}
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch op := rapid.IntRange(0, 6).Draw(rt, "op"); {
			case op <= 1 || len(model) == 0: // insert a run of new members
				for range rapid.IntRange(1, 200).Draw(rt, "inserts") {
					// IDs spread over the key space, so inserts land in
					// every chunk.
					id := fmt.Sprintf("m%08d", (next*7919)%100003)
					next++
					if _, ok := l.Get(id); ok {
						continue
					}
					l.insert(&Member{ID: id, epoch: epoch}, epoch)
					i, _ := slices.BinarySearchFunc(model, id, func(e listEntry, id string) int { return strings.Compare(e.id, id) })
					model = slices.Insert(model, i, listEntry{id: id})
				}
			case op == 2: // remove a run of neighbours and a few others
				all := ids()
				from := rapid.IntRange(0, len(all)-1).Draw(rt, "from")
				to := rapid.IntRange(from+1, len(all)).Draw(rt, "to")
				gone := slices.Clone(all[from:to])
				for _, id := range rapid.SliceOfNDistinct(rapid.SampledFrom(all), 0, 5, rapid.ID[string]).Draw(rt, "others") {
					if !slices.Contains(gone, id) {
						gone = append(gone, id)
					}
				}
				var at []memberPos
				for _, id := range gone {
					p, ok := l.find(id)
					if !ok {
						rt.Fatalf("step %d: member %q not found", step, id)
					}
					at = append(at, p)
				}
				removed := l.remove(at, epoch)
				if len(removed) != len(gone) {
					rt.Fatalf("step %d: removed %d members, want %d", step, len(removed), len(gone))
				}
				model = slices.DeleteFunc(model, func(e listEntry) bool { return slices.Contains(gone, e.id) })
			case op == 3: // remove the members whose number has a digit
				d := byte('0' + rapid.IntRange(0, 9).Draw(rt, "digit"))
				del := func(id string) bool { return id[len(id)-1] == d }
				removed := l.removeFunc(func(m *Member) bool { return del(m.ID) }, epoch)
				before := len(model)
				model = slices.DeleteFunc(model, func(e listEntry) bool { return del(e.id) })
				if len(removed) != before-len(model) {
					rt.Fatalf("step %d: removed %d members, want %d", step, len(removed), before-len(model))
				}
			case op == 4: // edit some members
				for _, id := range rapid.SliceOfN(rapid.SampledFrom(ids()), 1, 20).Draw(rt, "edited") {
					p, _ := l.find(id)
					m := editMember(&l, p, epoch)
					m.JoinSeq++
					i, _ := slices.BinarySearchFunc(model, id, func(e listEntry, id string) int { return strings.Compare(e.id, id) })
					model[i].seq++
				}
			case op == 5: // freeze: what a command's group becomes
				frozenLists = append(frozenLists, frozen{list: l, want: slices.Clone(model)})
				l = l.clone()
				epoch++
			case op == 6: // a consumer group's change: a new list with one member replaced, l frozen
				id := rapid.SampledFrom(ids()).Draw(rt, "replaced")
				old, _ := l.Get(id)
				frozenLists = append(frozenLists, frozen{list: l, want: slices.Clone(model)})
				l = l.replaced(&Member{ID: id, JoinSeq: old.JoinSeq + 1})
				epoch++ // l's other chunks are the frozen list's
				i, _ := slices.BinarySearchFunc(model, id, func(e listEntry, id string) int { return strings.Compare(e.id, id) })
				model[i].seq++
				if rebuilt := listOf(l.Slice()); !slices.Equal(listEntries(&rebuilt), model) {
					rt.Fatalf("step %d: listOf the list's members holds %v, want %v", step, listEntries(&rebuilt), model)
				}
			}
			if got := listEntries(&l); !slices.Equal(got, model) {
				rt.Fatalf("step %d: list holds %v, want %v", step, got, model)
			}
			if err := checkChunks(&l); err != nil {
				rt.Fatalf("step %d: %v", step, err)
			}
			for _, e := range model {
				if m, ok := l.Get(e.id); !ok || m.ID != e.id {
					rt.Fatalf("step %d: Get(%q) = %v, %v", step, e.id, m, ok)
				}
			}
			if _, ok := l.Get("absent"); ok {
				rt.Fatalf("step %d: Get found a member that was never inserted", step)
			}
			for k, f := range frozenLists {
				if got := listEntries(&f.list); !slices.Equal(got, f.want) {
					rt.Fatalf("step %d: frozen copy %d changed: holds %v, want %v", step, k, got, f.want)
				}
			}
		}
	})
}

// TestGroupClone_CopiesChunksNotMembers shows what a group's copy-on-write
// copy costs: one pointer per chunk of members, however many members.
func TestGroupClone_CopiesChunksNotMembers(t *testing.T) {
	t.Parallel()
	g := newGroup("g", 1, 0)
	for i := range 10_000 {
		g.Members.insert(&Member{ID: fmt.Sprintf("m%05d", i)}, g.epoch)
	}
	c := g.clone(2)
	if len(c.Members.chunks) > 10_000/(chunkMax/2)+1 {
		t.Fatalf("10,000 members in %d chunks", len(c.Members.chunks))
	}
	m, _ := c.editMemberByID("m05000")
	m.JoinSeq = 7
	if orig, _ := g.Member("m05000"); orig.JoinSeq != 0 {
		t.Fatalf("editing the copy changed the original's member: JoinSeq %d", orig.JoinSeq)
	}
	shared := 0
	for k := range c.Members.chunks {
		if c.Members.chunks[k] == g.Members.chunks[k] {
			shared++
		}
	}
	if shared != len(g.Members.chunks)-1 {
		t.Fatalf("the copy shares %d of %d chunks after one edit, want all but one", shared, len(g.Members.chunks))
	}
}
