package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/kafkatest"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/kafka"
	"github.com/cohortlabs/cohort/server"
)

// raw is a bare Kafka connection: requests written and answers read by
// hand, so that a test controls every byte.
type raw struct {
	t    testing.TB
	nc   net.Conn
	corr int32
}

func dial(t testing.TB, addr string) *raw {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &raw{t: t, nc: nc}
}

// do sends req at its version and reads the answer.
func (r *raw) do(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	r.corr++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("wire-test")).AppendRequest(nil, req, r.corr)
	r.send(frame)
	body := r.read()
	if got := int32(binary.BigEndian.Uint32(body)); got != r.corr {
		r.t.Fatalf("answer has correlation ID %d, want %d", got, r.corr)
	}
	body = body[4:]
	if req.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		body = body[1:] // the response header's empty tagged fields
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		r.t.Fatalf("%s answer: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

func (r *raw) send(b []byte) {
	r.t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *raw) read() []byte {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(r.nc, size[:]); err != nil {
		r.t.Fatalf("read: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r.nc, body); err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return body
}

// closed asserts the node closes the connection without an answer.
func (r *raw) closed(why string) {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := r.nc.Read(make([]byte, 1))
	if n != 0 || !(errors.Is(err, io.EOF) || isReset(err)) {
		r.t.Fatalf("%s: the connection stays open (read %d bytes, %v); want it closed", why, n, err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// frame is a request frame with the given header fields and body.
func frame(key, version int16, corr int32, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 0xffff) // null client ID
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func apiVersionsOK(t *testing.T, addr string) {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "wire-test", "1"
	resp := dial(t, addr).do(req).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("ApiVersions after a refused request: error %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
}

// TestWire_BadRequestsCloseTheConnectionAndTheNodeServesOn: a request over
// the size limit, one of an API or version not served, one whose body does
// not parse, and one whose header is cut short each close their connection
// without an answer, as a Kafka broker does; the node keeps serving every
// other connection and nothing committed changes.
func TestWire_BadRequestsCloseTheConnectionAndTheNodeServesOn(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 3)
	addr := c.KafkaAddr(0)
	cases := []struct {
		name  string
		bytes []byte
	}{
		{"a size over the limit", binary.BigEndian.AppendUint32(nil, uint32(kafka.DefaultMaxRequestBytes+1))},
		{"a negative size", binary.BigEndian.AppendUint32(nil, 0xffff_fff0)},
		{"an API not served (Produce)", frame(kmsg.Produce.Int16(), 9, 1, nil)},
		{"an unknown API key", frame(999, 0, 1, nil)},
		{"a version past the served range", frame(kmsg.JoinGroup.Int16(), 99, 1, nil)},
		{"a body that does not parse", frame(kmsg.JoinGroup.Int16(), 5, 1, []byte{0, 5, 'g'})},
		{"a client ID longer than the request", append(binary.BigEndian.AppendUint32(nil, 10), 0, 18, 0, 3, 0, 0, 0, 1, 0x7f, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dial(t, addr)
			r.send(tc.bytes)
			r.closed(tc.name)
			apiVersionsOK(t, addr)
		})
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	topic := "orders"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	resp := dial(t, addr).do(md).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 || len(resp.Topics[0].Partitions) != 3 {
		t.Fatalf("metadata of orders after the refusals: %+v", resp.Topics)
	}
}

// TestWire_ApiVersionsOfANewerVersion: ApiVersions at a version past the
// served one is answered in version 0 with UNSUPPORTED_VERSION and the
// served versions, so that the client retries with one.
func TestWire_ApiVersionsOfANewerVersion(t *testing.T) {
	c, _ := startCluster(t)
	r := dial(t, c.KafkaAddr(0))
	r.send(frame(kmsg.ApiVersions.Int16(), 99, 7, nil))
	body := r.read()
	if corr := int32(binary.BigEndian.Uint32(body)); corr != 7 {
		t.Fatalf("correlation ID %d, want 7", corr)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	if err := resp.ReadFrom(body[4:]); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("error %d, want UNSUPPORTED_VERSION", resp.ErrorCode)
	}
	served := map[int16][2]int16{}
	for _, k := range resp.ApiKeys {
		served[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	if v := served[kmsg.JoinGroup.Int16()]; v != [2]int16{0, 9} {
		t.Fatalf("JoinGroup versions %v, want 0 to 9", v)
	}
	if _, ok := served[kmsg.Produce.Int16()]; ok {
		t.Fatal("Produce is listed; Cohort keeps no records")
	}
}

// TestWire_LeaderCoordinatesFollowersRedirect: on every node
// FindCoordinator names the Raft leader and Metadata names it controller;
// a follower answers a group request NOT_COORDINATOR and an admin request
// NOT_CONTROLLER, and lists no groups, while the leader lists them.
func TestWire_LeaderCoordinatesFollowersRedirect(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 2)
	m := join(t, c, "solo", "redirects", kgo.RangeBalancer(), []string{"orders"})
	kafkatest.WaitBalanced(t, adm, "redirects", []*kafkatest.Member{m}, map[string]int32{"orders": 2})
	leader := c.Leader()
	leaderBroker := kafka.BrokerID(c.Nodes[leader].ID)
	for i := range c.Nodes {
		r := dial(t, c.KafkaAddr(i))
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.SetVersion(4)
		fc.CoordinatorKeys = []string{"redirects", "other"}
		fr := r.do(fc).(*kmsg.FindCoordinatorResponse)
		for _, co := range fr.Coordinators {
			if co.ErrorCode != 0 || co.NodeID != leaderBroker {
				t.Fatalf("node %d: FindCoordinator(%s) = broker %d, error %d; want the leader %d", i, co.Key, co.NodeID, co.ErrorCode, leaderBroker)
			}
		}
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(12)
		mr := r.do(md).(*kmsg.MetadataResponse)
		if mr.ControllerID != leaderBroker || len(mr.Brokers) != 3 {
			t.Fatalf("node %d: Metadata controller %d with %d brokers; want %d with 3", i, mr.ControllerID, len(mr.Brokers), leaderBroker)
		}

		lg := kmsg.NewPtrListGroupsRequest()
		lg.SetVersion(4)
		listed := r.do(lg).(*kmsg.ListGroupsResponse)
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.SetVersion(4)
		hb.Group, hb.MemberID, hb.Generation = "redirects", "nobody", 1
		hr := r.do(hb).(*kmsg.HeartbeatResponse)
		ct := kmsg.NewPtrCreateTopicsRequest()
		ct.SetVersion(7)
		ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "from-" + c.Nodes[i].ID, NumPartitions: 1, ReplicationFactor: -1}}
		cr := r.do(ct).(*kmsg.CreateTopicsResponse)
		if i == leader {
			if listed.ErrorCode != 0 || len(listed.Groups) != 1 || listed.Groups[0].Group != "redirects" || listed.Groups[0].ProtocolType != "consumer" {
				t.Fatalf("leader's ListGroups: %+v", listed)
			}
			if hr.ErrorCode != kerr.UnknownMemberID.Code {
				t.Fatalf("leader's Heartbeat for an unknown member: error %d, want UNKNOWN_MEMBER_ID", hr.ErrorCode)
			}
			if cr.Topics[0].ErrorCode != 0 {
				t.Fatalf("leader's CreateTopics: error %d", cr.Topics[0].ErrorCode)
			}
			continue
		}
		if listed.ErrorCode != 0 || len(listed.Groups) != 0 {
			t.Fatalf("follower %d lists %+v; want nothing (the leader coordinates every group)", i, listed.Groups)
		}
		if hr.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("follower %d: Heartbeat error %d, want NOT_COORDINATOR", i, hr.ErrorCode)
		}
		if cr.Topics[0].ErrorCode != kerr.NotController.Code {
			t.Fatalf("follower %d: CreateTopics error %d, want NOT_CONTROLLER", i, cr.Topics[0].ErrorCode)
		}
	}
}

// TestWire_KafkaAndGRPCGroupsDoNotMix: a group joined through one front
// refuses a member of the other, INCONSISTENT_GROUP_PROTOCOL, and keeps its
// members.
func TestWire_KafkaAndGRPCGroupsDoNotMix(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 2)
	leader := c.Leader()
	r := dial(t, c.KafkaAddr(leader))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A gRPC group first: a Kafka member is refused.
	grpcJoin := &cohortv1.JoinGroupRequest{GroupId: "grpc-first", ProtocolType: "consumer", SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 10_000,
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, Topics: []string{"orders"}}
	first, err := joinGRPC(ctx, c, leader, grpcJoin)
	if err != nil {
		t.Fatalf("gRPC join: %v", err)
	}
	if code := joinKafka(r, "grpc-first").ErrorCode; code != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("a Kafka member joining a gRPC group: error %d, want INCONSISTENT_GROUP_PROTOCOL", code)
	}
	if g, _ := c.Nodes[leader].FSM.Group("grpc-first"); g == nil || g.Members.Len() != 1 || g.Members.Slice()[0].ID != first.GetMemberId() {
		t.Fatalf("the gRPC group's members changed: %+v", g)
	}

	// A Kafka group first: a gRPC member is refused.
	if code := joinKafka(r, "kafka-first").ErrorCode; code != 0 {
		t.Fatalf("Kafka join: error %d", code)
	}
	grpcJoin.GroupId = "kafka-first"
	_, err = joinGRPC(ctx, c, leader, grpcJoin)
	if errcode.Of(err) != errcode.InconsistentGroupProtocol {
		t.Fatalf("a gRPC member joining a Kafka group: %v, want INCONSISTENT_GROUP_PROTOCOL", err)
	}
}

// joinGRPC joins through the gRPC front, taking the member-ID round trip.
func joinGRPC(ctx context.Context, c *testcluster.Cluster, node int, req *cohortv1.JoinGroupRequest) (*cohortv1.JoinGroupResponse, error) {
	resp, err := c.Nodes[node].Engine.JoinGroup(ctx, req, "127.0.0.1")
	if idErr, ok := errors.AsType[*coordinator.MemberIDRequiredError](err); ok {
		req.MemberId = idErr.MemberID
		resp, err = c.Nodes[node].Engine.JoinGroup(ctx, req, "127.0.0.1")
	}
	return resp, err
}

// joinKafka joins group as a new Kafka consumer (JoinGroup v9, with the
// MEMBER_ID_REQUIRED round trip) and returns the final answer.
func joinKafka(r *raw, group string) *kmsg.JoinGroupResponse {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"orders"}
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(9)
	req.Group, req.ProtocolType, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = group, "consumer", 10_000, 10_000
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
	resp := r.do(req).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode == kerr.MemberIDRequired.Code {
		req.MemberID = resp.MemberID
		resp = r.do(req).(*kmsg.JoinGroupResponse)
	}
	return resp
}

// TestWire_FetchAndListOffsetsAnswerAnEmptyLog: ListOffsets answers 0 for
// every partition of a topic, whatever the timestamp (an empty log's start
// and end); Fetch answers an empty partition at the offset asked for, so a
// consumer's position is never out of range; both answer an unknown
// partition UNKNOWN_TOPIC_OR_PARTITION.
func TestWire_FetchAndListOffsetsAnswerAnEmptyLog(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 2)
	r := dial(t, c.KafkaAddr(0))
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(7)
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "orders"
	for _, p := range []int32{0, 1, 2} {
		for _, ts := range []int64{-2, -1} { // earliest, latest
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition, lp.Timestamp = p, ts
			lt.Partitions = append(lt.Partitions, lp)
		}
	}
	lo.Topics = append(lo.Topics, lt)
	lr := r.do(lo).(*kmsg.ListOffsetsResponse)
	for _, p := range lr.Topics[0].Partitions {
		want, code := int64(0), int16(0)
		if p.Partition == 2 {
			want, code = -1, kerr.UnknownTopicOrPartition.Code
		}
		if p.Offset != want || p.ErrorCode != code {
			t.Fatalf("ListOffsets orders/%d: offset %d error %d, want %d error %d", p.Partition, p.Offset, p.ErrorCode, want, code)
		}
	}
	f := kmsg.NewPtrFetchRequest()
	f.SetVersion(12)
	f.MaxWaitMillis = 10
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "orders"
	for _, p := range []int32{1, 5} {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset = p, 42
		ft.Partitions = append(ft.Partitions, fp)
	}
	f.Topics = append(f.Topics, ft)
	fr := r.do(f).(*kmsg.FetchResponse)
	got := fr.Topics[0].Partitions
	if got[0].ErrorCode != 0 || got[0].HighWatermark != 42 || got[0].LastStableOffset != 42 || len(got[0].RecordBatches) != 0 {
		t.Fatalf("Fetch orders/1 at 42: %+v, want empty at high watermark 42", got[0])
	}
	if got[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("Fetch orders/5: error %d, want UNKNOWN_TOPIC_OR_PARTITION", got[1].ErrorCode)
	}
}

// cgh sends a ConsumerGroupHeartbeat v1.
func cgh(r *raw, group, member string, epoch int32, topics []string, owned []kmsg.ConsumerGroupHeartbeatRequestTopic, rebalanceMs int32) *kmsg.ConsumerGroupHeartbeatResponse {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.SetVersion(1)
	req.Group, req.MemberID, req.MemberEpoch, req.RebalanceTimeoutMillis = group, member, epoch, rebalanceMs
	req.SubscribedTopicNames, req.Topics = topics, owned
	return r.do(req).(*kmsg.ConsumerGroupHeartbeatResponse)
}

func held(resp *kmsg.ConsumerGroupHeartbeatResponse) int {
	n := 0
	if resp.Assignment != nil {
		for _, t := range resp.Assignment.Topics {
			n += len(t.Partitions)
		}
	}
	return n
}

// TestWire_ConsumerGroupDeadlines: the leader removes a consumer group
// member that stops heartbeating (session timeout), and one that does not
// confirm a revocation within its rebalance timeout, so that its
// partitions reach the member whose target they are.
func TestWire_ConsumerGroupDeadlines(t *testing.T) {
	opts := testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true}
	opts.Coordinator.ConsumerHeartbeatInterval = 100 * time.Millisecond
	opts.Coordinator.ConsumerSessionTimeout = time.Second
	c := testcluster.Start(t, 3, opts)
	waitBrokers(t, c)
	adm := kadm.NewClient(kafkatest.NewClient(t, c.KafkaAddrs()))
	createTopic(t, c, adm, "orders", 4)
	r := dial(t, c.KafkaAddr(c.Leader()))

	// a joins and holds everything; b joins: a must give up half.
	a := cgh(r, "deadlines", "member-a", 0, []string{"orders"}, nil, 400)
	if a.ErrorCode != 0 || held(a) != 4 {
		t.Fatalf("a's join: error %d, %d partitions", a.ErrorCode, held(a))
	}
	b := cgh(r, "deadlines", "member-b", 0, []string{"orders"}, nil, 60_000)
	a = cgh(r, "deadlines", "member-a", a.MemberEpoch, nil, nil, -1)
	if a.ErrorCode != 0 || held(a) != 2 {
		t.Fatalf("a after b's join: error %d, %d partitions, want 2 kept (revoking 2)", a.ErrorCode, held(a))
	}
	// a keeps heartbeating (its session stays alive) but never confirms;
	// b gets everything once a's rebalance timeout (400 ms) removed it.
	epochA := a.MemberEpoch
	testcluster.WaitFor(t, 10*time.Second, "b to hold every partition", func() (bool, string) {
		a = cgh(r, "deadlines", "member-a", epochA, nil, nil, -1)
		b = cgh(r, "deadlines", "member-b", b.MemberEpoch, nil, nil, -1)
		return b.ErrorCode == 0 && held(b) == 4, fmt.Sprintf("error %d, %d partitions", b.ErrorCode, held(b))
	})
	if a = cgh(r, "deadlines", "member-a", epochA, nil, nil, -1); a.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("a, heartbeating without confirming its revocation: error %d, want UNKNOWN_MEMBER_ID (removed)", a.ErrorCode)
	}
	// b stops heartbeating: gone after the session timeout (1 s).
	testcluster.WaitFor(t, 10*time.Second, "b's session to expire", func() (bool, string) {
		var state string
		c.Nodes[c.Leader()].FSM.Read(func(s *fsm.State) {
			if g, ok := s.ConsumerGroup("deadlines"); ok {
				state = g.State()
			}
		})
		return state == fsm.ConsumerEmpty, "state " + state
	})

	// A static member that left (epoch -2) is kept, holding its
	// partitions, for its session: then the leader removes it.
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.SetVersion(1)
	req.Group, req.MemberID, req.InstanceID, req.RebalanceTimeoutMillis, req.SubscribedTopicNames = "deadlines", "member-s", kmsg.StringPtr("instance-s"), 60_000, []string{"orders"}
	joinedAt := time.Now() // the session starts when the leader serves the join, after this
	if s := r.do(req).(*kmsg.ConsumerGroupHeartbeatResponse); s.ErrorCode != 0 || held(s) != 4 {
		t.Fatalf("the static member's join: error %d, %d partitions", s.ErrorCode, held(s))
	}
	if s := cgh(r, "deadlines", "member-s", -2, nil, nil, -1); s.ErrorCode != 0 || s.MemberEpoch != fsm.DepartedEpoch {
		t.Fatalf("the static member's leave: error %d, epoch %d, want %d", s.ErrorCode, s.MemberEpoch, fsm.DepartedEpoch)
	}
	testcluster.WaitFor(t, 10*time.Second, "the departed static member's session to expire", func() (bool, string) {
		var members int
		c.Nodes[c.Leader()].FSM.Read(func(s *fsm.State) {
			if g, ok := s.ConsumerGroup("deadlines"); ok {
				members = g.Members.Len()
			}
		})
		return members == 0, fmt.Sprintf("%d members", members)
	})
	if d := time.Since(joinedAt); d < time.Second {
		t.Fatalf("the departed static member was removed %v after its join, before its 1 s session ran out", d)
	}
}

// TestWire_ConsumerGroupsWaitForRules5: while a server of the cluster
// applies only command rules 4 (a rolling upgrade, or a fresh cluster
// whose nodes have not all registered), a consumer group heartbeat is
// answered COORDINATOR_NOT_AVAILABLE, which Kafka clients retry, and
// nothing is written; once every server applies rules 5 the same
// heartbeat joins.
func TestWire_ConsumerGroupsWaitForRules5(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 2)
	follower := (c.Leader() + 1) % len(c.Nodes)
	if err := c.Nodes[follower].FSM.LimitRules(4); err != nil {
		t.Fatal(err)
	}
	leader := c.Nodes[c.Leader()]
	testcluster.WaitFor(t, 30*time.Second, "the leader to write under rules 4", func() (bool, string) {
		return leader.Node.CommandRules() == 4, fmt.Sprintf("rules %d", leader.Node.CommandRules())
	})
	r := dial(t, c.KafkaAddr(c.Leader()))
	if resp := cgh(r, "upgrading", "m1", 0, []string{"orders"}, nil, 30_000); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("a join under rules 4: error %d, want COORDINATOR_NOT_AVAILABLE (retriable)", resp.ErrorCode)
	}
	if _, ok := leader.FSM.Group("upgrading"); ok {
		t.Fatal("a refused join created a group")
	}
	if err := c.Nodes[follower].FSM.LimitRules(fsm.CommandVersion); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the join once every server applies rules 5", func() (bool, string) {
		resp := cgh(r, "upgrading", "m1", 0, []string{"orders"}, nil, 30_000)
		return resp.ErrorCode == 0 && held(resp) == 2, fmt.Sprintf("error %d, %d partitions", resp.ErrorCode, held(resp))
	})
}

// TestWire_RollingUpgradeToRules6: while one server runs a cohortd that
// applies command rules 5 (a rolling upgrade under way), consumer groups
// are served by topic name, a subscription by regular expression is
// answered COORDINATOR_NOT_AVAILABLE (which Kafka clients retry) and
// written nowhere, and a static member's leave removes it, as under rules
// 5. Once that server is restarted on the new binary, the cluster writes
// under rules 6: the same heartbeat joins, and a static member's leave
// keeps it for its instance to return.
func TestWire_RollingUpgradeToRules6(t *testing.T) {
	const old = 2
	opts := testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true, MaxCommandRules: func(i int) uint32 {
		if i == old {
			return 5
		}
		return 0
	}}
	c := testcluster.Start(t, 3, opts)
	waitBrokers(t, c)
	adm := kadm.NewClient(kafkatest.NewClient(t, c.KafkaAddrs()))
	createTopic(t, c, adm, "orders", 2)
	rules := func() uint32 {
		if l := c.Leader(); l >= 0 {
			return c.Nodes[l].Node.CommandRules()
		}
		return 0 // no leader (an election after the old server's restart)
	}
	testcluster.WaitFor(t, 30*time.Second, "the cluster to write under rules 5", func() (bool, string) {
		return rules() == 5, fmt.Sprintf("rules %d", rules())
	})
	groupExists := func(id string) (ok bool) {
		c.Nodes[c.WaitServing()].FSM.Read(func(s *fsm.State) { _, ok = s.ConsumerGroup(id) })
		return ok
	}
	regex := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	regex.SetVersion(1)
	regex.Group, regex.MemberID, regex.RebalanceTimeoutMillis, regex.SubscribedTopicRegex = "by-regex", "m-regex", 30_000, kmsg.StringPtr("ord.*")
	static := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	static.SetVersion(1)
	static.Group, static.MemberID, static.InstanceID, static.RebalanceTimeoutMillis, static.SubscribedTopicNames = "statics", "m-static", kmsg.StringPtr("instance-1"), 30_000, []string{"orders"}

	r := dial(t, c.KafkaAddr(c.WaitServing()))
	if resp := r.do(regex).(*kmsg.ConsumerGroupHeartbeatResponse); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("a join by regular expression under rules 5: error %d, want COORDINATOR_NOT_AVAILABLE (retriable)", resp.ErrorCode)
	}
	if groupExists("by-regex") {
		t.Fatal("a refused join by regular expression created a group")
	}
	static.SubscribedTopicRegex = kmsg.StringPtr("") // no expression: as if not stated
	if resp := r.do(static).(*kmsg.ConsumerGroupHeartbeatResponse); resp.ErrorCode != 0 || held(resp) != 2 {
		t.Fatalf("a static join by name (and an empty expression) under rules 5: error %d, %d partitions", resp.ErrorCode, held(resp))
	}
	static.SubscribedTopicRegex = nil
	if resp := cgh(r, "statics", "m-static", -2, nil, nil, -1); resp.ErrorCode != 0 || resp.MemberEpoch != -1 {
		t.Fatalf("a static leave under rules 5: error %d, epoch %d, want -1 (removed)", resp.ErrorCode, resp.MemberEpoch)
	}

	// The upgrade's last step: the old server runs the new binary.
	c.Kill(old)
	c.RestartWith(old, func(cfg *server.Config) { cfg.MaxCommandRules = 0 })
	c.WaitServing()
	testcluster.WaitFor(t, 30*time.Second, "the cluster to write under rules 6", func() (bool, string) {
		return rules() == fsm.CommandVersion, fmt.Sprintf("rules %d", rules())
	})
	r = dial(t, c.KafkaAddr(c.WaitServing()))
	testcluster.WaitFor(t, 30*time.Second, "the join by regular expression", func() (bool, string) {
		resp := r.do(regex).(*kmsg.ConsumerGroupHeartbeatResponse)
		return resp.ErrorCode == 0 && held(resp) == 2, fmt.Sprintf("error %d, %d partitions", resp.ErrorCode, held(resp))
	})
	static.MemberID = "m-static-2"
	if resp := r.do(static).(*kmsg.ConsumerGroupHeartbeatResponse); resp.ErrorCode != 0 {
		t.Fatalf("a static join under rules 6: error %d", resp.ErrorCode)
	}
	if resp := cgh(r, "statics", "m-static-2", -2, nil, nil, -1); resp.ErrorCode != 0 || resp.MemberEpoch != fsm.DepartedEpoch {
		t.Fatalf("a static leave under rules 6: error %d, epoch %d, want %d (kept)", resp.ErrorCode, resp.MemberEpoch, fsm.DepartedEpoch)
	}
}

// TestWire_DescribeCluster: every node names the same brokers, by their
// registered Kafka addresses, and the Raft leader as controller.
func TestWire_DescribeCluster(t *testing.T) {
	c, _ := startCluster(t)
	leader := kafka.BrokerID(c.Nodes[c.Leader()].ID)
	want := map[int32]string{}
	for i, n := range c.Nodes {
		want[kafka.BrokerID(n.ID)] = c.KafkaAddr(i)
	}
	for i := range c.Nodes {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.SetVersion(1)
		req.EndpointType = 1
		resp := dial(t, c.KafkaAddr(i)).do(req).(*kmsg.DescribeClusterResponse)
		got := map[int32]string{}
		for _, b := range resp.Brokers {
			got[b.NodeID] = fmt.Sprintf("%s:%d", b.Host, b.Port)
		}
		if resp.ErrorCode != 0 || resp.ControllerID != leader || resp.ClusterID != kafka.ClusterID || !maps.Equal(got, want) {
			t.Fatalf("node %d: DescribeCluster error %d, controller %d, cluster %q, brokers %v; want controller %d, cluster %q, brokers %v",
				i, resp.ErrorCode, resp.ControllerID, resp.ClusterID, got, leader, kafka.ClusterID, want)
		}
	}
}
