package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// adminCode is an admin request's error as a Kafka code: a follower is
// NOT_CONTROLLER (the client asks Metadata who the controller is and
// sends it there), an authorization refusal TOPIC_AUTHORIZATION_FAILED.
func adminCode(err error) int16 {
	if c := errcode.Of(err); c == errcode.NotLeader || c == errcode.StaleCommand {
		return kerr.NotController.Code
	}
	return kafkaCode(err)
}

// defaultPartitions is a topic's partition count when CreateTopics asks
// for the broker's default (-1): Kafka's num.partitions default.
const defaultPartitions = 1

func (c *call) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreateTopicsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.ReplicationFactor = t.Topic, 1
		n := t.NumPartitions
		if n == -1 {
			n = defaultPartitions
		}
		req := &cohortv1.CreateTopicRequest{Name: t.Topic, Partitions: n}
		var err error
		switch {
		case len(t.ReplicaAssignment) > 0:
			rt.ErrorCode, err = kerr.InvalidReplicaAssignment.Code, errcode.Errorf(errcode.InvalidArgument, "Cohort keeps no replicas of partitions: a replica assignment cannot be given")
		case c.authorize(cohortv1.Topics_CreateTopic_FullMethodName, req) != nil:
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case r.ValidateOnly:
			if _, exists := c.partitions(t.Topic); exists {
				err = errcode.Errorf(errcode.TopicAlreadyExists, "topic %q already exists", t.Topic)
			} else if n < 1 {
				err = errcode.Errorf(errcode.InvalidPartitions, "topic %q: %d partitions", t.Topic, n)
			}
			rt.ErrorCode = adminCode(err)
		default:
			err = c.s.cfg.Engine.CreateTopic(ctx, t.Topic, n)
			rt.ErrorCode = adminCode(err)
		}
		rt.ErrorMessage = errMessage(err)
		if rt.ErrorCode == 0 {
			rt.TopicID, rt.NumPartitions = TopicID(t.Topic), n
		} else {
			rt.NumPartitions, rt.ReplicationFactor = -1, -1
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (c *call) partitions(topic string) (int32, bool) { return c.s.topicPartitions(topic) }

func (c *call) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteTopicsResponse()
	if r.GetVersion() < 6 {
		for _, name := range r.TopicNames {
			resp.Topics = append(resp.Topics, c.deleteTopic(ctx, name))
		}
		return resp
	}
	// From v6 a topic is named, or given by ID.
	ids := topicResolver{s: c.s}
	for _, t := range r.Topics {
		if t.Topic != nil {
			rt := c.deleteTopic(ctx, *t.Topic)
			if rt.ErrorCode == 0 {
				rt.TopicID = TopicID(*t.Topic)
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		name, ok := ids.name(t.TopicID)
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.TopicID = t.TopicID
		switch {
		case !ok:
			rt.ErrorCode, rt.ErrorMessage = kerr.UnknownTopicID.Code, ptr("no topic has this ID")
		default:
			// The name only to a caller that may delete it: an ID must not
			// reveal a name to anyone else.
			if named := c.deleteTopic(ctx, name); named.ErrorCode != kerr.TopicAuthorizationFailed.Code {
				rt.Topic, rt.ErrorCode, rt.ErrorMessage = named.Topic, named.ErrorCode, named.ErrorMessage
			} else {
				rt.ErrorCode = named.ErrorCode
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// deleteTopic deletes one topic by name, if the caller may.
func (c *call) deleteTopic(ctx context.Context, name string) kmsg.DeleteTopicsResponseTopic {
	rt := kmsg.NewDeleteTopicsResponseTopic()
	rt.Topic = ptr(name)
	if c.authorize(cohortv1.Topics_DeleteTopic_FullMethodName, &cohortv1.DeleteTopicRequest{Name: name}) != nil {
		rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		return rt
	}
	err := c.s.cfg.Engine.DeleteTopic(ctx, name)
	rt.ErrorCode, rt.ErrorMessage = adminCode(err), errMessage(err)
	return rt
}

func (c *call) createPartitions(ctx context.Context, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreatePartitionsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var err error
		switch {
		case c.authorize(cohortv1.Topics_AddPartitions_FullMethodName, &cohortv1.AddPartitionsRequest{Name: t.Topic, Partitions: t.Count}) != nil:
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case r.ValidateOnly:
			if n, ok := c.partitions(t.Topic); !ok {
				err = errcode.Errorf(errcode.UnknownTopicOrPartition, "topic %q does not exist", t.Topic)
			} else if t.Count <= n {
				err = errcode.Errorf(errcode.InvalidPartitions, "topic %q has %d partitions; the new count %d must be more", t.Topic, n, t.Count)
			}
			rt.ErrorCode, rt.ErrorMessage = adminCode(err), errMessage(err)
		default:
			err = c.s.cfg.Engine.AddPartitions(ctx, t.Topic, t.Count)
			rt.ErrorCode, rt.ErrorMessage = adminCode(err), errMessage(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
