package coordinator

import (
	"context"
	"slices"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
)

type waitKind int

const (
	waitJoin waitKind = iota
	waitSync
)

// waiter is a parked JoinGroup or SyncGroup call.
type waiter struct {
	kind       waitKind
	member     string
	instance   string // static instance ID, "" for a dynamic member
	generation int32
	ch         chan waitResult
}

type waitResult struct {
	group *fsm.Group
	err   error
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
			e.touchSessionLocked(id, w.member, now)
		}
		e.unparkedLocked(id, w)
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
		return waitResult{err: errcode.Errorf(errcode.UnknownMemberID, "the group no longer exists")}, true
	}
	if _, ok := g.Member(w.member); !ok {
		if owner, ok := g.MemberByInstance(w.instance); ok {
			// KIP-345: a newer incarnation of this static member took its
			// slot; the old one is fenced, not told to join again (which
			// would fence the new one in turn).
			return waitResult{err: errcode.Errorf(errcode.FencedInstanceID, "instance %q of group %q now belongs to member %q: member %q was replaced by a newer instance", w.instance, g.ID, owner.ID, w.member)}, true
		}
		return waitResult{err: errcode.Errorf(errcode.UnknownMemberID, "member %q was removed from group %q (it did not rejoin in time, left, or expired)", w.member, g.ID)}, true
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
		return waitResult{err: errcode.Errorf(errcode.RebalanceInProgress, "group %q started another rebalance (now %s at generation %d) before generation %d's assignment arrived", g.ID, g.State, g.Generation, w.generation)}, true
	}
}

// park waits for the barrier of one call. The caller has just seen the
// group in the state that makes it wait; park re-checks under the lock, so
// no completion between that read and the registration is missed.
func (e *Engine) park(ctx context.Context, kind waitKind, group, member, instance string, generation int32) (*fsm.Group, error) {
	w := &waiter{kind: kind, member: member, instance: instance, generation: generation, ch: make(chan waitResult, 1)}
	e.mu.Lock()
	if !e.serving {
		e.mu.Unlock()
		return nil, errcode.Errorf(errcode.NotLeader, "this node stopped leading; retry on the new leader")
	}
	g, _ := e.fsm.Group(group)
	if res, done := waitOutcome(w, g); done {
		if res.err == nil {
			e.touchSessionLocked(group, member, e.cfg.Now())
		}
		e.mu.Unlock()
		return res.group, res.err
	}
	e.waiters[group] = append(e.waiters[group], w)
	e.parked[memberKey{group, member}]++
	// A parked member is alive: its session counts from now, and does not
	// run while it waits (expiredSessionsLocked skips it).
	e.touchSessionLocked(group, member, e.cfg.Now())
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
			e.unparkedLocked(group, w)
			// Its call was cut (a reset connection, a restarted
			// forwarder), not its life: a full session from now lets
			// the client's retry find it a member still.
			e.touchSessionLocked(group, member, e.cfg.Now())
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
	return e.parked[memberKey{group, member}] > 0
}

// unparkedLocked counts w out of its member's parked calls.
func (e *Engine) unparkedLocked(group string, w *waiter) {
	k := memberKey{group, w.member}
	if e.parked[k]--; e.parked[k] <= 0 {
		delete(e.parked, k)
	}
}
