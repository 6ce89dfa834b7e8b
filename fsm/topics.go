package fsm

import (
	"maps"
	"slices"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

func (s *State) createTopic(c *fsmv1.CreateTopic) *ApplyResult {
	if err := checkName("topic name", c.GetName()); err != nil {
		return fail(err)
	}
	if c.GetPartitions() <= 0 || c.GetPartitions() > MaxTopicPartitions {
		return fail(errcode.Errorf(errcode.InvalidPartitions, "topic %q: %d partitions is outside 1..%d", c.GetName(), c.GetPartitions(), MaxTopicPartitions))
	}
	if n, ok := s.topics[c.GetName()]; ok {
		if n == c.GetPartitions() {
			return &ApplyResult{} // a retried create
		}
		return fail(errcode.Errorf(errcode.TopicAlreadyExists, "topic %q exists with %d partitions", c.GetName(), n))
	}
	s.topics[c.GetName()] = c.GetPartitions()
	return &ApplyResult{}
}

func (s *State) deleteTopic(now int64, c *fsmv1.DeleteTopic) *ApplyResult {
	if _, ok := s.topics[c.GetName()]; !ok {
		return fail(errcode.Errorf(errcode.UnknownTopicOrPartition, "topic %q does not exist", c.GetName()))
	}
	delete(s.topics, c.GetName())
	s.offsets.DeleteTopic(c.GetName())
	s.rebalanceSubscribers(now, c.GetName())
	return &ApplyResult{}
}

func (s *State) addPartitions(now int64, c *fsmv1.AddPartitions) *ApplyResult {
	n, ok := s.topics[c.GetName()]
	if !ok {
		return fail(errcode.Errorf(errcode.UnknownTopicOrPartition, "topic %q does not exist", c.GetName()))
	}
	switch {
	case c.GetPartitions() == n:
		return &ApplyResult{} // a retried add
	case c.GetPartitions() < n || c.GetPartitions() > MaxTopicPartitions:
		return fail(errcode.Errorf(errcode.InvalidPartitions, "topic %q has %d partitions; the new count %d must be larger and at most %d", c.GetName(), n, c.GetPartitions(), MaxTopicPartitions))
	}
	s.topics[c.GetName()] = c.GetPartitions()
	s.rebalanceSubscribers(now, c.GetName())
	return &ApplyResult{}
}

// rebalanceSubscribers starts a rebalance in every settled group with a
// member subscribed to topic, whose partitions just changed.
func (s *State) rebalanceSubscribers(now int64, topic string) {
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		if g.State != Stable && g.State != CompletingRebalance {
			continue
		}
		if !slices.ContainsFunc(g.Members, func(m *Member) bool { return m.Subscribes(topic) }) {
			continue
		}
		g, _ = s.mutableGroup(id)
		s.prepareRebalance(now, g)
	}
}

func (s *State) registerNode(c *fsmv1.RegisterNode) *ApplyResult {
	if err := checkName("node_id", c.GetNodeId()); err != nil {
		return fail(err)
	}
	if err := checkName("grpc_address", c.GetGrpcAddress()); err != nil {
		return fail(err)
	}
	s.nodes[c.GetNodeId()] = Node{ID: c.GetNodeId(), GRPCAddress: c.GetGrpcAddress(), RaftAddress: c.GetRaftAddress()}
	return &ApplyResult{}
}
