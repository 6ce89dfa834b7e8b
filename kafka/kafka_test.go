package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/kafkatest"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/kafka"
)

// startCluster is a three-node cluster whose nodes serve the Kafka
// protocol, and an admin client of it.
func startCluster(t *testing.T) (*testcluster.Cluster, *kadm.Client) {
	t.Helper()
	opts := testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true}
	opts.Coordinator.MaxSessionTimeout = time.Minute
	opts.Coordinator.ConsumerHeartbeatInterval = 100 * time.Millisecond
	opts.Coordinator.ConsumerSessionTimeout = 10 * time.Second
	c := testcluster.Start(t, 3, opts)
	waitBrokers(t, c)
	return c, kadm.NewClient(kafkatest.NewClient(t, c.KafkaAddrs()))
}

// waitBrokers waits until every node names every node as a broker: a
// node's Kafka address enters the registry once the cluster writes under
// command rules 5, which is after every node registered once.
func waitBrokers(t testing.TB, c *testcluster.Cluster) {
	t.Helper()
	for i, n := range c.Nodes {
		testcluster.WaitFor(t, 30*time.Second, "every broker in the registry", func() (bool, string) {
			got := len(n.Cluster.KafkaBrokers())
			return got == len(c.Nodes), fmt.Sprintf("node %d names %d brokers", i, got)
		})
	}
}

// createTopic creates a topic through kadm and waits until every node has
// applied it (a follower answers Metadata from its own registry).
func createTopic(t *testing.T, c *testcluster.Cluster, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	kafkatest.CreateTopic(t, adm, topic, partitions)
	for i, n := range c.Nodes {
		testcluster.WaitFor(t, 10*time.Second, "the topic on every node", func() (bool, string) {
			var got int32
			n.FSM.Read(func(s *fsm.State) { got, _ = s.Partitions(topic) })
			return got == partitions, fmt.Sprintf("node %d has %d partitions of %s", i, got, topic)
		})
	}
}

func join(t *testing.T, c *testcluster.Cluster, name, group string, balancer kgo.GroupBalancer, topics []string, extra ...kgo.Opt) *kafkatest.Member {
	t.Helper()
	return kafkatest.Join(t, c.KafkaAddrs(), name, group, balancer, topics, extra...)
}

// TestKafka_ConsumerGroups: kgo consumer groups with each of Kafka's
// client-side balancers run their whole lifecycle against a three-node
// cluster through the Kafka listener: members join, the assignment is
// complete and disjoint (as the members see it and as DescribeGroups
// says), members leave and join, and every change rebalances again.
func TestKafka_ConsumerGroups(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 12)
	createTopic(t, c, adm, "payments", 5)
	partitions := map[string]int32{"orders": 12, "payments": 5}
	topics := slices.Sorted(maps.Keys(partitions))
	balancers := map[string]func() kgo.GroupBalancer{
		"range":              kgo.RangeBalancer,
		"roundrobin":         kgo.RoundRobinBalancer,
		"sticky":             kgo.StickyBalancer,
		"cooperative-sticky": kgo.CooperativeStickyBalancer,
	}
	for _, name := range slices.Sorted(maps.Keys(balancers)) {
		t.Run(name, func(t *testing.T) {
			group := "g-" + name
			var members []*kafkatest.Member
			for i := range 4 {
				members = append(members, join(t, c, fmt.Sprintf("%s-%d", name, i), group, balancers[name](), topics))
			}
			kafkatest.WaitBalanced(t, adm, group, members, partitions)

			members[0].Stop()
			members[3].Stop()
			members = members[1:3]
			kafkatest.WaitBalanced(t, adm, group, members, partitions)

			members = append(members, join(t, c, name+"-4", group, balancers[name](), topics))
			kafkatest.WaitBalanced(t, adm, group, members, partitions)
		})
	}
}

// TestKafka_TwentyMembers: twenty members of one group end with a
// complete and disjoint assignment.
func TestKafka_TwentyMembers(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "events", 64)
	var members []*kafkatest.Member
	for i := range 20 {
		members = append(members, join(t, c, fmt.Sprintf("m%02d", i), "big", kgo.CooperativeStickyBalancer(), []string{"events"}))
	}
	kafkatest.WaitBalanced(t, adm, "big", members, map[string]int32{"events": 64})
}

// TestKafka_StaticMembersRestartWithoutRebalance: a static member (KIP-345,
// kgo's InstanceID) that restarts within its session takes its old slot:
// the group keeps its generation and the member gets its partitions back.
func TestKafka_StaticMembersRestartWithoutRebalance(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 6)
	partitions := map[string]int32{"orders": 6}
	static := func(i int) *kafkatest.Member {
		return join(t, c, fmt.Sprintf("s%d", i), "statics", kgo.RangeBalancer(), []string{"orders"}, kgo.InstanceID(fmt.Sprintf("instance-%d", i)))
	}
	members := []*kafkatest.Member{static(0), static(1), static(2)}
	kafkatest.WaitBalanced(t, adm, "statics", members, partitions)
	// A member that is not the group leader: a replaced leader rebalances
	// the group (it computes the plan), as in Kafka.
	var g *fsm.Group
	testcluster.WaitFor(t, 10*time.Second, "the group on the leader", func() (bool, string) {
		g, _ = c.Nodes[c.Leader()].FSM.Group("statics")
		return g != nil && g.State == fsm.Stable, "not Stable"
	})
	r := slices.IndexFunc(members, func(m *kafkatest.Member) bool {
		leader, _ := g.Member(g.LeaderID)
		return m.Name != leader.ClientID
	})
	_, gen := members[r].Client.GroupMetadata()
	held := slices.Sorted(slices.Values(members[r].Holding()))

	// Closing a static member's client does not leave the group (kgo, as
	// Kafka's clients, leaves only dynamic members on close).
	members[r].Stop()
	members[r] = static(r)
	kafkatest.WaitBalanced(t, adm, "statics", members, partitions)
	if got := slices.Sorted(slices.Values(members[r].Holding())); !slices.Equal(got, held) {
		t.Fatalf("the restarted static member holds %v, before %v", got, held)
	}
	for _, m := range members {
		if _, g := m.Client.GroupMetadata(); g != gen {
			t.Fatalf("%s is at generation %d, the group was at %d before the restart: a static restart must not rebalance", m.Name, g, gen)
		}
	}
}

// TestKafka_CommitsSurviveLeaderKill: members commit with kgo's
// CommitOffsetsSync, kadm fetches the commits back; the Raft leader (the
// coordinator) is killed, kgo finds the new coordinator, the group keeps
// its generation (it does not go back), every commit acknowledged before
// the kill is still there, and members commit again through the new leader.
func TestKafka_CommitsSurviveLeaderKill(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 8)
	partitions := map[string]int32{"orders": 8}
	var members []*kafkatest.Member
	for i := range 3 {
		members = append(members, join(t, c, fmt.Sprintf("c%d", i), "billing", kgo.RangeBalancer(), []string{"orders"}))
	}
	kafkatest.WaitBalanced(t, adm, "billing", members, partitions)
	acked := kafkatest.Offsets{}
	for _, m := range members {
		kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 1000), acked)
	}
	if got := kafkatest.FetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("kadm fetched %v, the members committed %v", got, acked)
	}
	_, genBefore := members[0].Client.GroupMetadata()

	leader := c.Leader()
	c.Kill(leader)
	c.WaitServing()
	// A new admin client, as an operator's next command would be: a
	// long-lived franz-go client sends sharded coordinator requests
	// (OffsetFetch v8) to its cached coordinator until its metadata, up to
	// 5 minutes old, drops the dead broker; a Kafka broker's death costs it
	// the same. The members' own requests re-resolve at once.
	adm = kadm.NewClient(kafkatest.NewClient(t, c.KafkaAddrs()))
	if got := kafkatest.FetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("after the leader's kill kadm fetched %v, the members had committed %v", got, acked)
	}
	kafkatest.WaitBalanced(t, adm, "billing", members, partitions)
	for _, m := range members {
		if _, gen := m.Client.GroupMetadata(); gen < genBefore {
			t.Fatalf("%s is at generation %d after the failover, %d before: the group lost its generation", m.Name, gen, genBefore)
		}
	}
	for _, m := range members {
		kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 2000), acked)
	}
	if got := kafkatest.FetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("after the failover kadm fetched %v, the members committed %v", got, acked)
	}
	c.Restart(leader)
}

// TestKafka_AdminMatchesTheGRPCFront: kadm's admin calls through the Kafka
// listener and the gRPC API (what cohortctl calls) see and change the same
// state: topics (create, add partitions, delete, list), groups (list,
// describe, delete), offsets (standalone commit, fetch, delete, with
// OffsetDelete refusing a subscribed topic) and the cluster's brokers.
func TestKafka_AdminMatchesTheGRPCFront(t *testing.T) {
	c, adm := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Leader()

	createTopic(t, c, adm, "orders", 4)
	createTopic(t, c, adm, "audit", 2)
	if _, err := adm.UpdatePartitions(ctx, 6, "audit"); err != nil {
		t.Fatalf("update partitions: %v", err)
	}
	if _, err := adm.DeleteTopics(ctx, "orders"); err != nil {
		t.Fatalf("delete topics: %v", err)
	}
	createTopic(t, c, adm, "orders", 3)
	grpcTopics, err := c.Topics(leader).ListTopics(ctx, &cohortv1.ListTopicsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, tp := range grpcTopics.GetTopics() {
		want[tp.GetTopic()] = int(tp.GetPartitions())
	}
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for name, d := range listed {
		got[name] = len(d.Partitions)
	}
	if !maps.Equal(got, want) || !maps.Equal(got, map[string]int{"orders": 3, "audit": 6}) {
		t.Fatalf("kadm lists topics %v, gRPC %v; want orders:3 audit:6", got, want)
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 3 || md.Controller != kafka.BrokerID(c.Nodes[leader].ID) || md.Cluster != kafka.ClusterID {
		t.Fatalf("metadata: %d brokers, controller %d (leader %d), cluster %q", len(md.Brokers), md.Controller, kafka.BrokerID(c.Nodes[leader].ID), md.Cluster)
	}

	// A live group, and offsets of a group without members.
	m := join(t, c, "live-0", "live", kgo.RangeBalancer(), []string{"orders"})
	kafkatest.WaitBalanced(t, adm, "live", []*kafkatest.Member{m}, map[string]int32{"orders": 3})
	kafkatest.Commit(t, m, kafkatest.Offsets{"orders/0": 7}, nil)
	var reset kadm.Offsets
	reset.AddOffset("audit", 0, 11, -1)
	reset.AddOffset("audit", 5, 12, -1)
	if resp, err := adm.CommitOffsets(ctx, "parked", reset); err != nil || resp.Error() != nil {
		t.Fatalf("standalone commit: %v %v", err, resp.Error())
	}
	if got := kafkatest.FetchOffsets(t, adm, "parked"); !maps.Equal(got, kafkatest.Offsets{"audit/0": 11, "audit/5": 12}) {
		t.Fatalf("kadm fetched %v for the standalone commit", got)
	}
	fetched, err := c.Groups(leader).OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "parked"})
	if err != nil || len(fetched.GetPartitions()) != 2 || fetched.GetPartitions()[1].GetOffset() != 12 {
		t.Fatalf("gRPC fetched %v, %v", fetched.GetPartitions(), err)
	}

	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	grpcGroups, err := c.Groups(leader).ListGroups(ctx, &cohortv1.ListGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantGroups := map[string]string{}
	for _, g := range grpcGroups.GetGroups() {
		wantGroups[g.GetGroupId()] = g.GetState()
	}
	gotGroups := map[string]string{}
	for id, g := range groups {
		gotGroups[id] = g.State
	}
	if !maps.Equal(gotGroups, wantGroups) || !maps.Equal(gotGroups, map[string]string{"live": "Stable", "parked": "Empty"}) {
		t.Fatalf("kadm lists %v, gRPC %v; want live Stable and parked Empty", gotGroups, wantGroups)
	}

	// OffsetDelete: a subscribed topic's offsets stay.
	var set kadm.TopicsSet
	set.Add("orders", 0)
	if del, err := adm.DeleteOffsets(ctx, "live", set); err != nil || !errors.Is(del.Error(), kerr.GroupSubscribedToTopic) {
		t.Fatalf("deleting a subscribed topic's offsets: %v %v, want GROUP_SUBSCRIBED_TO_TOPIC", err, del.Error())
	}
	set = nil
	set.Add("audit", 0)
	if del, err := adm.DeleteOffsets(ctx, "parked", set); err != nil || del.Error() != nil {
		t.Fatalf("delete offsets: %v %v", err, del.Error())
	}
	if got := kafkatest.FetchOffsets(t, adm, "parked"); !maps.Equal(got, kafkatest.Offsets{"audit/5": 12}) {
		t.Fatalf("after OffsetDelete kadm fetched %v, want audit/5 only", got)
	}

	// DeleteGroups: a live group stays (NON_EMPTY_GROUP), an empty one goes.
	deleted, err := adm.DeleteGroups(ctx, "live", "parked")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(deleted["live"].Err, kerr.NonEmptyGroup) || deleted["parked"].Err != nil {
		t.Fatalf("delete groups: live %v (want NON_EMPTY_GROUP), parked %v", deleted["live"].Err, deleted["parked"].Err)
	}
	described, err := c.Groups(leader).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"parked", "live"}})
	if err != nil {
		t.Fatal(err)
	}
	if st := described.GetGroups()[0].GetState(); st != "Dead" {
		t.Fatalf("gRPC describes the deleted group as %s, want Dead", st)
	}
	if g := described.GetGroups()[1]; g.GetProtocolType() != "kafka.consumer" || len(g.GetMembers()) != 1 || g.GetMembers()[0].GetClientId() != "live-0" {
		t.Fatalf("gRPC describes the Kafka group as %+v", g)
	}
}

// TestKafka_ConsumerGroupProtocol: kgo members of a KIP-848 consumer group
// (kgo.ServerSideBalancer: the coordinator assigns, with "uniform" for
// kgo's sticky balancer and "range" for its range balancer) reach a
// complete, disjoint assignment with no join barrier; members leave and
// join; commits are fenced by the member epoch and survive the Raft
// leader's kill, after which the members carry on at epochs that did not
// go back.
func TestKafka_ConsumerGroupProtocol(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 12)
	createTopic(t, c, adm, "payments", 4)
	partitions := map[string]int32{"orders": 12, "payments": 4}
	topics := []string{"orders", "payments"}
	for name, balancer := range map[string]func() kgo.GroupBalancer{"uniform": kgo.StickyBalancer, "range": kgo.RangeBalancer} {
		t.Run(name, func(t *testing.T) {
			group := "next-" + name
			joinNext := func(i int) *kafkatest.Member {
				return join(t, c, fmt.Sprintf("%s-%d", name, i), group, balancer(), topics, kgo.ServerSideBalancer())
			}
			var members []*kafkatest.Member
			for i := range 4 {
				members = append(members, joinNext(i))
			}
			kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)
			described, err := adm.DescribeConsumerGroups(context.Background(), group)
			if err != nil || described[group].AssignorName != name {
				t.Fatalf("the group's assignor: %v %q, want %q", err, described[group].AssignorName, name)
			}

			members[1].Stop()
			members = slices.Delete(members, 1, 2)
			members = append(members, joinNext(4))
			kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)

			acked := kafkatest.Offsets{}
			for _, m := range members {
				kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 300), acked)
			}
			if got := kafkatest.FetchOffsets(t, adm, group); !maps.Equal(got, acked) {
				t.Fatalf("kadm fetched %v, the members committed %v", got, acked)
			}
		})
	}

	listed, err := adm.ListGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"next-uniform", "next-range"} { // their members left with the subtests
		if l, ok := listed[g]; !ok || l.State != "Empty" {
			t.Fatalf("ListGroups: %s is %+v (listed: %v), want Empty", g, l, listed.Groups())
		}
	}

	// The leader's kill: a consumer group carries on.
	group := "next-failover"
	var members []*kafkatest.Member
	for i := range 3 {
		members = append(members, join(t, c, fmt.Sprintf("f-%d", i), group, kgo.StickyBalancer(), topics, kgo.ServerSideBalancer()))
	}
	kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)
	// The gRPC API (what cohortctl shows) lists and describes it too.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	grpcListed, err := c.Groups(c.Leader()).ListGroups(ctx, &cohortv1.ListGroupsRequest{States: []string{"Stable"}})
	if err != nil {
		t.Fatal(err)
	}
	if gs := grpcListed.GetGroups(); len(gs) != 1 || gs[0].GetGroupId() != group || gs[0].GetProtocolType() != fsm.ConsumerGroupType || gs[0].GetMembers() != 3 || gs[0].GetProtocol() != "uniform" {
		t.Fatalf("gRPC ListGroups of Stable groups: %v, want %s (%s, uniform) with 3 members", gs, group, fsm.ConsumerGroupType)
	}
	grpcDescribed, err := c.Groups(c.Leader()).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{group}})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range grpcDescribed.GetGroups()[0].GetMembers() {
		for _, tp := range m.GetAssignment().GetTopics() {
			total += len(tp.GetPartitions())
		}
	}
	if d := grpcDescribed.GetGroups()[0]; d.GetState() != "Stable" || len(d.GetMembers()) != 3 || total != 16 {
		t.Fatalf("gRPC DescribeGroups: %s with %d members holding %d partitions, want Stable, 3 holding 16", d.GetState(), len(d.GetMembers()), total)
	}

	acked := kafkatest.Offsets{}
	epochs := map[string]int32{}
	for _, m := range members {
		kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 500), acked)
		_, epochs[m.Name] = m.Client.GroupMetadata()
	}
	leader := c.Leader()
	c.Kill(leader)
	c.WaitServing()
	adm = kadm.NewClient(kafkatest.NewClient(t, c.KafkaAddrs()))
	if got := kafkatest.FetchOffsets(t, adm, group); !maps.Equal(got, acked) {
		t.Fatalf("after the leader's kill kadm fetched %v, the members had committed %v", got, acked)
	}
	kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)
	for _, m := range members {
		if _, e := m.Client.GroupMetadata(); e < epochs[m.Name] {
			t.Fatalf("%s is at epoch %d after the failover, %d before", m.Name, e, epochs[m.Name])
		}
		kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 900), acked)
	}
	if got := kafkatest.FetchOffsets(t, adm, group); !maps.Equal(got, acked) {
		t.Fatalf("kadm fetched %v, the members committed %v", got, acked)
	}
	c.Restart(leader)
}

// TestKafka_ConsumerGroupRegexAndStaticMembers: kgo consumers of a KIP-848
// group subscribed by a regular expression (kgo.ConsumeRegex, which sends
// SubscribedTopicRegex) get the partitions of every topic it matches, and
// of a matching topic created while they run; a static member's client
// closed (kgo leaves with epoch -2) and started again under its instance
// ID gets back its partitions at its epoch, and the group's epoch does not
// move.
func TestKafka_ConsumerGroupRegexAndStaticMembers(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "logs-app", 3)
	createTopic(t, c, adm, "logs-db", 3)
	createTopic(t, c, adm, "metrics", 2)
	partitions := map[string]int32{"logs-app": 3, "logs-db": 3}
	const group = "regex"
	member := func(i int, extra ...kgo.Opt) *kafkatest.Member {
		return join(t, c, fmt.Sprintf("r-%d", i), group, kgo.StickyBalancer(), []string{"logs-.*"}, append([]kgo.Opt{kgo.ServerSideBalancer(), kgo.ConsumeRegex()}, extra...)...)
	}
	members := []*kafkatest.Member{member(0), member(1)}
	kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)
	described, err := adm.DescribeConsumerGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range described[group].Members {
		if m.SubscribedTopicRegex == nil || !strings.Contains(*m.SubscribedTopicRegex, "logs-.*") {
			t.Fatalf("ConsumerGroupDescribe: member %s subscribes by %v, want kgo's expression around logs-.*", m.ClientID, m.SubscribedTopicRegex)
		}
	}

	createTopic(t, c, adm, "logs-web", 2)
	partitions["logs-web"] = 2
	kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)

	// A static member's restart.
	members = append(members, member(2, kgo.InstanceID("instance-2")))
	kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)
	held := slices.Sorted(slices.Values(members[2].Holding()))
	_, memberEpoch := members[2].Client.GroupMetadata()
	described, err = adm.DescribeConsumerGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	groupEpoch := described[group].Epoch
	members[2].Stop()
	testcluster.WaitFor(t, 10*time.Second, "the departed static member in the group", func() (bool, string) {
		described, err := adm.DescribeConsumerGroups(context.Background(), group)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range described[group].Members {
			if m.InstanceID != nil && *m.InstanceID == "instance-2" && m.MemberEpoch == fsm.DepartedEpoch {
				return true, ""
			}
		}
		return false, fmt.Sprintf("members %+v", described[group].Members)
	})
	members[2] = member(2, kgo.InstanceID("instance-2"))
	kafkatest.WaitConsumerBalanced(t, adm, group, members, partitions)
	if got := slices.Sorted(slices.Values(members[2].Holding())); !slices.Equal(got, held) {
		t.Fatalf("the restarted static member holds %v, before %v", got, held)
	}
	if _, e := members[2].Client.GroupMetadata(); e != memberEpoch {
		t.Fatalf("the restarted static member is at epoch %d, before %d", e, memberEpoch)
	}
	described, err = adm.DescribeConsumerGroups(context.Background(), group)
	if err != nil || described[group].Epoch != groupEpoch {
		t.Fatalf("the group's epoch after the static restart: %v %d, before %d: a static restart must not rebalance", err, described[group].Epoch, groupEpoch)
	}
}
