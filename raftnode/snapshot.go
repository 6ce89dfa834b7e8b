package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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

// RestoreSnapshot replaces the whole replicated state with the snapshot in
// f (size bytes of the FSM's encoding) on every node. The data is fully
// decoded and checked first: a corrupted or foreign snapshot is refused
// (ErrInvalidSnapshot) and nothing changes. Afterwards the node registry
// entries of the current servers are written again (the snapshot carries
// the registry of the cluster it came from), and leadership is handed to
// another voter when there is one, so that the new leader's group engine
// starts from the restored state (fresh session deadlines for every member).
func (n *Node) RestoreSnapshot(ctx context.Context, f *os.File, size int64, index, term uint64) (uint64, error) {
	c, err := n.LeaderConfiguration()
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	st, err := fsm.ReadSnapshot(io.LimitReader(f, size))
	if err != nil {
		return 0, fmt.Errorf("%w: refusing it, nothing changed: %v", ErrInvalidSnapshot, err)
	}
	_ = st
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	registry := map[string]fsm.Node{}
	for _, node := range n.fsm.Nodes() {
		registry[node.ID] = node
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: index, Term: term, Size: size}
	timeout := restoreTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := n.raft.Restore(meta, f, timeout); err != nil {
		return 0, fmt.Errorf("restore snapshot through raft: %w", err)
	}
	n.log.Warn("restored the replicated state from a snapshot", "snapshot_index", index, "snapshot_term", term, "bytes", size)
	for _, s := range c.Servers {
		node, ok := registry[string(s.ID)]
		if !ok {
			continue
		}
		_, err := n.Apply(ctx, &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
			NodeId: node.ID, GrpcAddress: node.GRPCAddress, RaftAddress: node.RaftAddress,
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
