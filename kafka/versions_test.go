package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/kafka"
)

// The newest versions of Kafka 4's clients (franz-go v1.22's kmsg too) for
// the APIs whose newest version changed what a broker answers:
//   - DescribeGroups v6 (KIP-1043): a group that does not exist is
//     GROUP_ID_NOT_FOUND with a message; before v6 it is Dead, no error.
//   - ConsumerGroupDescribe v1 (KIP-1099): each member's type is consumer.
//   - DescribeCluster v2: no broker is fenced.
//   - FindCoordinator v6: a share-group key (type 2) is refused as any
//     other type than a group's; group keys name the leader.
//   - Metadata v13 (KIP-1102): no top-level error.
//   - OffsetCommit and OffsetFetch v10 (Kafka 4.1, KIP-848): topics by ID;
//     one no topic has is UNKNOWN_TOPIC_ID, the others are committed and
//     fetched as by name. Metadata answers a topic asked for by ID (how
//     clients name the topics of an OffsetFetch v10 answer).
//   - DeleteGroups v3: a refused group says why. DeleteTopics v6: topics by
//     name or ID; an ID no topic has is UNKNOWN_TOPIC_ID.
func TestNewestVersions_AnsweredAsKafkaFourAnswers(t *testing.T) {
	c := startAuditCluster(t)
	r := dial(t, c.KafkaAddr(0))

	describe := func(v int16, groups ...string) []kmsg.DescribeGroupsResponseGroup {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.SetVersion(v)
		req.Groups = groups
		return r.do(req).(*kmsg.DescribeGroupsResponse).Groups
	}
	if gs := describe(6, "nope"); len(gs) != 1 || gs[0].ErrorCode != kerr.GroupIDNotFound.Code || gs[0].ErrorMessage == nil || *gs[0].ErrorMessage != "group nope not found" {
		t.Errorf("DescribeGroups v6 of an unknown group: %+v, want GROUP_ID_NOT_FOUND, \"group nope not found\"", gs)
	}
	if gs := describe(5, "nope"); len(gs) != 1 || gs[0].ErrorCode != 0 || gs[0].State != "Dead" {
		t.Errorf("DescribeGroups v5 of an unknown group: %+v, want Dead without an error", gs)
	}

	cgd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cgd.SetVersion(1)
	cgd.Groups = []string{"cg"}
	gs := r.do(cgd).(*kmsg.ConsumerGroupDescribeResponse).Groups
	if len(gs) != 1 || gs[0].ErrorCode != 0 || len(gs[0].Members) != 1 || gs[0].Members[0].MemberType != 1 {
		t.Errorf("ConsumerGroupDescribe v1 of cg: %+v, want one member of type consumer (1)", gs)
	}

	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.SetVersion(2)
	dc.IncludeFencedBrokers = true
	dr := r.do(dc).(*kmsg.DescribeClusterResponse)
	if dr.ErrorCode != 0 || len(dr.Brokers) != 1 || dr.Brokers[0].IsFenced || dr.Brokers[0].NodeID != kafka.BrokerID(c.Nodes[0].ID) {
		t.Errorf("DescribeCluster v2: %+v, want the one node, not fenced", dr)
	}

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.SetVersion(6)
	fc.CoordinatorKeys = []string{"cg"}
	if cs := r.do(fc).(*kmsg.FindCoordinatorResponse).Coordinators; len(cs) != 1 || cs[0].ErrorCode != 0 || cs[0].NodeID != kafka.BrokerID(c.Nodes[0].ID) {
		t.Errorf("FindCoordinator v6 of a group: %+v, want the leader", cs)
	}
	fc.CoordinatorType = 2 // share
	fc.CoordinatorKeys = []string{"sg:topic-id:0"}
	if cs := r.do(fc).(*kmsg.FindCoordinatorResponse).Coordinators; len(cs) != 1 || cs[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("FindCoordinator v6 of a share group: %+v, want INVALID_REQUEST", cs)
	}

	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(13)
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("orders")
	md.Topics = []kmsg.MetadataRequestTopic{mt}
	mr := r.do(md).(*kmsg.MetadataResponse)
	if mr.ErrorCode != 0 || len(mr.Topics) != 1 || len(mr.Topics[0].Partitions) != 4 {
		t.Errorf("Metadata v13 of orders: error %d, %d topics; want no error and orders' 4 partitions", mr.ErrorCode, len(mr.Topics))
	}

	// A standalone commit (generation -1) by ID, beside an ID no topic has.
	orders, missing := kafka.TopicID("orders"), kafka.TopicID("missing")
	byID := kmsg.NewPtrMetadataRequest()
	byID.SetVersion(12)
	for _, id := range [][16]byte{orders, missing} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.TopicID = id
		byID.Topics = append(byID.Topics, mt)
	}
	if mts := r.do(byID).(*kmsg.MetadataResponse).Topics; len(mts) != 2 || mts[0].Topic == nil || *mts[0].Topic != "orders" || mts[0].TopicID != orders ||
		len(mts[0].Partitions) != 4 || mts[1].TopicID != missing || mts[1].ErrorCode != kerr.UnknownTopicID.Code {
		t.Errorf("Metadata by the IDs of orders and of no topic: %+v, want orders (4 partitions) and UNKNOWN_TOPIC_ID", mts)
	}
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.SetVersion(10)
	oc.Group, oc.Generation = "by-id", -1
	for _, id := range [][16]byte{orders, missing} {
		ot := kmsg.NewOffsetCommitRequestTopic()
		ot.TopicID = id
		op := kmsg.NewOffsetCommitRequestTopicPartition()
		op.Partition, op.Offset = 2, 42
		ot.Partitions = append(ot.Partitions, op)
		oc.Topics = append(oc.Topics, ot)
	}
	ts := r.do(oc).(*kmsg.OffsetCommitResponse).Topics
	if len(ts) != 2 || ts[0].TopicID != orders || ts[0].Partitions[0].ErrorCode != 0 || ts[1].TopicID != missing || ts[1].Partitions[0].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("OffsetCommit v10: %+v, want orders committed and the unknown ID UNKNOWN_TOPIC_ID", ts)
	}
	fetch := func(topics ...[16]byte) []kmsg.OffsetFetchResponseGroupTopic {
		of := kmsg.NewPtrOffsetFetchRequest()
		of.SetVersion(10)
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = "by-id"
		for _, id := range topics {
			ft := kmsg.NewOffsetFetchRequestGroupTopic()
			ft.TopicID, ft.Partitions = id, []int32{2}
			g.Topics = append(g.Topics, ft)
		}
		of.Groups = []kmsg.OffsetFetchRequestGroup{g}
		gs := r.do(of).(*kmsg.OffsetFetchResponse).Groups
		if len(gs) != 1 || gs[0].ErrorCode != 0 {
			t.Fatalf("OffsetFetch v10 of %v: %+v", topics, gs)
		}
		return gs[0].Topics
	}
	if ft := fetch(orders, missing); len(ft) != 2 || ft[0].TopicID != orders || ft[0].Partitions[0].Offset != 42 ||
		ft[1].TopicID != missing || ft[1].Partitions[0].ErrorCode != kerr.UnknownTopicID.Code {
		t.Errorf("OffsetFetch v10 of orders and an unknown ID: %+v, want 42 and UNKNOWN_TOPIC_ID", ft)
	}
	if ft := fetch(); len(ft) != 1 || ft[0].TopicID != orders || len(ft[0].Partitions) != 1 || ft[0].Partitions[0].Offset != 42 {
		t.Errorf("OffsetFetch v10 of the whole group: %+v, want orders' partition 2 at 42, by ID", ft)
	}

	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.SetVersion(3)
	dg.Groups = []string{"nope"}
	if gs := r.do(dg).(*kmsg.DeleteGroupsResponse).Groups; len(gs) != 1 || gs[0].ErrorCode != kerr.GroupIDNotFound.Code || gs[0].ErrorMessage == nil {
		t.Errorf("DeleteGroups v3 of an unknown group: %+v, want GROUP_ID_NOT_FOUND with a message", gs)
	}

	for _, name := range []string{"doomed-by-name", "doomed-by-id"} {
		ct := kmsg.NewPtrCreateTopicsRequest()
		ct.SetVersion(7)
		ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: name, NumPartitions: 1, ReplicationFactor: -1}}
		if code := r.do(ct).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
			t.Fatalf("create %s: %v", name, kerr.ErrorForCode(code))
		}
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.SetVersion(6)
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("doomed-by-name")}, {TopicID: kafka.TopicID("doomed-by-id")}, {TopicID: missing}}
	dts := r.do(dt).(*kmsg.DeleteTopicsResponse).Topics
	if len(dts) != 3 || dts[0].ErrorCode != 0 || dts[0].TopicID != kafka.TopicID("doomed-by-name") ||
		dts[1].ErrorCode != 0 || dts[1].Topic == nil || *dts[1].Topic != "doomed-by-id" ||
		dts[2].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("DeleteTopics v6 by name, by ID and by an unknown ID: %+v", dts)
	}
	testcluster.WaitFor(t, 10*time.Second, "both doomed topics gone", func() (bool, string) {
		var a, b bool
		c.Nodes[0].FSM.Read(func(s *fsm.State) { _, a = s.Partitions("doomed-by-name"); _, b = s.Partitions("doomed-by-id") })
		return !a && !b, fmt.Sprintf("by name still there: %v, by ID: %v", a, b)
	})
}
