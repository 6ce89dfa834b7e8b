package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// fetch answers every partition as an empty log positioned at the offset
// asked for (high watermark, last stable offset = the fetch offset; log
// start 0): Cohort keeps no records, and an answer at the consumer's own
// offset never moves it (no OFFSET_OUT_OF_RANGE, no reset). It waits the
// request's max wait first (capped), as a broker with no new data does,
// so a consumer's fetch loop does not spin, and builds the answer after
// the wait, so that a waiting fetch holds no answer. Fetch sessions are
// declined (session ID 0): each fetch is a full one. A caller who may not
// list topics learns nothing of them (which partitions exist), as from
// Metadata: every partition is TOPIC_AUTHORIZATION_FAILED.
func (c *call) fetch(r *kmsg.FetchRequest) kmsg.Response {
	s := c.s
	wait := min(time.Duration(r.MaxWaitMillis)*time.Millisecond, s.cfg.MaxFetchWait)
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
		}
	}
	allowed := c.mayListTopics()
	resp := kmsg.NewPtrFetchResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		n, _ := s.topicPartitions(t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.PreferredReadReplica = p.Partition, -1
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.FetchOffset, p.FetchOffset, 0
			switch {
			case !allowed:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case p.Partition < 0 || p.Partition >= n:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			if rp.ErrorCode != 0 {
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// listOffsets answers offset 0 for every partition, whatever the
// timestamp asked for: an empty log's start and end (to a caller who may
// list topics; TOPIC_AUTHORIZATION_FAILED to one who may not, as fetch).
func (c *call) listOffsets(r *kmsg.ListOffsetsRequest) kmsg.Response {
	allowed := c.mayListTopics()
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		n, _ := c.s.topicPartitions(t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Timestamp, rp.LeaderEpoch = p.Partition, -1, -1
			rp.Offset = 0 // kmsg's default is -1, which clients refuse as an offset
			switch {
			case !allowed:
				rp.ErrorCode, rp.Offset = kerr.TopicAuthorizationFailed.Code, -1
			case p.Partition < 0 || p.Partition >= n:
				rp.ErrorCode, rp.Offset = kerr.UnknownTopicOrPartition.Code, -1
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// mayListTopics is whether the caller may learn the topics: the right
// Metadata asks for.
func (c *call) mayListTopics() bool {
	return c.authorize(cohortv1.Topics_ListTopics_FullMethodName, &cohortv1.ListTopicsRequest{}) == nil
}

// topicPartitions is a topic's partition count in this node's registry.
func (s *Server) topicPartitions(topic string) (int32, bool) {
	var n int32
	var ok bool
	s.cfg.FSM.Read(func(st *fsm.State) { n, ok = st.Partitions(topic) })
	return n, ok
}
