package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"go.etcd.io/bbolt"
)

// The stores a run can measure (--store).
const (
	// storeBolt is raft-boltdb/v2 opened as raftnode/logstore.go opens it:
	// no freelist sync, the map freelist. Cohort's store today.
	storeBolt = "bolt"
	// storeBoltDefaults is raft-boltdb/v2 with bbolt's default options
	// (the freelist written at every commit, the array freelist): the
	// configuration in which the slowdown after truncation was reported.
	storeBoltDefaults = "bolt-defaults"
	// storeWAL is hashicorp/raft-wal with its default 64 MiB segments, as
	// Consul uses it: the log and the stable store in one directory.
	storeWAL = "wal"
)

var storeNames = []string{storeBolt, storeWAL, storeBoltDefaults}

// clusterSize is the number of nodes, all in this process.
const clusterSize = 3

// raftSettings are what a run changes in raft.Config; everything else is
// raftnode's defaults (raftnode/config.go), so that apply latency is
// Cohort's apart from the store.
type raftSettings struct {
	snapshotInterval  time.Duration
	snapshotThreshold uint64
	trailingLogs      uint64
}

// logStore is what each store kind gives raft: the log and the stable
// store in one object (as raftnode uses its bolt file and Consul its WAL).
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// node is one cluster member and what the sampler reads of it.
type node struct {
	id        raft.ServerID
	raft      *raft.Raft
	logs      logStore
	logDir    string // the store's files, and nothing else
	transport *raft.NetworkTransport
	snapshots atomic.Int64 // snapshots persisted by this node
}

type cluster struct {
	nodes []*node
}

// openStore opens a store of the given kind in dir (created if missing).
func openStore(kind, dir string) (logStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	switch kind {
	case storeBolt:
		// raftnode/logstore.go's options; keep them in step.
		return raftboltdb.New(raftboltdb.Options{
			Path: filepath.Join(dir, "raft.db"),
			BoltOptions: &bbolt.Options{
				Timeout:        time.Second,
				NoFreelistSync: true,
				FreelistType:   bbolt.FreelistMapType,
			},
		})
	case storeBoltDefaults:
		return raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	case storeWAL:
		return wal.Open(dir, wal.WithLogger(hclog.NewNullLogger()))
	}
	return nil, fmt.Errorf("store %q: want one of %v", kind, storeNames)
}

// startCluster starts three nodes on loopback TCP with the given store,
// bootstraps them as one cluster and waits for a leader.
func startCluster(ctx context.Context, dir, kind string, set raftSettings, logOut io.Writer) (c *cluster, err error) {
	c = &cluster{}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	logger := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: logOut})
	if logOut == io.Discard {
		logger = hclog.NewNullLogger()
	}
	var servers []raft.Server
	for i := range clusterSize {
		id := raft.ServerID(fmt.Sprintf("node%d", i+1))
		n := &node{id: id, logDir: filepath.Join(dir, string(id), "log")}
		c.nodes = append(c.nodes, n)
		if n.logs, err = openStore(kind, n.logDir); err != nil {
			return c, fmt.Errorf("%s: open %s store in %s: %w", id, kind, n.logDir, err)
		}
		files, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, string(id)), 2, logger.Named(string(id)))
		if err != nil {
			return c, fmt.Errorf("%s: snapshot store: %w", id, err)
		}
		// raftnode's transport settings: 3 pooled connections per peer, 10 s per RPC.
		n.transport, err = raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, logger.Named(string(id)))
		if err != nil {
			return c, fmt.Errorf("%s: transport: %w", id, err)
		}
		rc := raft.DefaultConfig()
		rc.LocalID = id
		rc.Logger = logger.Named(string(id))
		// raftnode's defaults (raftnode/config.go).
		rc.HeartbeatTimeout = 500 * time.Millisecond
		rc.ElectionTimeout = 500 * time.Millisecond
		rc.LeaderLeaseTimeout = 250 * time.Millisecond
		rc.CommitTimeout = 50 * time.Millisecond
		rc.MaxAppendEntries = 256
		rc.SnapshotInterval = set.snapshotInterval
		rc.SnapshotThreshold = set.snapshotThreshold
		rc.TrailingLogs = set.trailingLogs
		if err := raft.ValidateConfig(rc); err != nil {
			return c, fmt.Errorf("raft config: %w", err)
		}
		// raftnode keeps the newest 512 entries in memory in front of the
		// store (its own cache also bounds their bytes, which for entries of
		// this size never binds), so replication and apply seldom read the
		// store back: the store is measured on the writes raft waits for.
		cached, err := raft.NewLogCache(512, n.logs)
		if err != nil {
			return c, err
		}
		n.raft, err = raft.NewRaft(rc, &fsmAdapter{f: fsm.New()}, cached, n.logs, &countingSnapshots{SnapshotStore: files, n: &n.snapshots}, n.transport)
		if err != nil {
			return c, fmt.Errorf("%s: start raft: %w", id, err)
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: id, Address: n.transport.LocalAddr()})
	}
	for _, n := range c.nodes {
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			return c, fmt.Errorf("%s: bootstrap: %w", n.id, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for c.leader() == nil {
		select {
		case <-wctx.Done():
			return c, fmt.Errorf("no leader elected: %w", wctx.Err())
		case <-time.After(10 * time.Millisecond): // poll until the election ends
		}
	}
	return c, nil
}

// leader is the node that believes it leads, or nil.
func (c *cluster) leader() *node {
	for _, n := range c.nodes {
		if n.raft != nil && n.raft.State() == raft.Leader {
			return n
		}
	}
	return nil
}

func (c *cluster) close() {
	for _, n := range c.nodes {
		if n.raft != nil {
			_ = n.raft.Shutdown().Error()
		}
		if n.transport != nil {
			_ = n.transport.Close()
		}
		if n.logs != nil {
			_ = n.logs.Close()
		}
	}
}

// errNoLeader: no node leads at the moment (an election is under way).
var errNoLeader = errors.New("no leader")

// apply proposes data on the current leader and waits for its FSM to apply
// it, as raftnode.Node.Apply does: raft's own timeout bounds only the
// enqueueing, so the wait is bounded here.
func (c *cluster) apply(ctx context.Context, data []byte) error {
	n := c.leader()
	if n == nil {
		return errNoLeader
	}
	future := n.raft.Apply(data, opTimeout)
	done := make(chan error, 1)
	go func() { done <- future.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return fmt.Errorf("waiting for commit: %w", ctx.Err())
	}
	if res, ok := future.Response().(*fsm.ApplyResult); ok && res.Err != nil {
		return res.Err
	}
	return nil
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			total += info.Size()
		}
		return nil
	})
	return total
}

// fsmAdapter is raftnode's fsmAdapter without its metrics and halting:
// Cohort's FSM applies the entries and writes the snapshots.
type fsmAdapter struct {
	f *fsm.FSM
}

func (a *fsmAdapter) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return a.f.ApplyEntry(l.Index, l.Data)
}

func (a *fsmAdapter) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{s: a.f.Snapshot()}, nil
}

// Restore does not set the FSM's applied index (raftnode does, from the
// snapshot's metadata): nothing in this program reads it.
func (a *fsmAdapter) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return a.f.Restore(rc)
}

type fsmSnapshot struct{ s *fsm.Snapshot }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot %s: %w", sink.ID(), err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// countingSnapshots counts the snapshots persisted: raft truncates the log
// after each.
type countingSnapshots struct {
	raft.SnapshotStore
	n *atomic.Int64
}

func (s *countingSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &countingSink{SnapshotSink: sink, n: s.n}, nil
}

// countingSink counts its snapshot once: Persist closes the sink, as
// raft's FSMSnapshot contract asks, and raft closes it again after Persist
// (the file store's second Close does nothing).
type countingSink struct {
	raft.SnapshotSink
	n       *atomic.Int64
	counted bool
}

func (s *countingSink) Close() error {
	err := s.SnapshotSink.Close()
	if err == nil && !s.counted {
		s.counted = true
		s.n.Add(1)
	}
	return err
}
