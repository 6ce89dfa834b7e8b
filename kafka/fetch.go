package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
)

// fetch answers every partition as an empty log positioned at the offset
// asked for (high watermark, last stable offset = the fetch offset; log
// start 0): Cohort keeps no records, and an answer at the consumer's own
// offset never moves it (no OFFSET_OUT_OF_RANGE, no reset). It waits the
// request's max wait first (capped), as a broker with no new data does,
// so a consumer's fetch loop does not spin. Fetch sessions are declined
// (session ID 0): each fetch is a full one.
func (s *Server) fetch(r *kmsg.FetchRequest) kmsg.Response {
	resp := kmsg.NewPtrFetchResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		n, _ := s.topicPartitions(t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.PreferredReadReplica = p.Partition, -1
			if p.Partition < 0 || p.Partition >= n {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			} else {
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.FetchOffset, p.FetchOffset, 0
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	wait := min(time.Duration(r.MaxWaitMillis)*time.Millisecond, s.cfg.MaxFetchWait)
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
		}
	}
	return resp
}

// listOffsets answers offset 0 for every partition, whatever the
// timestamp asked for: an empty log's start and end.
func (s *Server) listOffsets(r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		n, _ := s.topicPartitions(t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Timestamp, rp.LeaderEpoch = p.Partition, -1, -1
			rp.Offset = 0 // kmsg's default is -1, which clients refuse as an offset
			if p.Partition < 0 || p.Partition >= n {
				rp.ErrorCode, rp.Offset = kerr.UnknownTopicOrPartition.Code, -1
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// topicPartitions is a topic's partition count in this node's registry.
func (s *Server) topicPartitions(topic string) (int32, bool) {
	var n int32
	var ok bool
	s.cfg.FSM.Read(func(st *fsm.State) { n, ok = st.Partitions(topic) })
	return n, ok
}
