package raftnode

import (
	"sync"

	"github.com/hashicorp/raft"
)

// logCacheEntries is the most entries the log cache holds, whatever their
// size.
const logCacheEntries = 512

// logEntryOverhead approximates what a cached raft.Log costs beyond its
// Data and Extensions (the struct and its bookkeeping).
const logEntryOverhead = 64

// byteLogCache keeps the newest log entries in memory in front of the log
// store, bounded by count and by bytes. Replication and the FSM read back
// entries just written; without a cache each of those reads is a bolt read
// transaction plus a decode (10% of all CPU under load, measured with
// cohort-bench). raft.LogCache bounds only the count, so 512 entries near
// the largest command would pin gigabytes; this one evicts the oldest
// entries until both bounds hold, and does not cache an entry larger than
// the byte bound at all. It holds copies of the entries it is given, so the
// bounds are on what it really pins.
type byteLogCache struct {
	store      raft.LogStore
	maxEntries int
	maxBytes   int64

	mu      sync.Mutex
	byIndex map[uint64]*raft.Log
	// order holds the cached entries oldest first from head on; an entry
	// overwritten at the same index stays in it (and in bytes) until it is
	// evicted, so bytes is what the cache really pins.
	order []*raft.Log
	head  int
	bytes int64
}

var (
	_ raft.LogStore          = (*byteLogCache)(nil)
	_ raft.MonotonicLogStore = (*byteLogCache)(nil)
)

func newByteLogCache(store raft.LogStore, maxEntries int, maxBytes int64) *byteLogCache {
	return &byteLogCache{store: store, maxEntries: maxEntries, maxBytes: maxBytes, byIndex: map[uint64]*raft.Log{}}
}

func logSize(l *raft.Log) int64 {
	return int64(len(l.Data)+len(l.Extensions)) + logEntryOverhead
}

// GetLog answers from the cache when it holds index, else from the store.
func (c *byteLogCache) GetLog(index uint64, out *raft.Log) error {
	c.mu.Lock()
	l, ok := c.byIndex[index]
	if ok {
		*out = *l
	}
	c.mu.Unlock()
	if ok {
		return nil
	}
	return c.store.GetLog(index, out)
}

func (c *byteLogCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes to the store first and caches only what it accepted.
func (c *byteLogCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		c.insert(l)
	}
	return nil
}

func (c *byteLogCache) insert(l *raft.Log) {
	size := logSize(l)
	if size > c.maxBytes {
		delete(c.byIndex, l.Index) // an older entry at this index is stale now
		return
	}
	// Cache a copy, never the caller's pointer: on the leader raft hands
	// over the Log inside each apply future, and keeping that pointer would
	// keep the whole future alive, with the FSM's result it holds (a Batch
	// of joins into a 10,000-member group: 512 copies of the group). With
	// 512 entries cached the leader held 3.7 GB that no follower held.
	cp := *l
	l = &cp
	c.byIndex[l.Index] = l
	c.order = append(c.order, l)
	c.bytes += size
	for c.bytes > c.maxBytes || len(c.order)-c.head > c.maxEntries {
		old := c.order[c.head]
		c.order[c.head] = nil
		c.head++
		c.bytes -= logSize(old)
		if c.byIndex[old.Index] == old {
			delete(c.byIndex, old.Index)
		}
	}
	// Reuse the slice's front once half of it is evicted.
	if c.head > len(c.order)/2 {
		n := copy(c.order, c.order[c.head:])
		clear(c.order[n:])
		c.order, c.head = c.order[:n], 0
	}
}

// DeleteRange empties the cache (as raft.LogCache does: deletes are rare,
// compaction and conflicting suffixes) and deletes from the store.
func (c *byteLogCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	clear(c.byIndex)
	clear(c.order)
	c.order, c.head, c.bytes = c.order[:0], 0, 0
	c.mu.Unlock()
	return c.store.DeleteRange(lo, hi)
}

func (c *byteLogCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }
func (c *byteLogCache) LastIndex() (uint64, error)  { return c.store.LastIndex() }

// IsMonotonic passes the store's answer on, so that raft treats a
// monotonic store (raft-wal) as such behind the cache.
func (c *byteLogCache) IsMonotonic() bool { return isMonotonic(c.store) }

func isMonotonic(s raft.LogStore) bool {
	m, ok := s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// stats reports the entries the cache answers for and the bytes it pins.
func (c *byteLogCache) stats() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byIndex), c.bytes
}
