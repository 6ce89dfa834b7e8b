package coordinator_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cluster starts three nodes with topic t (6 partitions). Members that
// join an empty group together fall into one 200 ms initial delay, so the
// hand-driven members need not rejoin each other's first rebalance.
func cluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	cfg := testcluster.DefaultCoordinator()
	cfg.InitialRebalanceDelay = 200 * time.Millisecond
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	createTopic(t, c, "t", 6)
	return c
}

func TestGroup_OneMemberGetsEveryPartition_ThreeTogetherGetOneGeneration(t *testing.T) {
	cfg := testcluster.DefaultCoordinator()
	cfg.InitialRebalanceDelay = 300 * time.Millisecond
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	createTopic(t, c, "t", 6)
	ctx := testCtx(t)

	solo := newMember(t, c, "solo", "t")
	rebalance(t, ctx, solo)
	if solo.generation != 1 || !solo.isLeader() || len(solo.owned()) != 6 {
		t.Fatalf("solo member: generation %d leader=%v owns %v, want generation 1, leader, all 6", solo.generation, solo.isLeader(), solo.owned())
	}

	// Three members arriving together fall into the initial delay: one
	// generation, not three.
	ms := []*member{newMember(t, c, "trio", "t"), newMember(t, c, "trio", "t"), newMember(t, c, "trio", "t")}
	rebalance(t, ctx, ms...)
	for _, m := range ms {
		if m.generation != 1 {
			t.Fatalf("member %s got generation %d, want 1 for all three", m.id, m.generation)
		}
	}
	checkAssignment(t, "t", 6, ms...)
	if d := describe(t, c, 0, "trio"); d.GetGeneration() != 1 || d.GetState() != "Stable" || len(d.GetMembers()) != 3 {
		t.Fatalf("trio: %s generation %d with %d members", d.GetState(), d.GetGeneration(), len(d.GetMembers()))
	}

	// A fourth member makes generation 2; the trio's last rejoin closes
	// that round in the apply of a join (TestObserve_ covers a join inside
	// a Batch entry).
	x := newMember(t, c, "trio", "t")
	joined := make(chan error, 1)
	go func() { joined <- x.tryJoin(ctx) }()
	waitState(t, ctx, c, "trio", "PreparingRebalance")
	if err := joinAll(ctx, ms...); err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatalf("fourth member's join: %v", err)
	}
	ms = append(ms, x)
	if err := all(ms, "sync", func(m *member) error { return m.trySync(ctx) }); err != nil {
		t.Fatal(err)
	}
	checkAssignment(t, "t", 6, ms...)

	// Three join phases, the first two at least the initial delay long,
	// every one timed from its start.
	h := leaderMetric(t, c, "cohort_group_rebalance_duration_seconds")[0].GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() < 0.6 || h.GetSampleSum() > 60 {
		t.Fatalf("rebalance durations: %d observed, sum %.3f s; want 3, two of them at least the 0.3 s initial delay", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() < 0.3 && b.GetCumulativeCount() > 1 {
			t.Fatalf("rebalance durations: %d at most %.3f s; only the third may be shorter than the initial delay", b.GetCumulativeCount(), b.GetUpperBound())
		}
	}
}

func TestGroup_JoinLeaveAndCrash_EachRebalanceOnce(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	a.sessionMs, b.sessionMs = 1000, 1000
	rebalance(t, ctx, a, b)
	checkAssignment(t, "t", 6, a, b)
	gen := a.generation

	// A third member joins: the others learn it from their heartbeat.
	x := newMember(t, c, "g", "t")
	joined := make(chan error, 1)
	go func() { joined <- x.tryJoin(ctx) }()
	testcluster.WaitFor(t, 10*time.Second, "REBALANCE_IN_PROGRESS on heartbeat", func() (bool, string) {
		err := a.heartbeat(ctx)
		return reason(err) == "REBALANCE_IN_PROGRESS", fmt.Sprint(err)
	})
	var wg sync.WaitGroup
	for _, m := range []*member{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.tryJoin(ctx); err != nil {
				t.Errorf("rejoin %s: %v", m.id, err)
			}
		}()
	}
	wg.Wait()
	if err := <-joined; err != nil {
		t.Fatalf("new member join: %v", err)
	}
	for _, m := range []*member{a, b, x} {
		if m.generation != gen+1 {
			t.Fatalf("after a join: member %s at generation %d, want %d", m.id, m.generation, gen+1)
		}
	}
	rebalance(t, ctx, a, b, x) // join again is idempotent for a completed generation; then sync
	if a.generation != gen+1 {
		t.Fatalf("a retried join moved the generation to %d", a.generation)
	}
	checkAssignment(t, "t", 6, a, b, x)

	// x leaves: one rebalance.
	resp, err := c.Groups(1).LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: x.id}}})
	if err != nil || resp.GetMembers()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
		t.Fatalf("leave: %v %v", resp, err)
	}
	if err := a.heartbeat(ctx); reason(err) != "REBALANCE_IN_PROGRESS" {
		t.Fatalf("heartbeat after a leave: %v, want REBALANCE_IN_PROGRESS", err)
	}
	rebalance(t, ctx, a, b)
	if a.generation != gen+2 {
		t.Fatalf("after a leave: generation %d, want %d", a.generation, gen+2)
	}
	checkAssignment(t, "t", 6, a, b)

	// b crashes (stops heartbeating); a keeps heartbeating until told to rejoin.
	testcluster.WaitFor(t, 10*time.Second, "b's session to expire", func() (bool, string) {
		err := a.heartbeat(ctx)
		return reason(err) == "REBALANCE_IN_PROGRESS", fmt.Sprint(err)
	})
	rebalance(t, ctx, a)
	if a.generation != gen+3 || len(a.owned()) != 6 {
		t.Fatalf("after b crashed: generation %d owning %v, want %d owning all", a.generation, a.owned(), gen+3)
	}
	if err := b.heartbeat(ctx); reason(err) != "UNKNOWN_MEMBER_ID" {
		t.Fatalf("the crashed member's heartbeat: %v, want UNKNOWN_MEMBER_ID", err)
	}
}

func TestGroup_LeaderLeaves_NewLeaderCompletesRebalance(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	ms := []*member{newMember(t, c, "g", "t"), newMember(t, c, "g", "t"), newMember(t, c, "g", "t")}
	rebalance(t, ctx, ms...)
	var leader *member
	var rest []*member
	for _, m := range ms {
		if m.isLeader() {
			leader = m
		} else {
			rest = append(rest, m)
		}
	}
	if _, err := c.Groups(0).LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: leader.id}}}); err != nil {
		t.Fatalf("leader leaves: %v", err)
	}
	rebalance(t, ctx, rest...)
	if rest[0].leader == leader.id || rest[0].leader != rest[1].leader || (rest[0].leader != rest[0].id && rest[0].leader != rest[1].id) {
		t.Fatalf("new leader %q (old %q, members %s %s)", rest[0].leader, leader.id, rest[0].id, rest[1].id)
	}
	checkAssignment(t, "t", 6, rest...)
}

func TestGroup_MemberNotRejoining_DroppedAtRebalanceTimeout(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	a.rebalMs, b.rebalMs = 500, 500
	rebalance(t, ctx, a, b)
	// a rejoins (its metadata changed), b never does but keeps its session
	// alive: the barrier waits for the rebalance timeout, then drops b.
	a.topics = []string{"t", "u"}
	createTopic(t, c, "u", 2)
	start := time.Now()
	a.mustJoin(ctx)
	waited := time.Since(start)
	d := describe(t, c, 0, "g")
	if len(d.GetMembers()) != 1 || d.GetMembers()[0].GetMemberId() != a.id || waited < 400*time.Millisecond {
		t.Fatalf("after the timeout: members %v after %v, want only %s after ≥ the 500ms rebalance timeout", d.GetMembers(), waited, a.id)
	}
	if err := b.heartbeat(ctx); reason(err) != "UNKNOWN_MEMBER_ID" {
		t.Fatalf("dropped member's heartbeat: %v, want UNKNOWN_MEMBER_ID", err)
	}
	a.mustSync(ctx)
	if len(a.owned()) != 8 {
		t.Fatalf("a owns %v, want all 8 partitions of t and u", a.owned())
	}
}

func TestCommit_FencedByGenerationMembershipAndOwnership(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	rebalance(t, ctx, a, b)
	own := a.assignment.GetTopics()[0].GetPartitions()[0]
	notOwn := b.assignment.GetTopics()[0].GetPartitions()[0]
	if resp, err := a.commit(ctx, "t", own, 100); err != nil || resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
		t.Fatalf("owner's commit: %v %v", resp, err)
	}
	resp, err := a.commit(ctx, "t", notOwn, 999)
	if err != nil || resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NOT_OWNER {
		t.Fatalf("commit of another member's partition: %v %v, want NOT_OWNER", resp, err)
	}
	stale := *a
	stale.generation--
	if _, err := stale.commit(ctx, "t", own, 999); reason(err) != "ILLEGAL_GENERATION" {
		t.Fatalf("stale generation commit: %v, want ILLEGAL_GENERATION", err)
	}
	// b leaves; a zombie b commits.
	if _, err := c.Groups(0).LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: b.id}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.commit(ctx, "t", notOwn, 999); reason(err) != "UNKNOWN_MEMBER_ID" {
		t.Fatalf("zombie commit: %v, want UNKNOWN_MEMBER_ID", err)
	}
	got, err := c.Groups(2).OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g", Partitions: []*cohortv1.TopicPartitions{{Topic: "t", Partitions: []int32{own, notOwn}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetPartitions()[0].GetOffset() != 100 || got.GetPartitions()[1].GetOffset() != -1 {
		t.Fatalf("offsets after refused commits: %v, want 100 and -1", got.GetPartitions())
	}
}

// Every RPC sent to a follower is served by the leader: the follower is
// held behind (it takes no new entries), so an answer from its own state
// would miss what the calls before it wrote, and a write it tried to serve
// itself would find no engine. Each answer is checked against what the
// leader holds, and names the leader in cohort-leader.
func TestFollower_ForwardsEveryRPC_AndNamesLeader(t *testing.T) {
	c, logs := heldBackCluster(t)
	ctx := testCtx(t)
	leader := c.Leader()
	follower := (leader + 1) % 3
	want := c.Addr(leader)
	g := c.Groups(follower)
	tp := c.Topics(follower)
	m := newMember(t, c, "fwd", "t")
	m.node = follower
	holdBehind(t, c, logs, follower)

	committed := func(resp *cohortv1.OffsetFetchResponse) bool {
		for _, p := range resp.GetPartitions() {
			if p.GetTopic() == "t" && p.GetPartition() == 0 && p.GetOffset() == 1 {
				return true
			}
		}
		return false
	}
	calls := []struct {
		name string
		call func(grpc.CallOption) error
	}{
		{"CreateTopic", func(o grpc.CallOption) error {
			_, err := tp.CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "fwd-topic", Partitions: 2}, o)
			return err
		}},
		{"AddPartitions", func(o grpc.CallOption) error {
			_, err := tp.AddPartitions(ctx, &cohortv1.AddPartitionsRequest{Name: "fwd-topic", Partitions: 3}, o)
			return err
		}},
		{"ListTopics", func(o grpc.CallOption) error {
			resp, err := tp.ListTopics(ctx, &cohortv1.ListTopicsRequest{}, o)
			if err != nil {
				return err
			}
			for _, tc := range resp.GetTopics() {
				if tc.GetTopic() == "fwd-topic" && tc.GetPartitions() == 3 {
					return nil
				}
			}
			return fmt.Errorf("topics %v, want fwd-topic with 3 partitions", resp.GetTopics())
		}},
		{"JoinGroup", func(o grpc.CallOption) error {
			resp, err := g.JoinGroup(ctx, m.joinRequest(), o)
			if reason(err) == "MEMBER_ID_REQUIRED" {
				m.id = errorInfo(err).GetMetadata()["member_id"]
				resp, err = g.JoinGroup(ctx, m.joinRequest(), o)
			}
			if err == nil {
				m.generation, m.leader, m.join = resp.GetGeneration(), resp.GetLeaderId(), resp
			}
			return err
		}},
		{"SyncGroup", func(o grpc.CallOption) error {
			_, err := g.SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "fwd", Generation: m.generation, MemberId: m.id, Assignments: plan(m.join)}, o)
			return err
		}},
		{"Heartbeat", func(o grpc.CallOption) error {
			// Heartbeats are never log entries: the leader's engine
			// counting this one is the proof that it got there.
			before := metricValue(t, c, "cohort_group_heartbeats_total")
			if _, err := g.Heartbeat(ctx, &cohortv1.HeartbeatRequest{GroupId: "fwd", Generation: m.generation, MemberId: m.id}, o); err != nil {
				return err
			}
			if after := metricValue(t, c, "cohort_group_heartbeats_total"); after != before+1 {
				return fmt.Errorf("the leader's engine counted %v heartbeats, want 1", after-before)
			}
			return nil
		}},
		{"OffsetCommit", func(o grpc.CallOption) error {
			_, err := g.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "fwd", Generation: m.generation, MemberId: m.id, Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 1}}}, o)
			return err
		}},
		{"OffsetFetch", func(o grpc.CallOption) error {
			resp, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "fwd"}, o)
			if err != nil {
				return err
			}
			if !committed(resp) {
				return fmt.Errorf("offsets %v, want t/0 at 1 as committed", resp.GetPartitions())
			}
			// The follower really is behind: a stale read, which it
			// serves from its own state, misses the commit, as this
			// read would have had the follower served it.
			stale, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "fwd", AllowStale: true})
			if err != nil {
				return fmt.Errorf("stale read on the follower: %w", err)
			}
			if committed(stale) {
				return fmt.Errorf("the held follower's own offsets %v have the commit: it is not behind, so this test proves nothing", stale.GetPartitions())
			}
			return nil
		}},
		{"DescribeGroups", func(o grpc.CallOption) error {
			resp, err := g.DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"fwd"}}, o)
			if err != nil {
				return err
			}
			d := resp.GetGroups()[0]
			if d.GetState() != "Stable" || d.GetGeneration() != m.generation || len(d.GetMembers()) != 1 || d.GetMembers()[0].GetMemberId() != m.id {
				return fmt.Errorf("group %v, want Stable in generation %d with member %s", d, m.generation, m.id)
			}
			return nil
		}},
		{"ListGroups", func(o grpc.CallOption) error {
			resp, err := g.ListGroups(ctx, &cohortv1.ListGroupsRequest{}, o)
			if err != nil {
				return err
			}
			for _, lg := range resp.GetGroups() {
				if lg.GetGroupId() == "fwd" && lg.GetMembers() == 1 {
					return nil
				}
			}
			return fmt.Errorf("groups %v, want fwd with one member", resp.GetGroups())
		}},
		{"LeaveGroup", func(o grpc.CallOption) error {
			_, err := g.LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "fwd", Members: []*cohortv1.LeaveMember{{MemberId: m.id}}}, o)
			return err
		}},
		{"DeleteGroups", func(o grpc.CallOption) error {
			_, err := g.DeleteGroups(ctx, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"fwd"}}, o)
			return err
		}},
		{"DeleteTopic", func(o grpc.CallOption) error {
			_, err := tp.DeleteTopic(ctx, &cohortv1.DeleteTopicRequest{Name: "fwd-topic"}, o)
			return err
		}},
	}
	for _, call := range calls {
		got, err := leaderHeader(call.call)
		if err != nil {
			t.Fatalf("%s through follower %s: %v", call.name, c.Nodes[follower].ID, err)
		}
		if got != want {
			t.Fatalf("%s: cohort-leader %q, want %q", call.name, got, want)
		}
	}
}

func TestStaticMember_RestartWithinSession_KeepsAssignmentAndGeneration(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, s := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	s.instance = "instance-1"
	rebalance(t, ctx, a, s)
	gen, owned, oldID := s.generation, s.owned(), s.id

	// The static member restarts: a new process with no member ID.
	restarted := newMember(t, c, "g", "t")
	restarted.instance = "instance-1"
	restarted.mustJoin(ctx)
	restarted.mustSync(ctx)
	if restarted.generation != gen || strings.Join(restarted.owned(), ",") != strings.Join(owned, ",") || restarted.id == oldID {
		t.Fatalf("restarted static member: generation %d owns %v (id %s), want generation %d owning %v with a new ID", restarted.generation, restarted.owned(), restarted.id, gen, owned)
	}
	if err := a.heartbeat(ctx); err != nil {
		t.Fatalf("the other member must see no rebalance: %v", err)
	}
	if err := s.heartbeat(ctx); reason(err) != "FENCED_INSTANCE_ID" {
		t.Fatalf("the old incarnation's heartbeat: %v, want FENCED_INSTANCE_ID", err)
	}
	// KIP-345: the old incarnation joining again with its old member ID is
	// fenced too, not told UNKNOWN_MEMBER_ID (on which a client rejoins
	// with its instance ID alone and takes the slot back), and the newer
	// one keeps it.
	if err := s.tryJoin(ctx); reason(err) != "FENCED_INSTANCE_ID" {
		t.Fatalf("the old incarnation's JoinGroup: %v, want FENCED_INSTANCE_ID", err)
	}
	if err := restarted.heartbeat(ctx); err != nil {
		t.Fatalf("the newer incarnation after the old one's join: %v", err)
	}
}

// TestStaticMember_ReplacedWhileParked_OldCallFenced: a static member's
// JoinGroup parked at the barrier is answered FENCED_INSTANCE_ID when a
// newer incarnation with the same instance ID takes the slot, so the old
// process stops instead of joining again and fencing the new one.
func TestStaticMember_ReplacedWhileParked_OldCallFenced(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, s := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	s.instance = "instance-1"
	a.rebalMs, s.rebalMs = 20000, 20000
	rebalance(t, ctx, a, s)

	// A new member starts a rebalance; s rejoins and parks (a has not).
	n := newMember(t, c, "g", "t")
	n.rebalMs = 20000
	nJoined := make(chan error, 1)
	go func() { nJoined <- n.tryJoin(ctx) }()
	waitState(t, ctx, c, "g", "PreparingRebalance")
	parked := make(chan error, 1)
	go func() { parked <- s.tryJoin(ctx) }()
	waitParked(t, c, 2) // n and s wait for a

	restarted := newMember(t, c, "g", "t")
	restarted.instance = "instance-1"
	restarted.rebalMs = 20000
	go func() { _ = restarted.tryJoin(ctx) }()
	select {
	case err := <-parked:
		if reason(err) != "FENCED_INSTANCE_ID" {
			t.Fatalf("the replaced incarnation's parked JoinGroup: %v, want FENCED_INSTANCE_ID", err)
		}
	case <-ctx.Done():
		t.Fatal("the replaced incarnation's parked JoinGroup was never answered")
	}
}

func TestMalformedRequests_ClearErrors_NothingChanges(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a := newMember(t, c, "g", "t")
	rebalance(t, ctx, a)
	if _, err := a.commit(ctx, "t", 0, 5); err != nil {
		t.Fatal(err)
	}
	g := c.Groups(1)
	huge := make([]byte, 1<<20)
	cases := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
		says   string
	}{
		{"empty group id", func() error {
			_, err := g.JoinGroup(ctx, &cohortv1.JoinGroupRequest{ProtocolType: "consumer", Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, SessionTimeoutMs: 1000, RebalanceTimeoutMs: 1000})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT", "group_id"},
		{"oversized metadata", func() error {
			_, err := g.JoinGroup(ctx, &cohortv1.JoinGroupRequest{GroupId: "g", ProtocolType: "consumer", Protocols: []*cohortv1.ProtocolMetadata{{Name: "range", Metadata: huge}}, SessionTimeoutMs: 1000, RebalanceTimeoutMs: 1000})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT", "metadata"},
		{"session timeout out of bounds", func() error {
			_, err := g.JoinGroup(ctx, &cohortv1.JoinGroupRequest{GroupId: "g", ProtocolType: "consumer", Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, SessionTimeoutMs: 1, RebalanceTimeoutMs: 1000})
			return err
		}, codes.InvalidArgument, "INVALID_SESSION_TIMEOUT", "session_timeout_ms"},
		{"unknown member", func() error {
			_, err := g.Heartbeat(ctx, &cohortv1.HeartbeatRequest{GroupId: "g", Generation: a.generation, MemberId: "nobody"})
			return err
		}, codes.FailedPrecondition, "UNKNOWN_MEMBER_ID", "nobody"},
		{"negative partition", func() error {
			_, err := g.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: a.generation, MemberId: a.id, Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: -1, Offset: 1}}})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT", "negative"},
		{"unknown topic in an assignment", func() error {
			_, err := g.SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "g", Generation: a.generation, MemberId: a.id, Assignments: []*cohortv1.MemberAssignment{{MemberId: a.id, Assignment: &cohortv1.Assignment{Topics: []*cohortv1.TopicPartitions{{Topic: "nope", Partitions: []int32{0}}}}}}})
			return err
		}, codes.OK, "", ""}, // the group is Stable: a sync is a retry and is answered, not validated again
		{"bad topic name", func() error {
			_, err := c.Topics(1).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "a/b", Partitions: 1})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT", "a/b"},
	}
	for _, tc := range cases {
		err := tc.call()
		if status.Code(err) != tc.code || reason(err) != tc.reason || !strings.Contains(fmt.Sprint(err), tc.says) {
			t.Fatalf("%s: %v, want %s %s mentioning %q", tc.name, err, tc.code, tc.reason, tc.says)
		}
	}
	// An invalid plan in CompletingRebalance is refused naming the fault.
	b := newMember(t, c, "g2", "t")
	b.mustJoin(ctx)
	_, err := g.SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "g2", Generation: b.generation, MemberId: b.id, Assignments: []*cohortv1.MemberAssignment{{MemberId: b.id, Assignment: &cohortv1.Assignment{Topics: []*cohortv1.TopicPartitions{{Topic: "nope", Partitions: []int32{0}}}}}}})
	if reason(err) != "INVALID_ASSIGNMENT" || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("plan with an unknown topic: %v, want INVALID_ASSIGNMENT naming it", err)
	}
	b.mustSync(ctx) // a corrected plan is accepted

	// Nothing committed changed and the node still serves.
	got, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g"})
	if err != nil || len(got.GetPartitions()) != 1 || got.GetPartitions()[0].GetOffset() != 5 {
		t.Fatalf("offsets after bad requests: %v %v", got, err)
	}
	if err := a.heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat after bad requests: %v", err)
	}
}

func TestCommit_ConcurrentCommitsCoalesceIntoFewerEntries(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	leader := c.Leader()
	before := c.Nodes[leader].Node.LastIndex()
	const commits = 200
	var wg sync.WaitGroup
	errs := make(chan error, commits)
	for i := range commits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Groups(leader).OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{
				GroupId: fmt.Sprintf("solo-%d", i), Generation: -1,
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: int32(i % 6), Offset: int64(i)}},
			})
			if err == nil && resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
				err = fmt.Errorf("partition error %v", resp.GetPartitions()[0])
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent commit: %v", err)
		}
	}
	// Sixteen proposers pipeline entries, and every commit that arrives
	// while they are busy waits for the next entry: 200 commits in flight
	// together take 10 to 30 entries here; one entry per commit, or
	// batches of two or three, is not coalescing.
	entries := c.Nodes[leader].Node.LastIndex() - before
	if entries > commits/4 {
		t.Fatalf("%d concurrent commits took %d log entries; coalesced, they share at most %d", commits, entries, commits/4)
	}
	// Every commit is readable on its own group.
	for i := range commits {
		resp, err := c.Groups((leader+1)%3).OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: fmt.Sprintf("solo-%d", i)})
		if err != nil || len(resp.GetPartitions()) != 1 || resp.GetPartitions()[0].GetOffset() != int64(i) {
			t.Fatalf("solo-%d after coalesced commits: %v %v", i, resp, err)
		}
	}
	t.Logf("%d commits in %d log entries", commits, entries)
}

func TestOffsetRetention_LeaderExpiresOffsetsOfEmptyGroupsOnly(t *testing.T) {
	cfg := testcluster.DefaultCoordinator()
	cfg.OffsetsRetention, cfg.OffsetsRetentionCheckInterval = 500*time.Millisecond, 100*time.Millisecond
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	createTopic(t, c, "t", 6)
	ctx := testCtx(t)
	a := newMember(t, c, "live", "t")
	a.sessionMs = 30_000 // silent while the test waits; its session must outlast the wait
	rebalance(t, ctx, a)
	if _, err := a.commit(ctx, "t", 0, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Groups(0).OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "solo", Generation: -1,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 5}}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 20*time.Second, "the empty group's offsets to expire", func() (bool, string) {
		d := describe(t, c, 1, "solo")
		return d.GetState() == "Dead", d.GetState()
	})
	// The sweep that expired solo's offsets, committed after live's, found
	// live's past retention too: it kept them because live has a member.
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := c.Groups(2).OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "live"})
	if err != nil || len(got.GetPartitions()) != 1 || got.GetPartitions()[0].GetOffset() != 10 {
		t.Fatalf("offsets of a group with members after retention passed: %v %v", got, err)
	}
}

// Members subscribed to a topic that does not exist yet are assigned it
// once it is created: the creation starts a rebalance, which they hear of
// on their next heartbeat (issue 13's second finding).
func TestCreateTopic_SettledGroupRebalancesOntoTheNewTopic(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t", "later"), newMember(t, c, "g", "t", "later")
	a.sessionMs, b.sessionMs = 30_000, 30_000 // no expiry may start a rebalance here
	rebalance(t, ctx, a, b)
	checkAssignment(t, "t", 6, a, b)
	gen := a.generation

	createTopic(t, c, "later", 4)
	testcluster.WaitFor(t, 10*time.Second, "a heartbeat to report the rebalance", func() (bool, string) {
		err := a.heartbeat(ctx)
		return reason(err) == "REBALANCE_IN_PROGRESS", fmt.Sprint(err)
	})
	rebalance(t, ctx, a, b)
	if a.generation <= gen {
		t.Fatalf("generation %d after the topic's creation, was %d", a.generation, gen)
	}
	checkAssignment(t, "t", 6, a, b)
	checkAssignment(t, "later", 4, a, b)
}

// waitState polls the leader until group is in state.
func waitState(t *testing.T, ctx context.Context, c *testcluster.Cluster, group, state string) {
	t.Helper()
	for {
		resp, err := c.Groups(c.Leader()).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{group}})
		if err == nil && len(resp.GetGroups()) == 1 && resp.GetGroups()[0].GetState() == state {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s never reached %s (last: %v, %v)", group, state, resp, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitParked polls the leader until n JoinGroup calls are parked at its
// barrier.
func waitParked(t *testing.T, c *testcluster.Cluster, n int) {
	t.Helper()
	proc.WaitFor(t, 10*time.Second, fmt.Sprintf("%d JoinGroup calls parked", n), func() (bool, string) {
		got := parkedCalls(t, c, "join")
		return got >= n, fmt.Sprintf("%d parked", got)
	})
}

// TestParkedMember_CutCall_KeepsItsSession: a member whose JoinGroup waits
// at the barrier longer than its session timeout, and whose call is then
// cut (a connection reset, a forwarding follower restarting), is still a
// member when it retries at once: the session counts from when the call
// parked and from when it was cut, as Kafka keeps a member awaiting join
// alive until the barrier completes (issue 13, finding 3).
func TestParkedMember_CutCall_KeepsItsSession(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	a.sessionMs, a.rebalMs = 30000, 30000
	b.sessionMs, b.rebalMs = 1000, 30000
	rebalance(t, ctx, a, b)

	// A new member starts a rebalance that a, silent, holds open.
	n := newMember(t, c, "g", "t")
	n.sessionMs, n.rebalMs = 30000, 30000
	go func() { _ = n.tryJoin(ctx) }()
	waitState(t, ctx, c, "g", "PreparingRebalance")

	// b parks for three of its session timeouts, then its call is cut.
	cut, cancel := context.WithTimeout(ctx, 3*time.Duration(b.sessionMs)*time.Millisecond)
	err := b.tryJoin(cut)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Canceled {
		t.Fatalf("b's parked join: %v, want it cut while waiting", err)
	}
	// The client backs off (100 ms, shorter than the session timeout), and
	// its retry parks again instead of finding b expired.
	time.Sleep(100 * time.Millisecond) // time passes: the client's back-off before its retry
	retry, cancelRetry := context.WithTimeout(ctx, 2*time.Duration(b.sessionMs)*time.Millisecond)
	defer cancelRetry()
	if err := b.tryJoin(retry); reason(err) == "UNKNOWN_MEMBER_ID" {
		t.Fatalf("b's retry right after its parked call was cut: %v: its session expired while it waited", err)
	}
}

// TestRebalance_NoMemberRejoined_CompletionPostponed: when a rebalance's
// timeout passes and the only members left are static ones that did not
// rejoin, the join phase is not completed (Kafka 2.4+): the generation
// does not move on with a leader that never got a join answer. When the
// static member comes back, the round completes with it (issue 13,
// finding 9).
func TestRebalance_NoMemberRejoined_CompletionPostponed(t *testing.T) {
	const postponed = "rebalance timeout passed with no member rejoined; completion postponed"
	logs := &logCounter{}
	cfg := testcluster.DefaultCoordinator()
	cfg.InitialRebalanceDelay = 200 * time.Millisecond
	cfg.Logger = slog.New(logs)
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	createTopic(t, c, "t", 6)
	ctx := testCtx(t)
	s, d := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	s.instance = "instance-1"
	s.sessionMs, s.rebalMs = 30000, 500
	d.rebalMs = 500
	rebalance(t, ctx, s, d)
	gen := s.generation

	// d leaves; s is silent (its process restarting, say).
	if _, err := d.client().LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: d.id}}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, c, "g", "PreparingRebalance")
	testcluster.WaitFor(t, 10*time.Second, "the rebalance timeout to pass twice with the round's completion postponed", func() (bool, string) {
		n := logs.count(postponed)
		return n >= 2, fmt.Sprintf("postponed %d times", n)
	})
	resp, err := c.Groups(c.Leader()).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetGroups()[0]; got.GetState() != "PreparingRebalance" || got.GetGeneration() != gen {
		t.Fatalf("after the rebalance timeout with nobody rejoined: %s at generation %d, want PreparingRebalance at %d", got.GetState(), got.GetGeneration(), gen)
	}
	// s comes back: the round completes with it as the leader.
	s.mustJoin(ctx)
	if s.generation != gen+1 || !s.isLeader() {
		t.Fatalf("s rejoined into generation %d (leader %t), want %d as the leader", s.generation, s.isLeader(), gen+1)
	}
}

// TestSync_RefusedPlan_ReportedAndUnsyncedMembersRemoved: a leader whose
// plan the FSM refuses does not hold its group in CompletingRebalance
// forever: the refusal is reported (DescribeGroups' assignment_error, the
// assignments_refused metric), and when the rebalance timeout passes the
// members that did not sync (the leader) are removed, the parked follower
// is told to rejoin, and the group moves on without the leader, as Kafka
// removes members that do not sync in time (issue 13, finding 5).
func TestSync_RefusedPlan_ReportedAndUnsyncedMembersRemoved(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	a.sessionMs, b.sessionMs = 30000, 30000
	a.rebalMs, b.rebalMs = 1000, 1000
	errs := make(chan error, 2)
	go func() { errs <- a.tryJoin(ctx) }()
	go func() { errs <- b.tryJoin(ctx) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	leader, follower := a, b
	if b.isLeader() {
		leader, follower = b, a
	}
	gen := leader.generation
	followerSync := make(chan error, 1)
	go func() { followerSync <- follower.trySync(ctx) }()
	waitSyncParked(t, c, 1)

	// A plan naming a partition that does not exist.
	_, err := leader.client().SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "g", Generation: gen, MemberId: leader.id,
		Assignments: []*cohortv1.MemberAssignment{{MemberId: leader.id, Assignment: &cohortv1.Assignment{Topics: []*cohortv1.TopicPartitions{{Topic: "t", Partitions: []int32{99}}}}}}})
	if reason(err) != "INVALID_ASSIGNMENT" {
		t.Fatalf("the bad plan: %v, want INVALID_ASSIGNMENT", err)
	}
	resp, err := c.Groups(c.Leader()).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetGroups()[0]; d.GetState() != "CompletingRebalance" || !strings.Contains(d.GetAssignmentError(), "INVALID_ASSIGNMENT") {
		t.Fatalf("describe after the refused plan: state %s, assignment_error %q", d.GetState(), d.GetAssignmentError())
	}
	if n := metricValue(t, c, "cohort_group_assignments_refused_total"); n != 1 {
		t.Fatalf("assignments_refused_total %v, want 1", n)
	}

	// The rebalance timeout passes: the leader, who never synced a valid
	// plan, is removed; the follower's parked sync is told to rejoin.
	select {
	case err := <-followerSync:
		if reason(err) != "REBALANCE_IN_PROGRESS" {
			t.Fatalf("the follower's parked sync: %v, want REBALANCE_IN_PROGRESS", err)
		}
	case <-time.After(15 * time.Second): // the rebalance timeout is 1 s; the leader's session 30 s
		t.Fatal("the follower's sync was not answered within 15 s: the group stays in CompletingRebalance until the leader's session runs out")
	}
	follower.mustJoin(ctx)
	if !follower.isLeader() || follower.generation <= gen || len(follower.join.GetMembers()) != 1 {
		t.Fatalf("after the timeout: generation %d (was %d), leader %t, %d members; want the follower alone, leading a new generation",
			follower.generation, gen, follower.isLeader(), len(follower.join.GetMembers()))
	}
	follower.mustSync(ctx)
	if n := metricValue(t, c, "cohort_group_sync_expirations_total"); n != 1 {
		t.Fatalf("sync_expirations_total %v, want 1 (the leader)", n)
	}
}

// waitSyncParked polls the leader until n SyncGroup calls are parked.
func waitSyncParked(t *testing.T, c *testcluster.Cluster, n int) {
	t.Helper()
	proc.WaitFor(t, 10*time.Second, fmt.Sprintf("%d SyncGroup calls parked", n), func() (bool, string) {
		got := parkedCalls(t, c, "sync")
		return got >= n, fmt.Sprintf("%d parked", got)
	})
}

// parkedCalls is cohort_group_parked_calls{kind} on the leader.
func parkedCalls(t *testing.T, c *testcluster.Cluster, kind string) int {
	t.Helper()
	for _, m := range leaderMetric(t, c, "cohort_group_parked_calls") {
		if m.GetLabel()[0].GetValue() == kind {
			return int(m.GetGauge().GetValue())
		}
	}
	return 0
}

// metricValue is a counter of the leader's engine.
func metricValue(t *testing.T, c *testcluster.Cluster, name string) float64 {
	t.Helper()
	if ms := leaderMetric(t, c, name); len(ms) > 0 {
		return ms[0].GetCounter().GetValue()
	}
	return 0
}

// leaderMetric gathers one metric family of the leader's engine.
func leaderMetric(t *testing.T, c *testcluster.Cluster, name string) []*dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Nodes[c.Leader()].Engine.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// TestJoin_RetryWhileCompletingRebalance_SameGeneration: a member that
// lost its join answer (its call cut after the barrier closed) and joins
// again unchanged while the group waits for the leader's plan gets the
// same generation back; no new rebalance starts, and the plan still ends
// the round.
func TestJoin_RetryWhileCompletingRebalance_SameGeneration(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	ms := []*member{newMember(t, c, "g", "t"), newMember(t, c, "g", "t")}
	if err := joinAll(ctx, ms...); err != nil {
		t.Fatal(err)
	}
	gen := ms[0].generation
	follower := ms[0]
	if follower.isLeader() {
		follower = ms[1]
	}
	// Short: a join that started a rebalance would park at the barrier
	// until the others rejoined or the rebalance timeout passed.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := follower.tryJoin(rctx)
	cancel()
	if err != nil || follower.generation != gen {
		t.Fatalf("retried join: generation %d, %v; want generation %d at once", follower.generation, err, gen)
	}
	if d := describe(t, c, c.Leader(), "g"); d.GetState() != "CompletingRebalance" || d.GetGeneration() != gen {
		t.Fatalf("after the retried join: %s generation %d, want CompletingRebalance %d", d.GetState(), d.GetGeneration(), gen)
	}
	if err := all(ms, "sync", func(m *member) error { return m.trySync(ctx) }); err != nil {
		t.Fatal(err)
	}
	checkAssignment(t, "t", 6, ms...)
}
