// Package kafkatest drives a Cohort cluster's Kafka listeners with
// franz-go, an independent Kafka client, for tests: kgo consumer-group
// members that track what they hold, the wait for a complete and disjoint
// assignment, commits that must be acknowledged, and kadm reads.
package kafkatest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/internal/proc"
)

// NewClient is a kgo client of seeds with opts, closed by t.Cleanup. Its
// requests retry for 20 s (a leader change takes a second or two); with
// COHORT_TEST_LOG set it logs at debug level.
func NewClient(t testing.TB, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RetryTimeout(20 * time.Second)}
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

// Member is one kgo consumer of a group, polling in the background, with
// the partitions it holds as its rebalance callbacks tell.
type Member struct {
	Name   string
	Client *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	held map[string]map[int32]bool
}

func (m *Member) change(parts map[string][]int32, add bool) {
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

// Holding is what the member holds, as "topic/partition" strings.
func (m *Member) Holding() []string {
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

// Join starts a consumer named name (its client ID) of group on topics
// with the balancer: no autocommit, 100 ms heartbeats, 10 s sessions.
// extra adds options (TLS, a static instance ID). t.Cleanup stops it.
func Join(t testing.TB, seeds []string, name, group string, balancer kgo.GroupBalancer, topics []string, extra ...kgo.Opt) *Member {
	t.Helper()
	m := &Member{Name: name, done: make(chan struct{}), held: map[string]map[int32]bool{}}
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
	m.Client = NewClient(t, seeds, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			m.Client.PollFetches(ctx)
		}
	}()
	t.Cleanup(m.Stop)
	return m
}

// Stop stops polling and leaves the group.
func (m *Member) Stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.cancel = nil
	m.Client.Close() // leaves the group
}

// WaitBalanced waits until the members hold every partition of the topics
// between them, each partition once, and DescribeGroups says the group is
// Stable with exactly these members holding exactly that.
func WaitBalanced(t testing.TB, adm *kadm.Client, group string, members []*Member, partitions map[string]int32) {
	t.Helper()
	proc.WaitFor(t, 60*time.Second, "a complete, disjoint assignment", func() (bool, string) {
		owner, problem := owners(members, partitions)
		if problem != "" {
			return false, problem
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
			return false, fmt.Sprintf("the coordinator's assignment %v differs from the members' %v", assigned, owner)
		}
		return true, ""
	})
}

// owners maps each partition the members hold ("topic/partition") to its
// holder; problem says why that is not every partition of partitions,
// each held once ("" when it is).
func owners(members []*Member, partitions map[string]int32) (owner map[string]string, problem string) {
	owner = map[string]string{}
	for _, m := range members {
		for _, tp := range m.Holding() {
			if prev, ok := owner[tp]; ok {
				return nil, fmt.Sprintf("%s held by %s and %s", tp, prev, m.Name)
			}
			owner[tp] = m.Name
		}
	}
	want := 0
	for topic, n := range partitions {
		want += int(n)
		for p := range n {
			if _, ok := owner[fmt.Sprintf("%s/%d", topic, p)]; !ok {
				return nil, fmt.Sprintf("%s/%d held by nobody (%d held)", topic, p, len(owner))
			}
		}
	}
	if len(owner) != want {
		return nil, fmt.Sprintf("%d partitions held, want %d", len(owner), want)
	}
	return owner, ""
}

// Offsets are committed offsets by "topic/partition".
type Offsets map[string]int64

// OwnOffsets is an offset for every partition m holds: base plus the
// partition number.
func OwnOffsets(m *Member, base int64) Offsets {
	out := Offsets{}
	for _, tp := range m.Holding() {
		_, p := splitTP(tp)
		out[tp] = base + int64(p)
	}
	return out
}

func splitTP(tp string) (string, int32) {
	i := strings.LastIndexByte(tp, '/')
	var p int32
	_, _ = fmt.Sscan(tp[i+1:], &p)
	return tp[:i], p
}

// Commit commits offs as m (its current generation) with kgo's
// CommitOffsetsSync and fails the test unless every partition is
// acknowledged; acked, when not nil, records what was.
func Commit(t testing.TB, m *Member, offs Offsets, acked Offsets) {
	t.Helper()
	req := map[string]map[int32]kgo.EpochOffset{}
	for tp, o := range offs {
		topic, p := splitTP(tp)
		if req[topic] == nil {
			req[topic] = map[int32]kgo.EpochOffset{}
		}
		req[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	var failed []string
	// A commit that got no answer (kgo's own error, not a Kafka error
	// code) is sent again, as an application would: right after a leader
	// change franz-go may still dial the old coordinator once before it
	// looks the new one up. An answer with an error code fails at once.
	proc.WaitFor(t, 30*time.Second, "a commit answered", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var sendErr error
		failed = nil
		m.Client.CommitOffsetsSync(ctx, req, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				sendErr = err
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
		if sendErr != nil {
			return false, sendErr.Error()
		}
		return true, ""
	})
	if len(failed) > 0 {
		t.Fatalf("commit as %s: %s", m.Name, strings.Join(failed, "; "))
	}
	if acked != nil {
		maps.Copy(acked, offs)
	}
}

// FetchOffsets is the group's committed offsets as kadm reads them.
func FetchOffsets(t testing.TB, adm *kadm.Client, group string) Offsets {
	t.Helper()
	var out Offsets
	proc.WaitFor(t, 30*time.Second, "the committed offsets", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return false, err.Error()
		}
		out = Offsets{}
		resp.Each(func(o kadm.OffsetResponse) {
			out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At
		})
		return true, ""
	})
	return out
}

// CreateTopic creates a topic through adm and fails the test on an error.
func CreateTopic(t testing.TB, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// WaitBrokers waits until every seed's own Metadata lists n brokers: in a
// new cluster, every node's Kafka listener is in the registry (command
// rules 5 reached, and each node registered again with its address), so
// that a coordinator any node names is one a client can reach.
func WaitBrokers(t testing.TB, cl *kgo.Client, n int) {
	t.Helper()
	proc.WaitFor(t, 30*time.Second, fmt.Sprintf("every seed's Metadata to list %d brokers", n), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		all, got := true, ""
		for _, b := range cl.SeedBrokers() {
			resp, err := b.Request(ctx, kmsg.NewPtrMetadataRequest())
			if err != nil {
				return false, err.Error()
			}
			md := resp.(*kmsg.MetadataResponse)
			var ports []int32
			for _, br := range md.Brokers {
				ports = append(ports, br.Port)
			}
			all = all && len(md.Brokers) == n
			got += fmt.Sprintf("a seed lists brokers at ports %v; ", ports)
		}
		return all, got
	})
}

// WaitConsumerBalanced is WaitBalanced for a consumer group (KIP-848):
// the members hold every partition once between them, and
// ConsumerGroupDescribe says the group is Stable with exactly these
// members, each assigned what it holds at the group's assignment epoch.
func WaitConsumerBalanced(t testing.TB, adm *kadm.Client, group string, members []*Member, partitions map[string]int32) {
	t.Helper()
	proc.WaitFor(t, 60*time.Second, "a complete, disjoint consumer group assignment", func() (bool, string) {
		owner, problem := owners(members, partitions)
		if problem != "" {
			return false, problem
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		described, err := adm.DescribeConsumerGroups(ctx, group)
		if err != nil {
			return false, fmt.Sprintf("describe: %v", err)
		}
		d := described[group]
		if d.Err != nil || d.State != "Stable" || len(d.Members) != len(members) {
			return false, fmt.Sprintf("consumer group %s: %v, %d members, want Stable with %d", d.State, d.Err, len(d.Members), len(members))
		}
		assigned := map[string]string{}
		for _, dm := range d.Members {
			if dm.MemberEpoch != d.AssignmentEpoch {
				return false, fmt.Sprintf("member %s at epoch %d, the group's assignment epoch is %d", dm.ClientID, dm.MemberEpoch, d.AssignmentEpoch)
			}
			for topic, ps := range dm.Assignment {
				for p := range ps {
					assigned[fmt.Sprintf("%s/%d", topic, p)] = dm.ClientID
				}
			}
		}
		if !maps.Equal(assigned, owner) {
			return false, fmt.Sprintf("the coordinator's assignment %v differs from the members' %v", assigned, owner)
		}
		return true, ""
	})
}
