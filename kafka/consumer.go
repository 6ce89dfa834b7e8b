package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Consumer groups, Kafka's KIP-848 protocol (ConsumerGroupHeartbeat,
// ConsumerGroupDescribe): the FSM reconciles (fsm/consumer.go), the
// leader's engine keeps sessions (coordinator/consumer.go); here the wire
// form: topic IDs to and from names, and Kafka's fields.

// topicNames maps this node's topics' IDs to their names.
func (s *Server) topicNames() map[[16]byte]string {
	out := map[[16]byte]string{}
	s.cfg.FSM.Read(func(st *fsm.State) {
		for _, t := range st.Topics() {
			out[TopicID(t.Name)] = t.Name
		}
	})
	return out
}

func (c *call) consumerGroupHeartbeat(ctx context.Context, r *kmsg.ConsumerGroupHeartbeatRequest) kmsg.Response {
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	fail := func(code int16, err error) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = code, errMessage(err)
		return resp
	}
	hb := &fsmv1.ConsumerHeartbeat{
		GroupId: r.Group, MemberId: r.MemberID, MemberEpoch: r.MemberEpoch, InstanceId: optional(r.InstanceID), RackId: optional(r.RackID),
		RebalanceTimeoutMs: r.RebalanceTimeoutMillis, ClientId: c.h.clientID, ClientHost: c.c.host, ServerAssignor: optional(r.ServerAssignor),
	}
	if r.SubscribedTopicNames != nil {
		hb.HasTopics, hb.SubscribedTopics = true, r.SubscribedTopicNames
	}
	if r.SubscribedTopicRegex != nil {
		hb.HasRegex, hb.SubscribedTopicRegex = true, *r.SubscribedTopicRegex
	}
	if r.Topics != nil {
		names := topicResolver{s: c.s}
		hb.HasOwned = true
		for _, t := range r.Topics {
			if name, ok := names.name(t.TopicID); ok {
				hb.Owned = append(hb.Owned, &fsmv1.TopicPartitions{Topic: name, Partitions: t.Partitions})
			}
		}
	}
	method := cohortv1.GroupCoordinator_Heartbeat_FullMethodName
	switch r.MemberEpoch {
	case 0:
		method = cohortv1.GroupCoordinator_JoinGroup_FullMethodName
	case -1, -2:
		method = cohortv1.GroupCoordinator_LeaveGroup_FullMethodName
	}
	if err := c.authorize(method, &cohortv1.HeartbeatRequest{GroupId: r.Group, MemberId: r.MemberID}); err != nil {
		return fail(kerr.GroupAuthorizationFailed.Code, err)
	}
	res, err := c.s.cfg.Engine.ConsumerHeartbeat(ctx, hb)
	if err != nil {
		return fail(kafkaCode(err), err)
	}
	resp.MemberID, resp.MemberEpoch = ptr(res.MemberID), res.Epoch
	resp.HeartbeatIntervalMillis = int32(c.s.cfg.Engine.ConsumerHeartbeatInterval().Milliseconds())
	if res.Epoch >= 0 {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		for _, tp := range res.Assigned.Topics {
			at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			at.TopicID, at.Partitions = TopicID(tp.Topic), slices.Clone(tp.Partitions)
			a.Topics = append(a.Topics, at)
		}
		resp.Assignment = &a
	}
	return resp
}

func (c *call) consumerGroupDescribe(ctx context.Context, r *kmsg.ConsumerGroupDescribeRequest) kmsg.Response {
	resp := kmsg.NewPtrConsumerGroupDescribeResponse()
	ids := unique(r.Groups)
	if len(ids) == 0 {
		return resp // the engine would read no IDs as every group
	}
	fail := func(code int16, err error) kmsg.Response {
		for _, id := range ids {
			g := kmsg.NewConsumerGroupDescribeResponseGroup()
			g.Group, g.ErrorCode, g.ErrorMessage = id, code, errMessage(err)
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	if err := c.authorize(cohortv1.GroupCoordinator_DescribeGroups_FullMethodName, &cohortv1.DescribeGroupsRequest{GroupIds: ids}); err != nil {
		return fail(kerr.GroupAuthorizationFailed.Code, err)
	}
	groups, err := c.s.cfg.Engine.ConsumerGroups(ctx, ids)
	if err != nil {
		return fail(kafkaCode(err), err)
	}
	reveal := c.s.authz.RevealsMemberIDsTo(c.c.principal)
	for i, g := range groups {
		dg := kmsg.NewConsumerGroupDescribeResponseGroup()
		dg.Group = ids[i]
		if g == nil {
			dg.ErrorCode, dg.ErrorMessage = kerr.GroupIDNotFound.Code, ptr("no consumer group "+ids[i])
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		dg.State, dg.Epoch, dg.AssignmentEpoch, dg.AssignorName = consumerState(g), g.Epoch, g.AssignmentEpoch, g.Assignor
		for _, m := range g.Members.All() {
			dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			if reveal {
				dm.MemberID = m.ID
			}
			dm.MemberEpoch, dm.ClientID, dm.ClientHost, dm.SubscribedTopics = m.Epoch, m.ClientID, m.ClientHost, m.Topics
			dm.MemberType = consumerMemberType // v1; a member of a consumer group always joined with ConsumerGroupHeartbeat
			if m.Regex != "" {
				dm.SubscribedTopicRegex = ptr(m.Regex)
			}
			if m.InstanceID != "" {
				dm.InstanceID = ptr(m.InstanceID)
			}
			if m.RackID != "" {
				dm.RackID = ptr(m.RackID)
			}
			dm.Assignment, dm.TargetAssignment = wireAssignment(m.Assigned), wireAssignment(m.Target)
			dg.Members = append(dg.Members, dm)
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// consumerState is a consumer group's state as Kafka names it.
func consumerState(g *fsm.ConsumerGroup) string {
	switch g.State() {
	case fsm.ConsumerEmpty:
		return "Empty"
	case fsm.ConsumerReconciling:
		return "Reconciling"
	}
	return "Stable"
}

func wireAssignment(a fsm.Assignment) kmsg.Assignment {
	out := kmsg.NewAssignment()
	for _, tp := range a.Topics {
		at := kmsg.NewAssignmentTopicPartition()
		at.TopicID, at.Topic, at.Partitions = TopicID(tp.Topic), tp.Topic, slices.Clone(tp.Partitions)
		out.TopicPartitions = append(out.TopicPartitions, at)
	}
	return out
}
