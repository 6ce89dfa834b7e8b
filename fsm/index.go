package fsm

import (
	"cmp"
	"slices"
)

// A group's derived figures: what joins and leaves would otherwise
// recompute from every member (issue 14). An entry about one member (a
// join, a rejoin, a leave) changes them by that member's contribution, so
// it costs the same in a group of 10,000 as in a group of 10; only the
// applies that open and close a join round pass over the members, once
// per generation.
//
// They are not in snapshots: a restore rebuilds them from the members
// (State.measureAll), and the figures kept entry by entry must equal that
// rebuild exactly, since some of them decide budget refusals, which every
// replica must decide alike (TestProperty_DerivedFiguresEqualRecompute).
//
// A group value handed out is frozen, and the FSM copies it before changing
// it (Group.clone); the copy shares these figures' tables with the frozen
// value, and a table is copied the first time the copy changes it
// (sortedMap.owner), so an entry pays for the tables it changes, not for
// all of them.

// groupIndex is a group's derived figures.
type groupIndex struct {
	// joined counts the members with Joined set.
	joined int
	// protocols counts the members supporting each protocol name.
	protocols sortedMap[string, int]
	// topics counts the members subscribing to each topic.
	topics sortedMap[string, int]
	// timeouts counts the members with each rebalance timeout; the
	// largest is the join barrier's.
	timeouts sortedMap[int32, int]
	// instances maps each static member's instance ID to its member ID.
	instances sortedMap[string, string]
	// size is the group's share of the budgets (budgets.go).
	size groupSize
}

// sortedMap is a map kept sorted by key, in chunks: deterministic to walk,
// and cheap to change in a frozen group's copy, which copies the list of
// chunks (a slice header per chunkSize entries) and the one chunk it
// changes, not every entry: a static member joining a group of 10,000
// static members copies about 200 headers and 64 entries.
type sortedMap[K cmp.Ordered, V any] struct {
	// owner is the group epoch that may change chunks in place; any other
	// epoch shares it with a frozen group and copies it first.
	owner  uint64
	chunks []mapChunk[K, V]
}

// mapChunk is a run of a sortedMap's entries, never empty, with its own
// owner epoch (a chunk copied with the list still shares its entries).
type mapChunk[K cmp.Ordered, V any] struct {
	owner   uint64
	entries []sortedEntry[K, V]
}

type sortedEntry[K cmp.Ordered, V any] struct {
	key K
	val V
}

// chunkSize is the size of a chunk a sortedMap builds or splits; a chunk
// splits when it holds twice as many.
const chunkSize = 64

// locate returns the chunk that holds k or would (-1 when there is none),
// and k's position in it.
func (sm *sortedMap[K, V]) locate(k K) (c, i int, found bool) {
	if len(sm.chunks) == 0 {
		return -1, 0, false
	}
	// The last chunk whose first key is not after k, or the first.
	c, _ = slices.BinarySearchFunc(sm.chunks, k, func(ch mapChunk[K, V], k K) int {
		if cmp.Less(k, ch.entries[0].key) {
			return 1
		}
		return -1
	})
	c = max(c-1, 0)
	i, found = slices.BinarySearchFunc(sm.chunks[c].entries, k, func(e sortedEntry[K, V], k K) int { return cmp.Compare(e.key, k) })
	return c, i, found
}

func (sm *sortedMap[K, V]) get(k K) (V, bool) {
	if c, i, ok := sm.locate(k); ok {
		return sm.chunks[c].entries[i].val, true
	}
	var zero V
	return zero, false
}

// last is the entry with the largest key.
func (sm *sortedMap[K, V]) last() (sortedEntry[K, V], bool) {
	if len(sm.chunks) == 0 {
		return sortedEntry[K, V]{}, false
	}
	e := sm.chunks[len(sm.chunks)-1].entries
	return e[len(e)-1], true
}

// all returns every entry in key order (for tests).
func (sm *sortedMap[K, V]) all() []sortedEntry[K, V] {
	var out []sortedEntry[K, V]
	for _, ch := range sm.chunks {
		out = append(out, ch.entries...)
	}
	return out
}

// own makes the list of chunks, and chunk c when c >= 0, the group at
// epoch's own to change.
func (sm *sortedMap[K, V]) own(epoch uint64, c int) {
	if sm.owner != epoch {
		sm.chunks = append(make([]mapChunk[K, V], 0, len(sm.chunks)+1), sm.chunks...)
		sm.owner = epoch
	}
	if c >= 0 && sm.chunks[c].owner != epoch {
		old := sm.chunks[c].entries
		sm.chunks[c] = mapChunk[K, V]{owner: epoch, entries: append(make([]sortedEntry[K, V], 0, len(old)+1), old...)}
	}
}

func (sm *sortedMap[K, V]) set(epoch uint64, k K, v V) {
	c, i, found := sm.locate(k)
	if c < 0 {
		sm.own(epoch, -1)
		sm.chunks = append(sm.chunks, mapChunk[K, V]{owner: epoch, entries: []sortedEntry[K, V]{{k, v}}})
		return
	}
	sm.own(epoch, c)
	ch := &sm.chunks[c]
	if found {
		ch.entries[i].val = v
		return
	}
	ch.entries = slices.Insert(ch.entries, i, sortedEntry[K, V]{k, v})
	if len(ch.entries) >= 2*chunkSize {
		half := len(ch.entries) / 2
		next := mapChunk[K, V]{owner: epoch, entries: slices.Clone(ch.entries[half:])}
		ch.entries = slices.Clip(ch.entries[:half])
		sm.chunks = slices.Insert(sm.chunks, c+1, next)
	}
}

func (sm *sortedMap[K, V]) delete(epoch uint64, k K) {
	c, i, found := sm.locate(k)
	if !found {
		return
	}
	sm.own(epoch, c)
	ch := &sm.chunks[c]
	ch.entries = slices.Delete(ch.entries, i, i+1)
	if len(ch.entries) == 0 {
		sm.chunks = slices.Delete(sm.chunks, c, c+1)
	}
}

// sortedMapOf builds a sortedMap owned by epoch from entries sorted by key.
func sortedMapOf[K cmp.Ordered, V any](epoch uint64, entries []sortedEntry[K, V]) sortedMap[K, V] {
	sm := sortedMap[K, V]{owner: epoch}
	for len(entries) > 0 {
		n := min(len(entries), chunkSize)
		sm.chunks = append(sm.chunks, mapChunk[K, V]{owner: epoch, entries: entries[:n:n]})
		entries = entries[n:]
	}
	return sm
}

// count is how many members hold k in a counting map.
func count[K cmp.Ordered](sm *sortedMap[K, int], k K) int {
	n, _ := sm.get(k)
	return n
}

// addCount changes k's count by d and returns the count before.
func addCount[K cmp.Ordered](sm *sortedMap[K, int], epoch uint64, k K, d int) int {
	before := count(sm, k)
	if before+d == 0 {
		sm.delete(epoch, k)
	} else {
		sm.set(epoch, k, before+d)
	}
	return before
}

// newGroup is a group that has nothing yet.
func newGroup(id string, epoch uint64, now int64) *Group {
	g := &Group{ID: id, State: Empty, epoch: epoch, StateChangedMs: now}
	g.ix.size.bytes = groupBytes(id, "")
	return g
}

// setProtocolType changes the group's protocol type, and its size.
func (g *Group) setProtocolType(pt string) {
	g.ix.size.bytes += groupBytes(g.ID, pt) - groupBytes(g.ID, g.ProtocolType)
	g.ProtocolType = pt
}

// countSpec adds (sign 1) or takes away (sign -1) what m states about
// itself: its protocols, topics and rebalance timeout, and their bytes.
// topics is the state's partition count per topic.
func (g *Group) countSpec(topics map[string]int32, m *Member, sign int) {
	for _, p := range m.Protocols {
		addCount(&g.ix.protocols, g.epoch, p.Name, sign)
	}
	for _, t := range m.Topics {
		// A topic counts towards the subscribed partitions while one
		// member subscribes to it.
		if before := addCount(&g.ix.topics, g.epoch, t, sign); before == 0 || before == 1 && sign < 0 {
			g.ix.size.subscribed += int64(sign) * int64(topics[t])
		}
	}
	addCount(&g.ix.timeouts, g.epoch, m.RebalanceTimeoutMs, sign)
	g.countSpecBytes(m, sign)
}

// countSpecBytes adds or takes away the bytes of what m states about
// itself.
func (g *Group) countSpecBytes(m *Member, sign int) {
	g.ix.size.metadata += int64(sign) * memberMetadataBytes(m)
	g.ix.size.bytes += int64(sign) * memberSpecBytes(m)
}

// countAssignments adds or takes away the bytes of m's assignments.
func (g *Group) countAssignments(m *Member, sign int) {
	g.ix.size.bytes += int64(sign) * (assignmentBytes(m.Assignment) + assignmentBytes(m.PreviousAssignment))
}

// countMember adds or takes away all of m.
func (g *Group) countMember(topics map[string]int32, m *Member, sign int) {
	g.countSpec(topics, m, sign)
	g.countAssignments(m, sign)
	if m.InstanceID != "" {
		if sign > 0 {
			g.ix.instances.set(g.epoch, m.InstanceID, m.ID)
		} else {
			g.ix.instances.delete(g.epoch, m.InstanceID)
		}
	}
	if m.Joined {
		g.ix.joined += sign
	}
}

// setAssignment gives member i its assignment.
func (g *Group) setAssignment(p memberPos, a Assignment) {
	m := g.editMember(p)
	g.countAssignments(m, -1)
	m.Assignment = a
	g.countAssignments(m, 1)
}

// reindex rebuilds the group's derived figures from its members (after a
// restore; the group must be the state's own to change).
func (g *Group) reindex(topics map[string]int32) {
	g.ix = deriveIndex(g, topics)
}

// deriveIndex computes g's derived figures from its members, with g's
// epoch as the tables' owner. It sorts once rather than inserting member
// by member, which would cost a restore a memmove per static member.
func deriveIndex(g *Group, topics map[string]int32) groupIndex {
	ix := groupIndex{size: groupSize{bytes: groupBytes(g.ID, g.ProtocolType)}}
	protocols, subscribed, timeouts := map[string]int{}, map[string]int{}, map[int32]int{}
	var instances []sortedEntry[string, string]
	for _, m := range g.Members.All() {
		for _, p := range m.Protocols {
			protocols[p.Name]++
		}
		for _, t := range m.Topics {
			subscribed[t]++
		}
		timeouts[m.RebalanceTimeoutMs]++
		if m.InstanceID != "" {
			instances = append(instances, sortedEntry[string, string]{m.InstanceID, m.ID})
		}
		if m.Joined {
			ix.joined++
		}
		ix.size.bytes += memberBytes(m)
		ix.size.metadata += memberMetadataBytes(m)
	}
	for t := range subscribed {
		ix.size.subscribed += int64(topics[t])
	}
	slices.SortFunc(instances, func(a, b sortedEntry[string, string]) int { return cmp.Compare(a.key, b.key) })
	ix.protocols = sortedMapOf(g.epoch, sortedEntries(protocols))
	ix.topics = sortedMapOf(g.epoch, sortedEntries(subscribed))
	ix.timeouts = sortedMapOf(g.epoch, sortedEntries(timeouts))
	ix.instances = sortedMapOf(g.epoch, instances)
	return ix
}

func sortedEntries[K cmp.Ordered, V any](m map[K]V) []sortedEntry[K, V] {
	out := make([]sortedEntry[K, V], 0, len(m))
	for k, v := range m {
		out = append(out, sortedEntry[K, V]{k, v})
	}
	slices.SortFunc(out, func(a, b sortedEntry[K, V]) int { return cmp.Compare(a.key, b.key) })
	return out
}
