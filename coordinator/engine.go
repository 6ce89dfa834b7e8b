package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// Raft is what the engine needs of the Raft node.
type Raft interface {
	// Apply proposes cmd and waits for its result. An error that wraps
	// ErrNotProposed or ErrOutcomeUnknown says what became of the command;
	// any other error is passed to the caller as it is.
	Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error)
	Barrier(ctx context.Context) error
	VerifyLeader(ctx context.Context) error
	IsLeader() bool
	// Term is the node's current Raft term.
	Term() uint64
	CommitIndex() uint64
	AppliedIndex() uint64
}

// What became of a command Raft.Apply failed to apply. The engine answers
// both NOT_LEADER; they differ in what the caller is told about its write.
var (
	// ErrNotProposed: this node does not lead, so the command was not
	// proposed.
	ErrNotProposed = errors.New("not proposed")
	// ErrOutcomeUnknown: the command was proposed, then this node lost
	// leadership or shut down; it may or may not be committed. Every
	// command is safe to propose again.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

type memberKey struct{ group, member string }

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
	// term is the Raft term the engine serves in: the leadership barrier
	// committed an entry of it. Reads are served only while the node's
	// term is still this one (readBarrier).
	term uint64
	// Leader-local state, rebuilt from the FSM on every leadership gain.
	sessions sessionTable
	pending  map[memberKey]time.Time
	// pendingPerGroup counts pending's keys by group.
	pendingPerGroup map[string]int
	rebalances      map[string]*rebalanceTimer
	// syncs are the deadlines of groups in CompletingRebalance: a
	// rebalance timeout for the members to sync (syncTimer).
	syncs map[string]*syncTimer
	// refusedPlans is why the leader's last plan of a group's current
	// generation was refused, for DescribeGroups and the logs.
	refusedPlans map[string]refusedPlan
	waiters      map[string][]*waiter
	// leaderAnswers are the group leaders' join answers of the current
	// generations (joinAnswer).
	leaderAnswers map[string]leaderJoinAnswer
	// parked counts each member's parked calls (waiters), so that the
	// session sweep asks about one member in O(1).
	parked map[memberKey]int
	// watches are the members watching their group (watch.go).
	watches  map[string][]*watch
	expiring map[memberKey]bool
	// consumers are the deadlines of consumer group members (consumer.go).
	consumers map[memberKey]*consumerDeadline

	reads   readBarrier
	commits *committer
	applied *appliedQueue
}

// New creates an engine for the node's Raft and FSM.
func New(cfg Config, r Raft, f *fsm.FSM) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:   cfg,
		raft:  r,
		fsm:   f,
		log:   cfg.Logger.With("component", "coordinator"),
		ready: make(chan struct{}),
		m:     newMetrics(),
	}
	e.reads.raft = r
	e.commits = &committer{e: e, queue: make(chan *commitRequest, 4*maxCommitBatch), held: map[string][]*commitRequest{}, joining: map[string]int{}}
	e.applied = newAppliedQueue()
	f.Observe(e.applied.push)
	e.resetLocked()
	return e, nil
}

func (e *Engine) resetLocked() {
	e.sessions = sessionTable{}
	e.pending = map[memberKey]time.Time{}
	e.pendingPerGroup = map[string]int{}
	e.rebalances = map[string]*rebalanceTimer{}
	e.syncs = map[string]*syncTimer{}
	e.refusedPlans = map[string]refusedPlan{}
	e.waiters = map[string][]*waiter{}
	e.parked = map[memberKey]int{}
	e.leaderAnswers = map[string]leaderJoinAnswer{}
	e.watches = map[string][]*watch{}
	e.expiring = map[memberKey]bool{}
	e.consumers = map[memberKey]*consumerDeadline{}
}

// Run follows the node's leadership until ctx ends or leading is closed:
// serving while leader, idle otherwise. leading delivers every change of
// this node's Raft leadership in order, none dropped: true when it became
// leader, false when it stopped; the first value is the leadership at the
// time Run starts.
func (e *Engine) Run(ctx context.Context, leading <-chan bool) {
	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	e.applied.following.Store(true)
	defer e.applied.following.Store(false)
	go e.followApplied(followCtx)
	for {
		select {
		case <-ctx.Done():
			e.stepDown("engine stopped")
			return
		case isLeader, ok := <-leading:
			if !ok {
				e.stepDown("leadership events closed")
				return
			}
			if isLeader {
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
		var term uint64
		for {
			term = e.raft.Term()
			bctx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
			err := e.raft.Barrier(bctx)
			cancel()
			if err == nil && e.raft.Term() == term {
				break // an entry of this term is committed and applied
			}
			if ctx.Err() != nil || !e.inEpoch(epoch) || !e.raft.IsLeader() {
				return
			}
			if err == nil {
				err = fmt.Errorf("the term moved from %d to %d", term, e.raft.Term())
			}
			e.log.Warn("leadership barrier failed; retrying", "err", err)
		}
		if !e.adoptBudgets(ctx, epoch) {
			return
		}
		e.mu.Lock()
		if e.epoch != epoch {
			e.mu.Unlock()
			return
		}
		e.resetLocked()
		now := e.cfg.Now()
		var groups []*fsm.Group
		var consumerGroups []*fsm.ConsumerGroup
		e.fsm.Read(func(s *fsm.State) { groups, consumerGroups = s.Groups(), s.ConsumerGroups() })
		for _, g := range groups {
			e.reconcileLocked(g.ID, g, now, true)
		}
		e.rebuildConsumersLocked(consumerGroups, now)
		e.serving, e.term = true, term
		close(e.ready)
		e.mu.Unlock()
		e.log.Info("coordinator serving", "groups", len(groups), "barrier", e.cfg.Now().Sub(start))
		e.tickLoop(ctx, epoch)
	}()
}

// adoptBudgets makes the configured budgets the cluster's, if the state
// holds others, before the leader serves: a leader enforces the budgets it
// was started with, and every replica the same ones. It reports false when
// the epoch ended first.
func (e *Engine) adoptBudgets(ctx context.Context, epoch uint64) bool {
	for {
		if e.fsm.Budgets() == e.cfg.Budgets {
			return true
		}
		actx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
		res, err := e.propose(actx, fsm.SetBudgetsCommand(e.cfg.Budgets))
		cancel()
		if err == nil && res.Err == nil {
			e.log.Info("budgets set", "budgets", fmt.Sprintf("%+v", e.cfg.Budgets))
			return true
		}
		if err == nil {
			err = res.Err
		}
		if ctx.Err() != nil || !e.inEpoch(epoch) || !e.raft.IsLeader() {
			return false
		}
		e.log.Warn("setting the budgets failed; retrying", "err", err)
		time.Sleep(e.cfg.Tick)
	}
}

// stepDown ends the epoch: every parked call is answered NOT_LEADER.
func (e *Engine) stepDown(why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.epoch++
	parked := 0
	for _, ws := range e.waiters {
		for _, w := range ws {
			w.ch <- waitResult{err: errcode.Errorf(errcode.NotLeader, "this node stopped leading (%s); retry on the new leader", why)}
			parked++
		}
	}
	watching := 0
	for _, ws := range e.watches {
		watching += len(ws)
	}
	e.endWatchesLocked(why)
	if e.serving {
		e.log.Info("coordinator stopped serving", "reason", why, "parked_calls_answered", parked, "watches_ended", watching)
	}
	e.serving = false
	e.ready = make(chan struct{})
	e.resetLocked()
}

// isServing reports whether the engine serves as leader now.
func (e *Engine) isServing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.serving
}

func (e *Engine) inEpoch(epoch uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch == epoch
}

// awaitServing waits until the engine serves, or says why it cannot.
func (e *Engine) awaitServing(ctx context.Context) error {
	_, err := e.awaitServingTerm(ctx)
	return err
}

// awaitServingTerm waits until the engine serves and returns the term it
// serves in.
func (e *Engine) awaitServingTerm(ctx context.Context) (uint64, error) {
	for {
		e.mu.Lock()
		serving, ready, term := e.serving, e.ready, e.term
		e.mu.Unlock()
		if serving {
			return term, nil
		}
		if !e.raft.IsLeader() {
			return 0, errcode.Errorf(errcode.NotLeader, "this node is not the raft leader")
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return 0, errcode.Errorf(errcode.NotLeader, "leader is still catching up (barrier): %v", ctx.Err())
		case <-time.After(e.cfg.Tick):
		}
	}
}
