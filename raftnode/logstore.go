package raftnode

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

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
