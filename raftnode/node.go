package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/hashicorp/raft"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotLeader: this node is not the leader, so the command was not
	// proposed. It is safe to send it to the leader.
	ErrNotLeader = errors.New("not the raft leader")
	// ErrLeadershipLost: the node lost leadership after proposing the
	// command and before it was committed. The outcome is UNKNOWN: the
	// entry may still be committed by the next leader. Every Cohort command
	// is safe to retry (DESIGN §4), so callers retry on the new leader.
	ErrLeadershipLost = errors.New("leadership lost while applying: outcome unknown")
	// ErrShutdown: the node is shutting down or has shut down.
	ErrShutdown = errors.New("raft node is shut down")
	// ErrInvalidSnapshot: a snapshot offered for restore does not decode
	// or is larger than MaxSnapshotSize; nothing changed.
	ErrInvalidSnapshot = errors.New("invalid snapshot")
)

// Bolt open timeout: a second cohortd on the same data dir fails at once
// with a clear error instead of waiting forever on bolt's file lock.
const boltOpenTimeout = time.Second

// Node is one Raft replica of the Cohort FSM.
type Node struct {
	cfg     Config
	id      string
	log     *slog.Logger
	fsm     *fsm.FSM
	adapter *fsmAdapter
	metrics *metrics

	raft      *raft.Raft
	transport *commitObservingTransport
	// rules is the command rules proposals are stamped with (rules.go);
	// rulesMu orders its refreshes, so the last computed is the one kept.
	rules   atomic.Uint32
	rulesMu sync.Mutex
	halter  *halter
	// testVerifyStarted, set by tests only, runs once each round of
	// VerifyLeader has handed its check to raft.
	testVerifyStarted func()
	stream            *streamLayer
	store             logStore
	logStoreKind      string // LogStoreBolt or LogStoreWAL
	logCache          *byteLogCache

	// What Fault reports (health.go): recorded write failures and the
	// leader's commit index as the AppendEntries requests carry it.
	faults       faults
	leaderCommit leaderCommit
	// Bytes and entries appended to the log since the last snapshot, and
	// the signal that a size-triggered snapshot is due (health.go).
	logBytes, logEntries atomic.Int64
	snapshotDue          chan struct{}

	// hadState records raft.HasExistingState at open: a node with state
	// never bootstraps again.
	hadState bool

	notifyCh chan bool
	subsMu   sync.Mutex
	subs     map[*LeadershipSubscription]struct{}
	isLeader bool // last value seen on notifyCh, under subsMu

	// bg is cancelled by Shutdown; it bounds the leadership fan-out.
	bg     context.Context
	stopBG context.CancelFunc
	bgWG   sync.WaitGroup
	// raftStopped is closed once raft has shut down.
	raftStopped chan struct{}

	shutdownOnce sync.Once
	shutdownErr  error

	now func() time.Time
}

// New opens (or creates) the node's data dir and starts Raft with f as its
// state machine. f must be fresh (fsm.New()): Raft restores it from the
// latest snapshot and replays the log. A node without Raft state waits for
// a configuration: BootstrapCluster, or a leader that adds it (the cluster
// package does both).
func New(cfg Config, f *fsm.FSM) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("raftnode config: %w", err)
	}
	if f == nil {
		return nil, errors.New("raftnode: nil FSM")
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "raft"), 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	id, err := loadOrCreateNodeID(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	cfg.NodeID = id
	if cfg.TLS != nil {
		// Validate could not check the name against a generated ID.
		if err := checkOwnCertificate(cfg.TLS, id); err != nil {
			return nil, fmt.Errorf("raftnode config: %w", err)
		}
	}
	n := &Node{
		cfg:      cfg,
		id:       id,
		log:      cfg.Logger.With("node_id", id),
		fsm:      f,
		metrics:  newMetrics(),
		notifyCh: make(chan bool, 16),
		subs:     map[*LeadershipSubscription]struct{}{},
		now:      time.Now,

		raftStopped: make(chan struct{}),
		snapshotDue: make(chan struct{}, 1),
	}
	n.faults.append = writeFault{what: "raft log append", sentinel: ErrLogWriteFailing}
	n.faults.delete = writeFault{what: "raft log delete", sentinel: ErrLogWriteFailing}
	n.faults.snapshot = writeFault{what: "raft snapshot", sentinel: ErrSnapshotFailing}
	// bg exists before open: the log store's wrappers signal into it.
	n.bg, n.stopBG = context.WithCancel(context.Background())
	n.halter = &halter{onHalt: cfg.OnHalt, stop: n.bg.Done()}
	n.rules.Store(1) // until the configuration and registry are read
	if err := n.open(); err != nil {
		n.stopBG()
		n.closeResources()
		return nil, err
	}
	n.bgWG.Add(3)
	go n.fanOutLeadership()
	go n.runSnapshots()
	go n.runRules()
	return n, nil
}

func (n *Node) open() error {
	cfg := n.cfg
	hlog := newHCLogAdapter(cfg.Logger.With("node_id", n.id), "raft")

	store, kind, err := openStore(cfg.DataDir, cfg.LogStore, hlog.Named("wal"))
	if err != nil {
		return err
	}
	n.store, n.logStoreKind = store, kind

	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.DataDir, "raft"), 2, hlog.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("open snapshot store in %s: %w", cfg.DataDir, err)
	}
	if err := checkSnapshotStore(fileSnaps, filepath.Join(cfg.DataDir, "raft")); err != nil {
		return err
	}
	snaps := &trackingSnapshotStore{SnapshotStore: &faultSnapshotStore{SnapshotStore: fileSnaps, n: n}}

	var advertise net.Addr
	if cfg.RaftAdvertise != "" {
		advertise, err = net.ResolveTCPAddr("tcp", cfg.RaftAdvertise)
		if err != nil {
			return fmt.Errorf("resolve raft advertise address %q: %w", cfg.RaftAdvertise, err)
		}
	}
	var stream *streamLayer
	if cfg.TLS != nil {
		stream, err = newTLSStreamLayer(cfg.RaftBind, advertise, cfg.MaxConns, cfg.IdleTimeout, n.log, cfg.TLS, cfg.RaftHandshakeTimeout)
		if err == nil && cfg.TLSPermissive {
			stream.permissive = true
			n.log.Warn("raft transport in TLS permissive mode: plaintext peers are accepted and dialled unauthenticated (migration only)")
		}
	} else {
		stream, err = newStreamLayer(cfg.RaftBind, advertise, cfg.MaxConns, cfg.IdleTimeout, n.log)
	}
	if err != nil {
		return fmt.Errorf("listen for raft on %s: %w", cfg.RaftBind, err)
	}
	tcp := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		Logger:  hlog.Named("transport"),
		MaxPool: DefaultTransportMaxPool,
		Timeout: DefaultTransportTimeout,
	})
	transport := newCommitObservingTransport(tcp, &n.leaderCommit)
	n.transport, n.stream = transport, stream
	n.cfg.RaftAdvertise = string(transport.LocalAddr())

	n.hadState, err = raft.HasExistingState(store, store, snaps)
	if err != nil {
		return fmt.Errorf("check raft state in %s: %w", cfg.DataDir, err)
	}

	n.adapter = &fsmAdapter{f: n.fsm, snaps: snaps, metrics: n.metrics, halter: n.halter}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.NotifyCh = n.notifyCh
	rc.Logger = hlog
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("raft config: %w", err)
	}
	// Raft writes the log through: the byte-bounded cache (logcache.go),
	// fault tracking and byte counting (health.go), the test hook, bolt.
	var logs raft.LogStore = store
	if cfg.WrapLogStore != nil {
		logs = cfg.WrapLogStore(store)
	}
	n.logCache = newByteLogCache(&faultLogStore{LogStore: logs, n: n}, logCacheEntries, cfg.LogCacheBytes)
	r, err := raft.NewRaft(rc, n.adapter, n.logCache, store, snaps, transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	n.adapter.running.Store(true)
	// Until now TLS peers were refused: there was no configuration to
	// check them against.
	stream.setConfigSource(func() (raft.Configuration, error) {
		f := r.GetConfiguration() // reads the latest configuration; never waits on raft's loop
		if err := f.Error(); err != nil {
			return raft.Configuration{}, err
		}
		return f.Configuration(), nil
	})
	n.log.Info("raft started", "raft_address", n.cfg.RaftAdvertise, "raft_tls", cfg.TLS != nil, "data_dir", cfg.DataDir, "log_store", kind,
		"existing_state", n.hadState, "last_index", r.LastIndex())
	return nil
}

// closeResources releases what open acquired; used on a failed New.
func (n *Node) closeResources() {
	if n.raft != nil {
		_ = n.raft.Shutdown().Error()
	}
	if n.transport != nil {
		_ = n.transport.Close()
	}
	if n.store != nil {
		_ = n.store.Close()
	}
}

// LogStore is the kind of log store the node runs on: LogStoreBolt or
// LogStoreWAL.
func (n *Node) LogStore() string { return n.logStoreKind }

// ID is the node's Raft server ID.
func (n *Node) ID() string { return n.id }

// RaftAddress is the address other nodes reach this node's Raft transport on.
func (n *Node) RaftAddress() string { return n.cfg.RaftAdvertise }

// Config is the node's configuration as it runs (RaftAdvertise resolved
// to the transport's address, NodeID to the stored one).
func (n *Node) Config() Config { return n.cfg }

// Raft is the underlying hashicorp/raft instance, for the cluster package's
// membership changes and bootstrap. Commands go through Apply, never
// through it.
func (n *Node) Raft() *raft.Raft { return n.raft }

// FSM is the node's state machine. Read it freely; change it only through Apply.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// HadExistingState reports whether the node had Raft state when it opened
// its data dir (and so did not bootstrap).
func (n *Node) HadExistingState() bool { return n.hadState }

// Collector returns the node's Prometheus collector.
func (n *Node) Collector() *Collector { return newCollector(n) }

// Apply proposes cmd through Raft and returns the FSM's result once the
// entry is committed and applied on this node. It sets cmd.TimestampMs to
// the leader's wall clock when it is 0, and cmd.Version, when 0, to the
// command rules every server applies (CommandRules; it modifies cmd).
//
// Errors: ErrNotLeader (not proposed; send it to the leader),
// ErrLeadershipLost (outcome unknown; retry on the new leader), ErrShutdown,
// or the context's error (outcome unknown if the entry was already
// proposed). A command the FSM refused is not an error here: it is the
// result's Err.
func (n *Node) Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	start := time.Now()
	if cmd.GetTimestampMs() == 0 {
		cmd.TimestampMs = start.UnixMilli()
	}
	if cmd.GetVersion() == 0 {
		cmd.Version = n.rules.Load()
	}
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("apply %T: %w", cmd.GetKind(), err)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("apply %T: %w", cmd.GetKind(), context.DeadlineExceeded)
	}

	// raft's timeout only bounds enqueueing; waiting for the commit is
	// bounded by ctx (or ApplyTimeout) here.
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	proposed := time.Now()
	future := n.raft.Apply(data, timeout)
	errCh := make(chan error, 1)
	go func() { errCh <- future.Error() }()
	select {
	case err = <-errCh:
	case <-wctx.Done():
		n.metrics.applyErrors.WithLabelValues("timeout").Inc()
		return nil, fmt.Errorf("apply %T: waiting for commit: %w (outcome unknown)", cmd.GetKind(), wctx.Err())
	}
	if err != nil {
		return nil, n.applyError(cmd, err)
	}
	n.metrics.commitLatency.Observe(time.Since(proposed).Seconds())
	res, ok := future.Response().(*fsm.ApplyResult)
	if !ok {
		return nil, fmt.Errorf("apply %T: unexpected FSM response %T", cmd.GetKind(), future.Response())
	}
	n.metrics.applyLatency.Observe(time.Since(start).Seconds())
	if _, ok := cmd.GetKind().(*fsmv1.Command_RegisterNode); ok && res.Err == nil {
		// A server stated the rules it applies: the ones to write under
		// may rise now rather than at the next refresh.
		n.refreshRules()
	}
	return res, nil
}

func (n *Node) applyError(cmd *fsmv1.Command, err error) error {
	var reason string
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		reason = "not_leader"
		_, id := n.raft.LeaderWithID()
		err = fmt.Errorf("apply %T: %w (leader %q)", cmd.GetKind(), ErrNotLeader, id)
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before it entered the log: as safe as not-leader.
		reason = "not_leader"
		err = fmt.Errorf("apply %T: %w (leadership transfer in progress)", cmd.GetKind(), ErrNotLeader)
	case errors.Is(err, raft.ErrLeadershipLost):
		reason = "leadership_lost"
		err = fmt.Errorf("apply %T: %w", cmd.GetKind(), ErrLeadershipLost)
	case errors.Is(err, raft.ErrRaftShutdown):
		reason = "shutdown"
		err = fmt.Errorf("apply %T: %w", cmd.GetKind(), ErrShutdown)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		reason = "timeout"
		err = fmt.Errorf("apply %T: %w: %w", cmd.GetKind(), context.DeadlineExceeded, err)
	default:
		reason = "other"
		err = fmt.Errorf("apply %T: %w", cmd.GetKind(), err)
	}
	n.metrics.applyErrors.WithLabelValues(reason).Inc()
	return err
}

// IsLeader reports whether this node is the Raft leader right now (without
// checking with a quorum: use VerifyLeader for that).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's server ID and Raft address, or empty
// strings when no leader is known.
func (n *Node) Leader() (id, raftAddr string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// State is the node's Raft state.
func (n *Node) State() raft.RaftState { return n.raft.State() }

// Term is the current Raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// LastIndex is the index of the last entry in the node's log (or snapshot).
func (n *Node) LastIndex() uint64 { return n.raft.LastIndex() }

// CommitIndex is the highest index this node knows to be committed.
func (n *Node) CommitIndex() uint64 { return n.raft.CommitIndex() }

// AppliedIndex is the highest index Raft has handed to the FSM. It
// includes entries the FSM never sees (no-ops, barriers, configuration
// changes), so it is the index to compare with CommitIndex; the FSM's own
// fsm.AppliedIndex counts only commands and restores.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// Configuration returns the latest Raft configuration (possibly not yet
// committed).
func (n *Node) Configuration() (raft.Configuration, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, fmt.Errorf("get raft configuration: %w", err)
	}
	return f.Configuration(), nil
}

// LeaderConfiguration returns the Raft configuration when this node leads,
// ErrNotLeader (naming the leader it knows) otherwise: what a change of the
// configuration starts from.
func (n *Node) LeaderConfiguration() (raft.Configuration, error) {
	if n.raft.State() != raft.Leader {
		id, _ := n.Leader()
		return raft.Configuration{}, fmt.Errorf("%w (leader %q)", ErrNotLeader, id)
	}
	return n.Configuration()
}

// HasConfiguration reports whether raft holds any configuration, i.e. this
// node is part of a cluster (it bootstrapped, or a leader contacted it).
func (n *Node) HasConfiguration() bool {
	c, err := n.Configuration()
	return err == nil && len(c.Servers) > 0
}

// LastContact is when this node last heard from a leader (zero if never;
// a leader's own is recent).
func (n *Node) LastContact() time.Time { return n.raft.LastContact() }

func (n *Node) voterCount() int {
	c, err := n.Configuration()
	if err != nil {
		return 0
	}
	v := 0
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

// Stats is a point-in-time summary of the node.
type Stats struct {
	ID           string
	State        raft.RaftState
	Term         uint64
	LeaderID     string
	LastIndex    uint64
	CommitIndex  uint64
	AppliedIndex uint64
	FSMApplied   uint64
	Restores     uint64
	LastSnapshot uint64
	FSM          fsm.Stats
	Raw          map[string]string // raft.Stats()
	HadState     bool
}

// Stats returns a summary of the node's Raft replica and FSM.
func (n *Node) Stats() Stats {
	raw := n.raft.Stats()
	leader, _ := n.Leader()
	s := Stats{
		ID: n.id, State: n.raft.State(), Term: n.raft.CurrentTerm(), LeaderID: leader,
		LastIndex: n.raft.LastIndex(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.raft.AppliedIndex(),
		FSMApplied: n.fsm.AppliedIndex(), Restores: n.adapter.restores.Load(), FSM: n.fsm.Stats(), Raw: raw,
		HadState: n.hadState,
	}
	fmt.Sscan(raw["last_snapshot_index"], &s.LastSnapshot)
	return s
}

// Ready reports whether the node can serve: a leader is known, the node
// is fit to serve (Fault: its log and snapshot writes succeed, and as a
// follower it is close behind the leader and in contact with it), and it
// has applied everything it knows to be committed. reason says why not.
func (n *Node) Ready() (ok bool, reason string) {
	if n.raft.State() == raft.Shutdown {
		return false, "raft is shut down"
	}
	leader, _ := n.Leader()
	if leader == "" {
		return false, "no known raft leader"
	}
	if err := n.Fault(); err != nil {
		return false, err.Error()
	}
	commit := n.raft.CommitIndex()
	if applied := n.raft.AppliedIndex(); applied < commit {
		return false, fmt.Sprintf("applied index %d behind commit index %d", applied, commit)
	}
	return true, ""
}

// Barrier waits until every entry proposed before it is applied to this
// node's FSM. Only the leader can issue it; a new leader calls it before
// serving reads.
func (n *Node) Barrier(ctx context.Context) error {
	return n.WaitFuture(ctx, "barrier", func(timeout time.Duration) raft.Future { return n.raft.Barrier(timeout) })
}

// Snapshot asks raft to take a snapshot now (and compact the log).
func (n *Node) Snapshot(ctx context.Context) error {
	err := n.WaitFuture(ctx, "snapshot", func(time.Duration) raft.Future { return n.raft.Snapshot() })
	if errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil
	}
	return err
}

// WaitFuture starts a raft operation and waits for it, bounded by ctx (or
// ApplyTimeout when ctx has no deadline); start gets the time left, for
// the raft calls that take a timeout. Raft's errors come back as this
// package's: ErrNotLeader (also for a leadership transfer in progress:
// nothing was done), ErrLeadershipLost, ErrShutdown.
func (n *Node) WaitFuture(ctx context.Context, what string, start func(timeout time.Duration) raft.Future) error {
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return fmt.Errorf("%s: %w", what, context.DeadlineExceeded)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f := start(timeout)
	errCh := make(chan error, 1)
	go func() { errCh <- f.Error() }()
	select {
	case err := <-errCh:
		switch {
		case err == nil:
			return nil
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return fmt.Errorf("%s: %w: %w", what, ErrNotLeader, err)
		case errors.Is(err, raft.ErrLeadershipLost):
			return fmt.Errorf("%s: %w", what, ErrLeadershipLost)
		case errors.Is(err, raft.ErrRaftShutdown):
			return fmt.Errorf("%s: %w", what, ErrShutdown)
		default:
			return fmt.Errorf("%s: %w", what, err)
		}
	case <-wctx.Done():
		return fmt.Errorf("%s: %w", what, wctx.Err())
	}
}

// Shutdown stops the node: background work first, then, if it leads a
// cluster with other voters, it hands leadership over (bounded by ctx) so
// that the cluster does not wait an election timeout, then raft, the
// transport and the log store. It is idempotent.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(ctx, true) })
	return n.shutdownErr
}

// kill stops the node like a crash would, as far as the cluster can tell:
// no leadership transfer. Tests use it to exercise failover.
func (n *Node) kill() error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(context.Background(), false) })
	return n.shutdownErr
}

// inboundDrainTimeout bounds the wait for raft's connection handlers at
// shutdown.
const inboundDrainTimeout = 5 * time.Second

// raftShutdownTimeout bounds the wait for raft's own goroutines at
// shutdown.
const raftShutdownTimeout = 30 * time.Second

func (n *Node) shutdown(ctx context.Context, transfer bool) error {
	n.stopBG()
	var errs []error
	if transfer && n.raft.State() == raft.Leader && n.voterCount() > 1 {
		n.log.Info("transferring leadership before shutdown")
		if err := n.WaitFuture(ctx, "leadership transfer", func(time.Duration) raft.Future { return n.raft.LeadershipTransfer() }); err != nil {
			// Not fatal: the others elect a leader after an election timeout.
			n.log.Warn("leadership transfer before shutdown failed", "err", err)
		} else {
			// The transfer ends when this node steps down, before the new
			// leader's first heartbeat names it here: wait a little for
			// that, so that the log says who leads now.
			id, _ := n.Leader()
			for wait := time.Now().Add(time.Second); id == "" && time.Now().Before(wait) && ctx.Err() == nil; id, _ = n.Leader() {
				time.Sleep(10 * time.Millisecond) // time passes: polling raft's view of the leader
			}
			n.log.Info("leadership transferred", "new_leader", id)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- n.raft.Shutdown().Error() }()
	select {
	case err := <-stopped:
		if err != nil {
			errs = append(errs, fmt.Errorf("shut down raft: %w", err))
		}
	case <-time.After(raftShutdownTimeout):
		// A raft goroutine is stuck (a log write that never returns, say).
		// Closing the log store beneath it could corrupt what it writes;
		// leave the store open and say so rather than wait for ever.
		stacks := make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		n.log.Error("raft did not shut down; its log store is left open", "waited", raftShutdownTimeout, "goroutines", string(stacks))
		return fmt.Errorf("shut down raft: not done after %v; the log store is left open", raftShutdownTimeout)
	}
	close(n.raftStopped)
	n.bgWG.Wait()
	if err := n.transport.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close raft transport: %w", err))
	}
	// No RPC handler may touch the store once it is closed.
	if err := n.stream.drainInbound(inboundDrainTimeout); err != nil {
		errs = append(errs, err)
	}
	if err := n.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close raft log store: %w", err))
	}
	n.closeSubscriptions()
	n.log.Info("raft node shut down")
	return errors.Join(errs...)
}
