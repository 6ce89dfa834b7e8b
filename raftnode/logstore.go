package raftnode

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// The log store holds the Raft log and the stable store (term, vote). Two
// kinds are supported, chosen when a data dir is created and kept for its
// life:
//
//   - bolt: raft-boltdb/v2, one file raft/raft.db. The default.
//   - wal: hashicorp/raft-wal, the directory raft/wal/ (segment files and a
//     small bolt file of metadata). About twice bolt's commit rate at half
//     its CPU per commit, and no slowdown as snapshots truncate the log
//     (docs/benchmarks.md, "The log store"). Withdrawn for now: walUsable.
//
// A data dir holding one kind is opened as that kind whatever is asked
// for new data dirs, unless the ask names the other kind explicitly: then
// the node refuses to start rather than start an empty log beside a full
// one. Moving a node to the other kind is a rejoin with an empty data dir
// (docs/operations.md).
const (
	LogStoreBolt = "bolt"
	LogStoreWAL  = "wal"
)

// logStore is what raft needs of a log store, and Close.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// walUsable gates the wal kind. raft-wal v0.4.0, the newest the module
// proxy serves, cannot reopen a log whose tail raft truncated: truncation
// seals the tail segment without writing its index block, and after a
// restart every read of that segment fails ("sealed segment has no index
// block", raft-wal issue 31). Raft truncates a follower's conflicting
// suffix after a leader change, so a node on wal would, sooner or later,
// not start again: the chaos suite found it in its first two minutes
// (TestWAL_TailTruncation_ReopenFails shows it on the library alone).
// Tests of this package set it to exercise the code; cohortd refuses wal
// until a fixed raft-wal is available.
var walUsable = false

// errWALWithdrawn is the refusal of the wal kind.
var errWALWithdrawn = errors.New("log store wal: withdrawn: hashicorp/raft-wal v0.4.0 cannot reopen a log after raft truncated its tail (after a leader change), so a node on it may never restart; use bolt until a fixed raft-wal is available (docs/operations.md, The log store)")

// ValidateLogStore checks a log store kind: empty (the data dir's own, or
// bolt for a new one), bolt, or wal (refused while withdrawn: walUsable).
func ValidateLogStore(kind string) error {
	switch kind {
	case "", LogStoreBolt:
		return nil
	case LogStoreWAL:
		if !walUsable {
			return errWALWithdrawn
		}
		return nil
	}
	return fmt.Errorf("log store %q: want %s or %s", kind, LogStoreBolt, LogStoreWAL)
}

// DataDirLogStore is the kind of log store the data dir holds, "" when it
// holds none yet.
func DataDirLogStore(dataDir string) (string, error) {
	raftDir := filepath.Join(dataDir, "raft")
	bolt, err := exists(filepath.Join(raftDir, "raft.db"))
	if err != nil {
		return "", err
	}
	walDir, err := exists(filepath.Join(raftDir, "wal"))
	if err != nil {
		return "", err
	}
	switch {
	case bolt && walDir:
		return "", fmt.Errorf("%s holds two raft log stores (raft.db and wal/); the node cannot tell which is its log: restore it from a snapshot or remove its data dir and rejoin it", raftDir)
	case bolt:
		return LogStoreBolt, nil
	case walDir:
		return LogStoreWAL, nil
	}
	return "", nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// openStore opens the data dir's log store: the kind it holds, or want
// (bolt when empty) for a new data dir. It returns the kind opened.
func openStore(dataDir, want string, log hclog.Logger) (logStore, string, error) {
	if err := ValidateLogStore(want); err != nil {
		return nil, "", err
	}
	have, err := DataDirLogStore(dataDir)
	if err != nil {
		return nil, "", err
	}
	raftDir := filepath.Join(dataDir, "raft")
	kind := have
	switch {
	case have == "" && want == "":
		kind = LogStoreBolt
	case have == "":
		kind = want
	case want != "" && want != have:
		return nil, "", fmt.Errorf("log store %s asked for, but %s holds a %s log store; a data dir keeps the kind it was created with (leave the log store unset to open it, or move the node to %s by removing its data dir and rejoining it)", want, raftDir, have, want)
	}
	if kind == LogStoreWAL {
		if !walUsable {
			return nil, "", fmt.Errorf("%s holds a raft-wal log store: %w", raftDir, errWALWithdrawn)
		}
		s, err := openWAL(filepath.Join(raftDir, "wal"), log)
		return s, kind, err
	}
	s, err := openLogStore(filepath.Join(raftDir, "raft.db"))
	return s, kind, err
}

// openLogStore opens the bolt file holding the Raft log and stable store,
// after reading every page of it once. bbolt panics (or faults on the
// mapping) when it meets a damaged page, which under a supervisor becomes a
// crash loop with no word about the file; reading it all here, with the
// panic recovered, turns any damage into an error naming the file. The walk
// costs one pass over the log, which snapshots keep short.
func openLogStore(path string) (*raftboltdb.BoltStore, error) {
	if err := verifyBoltFile(path); err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: path,
		// As Vault does: no freelist sync (faster commits, the freelist is
		// rebuilt on open) and the map freelist (fast with large free lists).
		BoltOptions: &bbolt.Options{
			Timeout:        boltOpenTimeout,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("open raft log store %s (is another cohortd using this data dir?): %w", path, err)
	}
	return store, nil
}

// walMetaFile is raft-wal's bolt file of segment metadata in its directory.
const walMetaFile = "wal-meta.db"

// openWAL opens (or creates) the raft-wal directory dir, and, as
// openLogStore does for bolt, reads it all once: its metadata file page by
// page, then every entry of the log, with panics recovered, so that damage
// is an error naming the directory rather than a crash at the first read.
// raft-wal itself takes an exclusive lock on the metadata file, so a
// second cohortd on the same data dir is refused.
func openWAL(dir string, log hclog.Logger) (_ *walStore, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create raft log store %s: %w", dir, err)
	}
	if err := verifyBoltFile(filepath.Join(dir, walMetaFile)); err != nil {
		return nil, err
	}
	damaged := func(what any) error {
		return fmt.Errorf("raft log store %s is damaged (%v); restore this node from a snapshot or remove its data dir and rejoin it", dir, what)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	w := &walStore{meta: &metadb.BoltMetaDB{}}
	defer func() {
		if r := recover(); r != nil {
			_ = w.Close()
			err = damaged(r)
		}
	}()
	w.WAL, err = wal.Open(dir, wal.WithLogger(log), wal.WithMetaStore(w.meta))
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open raft log store %s (is another cohortd using this data dir, or is it damaged?): %w", dir, err)
	}
	if err := walkWAL(w.WAL); err != nil {
		_ = w.Close()
		return nil, damaged(err)
	}
	return w, nil
}

// walStore is a raft-wal log store whose Close also closes its metadata
// file: raft-wal v0.4.0's own Close leaves that file open, and with it the
// file's lock, so the data dir could not be opened again in the same
// process (a restart in tests, recovery followed by a start).
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func (w *walStore) Close() error {
	var err error
	if w.WAL != nil {
		err = w.WAL.Close() // waits for writes in flight
	}
	return errors.Join(err, w.meta.Close())
}

// walkWAL reads every entry of w's log, checking that each holds its own
// index.
func walkWAL(w *wal.WAL) error {
	first, err := w.FirstIndex()
	if err != nil {
		return err
	}
	last, err := w.LastIndex()
	if err != nil {
		return err
	}
	if first == 0 {
		return nil
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		if err := w.GetLog(i, &l); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if l.Index != i {
			return fmt.Errorf("entry %d reads as entry %d", i, l.Index)
		}
	}
	return nil
}

// verifyBoltFile reads every bucket, key and value of the bolt file at
// path. A missing file is fine (raft-boltdb creates it).
func verifyBoltFile(path string) (err error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: boltOpenTimeout, ReadOnly: true})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("open raft log store %s (is another cohortd using this data dir, or is the file damaged?): %w", path, err)
	}
	defer db.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("raft log store %s is damaged (%v); restore this node from a snapshot or remove its data dir and rejoin it", path, r)
		}
	}()
	return db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error { return walkBucket(b) })
	})
}

func walkBucket(b *bbolt.Bucket) error {
	var last byte
	err := b.ForEach(func(k, v []byte) error {
		if v == nil {
			if child := b.Bucket(k); child != nil {
				return walkBucket(child)
			}
			return nil
		}
		// Touch the value's end, which may lie on an overflow page.
		if len(v) > 0 {
			last ^= v[len(v)-1]
		}
		return nil
	})
	_ = last
	return err
}
