package kafka_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/kafkatest"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// Hostile input on the wire: requests a real client never sends, each of
// which must be refused or answered at a bounded cost, leaving the node
// serving and the committed state as it was.

// auditBudgets are small budgets, so that a request naming one item more
// than a budget allows is small too.
func auditBudgets() fsm.Budgets {
	b := fsm.DefaultBudgets()
	b.Topics, b.Groups, b.MembersPerGroup, b.Partitions = 6, 6, 4, 40
	return b
}

// startAuditCluster is a one-node cluster serving Kafka under
// auditBudgets, with the topic orders (4 partitions) and a consumer group
// (KIP-848) "cg" of one member.
func startAuditCluster(t testing.TB) *testcluster.Cluster {
	t.Helper()
	opts := testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true}
	opts.Coordinator.Budgets = auditBudgets()
	opts.Coordinator.ConsumerHeartbeatInterval = 100 * time.Millisecond
	c := testcluster.Start(t, 1, opts)
	waitBrokers(t, c)
	r := dial(t, c.KafkaAddr(0))
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.SetVersion(7)
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "orders", NumPartitions: 4, ReplicationFactor: -1}}
	if code := r.do(ct).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create orders: %v", kerr.ErrorForCode(code))
	}
	testcluster.WaitFor(t, 10*time.Second, "the budgets and orders applied", func() (bool, string) {
		var n int32
		c.Nodes[0].FSM.Read(func(s *fsm.State) { n, _ = s.Partitions("orders") })
		return n == 4 && c.Nodes[0].FSM.Budgets() == auditBudgets(), fmt.Sprintf("orders has %d partitions, budgets %+v", n, c.Nodes[0].FSM.Budgets())
	})
	if resp := cgh(r, "cg", "member-1", 0, []string{"orders"}, nil, 30_000); resp.ErrorCode != 0 {
		t.Fatalf("consumer group join: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	return c
}

// sendOnly writes req without reading an answer.
func (r *raw) sendOnly(req kmsg.Request) {
	r.t.Helper()
	r.corr++
	r.send(kmsg.NewRequestFormatter(kmsg.FormatterClientID("audit")).AppendRequest(nil, req, r.corr))
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// TestHostile_ConsumerGroupDescribeOfNoGroups: a ConsumerGroupDescribe
// naming no group is answered with no group. (It once asked the engine for
// every consumer group, nil meaning all, and indexed the request's empty
// list with their positions: a panic that took the node down.)
func TestHostile_ConsumerGroupDescribeOfNoGroups(t *testing.T) {
	c := startAuditCluster(t)
	r := dial(t, c.KafkaAddr(0))
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{}
	if resp := r.do(req).(*kmsg.ConsumerGroupDescribeResponse); len(resp.Groups) != 0 {
		t.Fatalf("ConsumerGroupDescribe of no group answered %d groups, want none", len(resp.Groups))
	}
	apiVersionsOK(t, c.KafkaAddr(0))
}

// TestHostile_RepeatedNamesAreAnsweredOnce: a topic or group named many
// times in one request is answered once, as Kafka's broker answers
// Metadata (and as DescribeGroups already did): otherwise one small request
// naming a topic of many partitions, or a large group, thousands of times
// is an answer thousands of times that size.
func TestHostile_RepeatedNamesAreAnsweredOnce(t *testing.T) {
	c := startAuditCluster(t)
	r := dial(t, c.KafkaAddr(0))

	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	for _, name := range []string{"orders", "missing", "orders", "orders", "missing"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		md.Topics = append(md.Topics, mt)
	}
	if got := r.do(md).(*kmsg.MetadataResponse).Topics; len(got) != 2 || *got[0].Topic != "orders" || len(got[0].Partitions) != 4 || *got[1].Topic != "missing" {
		t.Fatalf("Metadata naming orders thrice and missing twice answered %d topics, want orders (4 partitions) and missing once each", len(got))
	}

	cgd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cgd.Groups = []string{"cg", "cg", "cg"}
	if got := r.do(cgd).(*kmsg.ConsumerGroupDescribeResponse).Groups; len(got) != 1 || got[0].Group != "cg" || len(got[0].Members) != 1 {
		t.Fatalf("ConsumerGroupDescribe naming cg thrice answered %d groups, want cg once", len(got))
	}

	of := kmsg.NewPtrOffsetFetchRequest()
	of.SetVersion(8)
	for range 3 {
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = "cg"
		of.Groups = append(of.Groups, g)
	}
	if got := r.do(of).(*kmsg.OffsetFetchResponse).Groups; len(got) != 1 || got[0].Group != "cg" {
		t.Fatalf("OffsetFetch naming cg thrice answered %d groups, want cg once", len(got))
	}
}

// TestHostile_ArraysOverTheBudgetsCloseTheConnection: a request whose
// list names more groups, topics, partitions or members than the
// cluster's budgets let exist (more states than a group can be in) is
// refused before any work, as a malformed request is: the connection
// closes and the node logs the list, its length and the bound. A request
// at the bound is served. Nothing committed changes.
func TestHostile_ArraysOverTheBudgetsCloseTheConnection(t *testing.T) {
	c := startAuditCluster(t)
	addr := c.KafkaAddr(0)
	b := auditBudgets()
	groups, topics := int(b.Groups), int(b.Topics)

	fc := func(n int) kmsg.Request {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.SetVersion(4)
		req.CoordinatorKeys = names("g", n)
		return req
	}
	md := func(n int) kmsg.Request {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(12)
		for _, name := range names("t", n) {
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, mt)
		}
		return req
	}
	dg := func(n int) kmsg.Request {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.SetVersion(5)
		req.Groups = names("g", n)
		return req
	}
	cases := []struct {
		name string
		req  kmsg.Request
	}{
		{"FindCoordinator keys", fc(groups + 1)},
		{"Metadata topics", md(topics + 1)},
		{"DescribeGroups groups", dg(groups + 1)},
		{"DeleteGroups groups", func() kmsg.Request {
			req := kmsg.NewPtrDeleteGroupsRequest()
			req.SetVersion(2)
			req.Groups = names("g", groups+1)
			return req
		}()},
		{"ConsumerGroupDescribe groups", func() kmsg.Request {
			req := kmsg.NewPtrConsumerGroupDescribeRequest()
			req.Groups = names("g", groups+1)
			return req
		}()},
		{"OffsetFetch groups", func() kmsg.Request {
			req := kmsg.NewPtrOffsetFetchRequest()
			req.SetVersion(8)
			for _, id := range names("g", groups+1) {
				g := kmsg.NewOffsetFetchRequestGroup()
				g.Group = id
				req.Groups = append(req.Groups, g)
			}
			return req
		}()},
		{"OffsetFetch partitions", func() kmsg.Request {
			req := kmsg.NewPtrOffsetFetchRequest()
			req.SetVersion(7)
			req.Group = "cg"
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic = "orders"
			for p := range b.Partitions + 1 {
				rt.Partitions = append(rt.Partitions, int32(p))
			}
			req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
			return req
		}()},
		{"Fetch topics", fetch(topics+1, 1)},
		{"Fetch partitions", fetch(1, int(b.Partitions)+1)},
		{"ListOffsets topics", listOffsets(topics+1, 1)},
		{"ListOffsets partitions", listOffsets(1, int(b.Partitions)+1)},
		{"LeaveGroup members", func() kmsg.Request {
			req := kmsg.NewPtrLeaveGroupRequest()
			req.SetVersion(5)
			req.Group = "classic"
			for _, id := range names("m", int(b.MembersPerGroup)+1) {
				m := kmsg.NewLeaveGroupRequestMember()
				m.MemberID = id
				req.Members = append(req.Members, m)
			}
			return req
		}()},
		{"CreateTopics topics", func() kmsg.Request {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.SetVersion(7)
			for _, name := range names("new", topics+1) {
				req.Topics = append(req.Topics, kmsg.CreateTopicsRequestTopic{Topic: name, NumPartitions: 1, ReplicationFactor: -1})
			}
			return req
		}()},
		{"DeleteTopics topics", func() kmsg.Request {
			req := kmsg.NewPtrDeleteTopicsRequest()
			req.SetVersion(5)
			req.TopicNames = append(names("gone", topics), "orders")
			return req
		}()},
		{"CreatePartitions topics", func() kmsg.Request {
			req := kmsg.NewPtrCreatePartitionsRequest()
			req.SetVersion(3)
			for _, name := range append(names("gone", topics), "orders") {
				req.Topics = append(req.Topics, kmsg.CreatePartitionsRequestTopic{Topic: name, Count: 8})
			}
			return req
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dial(t, addr)
			r.sendOnly(tc.req)
			r.closed(tc.name + " over its bound")
			apiVersionsOK(t, addr)
		})
	}

	// At the bound, each is served.
	r := dial(t, addr)
	if got := r.do(fc(groups)).(*kmsg.FindCoordinatorResponse).Coordinators; len(got) != groups {
		t.Fatalf("FindCoordinator of %d keys answered %d", groups, len(got))
	}
	if got := r.do(md(topics)).(*kmsg.MetadataResponse).Topics; len(got) != topics {
		t.Fatalf("Metadata of %d topics answered %d", topics, len(got))
	}
	if got := r.do(dg(groups)).(*kmsg.DescribeGroupsResponse).Groups; len(got) != groups {
		t.Fatalf("DescribeGroups of %d groups answered %d", groups, len(got))
	}
	if got := r.do(fetch(topics, int(b.Partitions)/topics)).(*kmsg.FetchResponse).Topics; len(got) != topics {
		t.Fatalf("Fetch of %d topics answered %d", topics, len(got))
	}
	if got := r.do(listOffsets(1, int(b.Partitions))).(*kmsg.ListOffsetsResponse).Topics; len(got) != 1 || len(got[0].Partitions) != int(b.Partitions) {
		t.Fatalf("ListOffsets of %d partitions answered %+v", b.Partitions, got)
	}

	// Nothing committed changed: orders keeps its partitions, cg its
	// member, and no topic or group was made.
	c.Nodes[0].FSM.Read(func(s *fsm.State) {
		n, _ := s.Partitions("orders")
		g, ok := s.ConsumerGroup("cg")
		if n != 4 || len(s.Topics()) != 1 || !ok || g.Members.Len() != 1 || len(s.Groups()) != 0 {
			t.Fatalf("after the refusals: orders %d partitions, %d topics, cg %v, %d classic groups; want 4, 1, one member, 0", n, len(s.Topics()), ok, len(s.Groups()))
		}
	})
}

// TestHostile_ListGroupsStatesFilterAsKafkaReadsIt: a states filter is
// read as Kafka reads one. Case does not matter, a state no group is in
// (Dead, or a name Kafka does not know) matches nothing rather than
// failing, and a filter of a hundred thousand repeats is answered as one
// naming each state once, on a connection that stays open.
func TestHostile_ListGroupsStatesFilterAsKafkaReadsIt(t *testing.T) {
	c := startAuditCluster(t)
	r := dial(t, c.KafkaAddr(0))
	list := func(filter ...string) map[string]string {
		t.Helper()
		req := kmsg.NewPtrListGroupsRequest()
		req.SetVersion(4)
		req.StatesFilter = filter
		resp := r.do(req).(*kmsg.ListGroupsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("ListGroups of %d states: %v", len(filter), kerr.ErrorForCode(resp.ErrorCode))
		}
		out := map[string]string{}
		for _, g := range resp.Groups {
			if _, twice := out[g.Group]; twice {
				t.Fatalf("ListGroups of %d states lists %s twice", len(filter), g.Group)
			}
			out[g.Group] = g.GroupState
		}
		return out
	}
	all := list()
	state, ok := all["cg"]
	if !ok || len(all) != 1 {
		t.Fatalf("unfiltered ListGroups: %v, want cg alone", all)
	}
	if got := list(strings.ToUpper(state)); got["cg"] != state || len(got) != 1 {
		t.Fatalf("ListGroups of %q: %v, want cg (%s)", strings.ToUpper(state), got, state)
	}
	for _, filter := range [][]string{{"Dead"}, {"NoSuchState"}, {"PreparingRebalance", "dead"}} {
		if got := list(filter...); len(got) != 0 {
			t.Fatalf("ListGroups of %v: %v, want no group", filter, got)
		}
	}
	var many []string
	for i := range 100_000 {
		many = append(many, []string{"stable", "EMPTY", "Dead", "reconciling", strings.ToLower(state)}[i%5])
	}
	if got := list(many...); got["cg"] != state || len(got) != 1 {
		t.Fatalf("ListGroups of %d repeated states: %v, want cg (%s)", len(many), got, state)
	}
}

// ListGroups v5 filters by group type as Kafka does: case does not
// matter, a type Cohort has no group of matches nothing, no filter lists
// both types, and each group says its type. kadm's ListGroupsByType,
// which drops the filter when a broker offers v4 at most, gets the consumer
// group alone.
func TestListGroups_TypesFilterAsKafkaReadsIt(t *testing.T) {
	c := startAuditCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A classic group: a standalone commit, through the gRPC API.
	if _, err := c.Groups(0).OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "cl", Generation: -1,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	r := dial(t, c.KafkaAddr(0))
	list := func(types ...string) map[string]string {
		t.Helper()
		req := kmsg.NewPtrListGroupsRequest()
		req.SetVersion(5)
		req.TypesFilter = types
		resp := r.do(req).(*kmsg.ListGroupsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("ListGroups of types %v: %v", types, kerr.ErrorForCode(resp.ErrorCode))
		}
		out := map[string]string{}
		for _, g := range resp.Groups {
			out[g.Group] = g.GroupType
		}
		return out
	}
	both := map[string]string{"cg": "consumer", "cl": "classic"}
	for _, tc := range []struct {
		types []string
		want  map[string]string
	}{
		{nil, both},
		{[]string{"consumer"}, map[string]string{"cg": "consumer"}},
		{[]string{"CLASSIC"}, map[string]string{"cl": "classic"}},
		{[]string{"Classic", "consumer", "share"}, both},
		{[]string{"share"}, map[string]string{}},
		{[]string{"streams", "no-such-type"}, map[string]string{}},
	} {
		if got := list(tc.types...); !maps.Equal(got, tc.want) {
			t.Errorf("ListGroups v5 of types %v: %v, want %v", tc.types, got, tc.want)
		}
	}

	adm := kadm.NewClient(kafkatest.NewClient(t, c.KafkaAddrs()))
	listed, err := adm.ListGroupsByType(ctx, []string{"consumer"})
	if err != nil {
		t.Fatal(err)
	}
	if got := listed.Groups(); !slices.Equal(got, []string{"cg"}) {
		t.Errorf("kadm ListGroupsByType(consumer): %v, want [cg]", got)
	}
}

// fetch is a Fetch of the given number of topics (orders, then others)
// with partitions partitions each, answered at once.
func fetch(topics, partitions int) kmsg.Request {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxWaitMillis = 0
	for _, name := range append([]string{"orders"}, names("t", topics-1)...) {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = name
		for p := range partitions {
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition = int32(p)
			ft.Partitions = append(ft.Partitions, fp)
		}
		req.Topics = append(req.Topics, ft)
	}
	return req
}

// listOffsets is a ListOffsets of the given number of topics (orders,
// then others) with partitions partitions each.
func listOffsets(topics, partitions int) kmsg.Request {
	req := kmsg.NewPtrListOffsetsRequest()
	req.SetVersion(7)
	for _, name := range append([]string{"orders"}, names("t", topics-1)...) {
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = name
		for p := range partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition = int32(p)
			lt.Partitions = append(lt.Partitions, lp)
		}
		req.Topics = append(req.Topics, lt)
	}
	return req
}
