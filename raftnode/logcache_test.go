package raftnode

import (
	"errors"
	"runtime"
	"testing"
	"weak"

	"github.com/hashicorp/raft"
)

// countingStore is an in-memory log store that counts reads, so a test
// can tell a cache hit from a miss.
type countingStore struct {
	*raft.InmemStore
	reads int
}

func (s *countingStore) GetLog(index uint64, out *raft.Log) error {
	s.reads++
	return s.InmemStore.GetLog(index, out)
}

func entry(index uint64, size int) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: make([]byte, size)}
}

// cached reports whether index is answered without reading the store.
func cached(t *testing.T, c *byteLogCache, s *countingStore, index uint64) bool {
	t.Helper()
	before := s.reads
	var out raft.Log
	if err := c.GetLog(index, &out); err != nil {
		t.Fatalf("GetLog(%d): %v", index, err)
	}
	if out.Index != index {
		t.Fatalf("GetLog(%d) returned entry %d", index, out.Index)
	}
	return s.reads == before
}

func TestByteLogCache_EvictsOldestByBytes(t *testing.T) {
	s := &countingStore{InmemStore: raft.NewInmemStore()}
	size := 1000 // each entry costs size + logEntryOverhead
	per := int64(size + logEntryOverhead)
	c := newByteLogCache(s, 512, 3*per) // room for three entries, far below the count bound
	for i := uint64(1); i <= 5; i++ {
		if err := c.StoreLog(entry(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	entries, bytes := c.stats()
	if entries != 3 || bytes != 3*per {
		t.Fatalf("cache holds %d entries, %d bytes; want 3 entries, %d bytes", entries, bytes, 3*per)
	}
	for i, want := range map[uint64]bool{1: false, 2: false, 3: true, 4: true, 5: true} {
		if got := cached(t, c, s, i); got != want {
			t.Errorf("entry %d cached = %t, want %t", i, got, want)
		}
	}

	// One large entry pushes out as many small ones as its size needs.
	if err := c.StoreLog(entry(6, 2*size)); err != nil {
		t.Fatal(err)
	}
	if entries, bytes := c.stats(); entries != 2 || bytes > 3*per {
		t.Fatalf("after a double-size entry: %d entries, %d bytes; want 2 entries within %d bytes", entries, bytes, 3*per)
	}
	if !cached(t, c, s, 6) || !cached(t, c, s, 5) || cached(t, c, s, 4) {
		t.Error("want entries 5 and 6 cached, 4 evicted")
	}
}

func TestByteLogCache_EntryLargerThanBoundIsNotCached(t *testing.T) {
	s := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newByteLogCache(s, 512, 4096)
	if err := c.StoreLogs([]*raft.Log{entry(1, 100), entry(2, 100)}); err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLog(entry(3, 8192)); err != nil {
		t.Fatal(err)
	}
	if cached(t, c, s, 3) {
		t.Error("an entry above the byte bound was cached")
	}
	if !cached(t, c, s, 1) || !cached(t, c, s, 2) {
		t.Error("an uncacheable entry evicted the small ones")
	}
}

func TestByteLogCache_CountBoundStillHolds(t *testing.T) {
	s := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newByteLogCache(s, 4, 1<<30)
	for i := uint64(1); i <= 10; i++ {
		if err := c.StoreLog(entry(i, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := c.stats(); entries != 4 {
		t.Fatalf("cache holds %d entries, want 4", entries)
	}
	if cached(t, c, s, 6) || !cached(t, c, s, 7) {
		t.Error("want the newest four entries cached")
	}
}

func TestByteLogCache_OverwriteAndDeleteRangeNeverServeStaleEntries(t *testing.T) {
	s := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newByteLogCache(s, 512, 1<<20)
	for i := uint64(1); i <= 3; i++ {
		if err := c.StoreLog(entry(i, 10)); err != nil {
			t.Fatal(err)
		}
	}
	// A new leader's entry replaces index 3 (raft deletes the suffix first).
	if err := c.DeleteRange(3, 3); err != nil {
		t.Fatal(err)
	}
	if entries, bytes := c.stats(); entries != 0 || bytes != 0 {
		t.Fatalf("after DeleteRange: %d entries, %d bytes, want an empty cache", entries, bytes)
	}
	replaced := &raft.Log{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("new")}
	if err := c.StoreLog(replaced); err != nil {
		t.Fatal(err)
	}
	var out raft.Log
	if err := c.GetLog(3, &out); err != nil || out.Term != 2 || string(out.Data) != "new" {
		t.Fatalf("GetLog(3) = term %d %q, %v; want the term-2 entry", out.Term, out.Data, err)
	}
}

type failingStore struct{ raft.LogStore }

var errDiskFull = errors.New("disk full")

func (failingStore) StoreLogs([]*raft.Log) error { return errDiskFull }

func TestByteLogCache_FailedWriteIsNotCached(t *testing.T) {
	inner := raft.NewInmemStore()
	c := newByteLogCache(failingStore{inner}, 512, 1<<20)
	if err := c.StoreLog(entry(1, 10)); !errors.Is(err, errDiskFull) {
		t.Fatalf("StoreLog: %v, want the store's error", err)
	}
	if entries, _ := c.stats(); entries != 0 {
		t.Fatalf("cache holds %d entries after a failed write", entries)
	}
	var out raft.Log
	if err := c.GetLog(1, &out); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of an entry never stored: %v, want ErrLogNotFound", err)
	}
}

// applyFuture stands for raft's apply future on the leader: the Log the
// cache is given is a field of it, beside the FSM's result.
type applyFuture struct {
	log    raft.Log
	result []byte
}

// copyingStore keeps copies, as a store on disk does (raft.InmemStore
// keeps the pointers it is given).
type copyingStore struct{ *raft.InmemStore }

func (s copyingStore) StoreLogs(logs []*raft.Log) error {
	for _, l := range logs {
		cp := *l
		if err := s.InmemStore.StoreLog(&cp); err != nil {
			return err
		}
	}
	return nil
}

func TestByteLogCache_DoesNotPinWhatHoldsTheEntry(t *testing.T) {
	c := newByteLogCache(copyingStore{raft.NewInmemStore()}, 512, 1<<20)
	f := &applyFuture{log: raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("join")}, result: make([]byte, 1<<20)}
	held := weak.Make(f)
	if err := c.StoreLog(&f.log); err != nil {
		t.Fatal(err)
	}
	f = nil
	runtime.GC()
	if held.Value() != nil {
		t.Fatal("the cache keeps the struct its entry came in alive (and whatever it holds)")
	}
	var out raft.Log
	if err := c.GetLog(1, &out); err != nil || string(out.Data) != "join" {
		t.Fatalf("GetLog(1) = %q, %v; want the cached entry", out.Data, err)
	}
	if entries, _ := c.stats(); entries != 1 {
		t.Fatalf("cache holds %d entries, want 1", entries)
	}
}
