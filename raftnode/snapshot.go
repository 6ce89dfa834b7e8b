package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/hashicorp/raft"
)

// restoreTimeout bounds a restore whose context has no deadline.
const restoreTimeout = time.Minute

// OpenSnapshot takes a snapshot of the leader's state now (or uses the
// latest one when nothing changed since) and opens it. The reader yields
// the FSM's own encoding (versioned and CRC'd); the caller closes it.
func (n *Node) OpenSnapshot(ctx context.Context) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if _, err := n.LeaderConfiguration(); err != nil {
		return nil, nil, err
	}
	if err := n.Snapshot(ctx); err != nil {
		return nil, nil, fmt.Errorf("take snapshot: %w", err)
	}
	// Open through the untracked store: the tracking one records what
	// raft restores from, and this open is not a restore.
	store := n.adapter.snaps.SnapshotStore
	list, err := store.List()
	if err != nil {
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	if len(list) == 0 {
		return nil, nil, errors.New("no snapshot available after taking one")
	}
	meta, rc, err := store.Open(list[0].ID)
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot %s: %w", list[0].ID, err)
	}
	return meta, rc, nil
}

// MaxSnapshotPosition is the largest index or term a snapshot may carry.
// Raft counts both in uint64 and adds one to the index of every restored
// or new entry; a value near 2^64 wraps, after which the node neither
// commits nor reads anything. No real cluster gets within 2^63 entries or
// terms, so anything above is forged or damaged metadata.
const MaxSnapshotPosition = math.MaxInt64

// ValidateSnapshotPosition checks the index and term a snapshot claims to
// stand at: both from 1 to MaxSnapshotPosition. The error names the value
// and the limit.
func ValidateSnapshotPosition(index, term uint64) error {
	var errs []error
	if index == 0 || index > MaxSnapshotPosition {
		errs = append(errs, fmt.Errorf("snapshot index %d: must be between 1 and %d", index, uint64(MaxSnapshotPosition)))
	}
	if term == 0 || term > MaxSnapshotPosition {
		errs = append(errs, fmt.Errorf("snapshot term %d: must be between 1 and %d", term, uint64(MaxSnapshotPosition)))
	}
	return errors.Join(errs...)
}

// RestoreSnapshot replaces the whole replicated state with the snapshot in
// f (size bytes of the FSM's encoding) on every node. The data is fully
// decoded and checked first: a corrupted, foreign or oversized snapshot is
// refused (ErrInvalidSnapshot) and nothing changes.
//
// The index and term the snapshot was taken at play no part: Raft installs
// it at the cluster's next index and current term (index 0 in the metadata
// makes raft.Restore take max(last index, 0)+1), so a snapshot from a
// cluster further along, or with forged metadata, cannot move this
// cluster's log forward, let alone past 2^64.
//
// Afterwards the node registry entries of the current servers are written
// again (the snapshot carries the registry of the cluster it came from),
// and leadership is handed to another voter when there is one, so that the
// new leader's group engine starts from the restored state (fresh session
// deadlines for every member). It returns the index the restored state
// stands at.
func (n *Node) RestoreSnapshot(ctx context.Context, f *os.File, size int64) (uint64, error) {
	c, err := n.LeaderConfiguration()
	if err != nil {
		return 0, err
	}
	if size <= 0 || size > n.cfg.MaxSnapshotSize {
		return 0, fmt.Errorf("%w: %d bytes: must be between 1 and the maximum snapshot size %d (--max-snapshot-size); nothing changed",
			ErrInvalidSnapshot, size, n.cfg.MaxSnapshotSize)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if _, err := fsm.ReadSnapshot(io.LimitReader(f, size)); err != nil {
		return 0, fmt.Errorf("%w: refusing it, nothing changed: %v", ErrInvalidSnapshot, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	registry := map[string]fsm.Node{}
	for _, node := range n.fsm.Nodes() {
		registry[node.ID] = node
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: 0, Size: size}
	timeout := restoreTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := n.raft.Restore(meta, f, timeout); err != nil {
		return 0, fmt.Errorf("restore snapshot through raft: %w", err)
	}
	n.log.Warn("restored the replicated state from a snapshot", "index", n.raft.LastIndex(), "bytes", size)
	for _, s := range c.Servers {
		node, ok := registry[string(s.ID)]
		if !ok {
			continue
		}
		_, err := n.Apply(ctx, &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
			NodeId: node.ID, GrpcAddress: node.GRPCAddress, RaftAddress: node.RaftAddress, MaxCommandVersion: node.MaxCommandVersion, KafkaAddress: node.KafkaAddress,
		}}})
		if err != nil {
			return 0, fmt.Errorf("restored, but re-registering node %s failed (restart it to register again): %w", node.ID, err)
		}
	}
	idx := n.raft.LastIndex()
	if n.voterCount() > 1 {
		if err := n.WaitFuture(ctx, "leadership transfer after restore", func(time.Duration) raft.Future { return n.raft.LeadershipTransfer() }); err != nil {
			n.log.Warn("could not hand leadership over after the restore; the group engine keeps its previous timers", "err", err)
		}
	}
	return idx, nil
}

// checkSnapshotStore refuses to start on a snapshot store raft cannot
// safely start from. Raft trusts a snapshot's metadata (meta.json, which no
// checksum covers): an index near 2^64 wraps its log index and the node
// wedges, and on a checksum mismatch it silently falls back to an older
// snapshot, whose successors the log may no longer hold. So every retained
// snapshot must claim a plausible index and term, a configuration index
// not past its own, its size, and data matching its CRC. dir is the data
// dir's raft directory, for the error.
func checkSnapshotStore(store raft.SnapshotStore, dir string) error {
	list, err := store.List()
	if err != nil {
		return fmt.Errorf("list snapshots in %s: %w", dir, err)
	}
	for _, m := range list {
		if err := checkStoredSnapshot(store, filepath.Join(dir, "snapshots", m.ID), m); err != nil {
			return fmt.Errorf("%w: cohortd neither starts nor recovers on it; if the other nodes are healthy, wipe this node's data dir and join it again, else restore a saved snapshot (docs/operations.md)", err)
		}
	}
	return nil
}

func checkStoredSnapshot(store raft.SnapshotStore, path string, m *raft.SnapshotMeta) error {
	if err := ValidateSnapshotPosition(m.Index, m.Term); err != nil {
		return fmt.Errorf("snapshot %s has forged or damaged metadata: %w", path, err)
	}
	if m.ConfigurationIndex > m.Index {
		return fmt.Errorf("snapshot %s has forged or damaged metadata: configuration index %d is past the snapshot index %d", path, m.ConfigurationIndex, m.Index)
	}
	st, err := os.Stat(filepath.Join(path, "state.bin"))
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if st.Size() != m.Size {
		return fmt.Errorf("snapshot %s is damaged: its metadata says %d bytes, state.bin has %d", path, m.Size, st.Size())
	}
	// Open reads the whole state and compares its CRC-64.
	_, rc, err := store.Open(m.ID)
	if err != nil {
		return fmt.Errorf("snapshot %s is damaged (checksum mismatch between meta.json and state.bin?): %w", path, err)
	}
	return rc.Close()
}
