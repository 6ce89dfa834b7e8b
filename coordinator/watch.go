package coordinator

import (
	"context"
	"slices"

	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Push: a member that watches its group (WatchGroup) hears that it must
// rejoin as soon as the entry that started the rebalance is applied here,
// instead of in the answer to its next heartbeat (up to a heartbeat
// interval later, 3 s by default in Kafka's clients). A watch is one-shot:
// it is registered while the member is current (its heartbeat would be
// answered with success), fires once when that stops being true, and is
// dropped. Members rejoining or syncing hold no watch, so during a
// rebalance the watches cost nothing per applied entry; firing them all is
// O(members) once per rebalance.

// watch is one member's registered WatchGroup.
type watch struct {
	member, instance string
	generation       int32
	// fired receives the member's new standing (never nil), once.
	fired chan error
}

// WatchGroup serves one WatchGroup call: send is called with the member's
// standing now, and once more when it changes (then WatchGroup returns
// nil). It returns NOT_LEADER when this node stops leading, and ctx's end
// when the caller goes away.
func (e *Engine) WatchGroup(ctx context.Context, r *cohortv1.WatchGroupRequest, send func(*cohortv1.WatchGroupResponse) error) error {
	if err := e.cfg.Limits.validateMemberRef(r.GetGroupId(), r.GetMemberId(), r.GetInstanceId()); err != nil {
		return err
	}
	if err := e.awaitServing(ctx); err != nil {
		return err
	}
	w := &watch{member: r.GetMemberId(), instance: r.GetInstanceId(), generation: r.GetGeneration(), fired: make(chan error, 1)}
	group := r.GetGroupId()
	e.mu.Lock()
	if !e.serving {
		e.mu.Unlock()
		return errcode.Errorf(errcode.NotLeader, "this node stopped leading; watch on the new leader")
	}
	// Decided and registered under the lock: an entry applied after this
	// reads the state again (notifyWatchesLocked), so no change is missed.
	now := e.standing(group, w.member, w.instance, w.generation)
	if now == nil {
		e.registerWatchLocked(group, w)
	}
	e.mu.Unlock()
	if err := send(watchResponse(now, e.generationOf(group))); err != nil || now != nil {
		e.dropWatch(group, w)
		return err
	}
	e.m.watches.Inc()
	defer e.m.watches.Dec()
	select {
	case err := <-w.fired:
		if c := errcode.Of(err); c == errcode.NotLeader || c == errcode.CoordinatorNotAvailable {
			return err // not about the member: watch again
		}
		return send(watchResponse(err, e.generationOf(group)))
	case <-ctx.Done():
		e.dropWatch(group, w)
		return ctx.Err()
	}
}

func (e *Engine) generationOf(group string) int32 {
	if g, ok := e.fsm.Group(group); ok {
		return g.Generation
	}
	return 0
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
		ws[i].fired <- errcode.Errorf(errcode.CoordinatorNotAvailable, "member %q of group %q opened another watch, which replaced this one", w.member, group)
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

// notifyWatchesLocked fires the watches of group whose member is no longer
// current, against the FSM's state now.
func (e *Engine) notifyWatchesLocked(group string) {
	ws := e.watches[group]
	if len(ws) == 0 {
		return
	}
	kept := ws[:0]
	for _, w := range ws {
		if err := e.standing(group, w.member, w.instance, w.generation); err != nil {
			w.fired <- err
			continue
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
			w.fired <- errcode.Errorf(errcode.NotLeader, "this node stopped leading (%s); watch on the new leader", why)
		}
	}
	e.watches = map[string][]*watch{}
}
