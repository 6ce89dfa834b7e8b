package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/cohortlabs/cohort/assign"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func joinReq(c fakeCall) *cohortv1.JoinGroupRequest { return c.req.(*cohortv1.JoinGroupRequest) }
func syncReq(c fakeCall) *cohortv1.SyncGroupRequest { return c.req.(*cohortv1.SyncGroupRequest) }
func hbReq(c fakeCall) *cohortv1.HeartbeatRequest   { return c.req.(*cohortv1.HeartbeatRequest) }
func commitReq(c fakeCall) *cohortv1.OffsetCommitRequest {
	return c.req.(*cohortv1.OffsetCommitRequest)
}

var allOrders = []TopicPartition{{"orders", 0}, {"orders", 1}, {"orders", 2}}

func TestMember_MemberIDRequired_ThenJoinsSyncsAndHeartbeats(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	rec := &recorder{}
	m, _ := startMember(t, testConfig(rec, n.addr))

	waitFor(t, "three heartbeats", func() bool { return c.count("Heartbeat") >= 3 })

	joins := c.callsOf("JoinGroup")
	if len(joins) != 2 || joinReq(joins[0]).MemberId != "" || joinReq(joins[1]).MemberId != "member-1" {
		t.Fatalf("joins: want \"\" then member-1, got %v", joins)
	}
	j := joinReq(joins[1])
	if j.GroupId != "g1" || j.ProtocolType != "consumer" || j.SessionTimeoutMs != 1000 || j.RebalanceTimeoutMs != 2000 ||
		!slices.Equal(j.Topics, []string{"orders"}) || len(j.Protocols) != 2 || j.Protocols[0].Name != "roundrobin" {
		t.Fatalf("join request: %v", j)
	}
	s := syncReq(c.callsOf("SyncGroup")[0])
	if s.Generation != 1 || s.MemberId != "member-1" || len(s.Assignments) != 1 {
		t.Fatalf("sync request: %v", s)
	}
	if got := fromProto(s.Assignments[0].Assignment); !slices.Equal(got, allOrders) {
		t.Fatalf("group leader's plan: got %v, want %v", got, allOrders)
	}
	for _, h := range c.callsOf("Heartbeat") {
		if r := hbReq(h); r.Generation != 1 || r.MemberId != "member-1" {
			t.Fatalf("heartbeat: %v", r)
		}
	}
	if got := rec.get(); !slices.Equal(got, []string{"assigned g1 [orders/0 orders/1 orders/2]"}) {
		t.Fatalf("callbacks: %v", got)
	}
	if m.Generation() != 1 || m.MemberID() != "member-1" || !m.IsLeader() || !slices.Equal(m.Assignment(), allOrders) {
		t.Fatalf("accessors: gen %d id %q leader %v assignment %v", m.Generation(), m.MemberID(), m.IsLeader(), m.Assignment())
	}
}

func TestMember_NotLeaderDuringSyncAndCommit_RetriesSameMemberAndGenerationOnNextEndpoint(t *testing.T) {
	c := newFakeCluster(t)
	a, b := c.node(), c.node()
	a.refuseNext("SyncGroup", errNotLeader)
	a.refuseNext("OffsetCommit", errNotLeader)
	rec := &recorder{}
	m, _ := startMember(t, testConfig(rec, a.addr, b.addr))

	waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })
	syncs := c.callsOf("SyncGroup")
	if len(syncs) != 2 || syncs[0].node != a.addr || syncs[1].node != b.addr {
		t.Fatalf("sync: want a (NOT_LEADER) then b, got %v", syncs)
	}
	if !proto_equal(syncs[0].req, syncs[1].req) {
		t.Fatalf("retried sync differs: %v vs %v", syncs[0].req, syncs[1].req)
	}
	if r := syncReq(syncs[1]); r.Generation != 1 || r.MemberId != "member-1" {
		t.Fatalf("retried sync: %v", r)
	}
	waitFor(t, "a heartbeat on b", func() bool {
		hbs := c.callsOf("Heartbeat")
		return len(hbs) > 0 && hbs[len(hbs)-1].node == b.addr
	})

	// b now knows a is the leader again; the commit goes there, is refused,
	// and comes back to b unchanged.
	b.setLeader(a.addr)
	waitFor(t, "the member to follow the header to a", func() bool { return m.Conn().Leader() == a.addr })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Commit(ctx, []PartitionOffset{{TopicPartition: TopicPartition{"orders", 1}, Offset: 42}}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	commits := c.callsOf("OffsetCommit")
	if len(commits) < 2 || commits[0].node != a.addr {
		t.Fatalf("commits: want first on a, got %v", commits)
	}
	for _, cm := range commits {
		if r := commitReq(cm); r.Generation != 1 || r.MemberId != "member-1" || r.Offsets[0].Offset != 42 {
			t.Fatalf("commit attempt: %v", r)
		}
	}
	if len(c.callsOf("JoinGroup")) != 2 {
		t.Fatalf("failover caused a rejoin: %v", c.callsOf("JoinGroup"))
	}
}

func TestMember_RebalanceInProgressOnHeartbeat_RevokesThenRejoinsWithSameMemberID(t *testing.T) {
	for _, reason := range []error{errRebalance, errIllegalGen} {
		t.Run(Reason(fromStatus(reason)), func(t *testing.T) {
			c := newFakeCluster(t)
			n := c.node()
			rec := &recorder{}
			m, _ := startMember(t, testConfig(rec, n.addr))
			waitFor(t, "first assignment", func() bool { return len(rec.get()) == 1 })

			c.fail("Heartbeat", reason)
			waitFor(t, "second assignment", func() bool { return len(rec.get()) == 3 })
			want := []string{
				"assigned g1 [orders/0 orders/1 orders/2]",
				"revoked [orders/0 orders/1 orders/2]",
				"assigned g2 [orders/0 orders/1 orders/2]",
			}
			if got := rec.get(); !slices.Equal(got, want) {
				t.Fatalf("callbacks:\n got %q\nwant %q", got, want)
			}
			joins := c.callsOf("JoinGroup")
			if len(joins) != 3 || joinReq(joins[2]).MemberId != "member-1" {
				t.Fatalf("rejoin must keep the member ID: %v", joins)
			}
			if m.Generation() != 2 {
				t.Fatalf("generation %d, want 2", m.Generation())
			}
		})
	}
}

func TestMember_UnknownMemberIDOnHeartbeat_ResetsDynamicMemberID(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	rec := &recorder{}
	m, _ := startMember(t, testConfig(rec, n.addr))
	waitFor(t, "first assignment", func() bool { return len(rec.get()) == 1 })

	c.fail("Heartbeat", errUnknownMember)
	waitFor(t, "second assignment", func() bool { return len(rec.get()) == 3 })
	joins := c.callsOf("JoinGroup")
	var ids []string
	for _, j := range joins {
		ids = append(ids, joinReq(j).MemberId)
	}
	if want := []string{"", "member-1", "", "member-2"}; !slices.Equal(ids, want) {
		t.Fatalf("join member IDs: got %q, want %q", ids, want)
	}
	if m.MemberID() != "member-2" {
		t.Fatalf("member ID %q, want member-2", m.MemberID())
	}
}

func TestMember_UnknownMemberIDOnHeartbeat_StaticMemberKeepsIDUntilJoinRefusesIt(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	rec := &recorder{}
	cfg := testConfig(rec, n.addr)
	cfg.InstanceID = "consumer-a"
	startMember(t, cfg)
	waitFor(t, "first assignment", func() bool { return len(rec.get()) == 1 })

	c.fail("Heartbeat", errUnknownMember)
	c.fail("JoinGroup", errUnknownMember)
	waitFor(t, "second assignment", func() bool { return len(rec.get()) == 3 })
	var ids []string
	for _, j := range c.callsOf("JoinGroup") {
		ids = append(ids, joinReq(j).MemberId)
		if joinReq(j).InstanceId != "consumer-a" {
			t.Fatalf("join without instance ID: %v", j.req)
		}
	}
	if want := []string{"", "member-1", "member-1", "", "member-2"}; !slices.Equal(ids, want) {
		t.Fatalf("join member IDs: got %q, want %q", ids, want)
	}
}

func TestMember_UnknownMemberIDOnJoinAfterFailover_StartsAsNewMember(t *testing.T) {
	// The old leader handed out a pending ID, then died: the new leader does
	// not know it.
	c := newFakeCluster(t)
	a, b := c.node(), c.node()
	a.refuseNext("JoinGroup", protoErr(codes.FailedPrecondition, "MEMBER_ID_REQUIRED", map[string]string{"member_id": "pending-1"}), errNodeDown)
	b.refuseNext("JoinGroup", errUnknownMember)
	rec := &recorder{}
	m, _ := startMember(t, testConfig(rec, a.addr, b.addr))
	waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })
	var ids []string
	for _, j := range c.callsOf("JoinGroup") {
		ids = append(ids, joinReq(j).MemberId)
	}
	if want := []string{"", "pending-1", "pending-1", "", "member-1"}; !slices.Equal(ids, want) {
		t.Fatalf("join member IDs: got %q, want %q", ids, want)
	}
	if m.MemberID() != "member-1" {
		t.Fatalf("member ID %q", m.MemberID())
	}
}

func TestMember_Close_RevokesAndLeaves(t *testing.T) {
	cases := []struct {
		name      string
		instance  string
		leaveOpt  bool
		wantLeave bool
	}{
		{"dynamic member leaves", "", false, true},
		{"static member stays (KIP-345)", "consumer-a", false, false},
		{"static member with LeaveStaticOnClose leaves", "consumer-a", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			n := c.node()
			rec := &recorder{}
			cfg := testConfig(rec, n.addr)
			cfg.InstanceID, cfg.LeaveStaticOnClose = tc.instance, tc.leaveOpt
			m, done := startMember(t, cfg)
			waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Run after Close: %v", err)
			}
			if got := rec.get(); len(got) != 2 || got[1] != "revoked [orders/0 orders/1 orders/2]" {
				t.Fatalf("callbacks: %q", got)
			}
			leaves := c.callsOf("LeaveGroup")
			if !tc.wantLeave {
				if len(leaves) != 0 {
					t.Fatalf("static member left: %v", leaves)
				}
				return
			}
			if len(leaves) != 1 {
				t.Fatalf("leaves: %v", leaves)
			}
			l := leaves[0].req.(*cohortv1.LeaveGroupRequest)
			if l.GroupId != "g1" || len(l.Members) != 1 || l.Members[0].MemberId != "member-1" || l.Members[0].InstanceId != tc.instance {
				t.Fatalf("leave request: %v", l)
			}
			if err := m.Commit(ctx, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("commit after close: %v", err)
			}
		})
	}
}

func TestMember_RunContextCancelled_LeavesAndReturnsContextError(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	rec := &recorder{}
	m, err := NewMember(testConfig(rec, n.addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if c.count("LeaveGroup") != 1 {
		t.Fatalf("no LeaveGroup after cancel")
	}
	if err := m.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Run: %v", err)
	}
}

func TestMember_FatalErrors_StopRun(t *testing.T) {
	cases := []struct {
		name   string
		method string
		err    error
		want   error
		leaves int
	}{
		{"fenced on heartbeat", "Heartbeat", errFenced, ErrFencedInstanceID, 0},
		{"inconsistent protocol on join", "JoinGroup", errInconsistent, ErrInconsistentGroupProtocol, 0},
		{"invalid session timeout on join", "JoinGroup", errInvalidSession, ErrInvalidSessionTimeout, 0},
		{"invalid argument on join", "JoinGroup", errInvalidArg, ErrInvalidArgument, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			n := c.node()
			c.fail(tc.method, tc.err)
			rec := &recorder{}
			cfg := testConfig(rec, n.addr)
			cfg.InstanceID = "consumer-a"
			_, done := startMember(t, cfg)
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not stop")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run: got %v, want %v", err, tc.want)
			}
			if c.count(tc.method) != 1 {
				t.Fatalf("fatal error was retried: %d calls", c.count(tc.method))
			}
			if c.count("LeaveGroup") != tc.leaves {
				t.Fatalf("leaves: %d", c.count("LeaveGroup"))
			}
			if ev := rec.get(); len(ev)%2 != 0 {
				t.Fatalf("every assignment must be revoked on stop: %q", ev)
			}
		})
	}
}

func TestMember_Commit_PerPartitionErrorsAndStaleGeneration(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	// The member gets its ID, then its join with it hangs, so the commit
	// below comes while the member has an ID but no generation, whatever
	// the scheduling. The short timeouts end the hang soon.
	n.refuseNext("JoinGroup", protoErr(codes.FailedPrecondition, "MEMBER_ID_REQUIRED", map[string]string{"member_id": "member-1"}), errHang)
	rec := &recorder{}
	cfg := testConfig(rec, n.addr)
	cfg.RebalanceTimeout, cfg.RequestTimeout = 500*time.Millisecond, time.Second
	m, _ := startMember(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	waitFor(t, "the join with the member ID", func() bool { return c.count("JoinGroup") == 2 })
	if err := m.Commit(ctx, []PartitionOffset{{TopicPartition: TopicPartition{"orders", 0}, Offset: 1}}); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("commit with a member ID but no generation: got %v, want ErrNotJoined", err)
	}
	if got := c.count("OffsetCommit"); got != 0 {
		t.Fatalf("a commit before the join reached the server (%d calls)", got)
	}
	waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })

	c.mu.Lock()
	c.commit = func(r *cohortv1.OffsetCommitRequest) *cohortv1.OffsetCommitResponse { return notOwnerAnswer(r, 7) }
	c.mu.Unlock()
	err := m.Commit(ctx, []PartitionOffset{
		{TopicPartition: TopicPartition{"orders", 0}, Offset: 10, Metadata: "m"},
		{TopicPartition: TopicPartition{"orders", 7}, Offset: 11},
	})
	var cerr *CommitError
	if !errors.As(err, &cerr) || !errors.Is(err, ErrNotOwner) || len(cerr.Partitions) != 1 || cerr.Partitions[TopicPartition{"orders", 7}] == nil {
		t.Fatalf("commit: want a CommitError with NOT_OWNER for orders/7, got %v", err)
	}
	commits := c.callsOf("OffsetCommit")
	if len(commits) != 1 {
		t.Fatalf("one commit sent, server got %d", len(commits))
	}
	if r := commitReq(commits[0]); r.Generation != 1 || r.MemberId != "member-1" || r.Offsets[0].Metadata != "m" {
		t.Fatalf("commit request: %v", r)
	}

	// A whole-request refusal is an *Error and makes the member check its
	// standing at once.
	hbs := c.count("Heartbeat")
	c.fail("OffsetCommit", errIllegalGen)
	c.fail("Heartbeat", errIllegalGen)
	err = m.Commit(ctx, []PartitionOffset{{TopicPartition: TopicPartition{"orders", 0}, Offset: 12}})
	if !errors.Is(err, ErrIllegalGeneration) || Reason(err) != "ILLEGAL_GENERATION" {
		t.Fatalf("commit: want ILLEGAL_GENERATION, got %v", err)
	}
	waitFor(t, "rejoin", func() bool { return m.Generation() == 2 })
	if c.count("Heartbeat") <= hbs {
		t.Fatal("no heartbeat after the refused commit")
	}
}

func TestMember_GroupLeader_AssignsEveryMember(t *testing.T) {
	c := newFakeCluster(t)
	c.topics["payments"] = 2
	c.members = []*cohortv1.JoinGroupMember{
		{MemberId: "member-1", Topics: []string{"orders", "payments"}},
		{MemberId: "other", Metadata: mustSubscription(t, "orders")},
	}
	n := c.node()
	rec := &recorder{}
	cfg := testConfig(rec, n.addr)
	cfg.Topics = []string{"orders", "payments"}
	cfg.Protocols = []string{"range"}
	m, _ := startMember(t, cfg)
	waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })
	plan := map[string][]TopicPartition{}
	for _, a := range syncReq(c.callsOf("SyncGroup")[0]).Assignments {
		plan[a.MemberId] = fromProto(a.Assignment)
	}
	want := map[string][]TopicPartition{
		"member-1": {{"orders", 0}, {"orders", 1}, {"payments", 0}, {"payments", 1}},
		"other":    {{"orders", 2}},
	}
	for id, tps := range want {
		if !slices.Equal(plan[id], tps) {
			t.Fatalf("plan for %s: got %v, want %v", id, plan[id], tps)
		}
	}
	if !slices.Equal(m.Assignment(), want["member-1"]) {
		t.Fatalf("assignment %v", m.Assignment())
	}
}

func TestMember_CloseBeforeRun_ClosesConn(t *testing.T) {
	m, err := NewMember(testConfig(&recorder{}, "127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

func mustSubscription(t *testing.T, topics ...string) []byte {
	t.Helper()
	b, err := assign.EncodeSubscription(assign.Subscription{Topics: topics, Generation: assign.NoGeneration})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
