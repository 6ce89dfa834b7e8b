package raftnode

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/hashicorp/raft"
)

// RecoverAsSingleNode rewrites the Raft configuration in a stopped node's
// data dir so that the node is the cluster's only voter, at raftAddr. It is
// the way out of a lost quorum (the other voters are gone for good): start
// the node afterwards and it elects itself with every entry it has, then
// grow the cluster again with fresh nodes that --join. Entries that only the
// lost nodes had are lost. It fails when another process holds the data dir.
func RecoverAsSingleNode(dataDir, raftAddr string, log *slog.Logger) (nodeID string, err error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b, err := os.ReadFile(filepath.Join(dataDir, nodeIDFile))
	if err != nil {
		return "", fmt.Errorf("read the node ID in %s (is it a cohortd data dir?): %w", dataDir, err)
	}
	nodeID = strings.TrimSpace(string(b))
	if err := ValidateAdvertise("raft address", raftAddr); err != nil {
		return "", err
	}
	kind, err := DataDirLogStore(dataDir)
	if err != nil {
		return "", err
	}
	if kind == "" {
		return "", fmt.Errorf("no raft state in %s: neither raft/raft.db nor raft/wal/ exists", dataDir)
	}
	hlog := newHCLogAdapter(log, "raft")
	store, _, err := openStore(dataDir, kind, hlog.Named("wal"))
	if err != nil {
		return "", fmt.Errorf("%w (stop cohortd first)", err)
	}
	defer store.Close()
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dataDir, "raft"), 2, hlog.Named("snapshots"))
	if err != nil {
		return "", fmt.Errorf("open snapshot store in %s: %w", dataDir, err)
	}
	if err := checkSnapshotStore(fileSnaps, filepath.Join(dataDir, "raft")); err != nil {
		return "", err
	}
	snaps := &trackingSnapshotStore{SnapshotStore: fileSnaps}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(raftAddr))
	defer trans.Close()
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(nodeID)
	rc.Logger = hlog
	// An entry this binary cannot apply fails the recovery (the halter
	// does not wait: the snapshot recovery takes is then refused).
	stopped := make(chan struct{})
	close(stopped)
	adapter := &fsmAdapter{f: fsm.New(), snaps: snaps, metrics: newMetrics(), halter: &halter{stop: stopped}}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(nodeID), Address: raft.ServerAddress(raftAddr)}}}
	if err := raft.RecoverCluster(rc, adapter, store, store, snaps, trans, conf); err != nil {
		return "", fmt.Errorf("recover the raft configuration in %s: %w", dataDir, err)
	}
	return nodeID, nil
}
