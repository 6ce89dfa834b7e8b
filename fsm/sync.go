package fsm

import (
	"slices"
	"strings"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

func (s *State) syncAssignment(now int64, c *fsmv1.SyncAssignment) *ApplyResult {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	g, ok := s.groups[c.GetGroupId()]
	if !ok {
		return fail(errcode.Errorf(errcode.UnknownMemberID, "group %q does not exist, so member %q is unknown", c.GetGroupId(), c.GetMemberId()))
	}
	if _, ok := g.Member(c.GetMemberId()); !ok {
		return fail(errcode.Errorf(errcode.UnknownMemberID, "member %q is not in group %q", c.GetMemberId(), g.ID))
	}
	if c.GetGeneration() != g.Generation {
		return fail(errcode.Errorf(errcode.IllegalGeneration, "group %q is at generation %d, sync names %d", g.ID, g.Generation, c.GetGeneration()))
	}
	switch g.State {
	case PreparingRebalance:
		return fail(errcode.Errorf(errcode.RebalanceInProgress, "group %q is rebalancing", g.ID))
	case Stable:
		return &ApplyResult{Group: g} // a retried sync: the plan is already in place
	}
	if g.LeaderID != c.GetMemberId() {
		return fail(errcode.Errorf(errcode.InvalidAssignment, "member %q is not the leader of group %q (the leader is %q)", c.GetMemberId(), g.ID, g.LeaderID))
	}
	plan, perr := s.validatePlan(g, c.GetAssignments())
	if perr == nil {
		perr = s.checkPlanGrowth(g, plan)
	}
	if perr != nil {
		return fail(perr)
	}
	g, _ = s.mutableGroup(g.ID)
	for p, m := range g.Members.positions() {
		g.setAssignment(p, plan[m.ID])
	}
	g.State = Stable
	g.StateChangedMs = now
	return &ApplyResult{Group: g}
}

// validatePlan checks a leader's plan and returns it in canonical form.
func (s *State) validatePlan(g *Group, plan []*fsmv1.MemberAssignment) (map[string]Assignment, *errcode.ProtocolError) {
	out := make(map[string]Assignment, len(plan))
	// The owner of every partition the plan names: sized by the plan, never
	// by the topics' partition counts, so that a small plan over huge
	// topics costs a small apply on every replica.
	owners := map[topicPartition]string{}
	for _, ma := range plan {
		m, ok := g.Member(ma.GetMemberId())
		if !ok {
			return nil, errcode.Errorf(errcode.InvalidAssignment, "plan names member %q, which is not in generation %d of group %q", ma.GetMemberId(), g.Generation, g.ID)
		}
		if _, dup := out[m.ID]; dup {
			return nil, errcode.Errorf(errcode.InvalidAssignment, "plan names member %q twice", m.ID)
		}
		a := Assignment{UserData: slices.Clone(ma.GetAssignment().GetUserData())}
		for _, t := range ma.GetAssignment().GetTopics() {
			topic := t.GetTopic()
			n, ok := s.topics[topic]
			if !ok {
				return nil, errcode.Errorf(errcode.InvalidAssignment, "plan gives member %q topic %q, which does not exist", m.ID, topic)
			}
			if !m.Subscribes(topic) {
				return nil, errcode.Errorf(errcode.InvalidAssignment, "plan gives member %q topic %q, to which it does not subscribe", m.ID, topic)
			}
			for _, p := range t.GetPartitions() {
				if p < 0 || p >= n {
					return nil, errcode.Errorf(errcode.InvalidAssignment, "plan gives member %q partition %s/%d; topic %q has partitions 0..%d", m.ID, topic, p, topic, n-1)
				}
				tp := topicPartition{topic, p}
				if prev, taken := owners[tp]; taken {
					return nil, errcode.Errorf(errcode.InvalidAssignment, "plan gives partition %s/%d to both %q and %q", topic, p, prev, m.ID)
				}
				owners[tp] = m.ID
			}
			a.Topics = append(a.Topics, TopicPartitions{Topic: topic, Partitions: slices.Clone(t.GetPartitions())})
		}
		out[m.ID] = canonical(a)
	}
	return out, nil
}

// canonical sorts an assignment's topics and partitions and merges topics
// named more than once.
func canonical(a Assignment) Assignment {
	slices.SortStableFunc(a.Topics, func(x, y TopicPartitions) int { return strings.Compare(x.Topic, y.Topic) })
	merged := a.Topics[:0]
	for _, tp := range a.Topics {
		if n := len(merged); n > 0 && merged[n-1].Topic == tp.Topic {
			merged[n-1].Partitions = append(merged[n-1].Partitions, tp.Partitions...)
			continue
		}
		merged = append(merged, tp)
	}
	for i := range merged {
		slices.Sort(merged[i].Partitions)
	}
	a.Topics = merged
	return a
}

// topicPartition names one partition of a plan.
type topicPartition struct {
	topic     string
	partition int32
}
