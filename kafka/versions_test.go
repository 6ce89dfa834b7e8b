package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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
}
