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
// one group (clone copies it). Epoch 0 owns nothing: a change at epoch 0
// copies every chunk it touches (a KIP-848 consumer group, frozen as a
// whole, changes its members that way: ConsumerMembers).
type MemberList = chunkedList[*Member]

// ConsumerMembers is a KIP-848 consumer group's members sorted by member
// ID, in chunks as MemberList; a consumer group is frozen, so its list is
// only changed at epoch 0 (replaced, listOf), which copies.
type ConsumerMembers = chunkedList[*ConsumerMember]

// listed is what a chunkedList holds: items with a string key.
type listed interface {
	listKey() string
}

func (m *Member) listKey() string         { return m.ID }
func (m *ConsumerMember) listKey() string { return m.ID }

// chunkedList is a list sorted by key, in chunks (see MemberList).
type chunkedList[T listed] struct {
	chunks []*memberChunk[T]
	n      int
}

type memberChunk[T listed] struct {
	epoch   uint64
	members []T
}

// chunkMax bounds a chunk; a chunk that grows past it is split in two
// halves, and two neighbours that together hold no more than chunkMax/2 are
// merged, so a list of n members has at most n/(chunkMax/2)+1 chunks.
const chunkMax = 128

// memberPos is where a member is: its chunk and its place in it.
type memberPos struct{ chunk, i int }

// Len returns the number of members.
func (l *chunkedList[T]) Len() int { return l.n }

// All yields the members in member ID order with their rank in it.
func (l *chunkedList[T]) All() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
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
func (l *chunkedList[T]) Slice() []T {
	out := make([]T, 0, l.n)
	for _, c := range l.chunks {
		out = append(out, c.members...)
	}
	return out
}

// Get returns the member with the given ID.
func (l *chunkedList[T]) Get(id string) (T, bool) {
	p, ok := l.find(id)
	if !ok {
		var zero T
		return zero, false
	}
	return l.chunks[p.chunk].members[p.i], true
}

// positions yields every member with its position, in member ID order. The
// member at the position yielded may be replaced (edit) while iterating;
// nothing may be inserted or removed.
func (l *chunkedList[T]) positions() iter.Seq2[memberPos, T] {
	return func(yield func(memberPos, T) bool) {
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
func (l *chunkedList[T]) find(id string) (memberPos, bool) {
	if len(l.chunks) == 0 {
		return memberPos{}, false
	}
	// The first chunk whose last member sorts at or after id.
	c, _ := slices.BinarySearchFunc(l.chunks, id, func(ch *memberChunk[T], id string) int {
		return strings.Compare(ch.members[len(ch.members)-1].listKey(), id)
	})
	if c == len(l.chunks) {
		last := len(l.chunks) - 1
		return memberPos{last, len(l.chunks[last].members)}, false
	}
	i, ok := slices.BinarySearchFunc(l.chunks[c].members, id, func(m T, id string) int {
		return strings.Compare(m.listKey(), id)
	})
	return memberPos{c, i}, ok
}

// clone returns a list sharing every chunk with l.
func (l *chunkedList[T]) clone() chunkedList[T] {
	return chunkedList[T]{chunks: slices.Clone(l.chunks), n: l.n}
}

// writable returns chunk c ready to be changed in place by epoch.
func (l *chunkedList[T]) writable(c int, epoch uint64) *memberChunk[T] {
	ch := l.chunks[c]
	if ch.epoch != epoch || epoch == 0 {
		ch = &memberChunk[T]{epoch: epoch, members: slices.Clone(ch.members)}
		l.chunks[c] = ch
	}
	return ch
}

// insert adds m, whose ID no member has.
func (l *chunkedList[T]) insert(m T, epoch uint64) {
	l.n++
	p, _ := l.find(m.listKey())
	if len(l.chunks) == 0 {
		l.chunks = []*memberChunk[T]{{epoch: epoch, members: []T{m}}}
		return
	}
	ch := l.writable(p.chunk, epoch)
	ch.members = slices.Insert(ch.members, p.i, m)
	if len(ch.members) <= chunkMax {
		return
	}
	half := len(ch.members) / 2
	right := &memberChunk[T]{epoch: epoch, members: slices.Clone(ch.members[half:])}
	clear(ch.members[half:])
	ch.members = ch.members[:half]
	l.chunks = slices.Insert(l.chunks, p.chunk+1, right)
}

// appendSorted adds m after every member (a restore, which reads members
// in ID order; the caller checks the order).
func (l *chunkedList[T]) appendSorted(m T, epoch uint64) {
	l.n++
	if k := len(l.chunks); k > 0 && len(l.chunks[k-1].members) < chunkMax {
		ch := l.writable(k-1, epoch)
		ch.members = append(ch.members, m)
		return
	}
	l.chunks = append(l.chunks, &memberChunk[T]{epoch: epoch, members: append(make([]T, 0, chunkMax), m)})
}

// last returns the member with the greatest ID.
func (l *chunkedList[T]) last() (T, bool) {
	if len(l.chunks) == 0 {
		var zero T
		return zero, false
	}
	ms := l.chunks[len(l.chunks)-1].members
	return ms[len(ms)-1], true
}

// remove removes the members at the given positions (distinct, in any
// order) and returns them.
func (l *chunkedList[T]) remove(at []memberPos, epoch uint64) []T {
	slices.SortFunc(at, func(a, b memberPos) int {
		if a.chunk != b.chunk {
			return b.chunk - a.chunk
		}
		return b.i - a.i
	})
	out := make([]T, 0, len(at))
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
func (l *chunkedList[T]) removeFunc(del func(T) bool, epoch uint64) []T {
	var out []T
	for c, ch := range l.chunks {
		if !slices.ContainsFunc(ch.members, del) {
			continue
		}
		ch = l.writable(c, epoch)
		ch.members = slices.DeleteFunc(ch.members, func(m T) bool {
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
func (l *chunkedList[T]) settle(epoch uint64) {
	kept := l.chunks[:0]
	for _, ch := range l.chunks {
		switch k := len(kept); {
		case len(ch.members) == 0:
		case k > 0 && len(kept[k-1].members)+len(ch.members) <= chunkMax/2:
			prev := kept[k-1]
			kept[k-1] = &memberChunk[T]{epoch: epoch, members: slices.Concat(prev.members, ch.members)}
		default:
			kept = append(kept, ch)
		}
	}
	clear(l.chunks[len(kept):])
	l.chunks = kept
}

// editMember returns the member at p ready to be changed in place by
// epoch.
func editMember(l *MemberList, p memberPos, epoch uint64) *Member {
	m := l.chunks[p.chunk].members[p.i]
	if m.epoch == epoch {
		return m
	}
	mc := *m
	mc.epoch = epoch
	l.writable(p.chunk, epoch).members[p.i] = &mc
	return &mc
}

// replaced returns a list sharing every chunk with l but the one that
// holds m's key, where m takes the place of the item with its key (or is
// added, if there is none): a consumer group's one-member change,
// O(chunk) and not O(members).
func (l *chunkedList[T]) replaced(m T) chunkedList[T] {
	c := l.clone()
	p, ok := c.find(m.listKey())
	if !ok {
		c.insert(m, 0)
		return c
	}
	c.writable(p.chunk, 0).members[p.i] = m
	return c
}

// listOf returns a list of items sorted by key, which it does not check,
// owned by no epoch.
func listOf[T listed](items []T) chunkedList[T] {
	var l chunkedList[T]
	for _, m := range items {
		l.appendSorted(m, 0)
	}
	return l
}
