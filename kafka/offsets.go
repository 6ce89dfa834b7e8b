package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func (c *call) offsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetCommitResponse()
	req := &cohortv1.OffsetCommitRequest{GroupId: r.Group, Generation: r.Generation, MemberId: r.MemberID, InstanceId: optional(r.InstanceID)}
	if r.GetVersion() < 1 {
		req.Generation = -1
	}
	// From v10 topics are named by ID; one no topic has is answered
	// UNKNOWN_TOPIC_ID and not committed.
	byID := r.GetVersion() >= 10
	names := make([]string, len(r.Topics))
	ids := topicResolver{s: c.s}
	for i, t := range r.Topics {
		names[i] = t.Topic
		if byID {
			names[i], _ = ids.name(t.TopicID)
		}
		if byID && names[i] == "" {
			continue
		}
		for _, p := range t.Partitions {
			req.Offsets = append(req.Offsets, &cohortv1.OffsetCommitPartition{Topic: names[i], Partition: p.Partition, Offset: p.Offset, Metadata: optional(p.Metadata)})
		}
	}
	var out *cohortv1.OffsetCommitResponse
	var whole int16
	switch {
	case c.authorize(cohortv1.GroupCoordinator_OffsetCommit_FullMethodName, req) != nil:
		whole = kerr.GroupAuthorizationFailed.Code
	case byID && len(req.Offsets) == 0:
		// every topic unknown: nothing to commit
	default:
		var err error
		if out, err = c.s.cfg.Engine.OffsetCommit(ctx, req); err != nil {
			whole = kafkaCode(err)
		}
	}
	// The engine answers each partition in the order asked.
	results := out.GetPartitions()
	i := 0
	for ti, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, whole
			switch {
			case byID && names[ti] == "":
				rp.ErrorCode = kerr.UnknownTopicID.Code
			case whole == 0:
				rp.ErrorCode = nthCode(results, i)
				i++
			default:
				i++
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetFetch answers one group (before v8) or several (v8+).
func (c *call) offsetFetch(ctx context.Context, r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetFetchResponse()
	if r.GetVersion() < 8 {
		var topics []kmsg.OffsetFetchRequestGroupTopic
		for _, t := range r.Topics {
			topics = append(topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
		}
		g := c.fetchGroup(ctx, r.Group, topics, r.Topics == nil && r.GetVersion() >= 2)
		resp.ErrorCode = g.ErrorCode
		for _, t := range g.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				if g.ErrorCode != 0 && r.GetVersion() < 2 {
					rp.ErrorCode = g.ErrorCode // no group-level code before v2
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	ids := topicResolver{s: c.s}
	seen := make(map[string]bool, len(r.Groups))
	for _, rg := range r.Groups {
		if seen[rg.Group] {
			continue // answered once: a group's offsets may be most of the state
		}
		seen[rg.Group] = true
		if r.GetVersion() < 10 {
			resp.Groups = append(resp.Groups, c.fetchGroup(ctx, rg.Group, rg.Topics, rg.Topics == nil))
			continue
		}
		resp.Groups = append(resp.Groups, c.fetchGroupByID(ctx, rg, &ids))
	}
	return resp
}

// fetchGroupByID is fetchGroup from v10, where topics are named by ID: a
// topic asked for that no topic has is answered UNKNOWN_TOPIC_ID, and
// offsets of a topic no longer in the registry are left out of a whole
// group's (their topic has no ID a client could look up).
func (c *call) fetchGroupByID(ctx context.Context, rg kmsg.OffsetFetchRequestGroup, ids *topicResolver) kmsg.OffsetFetchResponseGroup {
	var known []kmsg.OffsetFetchRequestGroupTopic
	var unknown []kmsg.OffsetFetchResponseGroupTopic
	for _, t := range rg.Topics {
		if name, ok := ids.name(t.TopicID); ok {
			t.Topic = name
			known = append(known, t)
			continue
		}
		ut := kmsg.NewOffsetFetchResponseGroupTopic()
		ut.TopicID = t.TopicID
		for _, p := range t.Partitions {
			up := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			up.Partition, up.Offset, up.LeaderEpoch, up.ErrorCode = p, -1, -1, kerr.UnknownTopicID.Code
			ut.Partitions = append(ut.Partitions, up)
		}
		unknown = append(unknown, ut)
	}
	g := kmsg.NewOffsetFetchResponseGroup()
	g.Group = rg.Group
	if all := rg.Topics == nil; all || len(known) > 0 {
		g = c.fetchGroup(ctx, rg.Group, known, all)
	} else if c.authorize(cohortv1.GroupCoordinator_OffsetFetch_FullMethodName, &cohortv1.OffsetFetchRequest{GroupId: rg.Group}) != nil {
		g.ErrorCode = kerr.GroupAuthorizationFailed.Code // before saying which IDs name nothing
	}
	if g.ErrorCode != 0 {
		return g
	}
	topics := g.Topics[:0]
	c.s.cfg.FSM.Read(func(st *fsm.State) {
		for _, t := range g.Topics {
			if _, ok := st.Partitions(t.Topic); ok {
				t.TopicID = TopicID(t.Topic)
				topics = append(topics, t)
			}
		}
	})
	g.Topics = append(topics, unknown...)
	return g
}

// fetchGroup reads one group's committed offsets: every one when all,
// else those asked for (-1 for a partition without one). The engine's
// pages are read to the end.
func (c *call) fetchGroup(ctx context.Context, group string, topics []kmsg.OffsetFetchRequestGroupTopic, all bool) kmsg.OffsetFetchResponseGroup {
	g := kmsg.NewOffsetFetchResponseGroup()
	g.Group = group
	req := &cohortv1.OffsetFetchRequest{GroupId: group, PageSize: largestPage}
	if !all {
		for _, t := range topics {
			req.Partitions = append(req.Partitions, &cohortv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
		}
		if len(req.Partitions) == 0 {
			return g
		}
	}
	if err := c.authorize(cohortv1.GroupCoordinator_OffsetFetch_FullMethodName, req); err != nil {
		g.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return g
	}
	var parts []*cohortv1.OffsetFetchPartition
	for {
		out, err := c.s.cfg.Engine.OffsetFetch(ctx, req)
		if err != nil {
			g.ErrorCode = kafkaCode(err)
			return g
		}
		parts = append(parts, out.GetPartitions()...)
		if out.GetNextPageToken() == "" {
			break
		}
		req.PageToken = out.GetNextPageToken()
	}
	for i := 0; i < len(parts); {
		t := kmsg.NewOffsetFetchResponseGroupTopic()
		t.Topic = parts[i].GetTopic()
		for ; i < len(parts) && parts[i].GetTopic() == t.Topic; i++ {
			p := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			p.Partition, p.Offset, p.LeaderEpoch = parts[i].GetPartition(), parts[i].GetOffset(), -1
			if parts[i].GetOffset() >= 0 {
				p.Metadata = ptr(parts[i].GetMetadata())
			}
			t.Partitions = append(t.Partitions, p)
		}
		g.Topics = append(g.Topics, t)
	}
	return g
}

// offsetDelete deletes a group's committed offsets (admins only, as on the
// gRPC front). A whole-request refusal (no such group, not the
// coordinator) is the top-level error; each partition has its own.
func (c *call) offsetDelete(ctx context.Context, r *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	req := &cohortv1.DeleteOffsetsRequest{GroupId: r.Group}
	for _, t := range r.Topics {
		tp := &cohortv1.TopicPartitions{Topic: t.Topic}
		for _, p := range t.Partitions {
			tp.Partitions = append(tp.Partitions, p.Partition)
		}
		req.Partitions = append(req.Partitions, tp)
	}
	if err := c.authorize(cohortv1.GroupCoordinator_DeleteOffsets_FullMethodName, req); err != nil {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	out, err := c.s.cfg.Engine.DeleteOffsets(ctx, req)
	if err != nil {
		resp.ErrorCode = kafkaCode(err)
		return resp
	}
	results := out.GetPartitions()
	i := 0
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = nthCode(results, i)
			i++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// nthCode is the Kafka code of the i-th per-partition result of an engine
// answer (one per partition asked, in order); an answer short of it is an
// UNKNOWN_SERVER_ERROR rather than a silent success.
func nthCode[R interface{ GetError() cohortv1.ErrorCode }](results []R, i int) int16 {
	if i < len(results) {
		return itemCode(results[i].GetError())
	}
	return kerr.UnknownServerError.Code
}
