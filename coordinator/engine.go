package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/raftnode"
)

// Raft is what the engine needs of the Raft node.
type Raft interface {
	Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error)
	Barrier(ctx context.Context) error
	VerifyLeader(ctx context.Context) error
	IsLeader() bool
	CommitIndex() uint64
	AppliedIndex() uint64
}

// Errors for callers that are not protocol errors of the FSM.
var (
	// ErrNotLeader: this node does not lead (or stopped leading while the
	// call was parked). The caller retries on the leader; a write's outcome
	// may be unknown, and every write is safe to retry.
	ErrNotLeader = &fsm.ProtocolError{Code: fsm.CodeNotLeader}
)

type memberKey struct{ group, member string }

// deadlines of one group's rebalance, leader-local.
type rebalanceTimer struct {
	generation int32
	at         time.Time // rebalance timeout
	delayAt    time.Time // end of the initial delay; zero if none
	firing     bool      // a CompleteJoin is in flight
}

type waitKind int

const (
	waitJoin waitKind = iota
	waitSync
)

// waiter is a parked JoinGroup or SyncGroup call.
type waiter struct {
	kind       waitKind
	member     string
	generation int32
	ch         chan waitResult
}

type waitResult struct {
	group *fsm.Group
	err   error
}

// Engine is the leader's group engine. Create it with New and run it with Run.
type Engine struct {
	cfg  Config
	raft Raft
	fsm  *fsm.FSM
	log  *slog.Logger
	m    *metrics

	mu sync.Mutex
	// epoch changes on every leadership gain and loss; work started in an
	// old epoch is discarded.
	epoch   uint64
	serving bool
	ready   chan struct{} // closed once serving in the current epoch
	// Leader-local state, rebuilt from the FSM on every leadership gain.
	sessions   map[memberKey]time.Time
	pending    map[memberKey]time.Time
	rebalances map[string]*rebalanceTimer
	waiters    map[string][]*waiter
	expiring   map[memberKey]bool

	reads   readBarrier
	commits *committer
}

// New creates an engine for the node's Raft and FSM.
func New(cfg Config, r Raft, f *fsm.FSM) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg:   cfg,
		raft:  r,
		fsm:   f,
		log:   cfg.Logger.With("component", "coordinator"),
		ready: make(chan struct{}),
		m:     newMetrics(),
	}
	e.reads.raft = r
	e.commits = &committer{e: e, queue: make(chan *commitRequest, 4*maxCommitBatch)}
	e.resetLocked()
	return e, nil
}

func (e *Engine) resetLocked() {
	e.sessions = map[memberKey]time.Time{}
	e.pending = map[memberKey]time.Time{}
	e.rebalances = map[string]*rebalanceTimer{}
	e.waiters = map[string][]*waiter{}
	e.expiring = map[memberKey]bool{}
}

// Run follows the node's leadership until ctx ends: serving while leader,
// idle otherwise.
func (e *Engine) Run(ctx context.Context, leadership <-chan raftnode.LeadershipEvent) {
	for {
		select {
		case <-ctx.Done():
			e.stepDown("engine stopped")
			return
		case ev, ok := <-leadership:
			if !ok {
				e.stepDown("leadership events closed")
				return
			}
			if ev.IsLeader {
				e.stepUp(ctx)
			} else {
				e.stepDown("lost leadership")
			}
		}
	}
}

// stepUp starts a leadership epoch: barrier, rebuild, serve, tick.
func (e *Engine) stepUp(ctx context.Context) {
	e.mu.Lock()
	e.epoch++
	epoch := e.epoch
	e.mu.Unlock()
	go func() {
		start := e.cfg.Now()
		for {
			bctx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
			err := e.raft.Barrier(bctx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil || !e.inEpoch(epoch) || !e.raft.IsLeader() {
				return
			}
			e.log.Warn("leadership barrier failed; retrying", "err", err)
		}
		e.mu.Lock()
		if e.epoch != epoch {
			e.mu.Unlock()
			return
		}
		e.resetLocked()
		now := e.cfg.Now()
		var groups []*fsm.Group
		e.fsm.Read(func(s *fsm.State) { groups = s.Groups() })
		for _, g := range groups {
			e.reconcileLocked(g.ID, g, now, true)
		}
		e.serving = true
		close(e.ready)
		e.mu.Unlock()
		e.log.Info("coordinator serving", "groups", len(groups), "barrier", e.cfg.Now().Sub(start))
		e.tickLoop(ctx, epoch)
	}()
}

// stepDown ends the epoch: every parked call is answered NOT_LEADER.
func (e *Engine) stepDown(why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.epoch++
	parked := 0
	for _, ws := range e.waiters {
		for _, w := range ws {
			w.ch <- waitResult{err: fsm.Errorf(fsm.CodeNotLeader, "this node stopped leading (%s); retry on the new leader", why)}
			parked++
		}
	}
	if e.serving {
		e.log.Info("coordinator stopped serving", "reason", why, "parked_calls_answered", parked)
	}
	e.serving = false
	e.ready = make(chan struct{})
	e.resetLocked()
}

func (e *Engine) inEpoch(epoch uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch == epoch
}

// awaitServing waits until the engine serves, or says why it cannot.
func (e *Engine) awaitServing(ctx context.Context) error {
	for {
		e.mu.Lock()
		serving, ready := e.serving, e.ready
		e.mu.Unlock()
		if serving {
			return nil
		}
		if !e.raft.IsLeader() {
			return fsm.Errorf(fsm.CodeNotLeader, "this node is not the raft leader")
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return fsm.Errorf(fsm.CodeNotLeader, "leader is still catching up (barrier): %v", ctx.Err())
		case <-time.After(e.cfg.Tick):
		}
	}
}

// propose applies a command through Raft and lets the engine see its result.
func (e *Engine) propose(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	res, err := e.raft.Apply(ctx, cmd)
	if err != nil {
		switch {
		case errors.Is(err, raftnode.ErrNotLeader):
			return nil, fsm.Errorf(fsm.CodeNotLeader, "%v", err)
		case errors.Is(err, raftnode.ErrLeadershipLost), errors.Is(err, raftnode.ErrShutdown):
			return nil, fsm.Errorf(fsm.CodeNotLeader, "%v; the outcome is unknown, retry on the new leader", err)
		}
		return nil, err
	}
	e.observe(res, cmd)
	return res, nil
}

// observe brings the leader-local state in line with the FSM after an apply.
func (e *Engine) observe(res *fsm.ApplyResult, cmd *fsmv1.Command) {
	e.logServerAssignment(res)
	if res.JoinCompleted && res.Group != nil {
		e.m.rebalances.Inc()
		e.m.rebalanceSeconds.Observe(float64(cmd.GetTimestampMs()-res.Group.RebalanceStartedMs) / 1000)
	}
	var ids []string
	switch c := cmd.GetKind().(type) {
	case *fsmv1.Command_CommitOffsets:
		return // commits change no member, state or deadline
	case *fsmv1.Command_Batch:
		for i, sub := range c.Batch.GetCommands() {
			if i < len(res.Batch) {
				e.observe(res.Batch[i], sub)
			}
		}
		return
	case *fsmv1.Command_DeleteTopic, *fsmv1.Command_AddPartitions, *fsmv1.Command_ExpireOffsets:
		e.fsm.Read(func(s *fsm.State) {
			for _, g := range s.Groups() {
				ids = append(ids, g.ID)
			}
		})
		e.mu.Lock()
		ids = append(ids, slices.Collect(maps.Keys(e.waiters))...)
		e.mu.Unlock()
	case *fsmv1.Command_DeleteGroups:
		ids = c.DeleteGroups.GetGroupIds()
	default:
		if res.Group != nil {
			ids = []string{res.Group.ID}
		}
	}
	if len(ids) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.serving {
		return
	}
	now := e.cfg.Now()
	for _, id := range ids {
		g, _ := e.fsm.Group(id)
		e.reconcileLocked(id, g, now, false)
	}
}

// reconcileLocked re-derives one group's deadlines from the FSM's view of it
// and answers the parked calls whose barrier has passed. fresh re-arms every
// deadline from now (a new leader).
func (e *Engine) reconcileLocked(id string, g *fsm.Group, now time.Time, fresh bool) {
	live := map[string]*fsm.Member{}
	if g != nil {
		for _, m := range g.Members {
			live[m.ID] = m
			k := memberKey{id, m.ID}
			if _, ok := e.sessions[k]; !ok || fresh {
				e.sessions[k] = now.Add(time.Duration(m.SessionTimeoutMs) * time.Millisecond)
			}
		}
	}
	for k := range e.sessions {
		if k.group == id && live[k.member] == nil {
			delete(e.sessions, k)
			delete(e.expiring, k)
		}
	}
	if g != nil && g.State == fsm.PreparingRebalance {
		t := e.rebalances[id]
		if t == nil || t.generation != g.Generation {
			t = &rebalanceTimer{generation: g.Generation, at: now.Add(time.Duration(g.RebalanceTimeoutMs()) * time.Millisecond)}
			e.rebalances[id] = t
		}
		t.delayAt = time.Time{}
		if g.InitialDelayUntilMs > 0 {
			t.delayAt = time.UnixMilli(g.InitialDelayUntilMs)
		}
	} else {
		delete(e.rebalances, id)
	}
	e.answerLocked(id, g, now)
}

// answerLocked answers the parked calls of group id whose wait is over.
func (e *Engine) answerLocked(id string, g *fsm.Group, now time.Time) {
	ws := e.waiters[id]
	if len(ws) == 0 {
		return
	}
	kept := ws[:0]
	for _, w := range ws {
		res, done := waitOutcome(w, g)
		if !done {
			kept = append(kept, w)
			continue
		}
		if res.err == nil {
			e.touchSessionLocked(id, w.member, g, now)
		}
		w.ch <- res
	}
	if len(kept) == 0 {
		delete(e.waiters, id)
	} else {
		e.waiters[id] = kept
	}
}

// waitOutcome decides whether a parked call can be answered given the
// group's current state.
func waitOutcome(w *waiter, g *fsm.Group) (waitResult, bool) {
	if g == nil {
		return waitResult{err: fsm.Errorf(fsm.CodeUnknownMemberID, "the group no longer exists")}, true
	}
	if _, ok := g.Member(w.member); !ok {
		return waitResult{err: fsm.Errorf(fsm.CodeUnknownMemberID, "member %q was removed from group %q (it did not rejoin in time, left, or expired)", w.member, g.ID)}, true
	}
	switch w.kind {
	case waitJoin:
		if g.State == fsm.PreparingRebalance && g.Generation == w.generation {
			return waitResult{}, false
		}
		return waitResult{group: g}, true
	default: // waitSync
		switch {
		case g.Generation == w.generation && g.State == fsm.CompletingRebalance:
			return waitResult{}, false
		case g.Generation == w.generation && g.State == fsm.Stable:
			return waitResult{group: g}, true
		}
		return waitResult{err: fsm.Errorf(fsm.CodeRebalanceInProgress, "group %q started another rebalance (now %s at generation %d) before generation %d's assignment arrived", g.ID, g.State, g.Generation, w.generation)}, true
	}
}

func (e *Engine) touchSessionLocked(group, member string, g *fsm.Group, now time.Time) {
	if m, ok := g.Member(member); ok {
		e.sessions[memberKey{group, member}] = now.Add(time.Duration(m.SessionTimeoutMs) * time.Millisecond)
	}
}

// park waits for the barrier of one call. The caller has just seen the
// group in the state that makes it wait; park re-checks under the lock, so
// no completion between that read and the registration is missed.
func (e *Engine) park(ctx context.Context, kind waitKind, group, member string, generation int32) (*fsm.Group, error) {
	w := &waiter{kind: kind, member: member, generation: generation, ch: make(chan waitResult, 1)}
	e.mu.Lock()
	if !e.serving {
		e.mu.Unlock()
		return nil, fsm.Errorf(fsm.CodeNotLeader, "this node stopped leading; retry on the new leader")
	}
	g, _ := e.fsm.Group(group)
	if res, done := waitOutcome(w, g); done {
		if res.err == nil {
			e.touchSessionLocked(group, member, g, e.cfg.Now())
		}
		e.mu.Unlock()
		return res.group, res.err
	}
	e.waiters[group] = append(e.waiters[group], w)
	e.mu.Unlock()
	e.m.parked.WithLabelValues(kindName(kind)).Inc()
	defer e.m.parked.WithLabelValues(kindName(kind)).Dec()

	select {
	case res := <-w.ch:
		return res.group, res.err
	case <-ctx.Done():
		e.mu.Lock()
		ws := e.waiters[group]
		if i := slices.Index(ws, w); i >= 0 {
			e.waiters[group] = slices.Delete(ws, i, i+1)
			e.mu.Unlock()
			return nil, ctx.Err()
		}
		e.mu.Unlock()
		res := <-w.ch // answered while we were giving up
		return res.group, res.err
	}
}

func kindName(k waitKind) string {
	if k == waitJoin {
		return "join"
	}
	return "sync"
}

// hasWaiterLocked reports whether member has a parked call (its session
// does not expire while it waits at a barrier).
func (e *Engine) hasWaiterLocked(group, member string) bool {
	return slices.ContainsFunc(e.waiters[group], func(w *waiter) bool { return w.member == member })
}

// tickLoop turns passed deadlines into commands for one leadership epoch.
func (e *Engine) tickLoop(ctx context.Context, epoch uint64) {
	t := time.NewTicker(e.cfg.Tick)
	defer t.Stop()
	retention := time.NewTicker(e.cfg.OffsetsRetentionCheckInterval)
	defer retention.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !e.inEpoch(epoch) {
				return
			}
			e.tick(ctx, epoch)
		case <-retention.C:
			if !e.inEpoch(epoch) {
				return
			}
			e.expireOffsets(ctx)
		}
	}
}

// expireOffsets proposes the retention sweep (Kafka's
// offsets.retention.minutes): offsets of groups without members expire
// retention after the later of their commit and the group becoming empty.
func (e *Engine) expireOffsets(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
	defer cancel()
	before := e.fsm.Stats()
	res, err := e.propose(actx, &fsmv1.Command{Kind: &fsmv1.Command_ExpireOffsets{ExpireOffsets: &fsmv1.ExpireOffsets{
		RetentionMs: e.cfg.OffsetsRetention.Milliseconds(),
	}}})
	if err != nil {
		e.log.Warn("offset retention sweep not applied", "err", err)
		return
	}
	if res.Err == nil {
		after := e.fsm.Stats()
		if before.Offsets != after.Offsets || before.Groups != after.Groups {
			e.log.Info("offsets expired", "offsets_removed", before.Offsets-after.Offsets, "groups_removed", before.Groups-after.Groups,
				"retention", e.cfg.OffsetsRetention)
		}
	}
}

// tick checks every deadline once.
func (e *Engine) tick(ctx context.Context, epoch uint64) {
	now := e.cfg.Now()
	expired := map[string][]string{}
	type completion struct {
		group        string
		generation   int32
		initialDelay bool
	}
	var completions []completion

	e.mu.Lock()
	if e.epoch != epoch || !e.serving {
		e.mu.Unlock()
		return
	}
	for k, at := range e.pending {
		if now.After(at) {
			delete(e.pending, k)
		}
	}
	for k, at := range e.sessions {
		if now.After(at) && !e.expiring[k] && !e.hasWaiterLocked(k.group, k.member) {
			e.expiring[k] = true
			expired[k.group] = append(expired[k.group], k.member)
		}
	}
	for id, t := range e.rebalances {
		if t.firing {
			continue
		}
		switch {
		case now.After(t.at):
			t.firing = true
			completions = append(completions, completion{id, t.generation, false})
		case !t.delayAt.IsZero() && !now.Before(t.delayAt):
			t.firing = true
			completions = append(completions, completion{id, t.generation, true})
		}
	}
	e.mu.Unlock()

	for _, group := range slices.Sorted(maps.Keys(expired)) {
		members := expired[group]
		slices.Sort(members)
		go e.expire(ctx, group, members)
	}
	for _, c := range completions {
		go e.completeJoin(ctx, c.group, c.generation, c.initialDelay)
	}
}

// expire proposes the removal of members whose sessions passed.
func (e *Engine) expire(ctx context.Context, group string, members []string) {
	cmd := &fsmv1.RemoveMembers{GroupId: group, Reason: fsmv1.RemoveReason_REMOVE_REASON_SESSION_EXPIRED}
	for _, m := range members {
		cmd.Members = append(cmd.Members, &fsmv1.MemberRef{MemberId: m})
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
	defer cancel()
	res, err := e.propose(actx, &fsmv1.Command{Kind: &fsmv1.Command_RemoveMembers{RemoveMembers: cmd}})
	e.mu.Lock()
	for _, m := range members {
		delete(e.expiring, memberKey{group, m})
	}
	e.mu.Unlock()
	if err != nil {
		e.log.Warn("session expiry not applied", "group", group, "members", members, "err", err)
		return
	}
	removed := 0
	for _, r := range res.Members {
		if r.Err == nil {
			removed++
		}
	}
	e.m.expirations.Add(float64(removed))
	e.log.Info("members expired", "group", group, "members", members, "removed", removed)
}

// completeJoin proposes the end of a join phase on timeout or initial delay.
func (e *Engine) completeJoin(ctx context.Context, group string, generation int32, initialDelay bool) {
	actx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
	defer cancel()
	res, err := e.propose(actx, &fsmv1.Command{Kind: &fsmv1.Command_CompleteJoin{CompleteJoin: &fsmv1.CompleteJoin{
		GroupId: group, Generation: generation, InitialDelay: initialDelay,
	}}})
	e.mu.Lock()
	if t := e.rebalances[group]; t != nil && t.generation == generation {
		t.firing = false
	}
	e.mu.Unlock()
	switch {
	case err != nil:
		e.log.Warn("join completion not applied", "group", group, "generation", generation, "err", err)
	case res.Err == nil:
		why := "rebalance timeout"
		if initialDelay {
			why = "initial delay over"
		}
		e.log.Info("join phase completed", "group", group, "generation", res.Group.Generation, "members", len(res.Group.Members), "why", why)
	}
}

// newMemberID makes a member ID the way Kafka does: client ID and a random
// suffix.
func newMemberID(clientID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if clientID == "" {
		clientID = "member"
	}
	return fmt.Sprintf("%s-%s", clientID, hex.EncodeToString(b[:]))
}
