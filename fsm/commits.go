package fsm

import (
	"maps"
	"slices"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/offsets"
)

// admitCommit validates a CommitOffsets against the state and the budgets,
// changing nothing: commitOffsets' first half, and the leader's pre-check.
// A refusal of the whole commit is in the result's Err; otherwise the
// result holds each partition's outcome and accepted counts those without
// an error.
func (s *State) admitCommit(c *fsmv1.CommitOffsets) (res *ApplyResult, accepted int) {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err), 0
	}
	if len(c.GetOffsets()) == 0 {
		return fail(errcode.Errorf(errcode.InvalidArgument, "commit names no offsets")), 0
	}
	if cg, ok := s.consumerGroups[c.GetGroupId()]; ok {
		return s.admitConsumerCommit(cg, c)
	}
	g, exists := s.groups[c.GetGroupId()]
	standalone := c.GetGeneration() == -1 && c.GetMemberId() == ""
	var member *Member
	switch {
	case standalone:
		if exists && g.Members.Len() > 0 {
			return fail(errcode.Errorf(errcode.IllegalGeneration, "group %q has members (%s, generation %d); a standalone commit needs an empty group", g.ID, g.State, g.Generation)), 0
		}
	case c.GetMemberId() == "":
		return fail(errcode.Errorf(errcode.UnknownMemberID, "commit at generation %d names no member", c.GetGeneration())), 0
	case !exists:
		return fail(errcode.Errorf(errcode.UnknownMemberID, "group %q does not exist, so member %q is unknown", c.GetGroupId(), c.GetMemberId())), 0
	default:
		m, ok := g.Member(c.GetMemberId())
		if !ok {
			// A static member's older incarnation, replaced by a newer
			// one: fenced, as its heartbeats and joins are (KIP-345).
			if cur, taken := g.MemberByInstance(c.GetInstanceId()); taken {
				return fail(errcode.Errorf(errcode.FencedInstanceID, "instance %q belongs to member %q, not %q", c.GetInstanceId(), cur.ID, c.GetMemberId())), 0
			}
			return fail(errcode.Errorf(errcode.UnknownMemberID, "member %q is not in group %q", c.GetMemberId(), g.ID)), 0
		}
		if c.GetInstanceId() != "" && m.InstanceID != c.GetInstanceId() {
			return fail(errcode.Errorf(errcode.FencedInstanceID, "member %q has instance_id %q, commit says %q", m.ID, m.InstanceID, c.GetInstanceId())), 0
		}
		if c.GetGeneration() != g.Generation {
			return fail(errcode.Errorf(errcode.IllegalGeneration, "group %q is at generation %d, commit names %d", g.ID, g.Generation, c.GetGeneration())), 0
		}
		if g.State == CompletingRebalance {
			return fail(errcode.Errorf(errcode.RebalanceInProgress, "group %q is waiting for generation %d's assignment", g.ID, g.Generation)), 0
		}
		member = m
	}

	res = &ApplyResult{Group: g, Partitions: make([]PartitionResult, len(c.GetOffsets()))}
	for i, o := range c.GetOffsets() {
		r := PartitionResult{Topic: o.GetTopic(), Partition: o.GetPartition()}
		r.Err = s.checkCommit(g, member, o)
		if r.Err == nil {
			accepted++
		}
		res.Partitions[i] = r
	}
	if accepted == 0 {
		return res, 0
	}
	if err := s.checkCommitGrowth(c.GetGroupId(), exists, c, res.Partitions); err != nil {
		return fail(err), 0
	}
	return res, accepted
}

// admitConsumerCommit is admitCommit for a consumer group: a member
// commits at its current epoch (the commit's generation field), or one a
// new group epoch advanced it over (rules 7: it held the same partitions),
// any partition (Kafka checks no ownership here); a commit without a
// member needs a group without members.
func (s *State) admitConsumerCommit(g *ConsumerGroup, c *fsmv1.CommitOffsets) (*ApplyResult, int) {
	switch {
	case c.GetMemberId() == "":
		if g.Members.Len() > 0 || c.GetGeneration() != -1 {
			return fail(errcode.Errorf(errcode.UnknownMemberID, "consumer group %q has %d members; a commit without a member needs an empty group and generation -1", g.ID, g.Members.Len())), 0
		}
	default:
		m, ok := g.Member(c.GetMemberId())
		if !ok {
			return fail(errcode.Errorf(errcode.UnknownMemberID, "member %q is not in consumer group %q", c.GetMemberId(), g.ID)), 0
		}
		if c.GetGeneration() != m.Epoch && !m.advancedOver(c.GetGeneration()) {
			return fail(errcode.Errorf(errcode.StaleMemberEpoch, "member %q of consumer group %q is at epoch %d, the commit says %d", m.ID, g.ID, m.Epoch, c.GetGeneration())), 0
		}
	}
	res := &ApplyResult{Partitions: make([]PartitionResult, len(c.GetOffsets()))}
	accepted := 0
	for i, o := range c.GetOffsets() {
		r := PartitionResult{Topic: o.GetTopic(), Partition: o.GetPartition()}
		if r.Err = s.checkCommit(nil, nil, o); r.Err == nil {
			accepted++
		}
		res.Partitions[i] = r
	}
	if accepted == 0 {
		return res, 0
	}
	if err := s.checkCommitGrowth(c.GetGroupId(), true, c, res.Partitions); err != nil {
		return fail(err), 0
	}
	return res, accepted
}

func (s *State) commitOffsets(now int64, c *fsmv1.CommitOffsets) *ApplyResult {
	res, accepted := s.admitCommit(c)
	if res.Err != nil || accepted == 0 {
		return res
	}
	if _, consumer := s.consumerGroups[c.GetGroupId()]; consumer {
		for i, o := range c.GetOffsets() {
			if res.Partitions[i].Err == nil {
				s.offsets.Put(c.GetGroupId(), offsetKey(o), offsets.Value{Offset: o.GetOffset(), Metadata: o.GetMetadata(), CommitTimestampMs: now, Generation: c.GetGeneration()})
			}
		}
		return res
	}
	g, exists := s.groups[c.GetGroupId()]
	if !exists {
		g = newGroup(c.GetGroupId(), s.epoch, now)
		s.groups[g.ID] = g
		s.touch(g)
	}
	for i, o := range c.GetOffsets() {
		if res.Partitions[i].Err != nil {
			continue
		}
		s.offsets.Put(g.ID, offsetKey(o), offsets.Value{
			Offset:            o.GetOffset(),
			Metadata:          o.GetMetadata(),
			CommitTimestampMs: now,
			Generation:        c.GetGeneration(),
		})
	}
	res.Group = g
	return res
}

// checkCommit applies the per-partition rules: the partition exists, the
// offset is not negative, and a member (of g) owns the partition, or
// (command rules 2) owned it in the previous generation and nobody owns
// it now: a cooperative member commits what it gives up in its revocation
// callback, after the sync that took it away (KIP-429) and before the
// next rebalance hands it to another member.
func (s *State) checkCommit(g *Group, member *Member, o *fsmv1.OffsetCommit) error {
	n, ok := s.topics[o.GetTopic()]
	if !ok || o.GetPartition() < 0 || o.GetPartition() >= n {
		return errcode.Errorf(errcode.UnknownTopicOrPartition, "partition %s/%d does not exist", o.GetTopic(), o.GetPartition())
	}
	if o.GetOffset() < 0 {
		return errcode.Errorf(errcode.InvalidArgument, "offset %d for %s/%d is negative", o.GetOffset(), o.GetTopic(), o.GetPartition())
	}
	if member == nil || member.Assignment.Owns(o.GetTopic(), o.GetPartition()) {
		return nil
	}
	if s.rules >= 2 && member.PreviousAssignment.Owns(o.GetTopic(), o.GetPartition()) {
		owner := ""
		for _, m := range g.Members.All() {
			if m.Assignment.Owns(o.GetTopic(), o.GetPartition()) {
				owner = m.ID
				break
			}
		}
		if owner == "" {
			return nil
		}
		return errcode.Errorf(errcode.NotOwner, "member %q gave up %s/%d in generation %d; member %q owns it now", member.ID, o.GetTopic(), o.GetPartition(), g.Generation, owner)
	}
	return errcode.Errorf(errcode.NotOwner, "member %q does not own %s/%d", member.ID, o.GetTopic(), o.GetPartition())
}

func (s *State) deleteGroups(c *fsmv1.DeleteGroups) *ApplyResult {
	if len(c.GetGroupIds()) == 0 {
		return fail(errcode.Errorf(errcode.InvalidArgument, "delete names no groups"))
	}
	res := &ApplyResult{Groups: make([]GroupResult, len(c.GetGroupIds()))}
	for i, id := range c.GetGroupIds() {
		r := GroupResult{GroupID: id}
		g, ok := s.groups[id]
		cg, consumer := s.consumerGroups[id]
		switch {
		case consumer && cg.Members.Len() > 0:
			r.Err = errcode.Errorf(errcode.NonEmptyGroup, "consumer group %q has %d members (%s)", id, cg.Members.Len(), cg.State())
		case consumer:
			s.putConsumerGroup(id, nil)
			s.offsets.DeleteGroup(id)
		case !ok:
			r.Err = errcode.Errorf(errcode.GroupIDNotFound, "group %q does not exist", id)
		case g.Members.Len() > 0:
			r.Err = errcode.Errorf(errcode.NonEmptyGroup, "group %q has %d members (%s)", id, g.Members.Len(), g.State)
		default:
			s.dropGroup(id)
			s.offsets.DeleteGroup(id)
		}
		res.Groups[i] = r
	}
	return res
}

// MaxDeleteOffsets bounds the partitions of one DeleteOffsets command.
const MaxDeleteOffsets = 100_000

// deleteOffsets removes committed offsets of one group, partition by
// partition (command rules 5). Each partition is answered in
// res.Partitions in the order asked; deleting an offset that is not there
// succeeds.
func (s *State) deleteOffsets(c *fsmv1.DeleteOffsets) *ApplyResult {
	id := c.GetGroupId()
	g, ok := s.groups[id]
	subscribed := func(topic string) bool { return count(&g.ix.topics, topic) > 0 }
	if cg, consumer := s.consumerGroups[id]; consumer {
		ok = true
		subscribed = func(topic string) bool {
			return cg.hasMember(func(m *ConsumerMember) bool { return slices.Contains(m.Topics, topic) })
		}
	}
	switch {
	case s.rules < 5:
		return fail(errcode.Errorf(errcode.InvalidArgument, "deleting offsets needs command rules 5; this entry was written under rules %d (a server of the cluster runs an older cohortd)", s.rules))
	case len(c.GetPartitions()) == 0:
		return fail(errcode.Errorf(errcode.InvalidArgument, "delete of group %q's offsets names no partitions", id))
	case len(c.GetPartitions()) > MaxDeleteOffsets:
		return fail(errcode.Errorf(errcode.InvalidArgument, "delete names %d partitions, over the limit of %d", len(c.GetPartitions()), MaxDeleteOffsets))
	case !ok:
		return fail(errcode.Errorf(errcode.GroupIDNotFound, "group %q does not exist", id))
	}
	res := &ApplyResult{Partitions: make([]PartitionResult, len(c.GetPartitions()))}
	doomed := map[offsets.Key]bool{}
	for i, p := range c.GetPartitions() {
		r := PartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()}
		if subscribed(p.GetTopic()) {
			r.Err = errcode.Errorf(errcode.GroupSubscribedToTopic, "members of group %q subscribe to topic %q, so its offsets stay", id, p.GetTopic())
		} else {
			doomed[offsets.Key{Topic: p.GetTopic(), Partition: p.GetPartition()}] = true
		}
		res.Partitions[i] = r
	}
	if len(doomed) > 0 {
		s.offsets.Expire(id, func(k offsets.Key, _ offsets.Value) bool { return doomed[k] })
	}
	return res
}

func (s *State) expireOffsets(now int64, c *fsmv1.ExpireOffsets) *ApplyResult {
	if c.GetRetentionMs() <= 0 {
		return fail(errcode.Errorf(errcode.InvalidArgument, "retention_ms %d must be positive", c.GetRetentionMs()))
	}
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		if g.Members.Len() > 0 {
			continue
		}
		s.offsets.Expire(id, func(_ offsets.Key, v offsets.Value) bool {
			return offsets.Expired(v, g.StateChangedMs, now, c.GetRetentionMs())
		})
		if s.offsets.GroupLen(id) == 0 && now-g.StateChangedMs >= c.GetRetentionMs() {
			s.dropGroup(id)
		}
	}
	if s.rules >= 5 {
		for _, g := range s.ConsumerGroups() {
			if g.Members.Len() > 0 {
				continue
			}
			s.offsets.Expire(g.ID, func(_ offsets.Key, v offsets.Value) bool {
				return offsets.Expired(v, g.StateChangedMs, now, c.GetRetentionMs())
			})
			if s.offsets.GroupLen(g.ID) == 0 && now-g.StateChangedMs >= c.GetRetentionMs() {
				s.putConsumerGroup(g.ID, nil)
			}
		}
	}
	return &ApplyResult{}
}

func offsetKey(o *fsmv1.OffsetCommit) offsets.Key {
	return offsets.Key{Topic: o.GetTopic(), Partition: o.GetPartition()}
}

// offsetBytes is a new offset's share of the state's size estimate.
func offsetBytes(topic, metadata string) int64 {
	return offsets.EntryBytes(offsets.Key{Topic: topic}, offsets.Value{Metadata: metadata})
}
