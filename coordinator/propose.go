package coordinator

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// propose applies a command through Raft. The engine sees its result, as
// every applied entry's, through followApplied; propose returns once it
// has (commits aside, which change no deadline), so the caller acts on an
// engine that is in line with the entry.
func (e *Engine) propose(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	res, err := e.raft.Apply(ctx, cmd)
	if err != nil {
		switch {
		case errors.Is(err, ErrNotProposed):
			return nil, errcode.Errorf(errcode.NotLeader, "%v", err)
		case errors.Is(err, ErrOutcomeUnknown):
			return nil, errcode.Errorf(errcode.NotLeader, "%v; retry on the new leader", err)
		}
		return nil, err
	}
	switch cmd.GetKind().(type) {
	case *fsmv1.Command_CommitOffsets, *fsmv1.Command_Batch:
	default:
		if e.isServing() {
			e.applied.awaitObserved(ctx, res.Index)
		}
	}
	return res, nil
}

// proposeAdmitted proposes cmd unless the FSM, asked first (fsm.Admit),
// refuses it as a whole: a command the apply would refuse is answered
// without being written to every replica's log.
func (e *Engine) proposeAdmitted(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	if pre := e.fsm.Admit(cmd); pre != nil && pre.Err != nil {
		e.m.refusedBeforeLog.Inc()
		return &fsm.ApplyResult{Err: pre.Err}, nil
	}
	if cmd.GetJoinMember() != nil {
		// Joins come in bursts (every member rejoins at once when told
		// of a rebalance): they share entries as commits do.
		return e.commits.submit(ctx, cmd)
	}
	return e.propose(ctx, cmd)
}

// observe brings the leader-local state in line with the FSM after an
// apply (followApplied calls it for every applied entry, in log order).
// nowMs is the entry's leader timestamp: the commands of a Batch carry
// none of their own, the FSM applies them at the batch's.
func (e *Engine) observe(res *fsm.ApplyResult, cmd *fsmv1.Command, nowMs int64) {
	e.logServerAssignment(res)
	if res.JoinCompleted && res.Group != nil {
		e.m.rebalances.Inc()
		e.m.rebalanceSeconds.Observe(float64(nowMs-res.Group.RebalanceStartedMs) / 1000)
	}
	var ids []string
	switch c := cmd.GetKind().(type) {
	case *fsmv1.Command_CommitOffsets:
		return // commits change no member, state or deadline
	case *fsmv1.Command_Batch:
		for i, sub := range c.Batch.GetCommands() {
			if i < len(res.Batch) {
				e.observe(res.Batch[i], sub, nowMs)
			}
		}
		return
	case *fsmv1.Command_CreateTopic, *fsmv1.Command_DeleteTopic, *fsmv1.Command_AddPartitions, *fsmv1.Command_ExpireOffsets:
		e.fsm.Read(func(s *fsm.State) {
			for _, g := range s.Groups() {
				ids = append(ids, g.ID)
			}
		})
		e.mu.Lock()
		ids = append(ids, slices.Collect(maps.Keys(e.waiters))...)
		ids = append(ids, slices.Collect(maps.Keys(e.watches))...)
		e.mu.Unlock()
	case *fsmv1.Command_DeleteGroups:
		ids = c.DeleteGroups.GetGroupIds()
	default:
		// A command refused for a group that is gone has no res.Group; the
		// engine must still forget that group's sessions and timers, or a
		// stale one would be proposed again on every tick.
		if res.Group != nil {
			ids = []string{res.Group.ID}
		} else if id := commandGroup(cmd); id != "" {
			ids = []string{id}
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
	if j := cmd.GetJoinMember(); j != nil && j.GetNewMember() && res.Err == nil {
		// A pending ID is a member now, whether or not its caller is still
		// there to hear it: the join of an attempt the client abandoned
		// (a timeout, a cut connection) lands all the same, and counting
		// it as pending too would keep new members out of a group near its
		// members-per-group budget until the ID's session ran out.
		e.forgetPendingLocked(memberKey{j.GetGroupId(), j.GetMember().GetMemberId()})
	}
	if e.joinedRoundLocked(cmd, res, now) {
		return
	}
	for _, id := range ids {
		g, _ := e.fsm.Group(id)
		e.reconcileLocked(id, g, now, false)
	}
}

func hasMember(g *fsm.Group, id string) bool {
	_, ok := g.Member(id)
	return ok
}

// joinedRoundLocked is reconcileLocked's shortcut for the commonest entry
// of a rebalance: a dynamic member joining a round that was already open
// at this generation when the engine last reconciled the group (its
// rebalance timer is for this generation). Such a join removes nobody and
// changes no state, so no parked call or watch can be answered (calls and
// watches the round ends were answered when it opened), and only the
// joiner may need a session: the join costs O(1) here, not O(members),
// which would make a round of n joins O(n²). It reports false, changing
// nothing, for every other entry.
func (e *Engine) joinedRoundLocked(cmd *fsmv1.Command, res *fsm.ApplyResult, now time.Time) bool {
	j := cmd.GetJoinMember()
	if j == nil || res.Err != nil || res.JoinCompleted || j.GetMember().GetInstanceId() != "" {
		return false
	}
	// The group as this join left it, not as the FSM holds it now: the
	// joins of one Batch entry are observed after the whole batch was
	// applied, and when its last join closed the round, the FSM's group is
	// already past it while the joins before were ordinary ones.
	id, member, g := j.GetGroupId(), j.GetMember().GetMemberId(), res.Group
	t := e.rebalances[id]
	if g == nil || g.State != fsm.PreparingRebalance || t == nil || t.generation != g.Generation {
		return false
	}
	if m, ok := g.Member(member); ok {
		k := memberKey{id, member}
		if _, armed := e.sessions.get(k); !armed {
			e.sessions.set(k, sessionDeadline(now, m))
		}
	}
	t.delayAt = time.Time{}
	if g.InitialDelayUntilMs > 0 {
		t.delayAt = time.UnixMilli(g.InitialDelayUntilMs)
	}
	return true
}

// commandGroup is the group a group command names ("" for others).
func commandGroup(cmd *fsmv1.Command) string {
	switch c := cmd.GetKind().(type) {
	case *fsmv1.Command_JoinMember:
		return c.JoinMember.GetGroupId()
	case *fsmv1.Command_RemoveMembers:
		return c.RemoveMembers.GetGroupId()
	case *fsmv1.Command_CompleteJoin:
		return c.CompleteJoin.GetGroupId()
	case *fsmv1.Command_SyncAssignment:
		return c.SyncAssignment.GetGroupId()
	}
	return ""
}

// reconcileLocked re-derives one group's deadlines from the FSM's view of it
// and answers the parked calls whose barrier has passed. fresh re-arms every
// deadline from now (a new leader).
func (e *Engine) reconcileLocked(id string, g *fsm.Group, now time.Time, fresh bool) {
	if g != nil {
		for _, m := range g.Members.All() {
			k := memberKey{id, m.ID}
			if _, ok := e.sessions.get(k); !ok || fresh {
				e.sessions.set(k, sessionDeadline(now, m))
			}
		}
	}
	for member := range e.sessions[id] {
		if g == nil || !hasMember(g, member) {
			k := memberKey{id, member}
			e.sessions.drop(k)
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
	if g != nil && g.State == fsm.CompletingRebalance {
		if t := e.syncs[id]; t == nil || t.generation != g.Generation || fresh {
			e.syncs[id] = &syncTimer{generation: g.Generation, at: now.Add(time.Duration(g.RebalanceTimeoutMs()) * time.Millisecond)}
		}
	} else {
		delete(e.syncs, id)
	}
	if a, ok := e.leaderAnswers[id]; ok && (g == nil || g.Generation != a.generation) {
		delete(e.leaderAnswers, id)
	}
	if r, ok := e.refusedPlans[id]; ok && (g == nil || g.Generation != r.generation || g.State != fsm.CompletingRebalance) {
		delete(e.refusedPlans, id)
	}
	e.answerLocked(id, g, now)
	e.notifyWatchesLocked(id)
}
