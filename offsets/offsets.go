// Package offsets is the committed-offset table the FSM owns: one register per
// (group, topic, partition), copy-on-write sharing with snapshots, and the
// retention rule.
//
// Like the FSM it must stay pure: no clock (times are passed in), no I/O, no
// goroutines, and every walk over the table is in sorted key order so that no
// map order reaches the FSM's output. Fencing (member, generation, ownership)
// needs the group and is decided by the FSM before it calls Put.
package offsets

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// Key names one partition of one topic.
type Key struct {
	Topic     string
	Partition int32
}

// Compare orders keys by topic, then partition.
func (k Key) Compare(o Key) int {
	if c := cmp.Compare(k.Topic, o.Topic); c != 0 {
		return c
	}
	return cmp.Compare(k.Partition, o.Partition)
}

func (k Key) String() string { return fmt.Sprintf("%s/%d", k.Topic, k.Partition) }

// Value is one committed offset.
type Value struct {
	Offset            int64
	Metadata          string
	CommitTimestampMs int64
	// Generation of the group the commit was made in; -1 for a standalone commit.
	Generation int32
}

// Entry is one row of the table.
type Entry struct {
	Group string
	Key   Key
	Value Value
}

// groupTable holds one group's offsets. It is shared copy-on-write between
// the live table and snapshots: epoch records which table generation may
// write it in place.
type groupTable struct {
	entries map[Key]Value
	epoch   uint64
	bytes   int64
}

// Table is the committed-offset table of all groups.
type Table struct {
	groups map[string]*groupTable
	epoch  uint64
	count  int
	bytes  int64
}

// entryOverhead stands for the map entry (key and value structs, 64
// bytes, in a map kept at most 7/8 full and grown by doubling) and the
// topic string each commit brings: measured at 144 bytes of heap per
// offset (BenchmarkStateHeap in package fsm). The estimate decides budget
// refusals in apply, so changing it changes replicated outcomes: only
// together with a new fsm.CommandVersion.
const entryOverhead = 144

// EntryBytes is one offset's share of the state's size estimate.
func EntryBytes(k Key, v Value) int64 {
	return entryOverhead + int64(len(k.Topic)+len(v.Metadata))
}

// Bytes is the table's size estimate: the sum of EntryBytes.
func (t *Table) Bytes() int64 { return t.bytes }

// New returns an empty table.
func New() *Table {
	return &Table{groups: map[string]*groupTable{}, epoch: 1}
}

// Len is the number of committed offsets.
func (t *Table) Len() int { return t.count }

// Clone returns a copy that shares every group's offsets copy-on-write: it
// costs a copy of the group index, not of the offsets. After Clone neither
// table modifies a shared group in place.
func (t *Table) Clone() *Table {
	t.epoch++
	return &Table{groups: maps.Clone(t.groups), epoch: t.epoch + 1<<63, count: t.count, bytes: t.bytes}
}

// writable returns group's table, copying it first if it is shared.
func (t *Table) writable(group string) *groupTable {
	gt, ok := t.groups[group]
	switch {
	case !ok:
		gt = &groupTable{entries: map[Key]Value{}, epoch: t.epoch}
		t.groups[group] = gt
	case gt.epoch != t.epoch:
		gt = &groupTable{entries: maps.Clone(gt.entries), epoch: t.epoch, bytes: gt.bytes}
		t.groups[group] = gt
	}
	return gt
}

// Get returns the committed offset of key in group.
func (t *Table) Get(group string, key Key) (Value, bool) {
	gt, ok := t.groups[group]
	if !ok {
		return Value{}, false
	}
	v, ok := gt.entries[key]
	return v, ok
}

// Put stores a committed offset.
func (t *Table) Put(group string, key Key, v Value) {
	gt := t.writable(group)
	grow := EntryBytes(key, v)
	if old, ok := gt.entries[key]; ok {
		grow -= EntryBytes(key, old)
	} else {
		t.count++
	}
	gt.entries[key] = v
	gt.bytes += grow
	t.bytes += grow
}

// Group returns the offsets of one group sorted by key.
func (t *Table) Group(group string) []Entry {
	gt, ok := t.groups[group]
	if !ok {
		return nil
	}
	out := make([]Entry, 0, len(gt.entries))
	for _, k := range sortedKeys(gt.entries) {
		out = append(out, Entry{Group: group, Key: k, Value: gt.entries[k]})
	}
	return out
}

// GroupLen is the number of offsets group has.
func (t *Table) GroupLen(group string) int {
	if gt, ok := t.groups[group]; ok {
		return len(gt.entries)
	}
	return 0
}

// DeleteGroup removes every offset of group and returns how many.
func (t *Table) DeleteGroup(group string) int {
	gt, ok := t.groups[group]
	if !ok {
		return 0
	}
	n := len(gt.entries)
	delete(t.groups, group)
	t.count -= n
	t.bytes -= gt.bytes
	return n
}

// DeleteTopic removes every offset of topic in every group and returns how many.
func (t *Table) DeleteTopic(topic string) int {
	return t.deleteWhere(func(_ string, k Key, _ Value) bool { return k.Topic == topic })
}

// DeletePartitionsFrom removes offsets of topic's partitions numbered n and above.
func (t *Table) DeletePartitionsFrom(topic string, n int32) int {
	return t.deleteWhere(func(_ string, k Key, _ Value) bool { return k.Topic == topic && k.Partition >= n })
}

// Expire removes the offsets of group for which expired returns true, and
// returns how many.
func (t *Table) Expire(group string, expired func(Key, Value) bool) int {
	gt, ok := t.groups[group]
	if !ok {
		return 0
	}
	return t.removeWhere(group, gt, expired)
}

// Expired is the retention rule (Kafka's, after KIP-211): an offset of a group
// without members expires retentionMs after the later of its commit and the
// moment the group became empty.
func Expired(v Value, emptySinceMs, nowMs, retentionMs int64) bool {
	return nowMs-max(v.CommitTimestampMs, emptySinceMs) >= retentionMs
}

func (t *Table) deleteWhere(match func(string, Key, Value) bool) int {
	removed := 0
	for _, g := range slices.Sorted(maps.Keys(t.groups)) {
		removed += t.removeWhere(g, t.groups[g], func(k Key, v Value) bool { return match(g, k, v) })
	}
	return removed
}

// removeWhere deletes the offsets of group (whose current table is gt) that
// match, and returns how many. A first pass counts them, so that a group
// losing every offset is dropped whole and one losing some allocates only
// the list of those: the cost of a deletion never exceeds the table's size.
func (t *Table) removeWhere(group string, gt *groupTable, match func(Key, Value) bool) int {
	n := 0
	for k, v := range gt.entries {
		if match(k, v) {
			n++
		}
	}
	switch {
	case n == 0:
		return 0
	case n == len(gt.entries):
		delete(t.groups, group)
		t.bytes -= gt.bytes
	default:
		doomed := make([]Key, 0, n)
		for k, v := range gt.entries {
			if match(k, v) {
				doomed = append(doomed, k)
			}
		}
		gt = t.writable(group)
		for _, k := range doomed {
			shrink := EntryBytes(k, gt.entries[k])
			gt.bytes -= shrink
			t.bytes -= shrink
			delete(gt.entries, k)
		}
	}
	t.count -= n
	return n
}

// Range calls fn for every offset in (group, topic, partition) order until fn
// returns false.
func (t *Table) Range(fn func(Entry) bool) {
	for _, g := range slices.Sorted(maps.Keys(t.groups)) {
		gt := t.groups[g]
		for _, k := range sortedKeys(gt.entries) {
			if !fn(Entry{Group: g, Key: k, Value: gt.entries[k]}) {
				return
			}
		}
	}
}

func sortedKeys(m map[Key]Value) []Key {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, Key.Compare)
	return keys
}
