package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Whether a node is fit to serve is more than "a leader is known": a
// follower whose disk is full keeps answering heartbeats (they write
// nothing), so raft still names a leader and its last contact stays fresh,
// while every AppendEntries with entries fails and its state falls
// further behind. Node.Fault says why the node is unfit; Ready, the
// cluster's Health and the forwarding of stale reads all ask it.
//
// What it watches:
//   - log store writes: faultLogStore records the error of a failed append
//     or delete, and a later successful one of the same kind clears it;
//   - snapshots: faultSnapshotStore records a failed create, write or close
//     of a snapshot (taken here or installed from the leader), and the next
//     complete snapshot clears it;
//   - lag: a follower compares its applied index with the leader's commit
//     index, which it learns from the AppendEntries requests themselves
//     (commitObservingTransport): raft's own commit index on a follower
//     never passes its last stored entry, so it cannot show the gap;
//   - contact: a follower that has not heard from a leader for
//     ReadyMaxLastContact is cut off, whether or not raft noticed yet.
//
// The same wrappers count the bytes appended to the log since the last
// snapshot, and start a snapshot when they pass SnapshotLogBytes.

// Faults; test with errors.Is on what Node.Fault returns.
var (
	ErrLogWriteFailing = errors.New("raft log store writes are failing")
	ErrSnapshotFailing = errors.New("raft snapshots are failing")
	ErrLagging         = errors.New("behind the leader's commit index")
	ErrNoLeaderContact = errors.New("no recent contact with a raft leader")
)

// FaultError lists every reason a node is unfit to serve.
type FaultError struct{ Faults []error }

func (e *FaultError) Error() string {
	parts := make([]string, len(e.Faults))
	for i, f := range e.Faults {
		parts[i] = f.Error()
	}
	return strings.Join(parts, "; ")
}

func (e *FaultError) Unwrap() []error { return e.Faults }

// Fault returns why the node is not fit to serve (a *FaultError naming
// every reason, each matching one of ErrLogWriteFailing,
// ErrSnapshotFailing, ErrLagging, ErrNoLeaderContact, or ErrShutdown), or
// nil when it is.
func (n *Node) Fault() error {
	state := n.raft.State()
	if state == raft.Shutdown {
		return &FaultError{[]error{ErrShutdown}}
	}
	var faults []error
	if err := n.halter.halted(); err != nil {
		faults = append(faults, err)
	}
	for _, w := range []*writeFault{&n.faults.append, &n.faults.delete, &n.faults.snapshot} {
		if err := w.err(); err != nil {
			faults = append(faults, err)
		}
	}
	if state != raft.Leader {
		if err := contactFault(n.raft.LastContact(), n.now(), n.cfg.ReadyMaxLastContact); err != nil {
			faults = append(faults, err)
		}
		term, commit := n.leaderCommit.load()
		if term == n.raft.CurrentTerm() {
			if err := lagFault(commit, n.raft.AppliedIndex(), n.cfg.ReadyMaxLag); err != nil {
				faults = append(faults, err)
			}
		}
	}
	if len(faults) == 0 {
		return nil
	}
	return &FaultError{faults}
}

// contactFault: the last contact with a leader (zero if never) is older
// than limit.
func contactFault(last, now time.Time, limit time.Duration) error {
	if last.IsZero() {
		return fmt.Errorf("%w: has not heard from a leader since it started", ErrNoLeaderContact)
	}
	if ago := now.Sub(last); ago > limit {
		return fmt.Errorf("%w: last heard from the leader %s ago (limit --ready-max-last-contact %s)", ErrNoLeaderContact, ago.Round(time.Millisecond), limit)
	}
	return nil
}

// lagFault: applied trails the leader's commit index by more than limit.
func lagFault(leaderCommit, applied, limit uint64) error {
	if leaderCommit <= applied || leaderCommit-applied <= limit {
		return nil
	}
	return fmt.Errorf("%w: applied index %d is %d entries behind the leader's commit index %d (limit --ready-max-lag %d)",
		ErrLagging, applied, leaderCommit-applied, leaderCommit, limit)
}

// faults are the node's recorded write failures.
type faults struct {
	append, delete, snapshot writeFault
}

// writeFault is the latest failure of one kind of write, until a write of
// that kind succeeds.
type writeFault struct {
	what     string
	sentinel error

	mu       sync.Mutex
	last     error
	since    time.Time
	failures uint64
}

// fail records err; it reports whether the writes were fine until now.
func (w *writeFault) fail(err error, now time.Time) (first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	first = w.last == nil
	if first {
		w.since, w.failures = now, 0
	}
	w.last = err
	w.failures++
	return first
}

// ok clears the failure; it reports whether there was one, and for how long.
func (w *writeFault) ok(now time.Time) (cleared bool, lasted time.Duration, failures uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		return false, 0, 0
	}
	cleared, lasted, failures = true, now.Sub(w.since), w.failures
	w.last = nil
	return cleared, lasted, failures
}

func (w *writeFault) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		return nil
	}
	return fmt.Errorf("%w: %s failed %d times since %s, last: %w",
		w.sentinel, w.what, w.failures, w.since.UTC().Format(time.RFC3339), w.last)
}

// recordWrite records the outcome of a write of kind w, logging the
// first failure and the recovery (one line each, not one per retry).
func (n *Node) recordWrite(w *writeFault, err error) {
	now := n.now()
	if err != nil {
		n.metrics.writeErrors.WithLabelValues(w.what).Inc()
		if w.fail(err, now) {
			n.log.Error("node is unfit to serve: "+w.what+" failed", "err", err)
		}
		return
	}
	if cleared, lasted, failures := w.ok(now); cleared {
		n.log.Info(w.what+" succeeded again", "failed_for", lasted.Round(time.Millisecond), "failures", failures)
	}
}

// faultLogStore sits on the log store: it records write failures and
// counts the bytes appended since the last snapshot.
type faultLogStore struct {
	raft.LogStore
	n *Node
}

var _ raft.MonotonicLogStore = (*faultLogStore)(nil)

func (s *faultLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *faultLogStore) StoreLogs(logs []*raft.Log) error {
	err := s.LogStore.StoreLogs(logs)
	s.n.recordWrite(&s.n.faults.append, err)
	if err != nil {
		return err
	}
	var size int64
	for _, l := range logs {
		size += logSize(l)
	}
	s.n.logWritten(size, int64(len(logs)))
	return nil
}

func (s *faultLogStore) DeleteRange(lo, hi uint64) error {
	err := s.LogStore.DeleteRange(lo, hi)
	s.n.recordWrite(&s.n.faults.delete, err)
	return err
}

func (s *faultLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }

// faultSnapshotStore sits on the snapshot store: it records snapshots
// that fail, and restarts the log byte count when one completes.
type faultSnapshotStore struct {
	raft.SnapshotStore
	n *Node
}

func (s *faultSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	bytes, entries := s.n.logBytes.Load(), s.n.logEntries.Load()
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		s.n.recordWrite(&s.n.faults.snapshot, err)
		return nil, err
	}
	return &faultSnapshotSink{SnapshotSink: sink, n: s.n, bytesAtStart: bytes, entriesAtStart: entries}, nil
}

type faultSnapshotSink struct {
	raft.SnapshotSink
	n                            *Node
	bytesAtStart, entriesAtStart int64
}

func (s *faultSnapshotSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	if err != nil {
		s.n.recordWrite(&s.n.faults.snapshot, err)
	}
	return n, err
}

func (s *faultSnapshotSink) Close() error {
	err := s.SnapshotSink.Close()
	s.n.recordWrite(&s.n.faults.snapshot, err)
	if err == nil {
		// What was appended while the snapshot was written stays counted.
		s.n.logBytes.Add(-s.bytesAtStart)
		s.n.logEntries.Add(-s.entriesAtStart)
	}
	return err
}

// leaderCommit is the highest commit index a leader sent in the newest
// term seen.
type leaderCommit struct {
	mu           sync.Mutex
	term, commit uint64
}

func (c *leaderCommit) observe(term, commit uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case term > c.term:
		c.term, c.commit = term, commit
	case term == c.term && commit > c.commit:
		c.commit = commit
	}
}

func (c *leaderCommit) load() (term, commit uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term, c.commit
}

// commitObservingTransport is the TCP transport with its RPCs relayed to
// raft through one goroutine that notes the leader's commit index of
// every AppendEntries request. Heartbeats (which carry no commit index)
// keep the transport's fast path.
type commitObservingTransport struct {
	*raft.NetworkTransport
	consumer chan raft.RPC
	seen     *leaderCommit
	acks     *leaderAcks
	// testAppend, set by tests only, runs each AppendEntries (pipelined
	// or not) in place of sending it directly: send sends it.
	testAppend atomic.Pointer[func(id raft.ServerID, pipelined bool, send func() error) error]
	stop       chan struct{}
	stopOnce   sync.Once
	done       chan struct{}
}

func newCommitObservingTransport(t *raft.NetworkTransport, seen *leaderCommit) *commitObservingTransport {
	c := &commitObservingTransport{NetworkTransport: t, consumer: make(chan raft.RPC), seen: seen,
		acks: newLeaderAcks(), stop: make(chan struct{}), done: make(chan struct{})}
	go c.relay()
	return c
}

func (c *commitObservingTransport) Consumer() <-chan raft.RPC { return c.consumer }

func (c *commitObservingTransport) relay() {
	defer close(c.done)
	in := c.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && req.LeaderCommitIndex > 0 {
				c.seen.observe(req.Term, req.LeaderCommitIndex)
			}
			select {
			case c.consumer <- rpc:
			case <-c.stop:
				return
			}
		case <-c.stop:
			return
		}
	}
}

// Close stops the relay, then the transport.
func (c *commitObservingTransport) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
	return c.NetworkTransport.Close()
}

// Size-triggered snapshots.

// sizeSnapshotPause is the least time between two snapshots started by
// the log's size, so that a node that cannot snapshot (nothing applied
// yet, a failing disk) does not retry on every append.
const sizeSnapshotPause = time.Second

// sizeSnapshotTimeout bounds one size-triggered snapshot.
const sizeSnapshotTimeout = time.Minute

// logWritten counts appended bytes and starts a snapshot once they pass
// SnapshotLogBytes. It runs on raft's goroutines, so it only signals.
func (n *Node) logWritten(bytes, entries int64) {
	n.logEntries.Add(entries)
	if n.logBytes.Add(bytes) >= n.cfg.SnapshotLogBytes {
		select {
		case n.snapshotDue <- struct{}{}:
		default:
		}
	}
}

// snapshotRetryInterval is how often a node whose last snapshot failed
// tries again: raft itself would wait for SnapshotThreshold new entries,
// which an idle cluster never writes, and the node would stay unfit.
const snapshotRetryInterval = 10 * time.Second

// runSnapshots takes the snapshots logWritten asks for, and retries a
// failed one, until the node shuts down.
func (n *Node) runSnapshots() {
	defer n.bgWG.Done()
	retry := time.NewTicker(snapshotRetryInterval)
	defer retry.Stop()
	for {
		select {
		case <-n.bg.Done():
			return
		case <-retry.C:
			if n.faults.snapshot.err() != nil {
				n.retrySnapshot()
			}
			continue
		case <-n.snapshotDue:
		}
		if n.logBytes.Load() >= n.cfg.SnapshotLogBytes {
			n.sizeSnapshot()
		}
		select {
		case <-n.bg.Done():
			return
		case <-time.After(sizeSnapshotPause):
		}
	}
}

// retrySnapshot takes a snapshot after a failed one. When raft finds
// nothing new to snapshot, the last complete snapshot already covers the
// whole state, so the failure no longer matters.
func (n *Node) retrySnapshot() {
	ctx, cancel := context.WithTimeout(n.bg, sizeSnapshotTimeout)
	defer cancel()
	err := n.WaitFuture(ctx, "snapshot retry", func(time.Duration) raft.Future { return n.raft.Snapshot() })
	switch {
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		n.recordWrite(&n.faults.snapshot, nil)
	case err != nil && n.bg.Err() == nil:
		n.log.Warn("snapshot retry failed", "err", err)
	}
}

// sizeSnapshot takes a snapshot and compacts the log to at most half of
// SnapshotLogBytes: raft keeps TrailingLogs entries after a snapshot, and
// TrailingLogs large entries would defeat the bound, so for this snapshot
// it keeps only as many as fit (at the average size of the entries
// appended since the last snapshot).
func (n *Node) sizeSnapshot() {
	bytes, entries := n.logBytes.Load(), n.logEntries.Load()
	trailing := trailingFor(bytes, entries, n.cfg.SnapshotLogBytes, n.cfg.TrailingLogs)
	n.log.Info("log size passed --raft-snapshot-log-bytes: taking a snapshot",
		"log_bytes", bytes, "entries", entries, "limit", n.cfg.SnapshotLogBytes, "trailing_logs", trailing)
	n.metrics.sizeSnapshots.Inc()
	if trailing < n.cfg.TrailingLogs {
		rc := n.raft.ReloadableConfig()
		rc.TrailingLogs = trailing
		if err := n.raft.ReloadConfig(rc); err != nil {
			n.log.Warn("could not lower the trailing logs for a size-triggered snapshot", "err", err)
		} else {
			defer func() {
				rc := n.raft.ReloadableConfig()
				rc.TrailingLogs = n.cfg.TrailingLogs
				if err := n.raft.ReloadConfig(rc); err != nil {
					n.log.Error("could not restore the trailing logs after a size-triggered snapshot", "err", err)
				}
			}()
		}
	}
	ctx, cancel := context.WithTimeout(n.bg, sizeSnapshotTimeout)
	defer cancel()
	if err := n.Snapshot(ctx); err != nil && n.bg.Err() == nil {
		n.log.Warn("size-triggered snapshot failed", "err", err)
	}
}

// trailingFor is how many entries to keep after a size-triggered
// snapshot: at most half of limit at the average entry size, at most
// configured, at least one.
func trailingFor(bytes, entries, limit int64, configured uint64) uint64 {
	if bytes <= 0 || entries <= 0 {
		return configured
	}
	avg := max(bytes/entries, 1)
	keep := uint64(max((limit/2)/avg, 1))
	return min(keep, configured)
}
