// Package faultstore has a raft.LogStore that fails on demand, for tests of
// what a node does when its disk does (raftnode's Config.WrapLogStore).
package faultstore

import (
	"io/fs"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/raft"
)

// FullDisk fails every append with ENOSPC while Failing is set, as bolt
// does on a full disk; reads and deletes pass through.
type FullDisk struct {
	raft.LogStore
	Failing atomic.Bool
}

// StoreLog appends one entry.
func (s *FullDisk) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends entries, or fails as a full disk does.
func (s *FullDisk) StoreLogs(logs []*raft.Log) error {
	if s.Failing.Load() {
		return &fs.PathError{Op: "write", Path: "raft.db", Err: syscall.ENOSPC}
	}
	return s.LogStore.StoreLogs(logs)
}
