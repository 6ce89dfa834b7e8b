package fsm

import (
	"maps"
	"slices"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// admitCreateTopic validates a CreateTopic, changing nothing; retry
// reports a create that already happened.
func (s *State) admitCreateTopic(c *fsmv1.CreateTopic) (retry bool, err *errcode.ProtocolError) {
	if err := checkName("topic name", c.GetName()); err != nil {
		return false, err
	}
	if c.GetPartitions() <= 0 || c.GetPartitions() > MaxTopicPartitions {
		return false, errcode.Errorf(errcode.InvalidPartitions, "topic %q: %d partitions is outside 1..%d", c.GetName(), c.GetPartitions(), MaxTopicPartitions)
	}
	if n, ok := s.topics[c.GetName()]; ok {
		if n == c.GetPartitions() {
			return true, nil
		}
		return false, errcode.Errorf(errcode.TopicAlreadyExists, "topic %q exists with %d partitions", c.GetName(), n)
	}
	return false, s.checkTopicGrowth(c.GetName(), 0, c.GetPartitions())
}

func (s *State) createTopic(now int64, c *fsmv1.CreateTopic) *ApplyResult {
	if retry, err := s.admitCreateTopic(c); err != nil || retry {
		return &ApplyResult{Err: errOrNil(err)}
	}
	s.topics[c.GetName()] = c.GetPartitions()
	s.partitions += int64(c.GetPartitions())
	s.topicBytes += topicBytes(c.GetName())
	// Members may subscribe to a topic before it exists; its creation
	// changes what their group has to assign, as adding partitions does.
	// Commands written before this rule (version 0) left the groups as
	// they were, and replay so.
	s.topicResized(now, c.GetName(), 0, c.GetPartitions(), s.rules >= 1)
	return &ApplyResult{}
}

func (s *State) deleteTopic(now int64, c *fsmv1.DeleteTopic) *ApplyResult {
	n, ok := s.topics[c.GetName()]
	if !ok {
		return fail(errcode.Errorf(errcode.UnknownTopicOrPartition, "topic %q does not exist", c.GetName()))
	}
	delete(s.topics, c.GetName())
	s.partitions -= int64(n)
	s.topicBytes -= topicBytes(c.GetName())
	s.offsets.DeleteTopic(c.GetName())
	s.topicResized(now, c.GetName(), n, 0, true)
	return &ApplyResult{}
}

// admitAddPartitions validates an AddPartitions, changing nothing; retry
// reports an add that already happened.
func (s *State) admitAddPartitions(c *fsmv1.AddPartitions) (retry bool, err *errcode.ProtocolError) {
	n, ok := s.topics[c.GetName()]
	if !ok {
		return false, errcode.Errorf(errcode.UnknownTopicOrPartition, "topic %q does not exist", c.GetName())
	}
	switch {
	case c.GetPartitions() == n:
		return true, nil
	case c.GetPartitions() < n || c.GetPartitions() > MaxTopicPartitions:
		return false, errcode.Errorf(errcode.InvalidPartitions, "topic %q has %d partitions; the new count %d must be larger and at most %d", c.GetName(), n, c.GetPartitions(), MaxTopicPartitions)
	}
	return false, s.checkTopicGrowth(c.GetName(), n, c.GetPartitions())
}

func (s *State) addPartitions(now int64, c *fsmv1.AddPartitions) *ApplyResult {
	if retry, err := s.admitAddPartitions(c); err != nil || retry {
		return &ApplyResult{Err: errOrNil(err)}
	}
	n := s.topics[c.GetName()]
	s.topics[c.GetName()] = c.GetPartitions()
	s.partitions += int64(c.GetPartitions() - n)
	s.topicResized(now, c.GetName(), n, c.GetPartitions(), true)
	return &ApplyResult{}
}

// topicResized follows topic's partition count going from old to n (0:
// the topic does not exist) in every group with a member subscribed to
// it: its subscribed partitions change, and (rebalance) a settled group
// rebalances, since its plan no longer fits. Every consumer group
// subscribed to it moves to a new epoch.
func (s *State) topicResized(now int64, topic string, old, n int32, rebalance bool) {
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		if count(&s.groups[id].ix.topics, topic) == 0 {
			continue
		}
		g, _ := s.mutableGroup(id)
		g.ix.size.subscribed += int64(n) - int64(old)
		if rebalance && (g.State == Stable || g.State == CompletingRebalance) {
			s.prepareRebalance(now, g)
		}
	}
	// A consumer group (rules 5) whose members subscribe to the topic gets
	// a new epoch, its targets computed for the topic's new size.
	for _, g := range s.ConsumerGroups() {
		if g.hasMember(func(m *ConsumerMember) bool { return m.subscribes(topic) }) {
			s.putConsumerGroup(g.ID, s.rebalanced(now, g, g.Members.Slice(), g.Assignor))
		}
	}
}

func (s *State) registerNode(c *fsmv1.RegisterNode) *ApplyResult {
	if err := checkName("node_id", c.GetNodeId()); err != nil {
		return fail(err)
	}
	if err := checkName("grpc_address", c.GetGrpcAddress()); err != nil {
		return fail(err)
	}
	n := Node{ID: c.GetNodeId(), GRPCAddress: c.GetGrpcAddress(), RaftAddress: c.GetRaftAddress(), MaxCommandVersion: c.GetMaxCommandVersion()}
	if s.rules >= 5 {
		// Before rules 5 the field is ignored, so a replica that knows it
		// and one that does not stay identical.
		if k := c.GetKafkaAddress(); k != "" {
			if err := checkName("kafka_address", k); err != nil {
				return fail(err)
			}
			n.KafkaAddress = k
		}
	}
	if err := s.checkNodeGrowth(n); err != nil {
		return fail(err)
	}
	old, ok := s.nodes[n.ID]
	if ok {
		s.nodeBytes -= nodeBytes(old)
	}
	if n.MaxCommandVersion == 0 {
		n.MaxCommandVersion = old.MaxCommandVersion // not stated: kept
	}
	s.nodes[n.ID] = n
	s.nodeBytes += nodeBytes(n)
	return &ApplyResult{}
}
