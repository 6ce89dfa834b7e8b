package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// member drives the group protocol by hand over raw gRPC, so tests control
// every request: which node it goes to, when it joins, syncs and heartbeats.
// Its try* methods may run on any goroutine and return what failed; its
// must* methods fail the test, so only the test's goroutine calls them.
type member struct {
	t          testing.TB
	c          *testcluster.Cluster
	node       int
	group      string
	id         string
	instance   string
	topics     []string
	sessionMs  int32
	rebalMs    int32
	generation int32
	leader     string
	join       *cohortv1.JoinGroupResponse
	assignment *cohortv1.Assignment
}

func newMember(t testing.TB, c *testcluster.Cluster, group string, topics ...string) *member {
	return &member{t: t, c: c, node: c.Leader(), group: group, topics: topics, sessionMs: 2000, rebalMs: 3000}
}

func (m *member) client() cohortv1.GroupCoordinatorClient { return m.c.Groups(m.node) }

func reason(err error) string { return client.Reason(err) }

func errorInfo(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

func (m *member) joinRequest() *cohortv1.JoinGroupRequest {
	return &cohortv1.JoinGroupRequest{
		GroupId: m.group, MemberId: m.id, InstanceId: m.instance, ProtocolType: "consumer",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "roundrobin", Metadata: []byte(strings.Join(m.topics, ","))}},
		Topics:    m.topics, SessionTimeoutMs: m.sessionMs, RebalanceTimeoutMs: m.rebalMs, ClientId: "test",
	}
}

// tryJoin joins (taking MEMBER_ID_REQUIRED's ID) and returns the error.
func (m *member) tryJoin(ctx context.Context) error {
	for range 2 {
		resp, err := m.client().JoinGroup(ctx, m.joinRequest())
		if reason(err) == "MEMBER_ID_REQUIRED" && m.id == "" {
			m.id = errorInfo(err).GetMetadata()["member_id"]
			if m.id == "" {
				return fmt.Errorf("MEMBER_ID_REQUIRED without member_id metadata: %w", err)
			}
			continue
		}
		if err != nil {
			return err
		}
		m.id, m.generation, m.leader, m.join = resp.GetMemberId(), resp.GetGeneration(), resp.GetLeaderId(), resp
		return nil
	}
	return fmt.Errorf("join did not settle")
}

func (m *member) mustJoin(ctx context.Context) {
	m.t.Helper()
	if err := m.tryJoin(ctx); err != nil {
		m.t.Fatalf("member %q join: %v", m.id, err)
	}
}

func (m *member) isLeader() bool { return m.id == m.leader }

// plan deals every partition of the subscribed topics round-robin, as the
// group leader computes it from its join answer.
func plan(resp *cohortv1.JoinGroupResponse) []*cohortv1.MemberAssignment {
	counts := map[string]int32{}
	for _, t := range resp.GetTopics() {
		counts[t.GetTopic()] = t.GetPartitions()
	}
	members := slices.Clone(resp.GetMembers())
	sort.Slice(members, func(i, j int) bool { return members[i].GetMemberId() < members[j].GetMemberId() })
	out := map[string]*cohortv1.Assignment{}
	var topics []string
	for t := range counts {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	i := 0
	for _, t := range topics {
		for p := int32(0); p < counts[t]; p++ {
			for range members {
				mm := members[i%len(members)]
				i++
				if slices.Contains(mm.GetTopics(), t) {
					a := out[mm.GetMemberId()]
					if a == nil {
						a = &cohortv1.Assignment{}
						out[mm.GetMemberId()] = a
					}
					if n := len(a.Topics); n == 0 || a.Topics[n-1].Topic != t {
						a.Topics = append(a.Topics, &cohortv1.TopicPartitions{Topic: t})
					}
					a.Topics[len(a.Topics)-1].Partitions = append(a.Topics[len(a.Topics)-1].Partitions, p)
					break
				}
			}
		}
	}
	var res []*cohortv1.MemberAssignment
	for _, mm := range members {
		res = append(res, &cohortv1.MemberAssignment{MemberId: mm.GetMemberId(), Assignment: out[mm.GetMemberId()]})
	}
	return res
}

func (m *member) trySync(ctx context.Context) error {
	req := &cohortv1.SyncGroupRequest{GroupId: m.group, Generation: m.generation, MemberId: m.id, InstanceId: m.instance}
	if m.isLeader() {
		req.Assignments = plan(m.join)
	}
	resp, err := m.client().SyncGroup(ctx, req)
	if err != nil {
		return err
	}
	m.assignment = resp.GetAssignment()
	return nil
}

func (m *member) mustSync(ctx context.Context) {
	m.t.Helper()
	if err := m.trySync(ctx); err != nil {
		m.t.Fatalf("member %q sync at generation %d: %v", m.id, m.generation, err)
	}
}

func (m *member) heartbeat(ctx context.Context) error {
	_, err := m.client().Heartbeat(ctx, &cohortv1.HeartbeatRequest{GroupId: m.group, Generation: m.generation, MemberId: m.id, InstanceId: m.instance})
	return err
}

func (m *member) commit(ctx context.Context, topic string, partition int32, offset int64) (*cohortv1.OffsetCommitResponse, error) {
	return m.client().OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{
		GroupId: m.group, Generation: m.generation, MemberId: m.id, InstanceId: m.instance,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: topic, Partition: partition, Offset: offset}},
	})
}

func (m *member) owned() []string {
	var out []string
	for _, tp := range m.assignment.GetTopics() {
		for _, p := range tp.GetPartitions() {
			out = append(out, fmt.Sprintf("%s/%d", tp.GetTopic(), p))
		}
	}
	return out
}

// rebalance runs one round for all members concurrently: everyone joins,
// then everyone syncs. It fails the test on any error.
func rebalance(t testing.TB, ctx context.Context, members ...*member) {
	t.Helper()
	if err := joinAll(ctx, members...); err != nil {
		t.Fatal(err)
	}
	if err := all(members, "sync", func(m *member) error { return m.trySync(ctx) }); err != nil {
		t.Fatal(err)
	}
}

// joinAll joins every member concurrently and returns once all have
// answered, with every failure.
func joinAll(ctx context.Context, members ...*member) error {
	return all(members, "join", func(m *member) error { return m.tryJoin(ctx) })
}

// all runs fn for every member concurrently and returns once all have
// returned, with every failure: the goroutines report, the caller fails
// the test.
func all(members []*member, what string, fn func(*member) error) error {
	errs := make(chan error, len(members))
	for _, m := range members {
		go func() {
			if err := fn(m); err != nil {
				errs <- fmt.Errorf("%s %q: %w", what, m.id, err)
				return
			}
			errs <- nil
		}()
	}
	var failed []error
	for range members {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// checkAssignment asserts the members' assignments are disjoint and cover
// every partition of topic (with n partitions).
func checkAssignment(t testing.TB, topic string, n int32, members ...*member) {
	t.Helper()
	seen := map[string]string{}
	for _, m := range members {
		for _, tp := range m.owned() {
			if prev, dup := seen[tp]; dup {
				t.Fatalf("%s owned by %s and %s", tp, prev, m.id)
			}
			seen[tp] = m.id
		}
	}
	for p := int32(0); p < n; p++ {
		if _, ok := seen[fmt.Sprintf("%s/%d", topic, p)]; !ok {
			t.Fatalf("%s/%d is assigned to nobody: %v", topic, p, seen)
		}
	}
}

func createTopic(t testing.TB, c *testcluster.Cluster, name string, n int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Topics(c.Leader()).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: n}); err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
}

func describe(t testing.TB, c *testcluster.Cluster, node int, group string) *cohortv1.GroupDescription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Groups(node).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{group}})
	if err != nil {
		t.Fatalf("describe %s: %v", group, err)
	}
	return resp.GetGroups()[0]
}

// leaderHeader calls fn with a header option and returns cohort-leader.
func leaderHeader(fn func(opt grpc.CallOption) error) (string, error) {
	var md metadata.MD
	err := fn(grpc.Header(&md))
	if v := md.Get("cohort-leader"); len(v) > 0 {
		return v[0], err
	}
	return "", err
}

// logCounter is a slog handler that counts records by message: a test
// waits on it for a decision the engine only logs (and discards the rest).
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[r.Message]++
	return nil
}

func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

// count is how many records with message msg were logged.
func (l *logCounter) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[msg]
}
