package coordinator

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// deadlines of one group's rebalance, leader-local.
type rebalanceTimer struct {
	generation int32
	at         time.Time // rebalance timeout
	delayAt    time.Time // end of the initial delay; zero if none
	firing     bool      // a CompleteJoin is in flight
}

// syncTimer is the deadline of one group's CompletingRebalance: members
// that have not synced by then are removed (Kafka's behaviour).
type syncTimer struct {
	generation int32
	at         time.Time
	firing     bool // a RemoveMembers is in flight
	// plans is the leader's SyncGroup proposals in flight: the removal
	// waits for them, and a plan is not proposed while a removal is in
	// flight, so the two never race in the log.
	plans int
}

// refusedPlan is the FSM's refusal of a leader's plan.
type refusedPlan struct {
	generation int32
	err        string
}

// sessionTable holds the members' session deadlines by group: a group's
// members are found without looking at every other group's.
type sessionTable map[string]map[string]time.Time

func (t sessionTable) get(k memberKey) (time.Time, bool) {
	at, ok := t[k.group][k.member]
	return at, ok
}

func (t sessionTable) set(k memberKey, at time.Time) {
	ms := t[k.group]
	if ms == nil {
		ms = map[string]time.Time{}
		t[k.group] = ms
	}
	ms[k.member] = at
}

func (t sessionTable) drop(k memberKey) {
	if ms := t[k.group]; ms != nil {
		delete(ms, k.member)
		if len(ms) == 0 {
			delete(t, k.group)
		}
	}
}

// len is the number of sessions.
func (t sessionTable) len() int {
	n := 0
	for _, ms := range t {
		n += len(ms)
	}
	return n
}

// sessionDeadline is when m's session expires if nothing is heard from it
// after now.
func sessionDeadline(now time.Time, m *fsm.Member) time.Time {
	return now.Add(time.Duration(m.SessionTimeoutMs) * time.Millisecond)
}

// touchSessionLocked restarts member's session: it was heard from at now.
// The member is looked up again in the FSM's current state, not in the
// caller's view of the group, which may predate the member's removal: a session
// started for a member that is gone would be expired on every tick.
func (e *Engine) touchSessionLocked(group, member string, now time.Time) {
	g, ok := e.fsm.Group(group)
	if !ok {
		return
	}
	if m, ok := g.Member(member); ok {
		e.sessions.set(memberKey{group, member}, sessionDeadline(now, m))
	}
}

// firstRetentionSweep is how long after gaining leadership the first
// offset retention sweep runs.
const firstRetentionSweep = time.Second

// tickLoop turns passed deadlines into commands for one leadership epoch.
func (e *Engine) tickLoop(ctx context.Context, epoch uint64) {
	t := time.NewTicker(e.cfg.Tick)
	defer t.Stop()
	retention := time.NewTicker(e.cfg.OffsetsRetentionCheckInterval)
	defer retention.Stop()
	// The first sweep comes soon after leadership is gained, not a whole
	// interval later: with leaders changing more often than the interval
	// (10 min by default) offsets would otherwise never expire.
	firstSweep := time.NewTimer(min(firstRetentionSweep, e.cfg.OffsetsRetentionCheckInterval))
	defer firstSweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-firstSweep.C:
			if !e.inEpoch(epoch) {
				return
			}
			e.expireOffsets(ctx)
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

// tick checks every deadline once and proposes what has passed.
func (e *Engine) tick(ctx context.Context, epoch uint64) {
	now := e.cfg.Now()
	e.mu.Lock()
	if e.epoch != epoch || !e.serving {
		e.mu.Unlock()
		return
	}
	e.prunePendingLocked(now)
	expired := e.expiredSessionsLocked(now)
	completions := e.dueCompletionsLocked(now)
	unsynced := e.dueSyncsLocked(now)
	consumers := e.dueConsumersLocked(now)
	e.mu.Unlock()

	for _, k := range consumers {
		go e.expireConsumer(ctx, k)
	}
	for _, x := range expired {
		go e.expire(ctx, x.group, x.members)
	}
	for _, x := range unsynced {
		go e.expireSync(ctx, x.group, x.generation, x.members)
	}
	for _, c := range completions {
		go e.completeJoin(ctx, c.group, c.generation, c.initialDelay)
	}
}

// prunePendingLocked forgets the member IDs handed out with
// MEMBER_ID_REQUIRED whose holder did not join within its session timeout.
func (e *Engine) prunePendingLocked(now time.Time) {
	for k, at := range e.pending {
		if now.After(at) {
			e.forgetPendingLocked(k)
		}
	}
}

// forgetPendingLocked drops a pending member ID.
func (e *Engine) forgetPendingLocked(k memberKey) {
	if _, ok := e.pending[k]; !ok {
		return
	}
	delete(e.pending, k)
	if e.pendingPerGroup[k.group]--; e.pendingPerGroup[k.group] <= 0 {
		delete(e.pendingPerGroup, k.group)
	}
}

// checkRoomFor decides whether a new dynamic member of group (g: the group,
// nil when it does not exist) may get a pending member ID: the group's
// members and pending IDs together stay within the members-per-group
// budget, and the leader's pending IDs within MaxPendingMembers.
func (e *Engine) checkRoomFor(group string, g *fsm.Group) error {
	limit := e.fsm.Budgets().MembersPerGroup
	if limit <= 0 {
		limit = e.cfg.Budgets.MembersPerGroup
	}
	members := 0
	if g != nil {
		members = g.Members.Len()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.pending) >= e.cfg.MaxPendingMembers {
		return errcode.Errorf(errcode.CoordinatorNotAvailable, "%d member IDs are handed out and not yet used to join, the most this leader keeps: retry later", len(e.pending))
	}
	if n := int64(members + e.pendingPerGroup[group]); n >= limit {
		return errcode.Errorf(errcode.GroupMaxSizeReached, "budget members-per-group: group %q has %d members and %d new ones about to join, the budget is %d", group, members, e.pendingPerGroup[group], limit)
	}
	return nil
}

// sessionExpiry is one group's members whose sessions passed.
type sessionExpiry struct {
	group   string
	members []string // sorted
}

// expiredSessionsLocked is where session timeouts are decided: a member
// whose deadline (last sign of life + its session timeout) has passed, that
// is not already being removed and is not parked at a barrier (a parked
// member is waiting on the group, not silent), expires. The members returned
// are marked expiring until their RemoveMembers is applied or refused.
// Groups come sorted by ID.
func (e *Engine) expiredSessionsLocked(now time.Time) []sessionExpiry {
	byGroup := map[string][]string{}
	for group, members := range e.sessions {
		for member, at := range members {
			k := memberKey{group, member}
			if now.After(at) && !e.expiring[k] && !e.hasWaiterLocked(group, member) {
				e.expiring[k] = true
				byGroup[group] = append(byGroup[group], member)
			}
		}
	}
	out := make([]sessionExpiry, 0, len(byGroup))
	for _, group := range slices.Sorted(maps.Keys(byGroup)) {
		members := byGroup[group]
		slices.Sort(members)
		out = append(out, sessionExpiry{group: group, members: members})
	}
	return out
}

// joinCompletion is a join phase whose rebalance timeout or initial delay
// has passed.
type joinCompletion struct {
	group        string
	generation   int32
	initialDelay bool
}

// dueCompletionsLocked marks and returns the join phases to complete.
func (e *Engine) dueCompletionsLocked(now time.Time) []joinCompletion {
	var out []joinCompletion
	for id, t := range e.rebalances {
		if t.firing {
			continue
		}
		switch {
		case now.After(t.at) && e.nobodyRejoinedLocked(id):
			// Kafka 2.4+: a round that only kept static members are in,
			// none of them rejoined, is not completed (the generation
			// would move on with a leader that never got a join answer);
			// it waits another rebalance timeout while their sessions run
			// out or they come back.
			g, _ := e.fsm.Group(id)
			t.at = now.Add(time.Duration(g.RebalanceTimeoutMs()) * time.Millisecond)
			e.log.Warn("rebalance timeout passed with no member rejoined; completion postponed", "group", id, "generation", t.generation, "members", g.Members.Len())
		case now.After(t.at):
			t.firing = true
			out = append(out, joinCompletion{id, t.generation, false})
		case !t.delayAt.IsZero() && !now.Before(t.delayAt):
			t.firing = true
			out = append(out, joinCompletion{id, t.generation, true})
		}
	}
	return out
}

// nobodyRejoinedLocked reports whether group is rebalancing with members,
// every one of them static and none rejoined.
func (e *Engine) nobodyRejoinedLocked(id string) bool {
	g, ok := e.fsm.Group(id)
	if !ok || g.State != fsm.PreparingRebalance || g.Members.Len() == 0 {
		return false
	}
	for _, m := range g.Members.All() {
		if m.Joined || m.InstanceID == "" {
			return false
		}
	}
	return true
}

// syncExpiry is one group's members that did not sync in time.
type syncExpiry struct {
	group      string
	generation int32
	members    []string // sorted
}

// dueSyncsLocked marks and returns the groups whose CompletingRebalance
// outlived its rebalance timeout, with the members that have not synced:
// the leader (the group would be Stable had its plan been applied) and
// every member without a SyncGroup parked. Groups come sorted by ID.
func (e *Engine) dueSyncsLocked(now time.Time) []syncExpiry {
	var out []syncExpiry
	for _, id := range slices.Sorted(maps.Keys(e.syncs)) {
		t := e.syncs[id]
		if t.firing || t.plans > 0 || !now.After(t.at) {
			continue
		}
		g, ok := e.fsm.Group(id)
		if !ok || g.State != fsm.CompletingRebalance || g.Generation != t.generation {
			continue
		}
		var members []string
		for _, m := range g.Members.All() {
			if m.ID == g.LeaderID || !e.hasWaiterLocked(id, m.ID) {
				members = append(members, m.ID)
			}
		}
		slices.Sort(members)
		t.firing = true
		out = append(out, syncExpiry{group: id, generation: t.generation, members: members})
	}
	return out
}

// expireSync removes the members of a group that did not sync within the
// rebalance timeout; the group rebalances without them.
func (e *Engine) expireSync(ctx context.Context, group string, generation int32, members []string) {
	cmd := &fsmv1.RemoveMembers{GroupId: group, Reason: fsmv1.RemoveReason_REMOVE_REASON_SYNC_TIMEOUT}
	for _, m := range members {
		cmd.Members = append(cmd.Members, &fsmv1.MemberRef{MemberId: m})
	}
	e.mu.Lock()
	refusal := e.refusedPlans[group]
	e.mu.Unlock()
	actx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
	defer cancel()
	_, err := e.propose(actx, &fsmv1.Command{Kind: &fsmv1.Command_RemoveMembers{RemoveMembers: cmd}})
	e.mu.Lock()
	if t := e.syncs[group]; t != nil && t.generation == generation {
		t.firing = false
	}
	e.mu.Unlock()
	if err != nil {
		e.log.Warn("removal of members that did not sync not applied", "group", group, "generation", generation, "members", members, "err", err)
		return
	}
	e.m.syncExpirations.Add(float64(len(members)))
	e.log.Warn("members removed: they did not sync within the rebalance timeout", "group", group, "generation", generation,
		"members", members, "refused_plan", refusal.err)
}

// noteRefusedPlan records why the FSM refused a leader's plan.
func (e *Engine) noteRefusedPlan(group string, generation int32, leader string, err error) {
	e.m.refusedPlans.Inc()
	e.mu.Lock()
	e.refusedPlans[group] = refusedPlan{generation: generation, err: err.Error()}
	e.mu.Unlock()
	e.log.Warn("group leader's assignment refused", "group", group, "generation", generation, "leader", leader, "err", err)
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
	if e.commits.sendHeld(group) {
		// Rejoins of the group are held or on their way to the log: the
		// completion waits for them (the next tick), or it would drop
		// members that did rejoin.
		e.mu.Lock()
		if t := e.rebalances[group]; t != nil && t.generation == generation {
			t.firing = false
		}
		e.mu.Unlock()
		return
	}
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
		e.log.Info("join phase completed", "group", group, "generation", res.Group.Generation, "members", res.Group.Members.Len(), "why", why)
	}
}
