package coordinator

import (
	"context"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// Consumer groups (Kafka's KIP-848 protocol): the FSM reconciles members
// on their heartbeats (fsm/consumer.go); the leader keeps what must not be
// replicated, each member's deadlines:
//   - its session: no heartbeat within ConsumerSessionTimeout, and the
//     member is removed;
//   - its revocation: a member told to give partitions up that has not
//     confirmed within its rebalance timeout is removed, so that the
//     partitions reach their new owner (Kafka's rule).
//
// A removal is a ConsumerHeartbeat with epoch -1 proposed by the leader.
// A new leader starts every deadline afresh from the replicated members.

// consumerDeadline is one consumer group member's deadlines.
type consumerDeadline struct {
	session  time.Time
	revokeBy time.Time // zero: not revoking
	firing   bool      // a removal is in flight
}

// ConsumerHeartbeat serves a consumer group member's heartbeat. A
// heartbeat that changes nothing is answered from the leader's state
// without a log entry; any other is applied through Raft. A join without
// a member ID (ConsumerGroupHeartbeat v0) gets one.
func (e *Engine) ConsumerHeartbeat(ctx context.Context, hb *fsmv1.ConsumerHeartbeat) (*fsm.ConsumerResult, error) {
	l := e.cfg.Limits
	if err := l.checkGroupID(hb.GetGroupId()); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"member_id", hb.GetMemberId(), l.MaxMemberIDBytes}, {"instance_id", hb.GetInstanceId(), l.MaxInstanceIDBytes}, {"client_id", hb.GetClientId(), l.MaxClientIDBytes}, {"rack_id", hb.GetRackId(), l.MaxClientIDBytes}} {
		if err := l.checkID(f.name, f.v, f.max, false); err != nil {
			return nil, err
		}
	}
	if len(hb.GetSubscribedTopics()) > l.MaxTopicsPerMember {
		return nil, invalid("subscribed_topics has %d entries, over the limit of %d", len(hb.GetSubscribedTopics()), l.MaxTopicsPerMember)
	}
	for _, t := range hb.GetSubscribedTopics() {
		if err := l.checkTopic("subscribed_topics[]", t); err != nil {
			return nil, err
		}
	}
	owned := 0
	for _, tp := range hb.GetOwned() {
		if err := l.checkTopic("owned[].topic", tp.GetTopic()); err != nil {
			return nil, err
		}
		owned += len(tp.GetPartitions())
	}
	if owned > l.MaxOffsetsPerCommit {
		return nil, invalid("owned names %d partitions, over the limit of %d", owned, l.MaxOffsetsPerCommit)
	}
	if hb.GetHasRegex() {
		if _, err := fsm.CompileTopicRegex(hb.GetSubscribedTopicRegex()); err != nil {
			return nil, err
		}
	}
	if hb.GetMemberEpoch() == 0 && hb.GetMemberId() == "" {
		hb.MemberId = newMemberID(hb.GetClientId(), l.MaxMemberIDBytes)
	}
	if hb.GetMemberId() == "" {
		return nil, invalid("member_id is empty: only a join (epoch 0) may leave it to the coordinator")
	}
	if err := e.awaitServing(ctx); err != nil {
		return nil, err
	}
	// The leader writes under the oldest rules any server applies, and
	// consumer groups need rules 5: until every server has registered a
	// cohortd that applies them (a fresh cluster's first second, or a
	// rolling upgrade), the answer is one Kafka clients retry.
	if r, ok := e.raft.(interface{ CommandRules() uint32 }); ok {
		switch rules := r.CommandRules(); {
		case rules < 5:
			return nil, errcode.Errorf(errcode.CoordinatorNotAvailable, "consumer groups need command rules 5 and the cluster writes under rules %d until every server has registered a cohortd that applies them: retry", rules)
		case rules < 6 && hb.GetHasRegex() && hb.GetSubscribedTopicRegex() == "":
			// No expression, where no member can have one: nothing to say.
			hb.HasRegex = false
		case rules < 6 && hb.GetHasRegex():
			return nil, errcode.Errorf(errcode.CoordinatorNotAvailable, "subscriptions by regular expression need command rules 6 and the cluster writes under rules %d until every server has registered a cohortd that applies them: retry", rules)
		}
	}
	if hb.GetMemberEpoch() > 0 {
		var quiet *fsm.ConsumerResult
		e.fsm.Read(func(s *fsm.State) {
			if g, ok := s.ConsumerGroup(hb.GetGroupId()); ok {
				quiet, _ = g.QuietHeartbeat(hb)
			}
		})
		if quiet != nil {
			e.touchConsumer(hb.GetGroupId(), quiet)
			e.m.heartbeats.Inc()
			return quiet, nil
		}
	}
	// A new group epoch sends every member's next heartbeat to the log at
	// once: they share entries as commits and joins do. A join or a leave
	// goes alone: its apply computes every member's target, O(members +
	// partitions), and hundreds of them in one entry (a large group
	// forming) would hold every replica's apply, and the reads behind it,
	// for a second at a time.
	cmd := &fsmv1.Command{Kind: &fsmv1.Command_ConsumerHeartbeat{ConsumerHeartbeat: hb}}
	var res *fsm.ApplyResult
	var err error
	if hb.GetMemberEpoch() > 0 {
		res, err = e.commits.submit(ctx, cmd)
	} else {
		res, err = e.propose(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if c := errcode.Of(res.Err); c == errcode.UnknownMemberID || c == errcode.FencedMemberEpoch {
			e.mu.Lock()
			delete(e.consumers, memberKey{hb.GetGroupId(), hb.GetMemberId()})
			e.mu.Unlock()
		}
		return nil, res.Err
	}
	e.touchConsumer(hb.GetGroupId(), res.Consumer)
	e.m.heartbeats.Inc()
	return res.Consumer, nil
}

// touchConsumer restarts the session of the member a result answers (or
// forgets it after its leave) and starts or clears its revocation
// deadline.
func (e *Engine) touchConsumer(group string, r *fsm.ConsumerResult) {
	now := e.cfg.Now()
	k := memberKey{group, r.MemberID}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.serving {
		return
	}
	d := e.consumers[k]
	switch {
	case r.Epoch == fsm.DepartedEpoch:
		// A static member that left keeps the session it had: once it
		// runs out without its instance back, the member is removed.
		if d == nil {
			e.consumers[k] = &consumerDeadline{session: now.Add(e.cfg.ConsumerSessionTimeout)}
		}
		return
	case r.Epoch < 0:
		delete(e.consumers, k)
		return
	case d == nil:
		d = &consumerDeadline{}
		e.consumers[k] = d
	}
	d.session = now.Add(e.cfg.ConsumerSessionTimeout)
	m, ok := r.Group.Member(r.MemberID)
	switch {
	case !ok || m.Revoking.Len() == 0:
		d.revokeBy = time.Time{}
	case d.revokeBy.IsZero():
		d.revokeBy = now.Add(time.Duration(m.RebalanceTimeoutMs) * time.Millisecond)
	}
}

// rebuildConsumersLocked starts every consumer group member's deadlines
// afresh: a new leader knows nothing of when they last heartbeated.
func (e *Engine) rebuildConsumersLocked(groups []*fsm.ConsumerGroup, now time.Time) {
	for _, g := range groups {
		for _, m := range g.Members.All() {
			d := &consumerDeadline{session: now.Add(e.cfg.ConsumerSessionTimeout)}
			if m.Revoking.Len() > 0 {
				d.revokeBy = now.Add(time.Duration(m.RebalanceTimeoutMs) * time.Millisecond)
			}
			e.consumers[memberKey{g.ID, m.ID}] = d
		}
	}
}

// dueConsumersLocked marks and returns the members whose session or
// revocation deadline passed.
func (e *Engine) dueConsumersLocked(now time.Time) []memberKey {
	var due []memberKey
	for k, d := range e.consumers {
		if d.firing {
			continue
		}
		if now.After(d.session) || !d.revokeBy.IsZero() && now.After(d.revokeBy) {
			d.firing = true
			due = append(due, k)
		}
	}
	return due
}

// expireConsumer removes a consumer group member whose deadline passed.
func (e *Engine) expireConsumer(ctx context.Context, k memberKey) {
	gone := true // a departed static member whose instance came back as another member, or a member removed since
	e.fsm.Read(func(s *fsm.State) {
		if g, ok := s.ConsumerGroup(k.group); ok {
			_, member := g.Member(k.member)
			gone = !member
		}
	})
	if gone {
		e.mu.Lock()
		delete(e.consumers, k)
		e.mu.Unlock()
		return
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
	defer cancel()
	res, err := e.propose(actx, &fsmv1.Command{Kind: &fsmv1.Command_ConsumerHeartbeat{ConsumerHeartbeat: &fsmv1.ConsumerHeartbeat{
		GroupId: k.group, MemberId: k.member, MemberEpoch: -1, RebalanceTimeoutMs: -1,
	}}})
	e.mu.Lock()
	if err == nil {
		delete(e.consumers, k)
	} else if d := e.consumers[k]; d != nil {
		d.firing = false
	}
	e.mu.Unlock()
	switch {
	case err != nil:
		e.log.Warn("consumer group member expiry not applied", "group", k.group, "member", k.member, "err", err)
	case res.Err != nil:
		e.log.Debug("consumer group member already gone", "group", k.group, "member", k.member, "err", res.Err)
	default:
		e.m.expirations.Inc()
		e.log.Info("consumer group member removed: no heartbeat within the session timeout, or no revocation within its rebalance timeout", "group", k.group, "member", k.member)
	}
}

// ConsumerHeartbeatInterval is the heartbeat interval consumer group
// members are told to keep.
func (e *Engine) ConsumerHeartbeatInterval() time.Duration { return e.cfg.ConsumerHeartbeatInterval }

// ConsumerGroups reads consumer groups as DescribeGroups reads groups (on
// the leader, after the read barrier): those named (nil in the answer for
// one that does not exist), or every one when ids is nil.
func (e *Engine) ConsumerGroups(ctx context.Context, ids []string) ([]*fsm.ConsumerGroup, error) {
	for _, id := range ids {
		if err := e.cfg.Limits.checkGroupID(id); err != nil {
			return nil, err
		}
	}
	if err := e.beforeRead(ctx, false); err != nil {
		return nil, err
	}
	var out []*fsm.ConsumerGroup
	e.fsm.Read(func(s *fsm.State) {
		if ids == nil {
			out = s.ConsumerGroups()
			return
		}
		for _, id := range ids {
			g, _ := s.ConsumerGroup(id)
			out = append(out, g)
		}
	})
	return out, nil
}
