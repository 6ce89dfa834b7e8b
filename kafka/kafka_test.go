package kafka_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// startCluster is a three-node cluster whose nodes serve the Kafka
// protocol, and an admin client of it.
func startCluster(t *testing.T) (*testcluster.Cluster, *kadm.Client) {
	t.Helper()
	opts := testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true}
	opts.Coordinator.MaxSessionTimeout = time.Minute
	c := testcluster.Start(t, 3, opts)
	adm := kadm.NewClient(newClient(t, c))
	return c, adm
}

// newClient is a kgo client seeded with every node's Kafka address.
func newClient(t *testing.T, c *testcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(c.KafkaAddrs()...), kgo.RetryTimeout(20 * time.Second)}
	if os.Getenv("COHORT_TEST_LOG") != "" {
		base = append(base, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates a topic through kadm and waits until every node has
// applied it (a follower answers Metadata from its own registry).
func createTopic(t *testing.T, c *testcluster.Cluster, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
	for i, n := range c.Nodes {
		testcluster.WaitFor(t, 10*time.Second, "the topic on every node", func() (bool, string) {
			var got int32
			n.FSM.Read(func(s *fsm.State) { got, _ = s.Partitions(topic) })
			return got == partitions, fmt.Sprintf("node %d has %d partitions of %s", i, got, topic)
		})
	}
}

// member is one kgo consumer of a group, polling in the background, with
// the partitions it holds as its rebalance callbacks tell.
type member struct {
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	held map[string]map[int32]bool
}

func (m *member) change(parts map[string][]int32, add bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for topic, ps := range parts {
		if m.held[topic] == nil {
			m.held[topic] = map[int32]bool{}
		}
		for _, p := range ps {
			if add {
				m.held[topic][p] = true
			} else {
				delete(m.held[topic], p)
			}
		}
	}
}

// holding is what the member holds, as "topic/partition" strings.
func (m *member) holding() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for topic, ps := range m.held {
		for p := range ps {
			out = append(out, fmt.Sprintf("%s/%d", topic, p))
		}
	}
	return out
}

// join starts a consumer of group on topics with the given balancer.
func join(t *testing.T, c *testcluster.Cluster, name, group string, balancer kgo.GroupBalancer, topics []string, extra ...kgo.Opt) *member {
	t.Helper()
	m := &member{name: name, done: make(chan struct{}), held: map[string]map[int32]bool{}}
	opts := append([]kgo.Opt{
		kgo.ClientID(name),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...), kgo.Balancers(balancer),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(10 * time.Second), kgo.RebalanceTimeout(15 * time.Second),
		kgo.HeartbeatInterval(100 * time.Millisecond), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.change(p, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.change(p, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.change(p, false) }),
	}, extra...)
	m.cl = newClient(t, c, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			m.cl.PollFetches(ctx)
		}
	}()
	t.Cleanup(m.stop)
	return m
}

// leave stops polling and leaves the group.
func (m *member) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.cancel = nil
	m.cl.Close() // leaves the group
}

// waitBalanced waits until the live members hold every partition of the
// topics between them, each partition once, and the group is Stable with
// exactly these members.
func waitBalanced(t *testing.T, adm *kadm.Client, group string, members []*member, partitions map[string]int32) {
	t.Helper()
	want := 0
	for _, n := range partitions {
		want += int(n)
	}
	testcluster.WaitFor(t, 60*time.Second, "a complete, disjoint assignment", func() (bool, string) {
		owner := map[string]string{}
		for _, m := range members {
			for _, tp := range m.holding() {
				if prev, ok := owner[tp]; ok {
					return false, fmt.Sprintf("%s held by %s and %s", tp, prev, m.name)
				}
				owner[tp] = m.name
			}
		}
		if len(owner) != want {
			return false, fmt.Sprintf("%d of %d partitions held", len(owner), want)
		}
		for topic, n := range partitions {
			for p := range n {
				if _, ok := owner[fmt.Sprintf("%s/%d", topic, p)]; !ok {
					return false, fmt.Sprintf("%s/%d held by nobody", topic, p)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		described, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return false, fmt.Sprintf("describe: %v", err)
		}
		d := described[group]
		if d.Err != nil || d.State != "Stable" || len(d.Members) != len(members) {
			return false, fmt.Sprintf("group %s: %v, %d members, want Stable with %d", d.State, d.Err, len(d.Members), len(members))
		}
		// The coordinator's view agrees with the members'.
		assigned := map[string]string{}
		for _, dm := range d.Members {
			ca, ok := dm.Assigned.AsConsumer()
			if !ok {
				return false, fmt.Sprintf("member %s: assignment not in the consumer protocol", dm.ClientID)
			}
			for _, tp := range ca.Topics {
				for _, p := range tp.Partitions {
					assigned[fmt.Sprintf("%s/%d", tp.Topic, p)] = dm.ClientID
				}
			}
		}
		if !maps.Equal(assigned, owner) {
			return false, fmt.Sprintf("coordinator's assignment %v differs from the members' %v", assigned, owner)
		}
		return true, ""
	})
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
			var members []*member
			for i := range 4 {
				members = append(members, join(t, c, fmt.Sprintf("%s-%d", name, i), group, balancers[name](), topics))
			}
			waitBalanced(t, adm, group, members, partitions)

			members[0].stop()
			members[3].stop()
			members = members[1:3]
			waitBalanced(t, adm, group, members, partitions)

			members = append(members, join(t, c, name+"-4", group, balancers[name](), topics))
			waitBalanced(t, adm, group, members, partitions)
		})
	}
}

// TestKafka_TwentyMembers: twenty members of one group, the size the
// issue asks for, end with a complete and disjoint assignment.
func TestKafka_TwentyMembers(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "events", 64)
	var members []*member
	for i := range 20 {
		members = append(members, join(t, c, fmt.Sprintf("m%02d", i), "big", kgo.CooperativeStickyBalancer(), []string{"events"}))
	}
	waitBalanced(t, adm, "big", members, map[string]int32{"events": 64})
}

// commit commits offsets as m (its current generation) and fails the test
// unless every partition is acknowledged.
func commit(t *testing.T, m *member, offsets map[string]map[int32]kgo.EpochOffset) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var failed []string
	m.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			failed = append(failed, err.Error())
			return
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					failed = append(failed, fmt.Sprintf("%s/%d: error %d", rt.Topic, rp.Partition, rp.ErrorCode))
				}
			}
		}
	})
	if len(failed) > 0 {
		t.Fatalf("commit as %s: %s", m.name, strings.Join(failed, "; "))
	}
}

// ownOffsets is an offset for every partition m holds: base plus the
// partition number.
func ownOffsets(m *member, base int64) map[string]map[int32]kgo.EpochOffset {
	out := map[string]map[int32]kgo.EpochOffset{}
	for _, tp := range m.holding() {
		topic, p := splitTP(tp)
		if out[topic] == nil {
			out[topic] = map[int32]kgo.EpochOffset{}
		}
		out[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: base + int64(p)}
	}
	return out
}

func splitTP(tp string) (string, int32) {
	i := strings.LastIndexByte(tp, '/')
	var p int32
	fmt.Sscan(tp[i+1:], &p)
	return tp[:i], p
}

// fetchOffsets is the group's committed offsets as kadm reads them.
func fetchOffsets(t *testing.T, adm *kadm.Client, group string) map[string]int64 {
	t.Helper()
	var out map[string]int64
	testcluster.WaitFor(t, 30*time.Second, "the committed offsets", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return false, err.Error()
		}
		out = map[string]int64{}
		resp.Each(func(o kadm.OffsetResponse) {
			out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At
		})
		return true, ""
	})
	return out
}

// TestKafka_CommitsSurviveLeaderKill: members commit with kgo's
// CommitOffsetsSync, kadm fetches the commits back; the Raft leader (the
// coordinator) is killed, kgo finds the new coordinator, the group keeps
// its generation (no member rejoins from scratch: the generation does not
// go back), every commit acknowledged before the kill is still there, and
// members commit again through the new leader.
func TestKafka_CommitsSurviveLeaderKill(t *testing.T) {
	c, adm := startCluster(t)
	createTopic(t, c, adm, "orders", 8)
	partitions := map[string]int32{"orders": 8}
	var members []*member
	for i := range 3 {
		members = append(members, join(t, c, fmt.Sprintf("c%d", i), "billing", kgo.RangeBalancer(), []string{"orders"}))
	}
	waitBalanced(t, adm, "billing", members, partitions)
	acked := map[string]int64{}
	for _, m := range members {
		offs := ownOffsets(m, 1000)
		commit(t, m, offs)
		for topic, ps := range offs {
			for p, eo := range ps {
				acked[fmt.Sprintf("%s/%d", topic, p)] = eo.Offset
			}
		}
	}
	if got := fetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("kadm fetched %v, the members committed %v", got, acked)
	}
	_, genBefore := members[0].cl.GroupMetadata()

	leader := c.Leader()
	c.Kill(leader)
	c.WaitServing()
	// A new admin client, as an operator's next command would be: a
	// long-lived franz-go client sends sharded coordinator requests
	// (OffsetFetch v8) to its cached coordinator until its metadata, up to
	// 5 minutes old, drops the dead broker; a Kafka broker's death costs it
	// the same. The members' own requests re-resolve at once.
	adm = kadm.NewClient(newClient(t, c))

	if got := fetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("after the leader's kill kadm fetched %v, the members had committed %v", got, acked)
	}
	waitBalanced(t, adm, "billing", members, partitions)
	for _, m := range members {
		if _, gen := m.cl.GroupMetadata(); gen < genBefore {
			t.Fatalf("%s is at generation %d after the failover, %d before: the group lost its generation", m.name, gen, genBefore)
		}
	}
	// The members commit through the new coordinator.
	for _, m := range members {
		offs := ownOffsets(m, 2000)
		commit(t, m, offs)
		for topic, ps := range offs {
			for p, eo := range ps {
				acked[fmt.Sprintf("%s/%d", topic, p)] = eo.Offset
			}
		}
	}
	if got := fetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("after the failover kadm fetched %v, the members committed %v", got, acked)
	}
	c.Restart(leader)
}
