package raftnode

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/hashicorp/raft"
)

// fsmAdapter is the raft.FSM in front of the pure *fsm.FSM. It is thin on
// purpose: decoding and applying are the FSM's; the adapter only filters
// entry types, measures, and tells the FSM which index a restored snapshot
// stands for.
type fsmAdapter struct {
	f       *fsm.FSM
	snaps   *trackingSnapshotStore
	metrics *metrics
	halter  *halter
	// running is set once raft started: a snapshot it cannot restore
	// before then fails the start instead of halting.
	running atomic.Bool

	restores atomic.Uint64
}

var _ raft.FSM = (*fsmAdapter)(nil)

// Apply applies a LogCommand entry and returns its *fsm.ApplyResult, which
// raft hands back through the ApplyFuture. Raft only passes LogCommand
// entries to a non-batching FSM; the check guards against a future change.
func (a *fsmAdapter) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	res := a.f.ApplyEntry(l.Index, l.Data)
	if errors.Is(res.Err, fsm.ErrNewerRules) {
		a.halter.halt(res.Err)
	}
	return res
}

// Snapshot takes the FSM's cheap point-in-time copy; serialising it happens
// in Persist, while Apply goes on.
func (a *fsmAdapter) Snapshot() (raft.FSMSnapshot, error) {
	if err := a.halter.halted(); err != nil {
		return nil, err
	}
	return &fsmSnapshot{s: a.f.Snapshot(), metrics: a.metrics}, nil
}

// Restore replaces the FSM's state with the snapshot raft just opened and
// records the snapshot's index as the FSM's applied index: the snapshot
// stream does not carry it, but the snapshot store's metadata does.
func (a *fsmAdapter) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	start := time.Now()
	if err := a.f.Restore(rc); err != nil {
		err = fmt.Errorf("restore fsm from snapshot: %w", err)
		if errors.Is(err, fsm.ErrNewerRules) && a.running.Load() {
			a.halter.halt(err)
		}
		return err
	}
	if meta := a.snaps.lastOpened.Load(); meta != nil {
		a.f.SetAppliedIndex(meta.Index)
	}
	a.restores.Add(1)
	a.metrics.restoreDuration.Observe(time.Since(start).Seconds())
	return nil
}

// fsmSnapshot streams an fsm.Snapshot into raft's sink.
type fsmSnapshot struct {
	s       *fsm.Snapshot
	metrics *metrics
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	n, err := s.s.WriteTo(sink)
	if err != nil {
		if cerr := sink.Cancel(); cerr != nil {
			err = fmt.Errorf("%w (and cancelling the snapshot sink %s: %v)", err, sink.ID(), cerr)
		}
		return fmt.Errorf("persist snapshot %s: %w", sink.ID(), err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close snapshot %s: %w", sink.ID(), err)
	}
	s.metrics.snapshotPersistDuration.Observe(time.Since(start).Seconds())
	s.metrics.snapshotSize.Observe(float64(n))
	s.metrics.lastSnapshotBytes.Store(n)
	return nil
}

func (s *fsmSnapshot) Release() {}

// trackingSnapshotStore remembers the metadata of the snapshot raft opened
// last. Raft opens a snapshot right before handing it to FSM.Restore (on
// start, on InstallSnapshot and on a user restore), so that metadata is
// the index the restored state stands for.
type trackingSnapshotStore struct {
	raft.SnapshotStore
	lastOpened atomic.Pointer[raft.SnapshotMeta]
}

func (t *trackingSnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := t.SnapshotStore.Open(id)
	if err == nil {
		t.lastOpened.Store(meta)
	}
	return meta, rc, err
}
