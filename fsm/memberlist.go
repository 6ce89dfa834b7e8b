package fsm

import (
	"iter"
	"slices"
	"strings"
)

// MemberList is a group's members sorted by member ID. It is stored in
// chunks of up to chunkMax members so that the copy-on-write copy a command
// makes of a group (Group.clone) copies one pointer per chunk, not one per
// member, and a change to a member copies its chunk, not the list: a join
// into a 10,000-member group copies a few hundred pointers, not 10,000.
//
// A chunk carries the epoch of the group that may change it in place, as a
// member does: a chunk of an older epoch is shared with frozen groups and
// is copied before it is changed. The list's own slice of chunks belongs to
// one group (clone copies it).
type MemberList struct {
	chunks []*memberChunk
	n      int
}

type memberChunk struct {
	epoch   uint64
	members []*Member
}

// chunkMax bounds a chunk; a chunk that grows past it is split in two
// halves, and two neighbours that together hold no more than chunkMax/2 are
// merged, so a list of n members has at most n/(chunkMax/2)+1 chunks.
const chunkMax = 128

// memberPos is where a member is: its chunk and its place in it.
type memberPos struct{ chunk, i int }

// Len returns the number of members.
func (l *MemberList) Len() int { return l.n }

// All yields the members in member ID order with their rank in it.
func (l *MemberList) All() iter.Seq2[int, *Member] {
	return func(yield func(int, *Member) bool) {
		k := 0
		for _, c := range l.chunks {
			for _, m := range c.members {
				if !yield(k, m) {
					return
				}
				k++
			}
		}
	}
}

// Slice returns the members in member ID order in a new slice.
func (l *MemberList) Slice() []*Member {
	out := make([]*Member, 0, l.n)
	for _, c := range l.chunks {
		out = append(out, c.members...)
	}
	return out
}

// Get returns the member with the given ID.
func (l *MemberList) Get(id string) (*Member, bool) {
	p, ok := l.find(id)
	if !ok {
		return nil, false
	}
	return l.chunks[p.chunk].members[p.i], true
}

// positions yields every member with its position, in member ID order. The
// member at the position yielded may be replaced (edit) while iterating;
// nothing may be inserted or removed.
func (l *MemberList) positions() iter.Seq2[memberPos, *Member] {
	return func(yield func(memberPos, *Member) bool) {
		for c := range l.chunks {
			for i := range l.chunks[c].members {
				if !yield(memberPos{c, i}, l.chunks[c].members[i]) {
					return
				}
			}
		}
	}
}

// find returns the position of the member with the given ID, or, when
// there is none, where it would be inserted.
func (l *MemberList) find(id string) (memberPos, bool) {
	if len(l.chunks) == 0 {
		return memberPos{}, false
	}
	// The first chunk whose last member sorts at or after id.
	c, _ := slices.BinarySearchFunc(l.chunks, id, func(ch *memberChunk, id string) int {
		return strings.Compare(ch.members[len(ch.members)-1].ID, id)
	})
	if c == len(l.chunks) {
		last := len(l.chunks) - 1
		return memberPos{last, len(l.chunks[last].members)}, false
	}
	i, ok := slices.BinarySearchFunc(l.chunks[c].members, id, func(m *Member, id string) int {
		return strings.Compare(m.ID, id)
	})
	return memberPos{c, i}, ok
}

// clone returns a list sharing every chunk with l.
func (l *MemberList) clone() MemberList {
	return MemberList{chunks: slices.Clone(l.chunks), n: l.n}
}

// writable returns chunk c ready to be changed in place by epoch.
func (l *MemberList) writable(c int, epoch uint64) *memberChunk {
	ch := l.chunks[c]
	if ch.epoch != epoch {
		ch = &memberChunk{epoch: epoch, members: slices.Clone(ch.members)}
		l.chunks[c] = ch
	}
	return ch
}

// edit returns the member at p ready to be changed in place by epoch.
func (l *MemberList) edit(p memberPos, epoch uint64) *Member {
	m := l.chunks[p.chunk].members[p.i]
	if m.epoch == epoch {
		return m
	}
	mc := *m
	mc.epoch = epoch
	l.writable(p.chunk, epoch).members[p.i] = &mc
	return &mc
}

// insert adds m, whose ID no member has.
func (l *MemberList) insert(m *Member, epoch uint64) {
	l.n++
	p, _ := l.find(m.ID)
	if len(l.chunks) == 0 {
		l.chunks = []*memberChunk{{epoch: epoch, members: []*Member{m}}}
		return
	}
	ch := l.writable(p.chunk, epoch)
	ch.members = slices.Insert(ch.members, p.i, m)
	if len(ch.members) <= chunkMax {
		return
	}
	half := len(ch.members) / 2
	right := &memberChunk{epoch: epoch, members: slices.Clone(ch.members[half:])}
	clear(ch.members[half:])
	ch.members = ch.members[:half]
	l.chunks = slices.Insert(l.chunks, p.chunk+1, right)
}

// appendSorted adds m after every member (a restore, which reads members
// in ID order; the caller checks the order).
func (l *MemberList) appendSorted(m *Member, epoch uint64) {
	l.n++
	if k := len(l.chunks); k > 0 && len(l.chunks[k-1].members) < chunkMax {
		ch := l.writable(k-1, epoch)
		ch.members = append(ch.members, m)
		return
	}
	l.chunks = append(l.chunks, &memberChunk{epoch: epoch, members: append(make([]*Member, 0, chunkMax), m)})
}

// last returns the member with the greatest ID.
func (l *MemberList) last() (*Member, bool) {
	if len(l.chunks) == 0 {
		return nil, false
	}
	ms := l.chunks[len(l.chunks)-1].members
	return ms[len(ms)-1], true
}

// remove removes the members at the given positions (distinct, in any
// order) and returns them.
func (l *MemberList) remove(at []memberPos, epoch uint64) []*Member {
	slices.SortFunc(at, func(a, b memberPos) int {
		if a.chunk != b.chunk {
			return b.chunk - a.chunk
		}
		return b.i - a.i
	})
	out := make([]*Member, 0, len(at))
	for _, p := range at {
		ch := l.writable(p.chunk, epoch)
		out = append(out, ch.members[p.i])
		ch.members = slices.Delete(ch.members, p.i, p.i+1)
	}
	l.n -= len(out)
	l.settle(epoch)
	return out
}

// removeFunc removes the members for which del is true and returns them,
// in member ID order.
func (l *MemberList) removeFunc(del func(*Member) bool, epoch uint64) []*Member {
	var out []*Member
	for c, ch := range l.chunks {
		if !slices.ContainsFunc(ch.members, del) {
			continue
		}
		ch = l.writable(c, epoch)
		ch.members = slices.DeleteFunc(ch.members, func(m *Member) bool {
			if del(m) {
				out = append(out, m)
				return true
			}
			return false
		})
	}
	l.n -= len(out)
	l.settle(epoch)
	return out
}

// settle drops empty chunks and merges neighbours that together hold no
// more than chunkMax/2 members, after a removal.
func (l *MemberList) settle(epoch uint64) {
	kept := l.chunks[:0]
	for _, ch := range l.chunks {
		switch k := len(kept); {
		case len(ch.members) == 0:
		case k > 0 && len(kept[k-1].members)+len(ch.members) <= chunkMax/2:
			prev := kept[k-1]
			kept[k-1] = &memberChunk{epoch: epoch, members: slices.Concat(prev.members, ch.members)}
		default:
			kept = append(kept, ch)
		}
	}
	clear(l.chunks[len(kept):])
	l.chunks = kept
}
