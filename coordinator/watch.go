package coordinator

import (
	"context"
	"slices"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Push: a member that watches its group (WatchGroup) hears that it must
// rejoin as soon as the entry that started the rebalance is applied here,
// instead of in the answer to its next heartbeat (up to a heartbeat
// interval later, 3 s by default in Kafka's clients). A watch is armed
// while its member is current (its heartbeat would be answered with
// success) and fires once when that stops being true; then it waits,
// silent, until the member is current again at a newer generation (it
// rejoined and synced) and arms itself at that generation. One stream thus
// serves a member across rebalances: a rebalance of n members costs n
// messages, not n messages and n new streams. The stream ends when the
// member is no longer in the group (it left, expired, was replaced or the
// group was deleted), or when this node stops leading.
//
// Waiting watches are looked at only when their group is neither
// preparing nor completing a rebalance: they cannot arm before the round
// ends, so the joins of a round (a thousand entries in a large group) cost
// nothing per watch. A member removed during the round hears so when it
// ends.

// watch is one member's registered WatchGroup.
type watch struct {
	member, instance string
	// generation is the one the member is current at (armed), or was
	// current at until the last change (waiting).
	generation int32
	waiting    bool
	// fired holds the latest change not yet sent (capacity 1; a newer
	// change replaces an unsent older one, which it makes stale).
	fired chan watchChange
}

// watchChange is one message for a watch: the member's new standing (never
// nil) and the generation it was current at until then.
type watchChange struct {
	err        error
	generation int32
}

// fire queues c for w's stream without blocking (the engine's lock is
// held): only the latest change matters.
func (w *watch) fire(c watchChange) {
	for {
		select {
		case w.fired <- c:
			return
		default:
		}
		select {
		case <-w.fired:
		default:
		}
	}
}

// WatchGroup serves one WatchGroup call: send is called with the member's
// standing now, and again with each change of it (see above). It returns
// nil when the member has left the group, NOT_LEADER when this node stops
// leading, and ctx's end when the caller goes away.
func (e *Engine) WatchGroup(ctx context.Context, r *cohortv1.WatchGroupRequest, send func(*cohortv1.WatchGroupResponse) error) error {
	if err := e.cfg.Limits.validateMemberRef(r.GetGroupId(), r.GetMemberId(), r.GetInstanceId()); err != nil {
		return err
	}
	if err := e.awaitServing(ctx); err != nil {
		return err
	}
	w := &watch{member: r.GetMemberId(), instance: r.GetInstanceId(), generation: r.GetGeneration(), fired: make(chan watchChange, 1)}
	group := r.GetGroupId()
	e.mu.Lock()
	if !e.serving {
		e.mu.Unlock()
		return errcode.Errorf(errcode.NotLeader, "this node stopped leading; watch on the new leader")
	}
	// Decided and registered under the lock: an entry applied after this
	// reads the state again (notifyWatchesLocked), so no change is missed.
	now := e.standing(group, w.member, w.instance, w.generation)
	if !memberGone(now) {
		w.waiting = now != nil
		e.registerWatchLocked(group, w)
	}
	e.mu.Unlock()
	if err := send(watchResponse(now, w.generation)); err != nil || memberGone(now) {
		e.dropWatch(group, w)
		return err
	}
	e.m.watches.Inc()
	defer e.m.watches.Dec()
	for {
		select {
		case c := <-w.fired:
			if code := errcode.Of(c.err); code == errcode.NotLeader || code == errcode.CoordinatorNotAvailable {
				return c.err // not about the member: watch again
			}
			if err := send(watchResponse(c.err, c.generation)); err != nil || memberGone(c.err) {
				e.dropWatch(group, w)
				return err
			}
		case <-ctx.Done():
			e.dropWatch(group, w)
			return ctx.Err()
		}
	}
}

// memberGone reports whether a standing says the member is no longer in
// the group: its watch has nothing more to wait for.
func memberGone(standing error) bool {
	switch errcode.Of(standing) {
	case errcode.UnknownMemberID, errcode.FencedInstanceID:
		return true
	}
	return false
}

func watchResponse(standing error, generation int32) *cohortv1.WatchGroupResponse {
	code, msg := itemError(standing)
	return &cohortv1.WatchGroupResponse{Error: code, ErrorMessage: msg, Generation: generation}
}

// registerWatchLocked adds w, ending the member's earlier watch if it has
// one: a member watches once, so the watches a leader holds stay within
// the members the budgets allow.
func (e *Engine) registerWatchLocked(group string, w *watch) {
	ws := e.watches[group]
	if i := slices.IndexFunc(ws, func(o *watch) bool { return o.member == w.member }); i >= 0 {
		ws[i].fire(watchChange{err: errcode.Errorf(errcode.CoordinatorNotAvailable, "member %q of group %q opened another watch, which replaced this one", w.member, group)})
		ws = slices.Delete(ws, i, i+1)
	}
	e.watches[group] = append(ws, w)
}

// dropWatch removes w if it is still registered.
func (e *Engine) dropWatch(group string, w *watch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws := e.watches[group]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
		if len(ws) == 0 {
			delete(e.watches, group)
		} else {
			e.watches[group] = ws
		}
	}
}

// notifyWatchesLocked brings group's watches in line with the FSM's state
// now: an armed watch whose member is no longer current fires; a waiting
// one whose member is current at a newer generation arms; a watch whose
// member is gone fires and is dropped.
func (e *Engine) notifyWatchesLocked(group string) {
	ws := e.watches[group]
	if len(ws) == 0 {
		return
	}
	g, _ := e.fsm.Group(group)
	roundOpen := g != nil && (g.State == fsm.PreparingRebalance || g.State == fsm.CompletingRebalance)
	kept := ws[:0]
	for _, w := range ws {
		if w.waiting {
			if roundOpen {
				kept = append(kept, w)
				continue
			}
			if g != nil && g.Generation > w.generation && e.standing(group, w.member, w.instance, g.Generation) == nil {
				w.generation, w.waiting = g.Generation, false
				kept = append(kept, w)
				continue
			}
		}
		err := e.standing(group, w.member, w.instance, w.generation)
		switch {
		case err == nil:
			w.waiting = false // current again at the same generation
			kept = append(kept, w)
			continue
		case memberGone(err):
			w.fire(watchChange{err: err, generation: w.generation})
			continue // dropped
		case !w.waiting:
			w.fire(watchChange{err: err, generation: w.generation})
			w.waiting = true
		}
		kept = append(kept, w)
	}
	clear(ws[len(kept):])
	if len(kept) == 0 {
		delete(e.watches, group)
	} else {
		e.watches[group] = kept
	}
}

// endWatchesLocked answers every watch NOT_LEADER (leadership is over).
func (e *Engine) endWatchesLocked(why string) {
	for _, ws := range e.watches {
		for _, w := range ws {
			w.fire(watchChange{err: errcode.Errorf(errcode.NotLeader, "this node stopped leading (%s); watch on the new leader", why)})
		}
	}
	e.watches = map[string][]*watch{}
}
