package kafka_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/cohortlabs/cohort/internal/kafkatest"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// startCluster is a three-node cluster whose nodes serve the Kafka
// protocol, and an admin client of it.
func startCluster(t *testing.T) (*testcluster.Cluster, *kadm.Client) {
	t.Helper()
	opts := testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true}
	opts.Coordinator.MaxSessionTimeout = time.Minute
	c := testcluster.Start(t, 3, opts)
	return c, kadm.NewClient(kafkatest.NewClient(t, c.KafkaAddrs()))
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
	_, gen := members[1].Client.GroupMetadata()
	held := slices.Sorted(slices.Values(members[1].Holding()))

	// Closing a static member's client does not leave the group (kgo, as
	// Kafka's clients, leaves only dynamic members on close).
	members[1].Stop()
	members[1] = static(1)
	kafkatest.WaitBalanced(t, adm, "statics", members, partitions)
	if got := slices.Sorted(slices.Values(members[1].Holding())); !slices.Equal(got, held) {
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
