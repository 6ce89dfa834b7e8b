package coordinator_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// watchStream is one member's open WatchGroup.
type watchStream struct {
	m      *member
	stream cohortv1.GroupCoordinator_WatchGroupClient
	cancel context.CancelFunc
}

// openWatch opens a WatchGroup on node for m's current generation and
// returns it after its first message, which it checks says want.
func openWatch(t *testing.T, ctx context.Context, m *member, node int, want cohortv1.ErrorCode) *watchStream {
	t.Helper()
	// Every watch of these tests ends or is checked within seconds: a
	// message that never comes fails the test after 15 s, not the test's
	// whole minute.
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	t.Cleanup(cancel)
	stream, err := m.c.Groups(node).WatchGroup(sctx, &cohortv1.WatchGroupRequest{GroupId: m.group, Generation: m.generation, MemberId: m.id, InstanceId: m.instance})
	if err != nil {
		t.Fatalf("watch %s on node %d: %v", m.id, node, err)
	}
	w := &watchStream{m: m, stream: stream, cancel: cancel}
	w.expect(t, want)
	return w
}

// expect receives the watch's next message and checks its error code.
func (w *watchStream) expect(t *testing.T, want cohortv1.ErrorCode) *cohortv1.WatchGroupResponse {
	t.Helper()
	resp, err := w.stream.Recv()
	if err != nil {
		t.Fatalf("watch of %s: %v, want a message with %s", w.m.id, err, want)
	}
	if resp.GetError() != want {
		t.Fatalf("watch of %s says %s (%s), want %s", w.m.id, resp.GetError(), resp.GetErrorMessage(), want)
	}
	return resp
}

// expectEnd checks that the stream ends: cleanly (wantReason "") or with a
// refusal whose reason is wantReason.
func (w *watchStream) expectEnd(t *testing.T, wantReason string) {
	t.Helper()
	resp, err := w.stream.Recv()
	switch {
	case err == nil:
		t.Fatalf("watch of %s sent %v, want the stream to end", w.m.id, resp)
	case wantReason == "" && !errors.Is(err, io.EOF):
		t.Fatalf("watch of %s ended with %v, want a clean end", w.m.id, err)
	case wantReason != "" && reason(err) != wantReason:
		t.Fatalf("watch of %s ended with %v, want %s", w.m.id, err, wantReason)
	}
}

// TestWatchGroup_RebalanceStarts_EveryWatcherToldWithoutHeartbeating: two
// settled members watch (one through a follower, which relays the stream
// to the leader) and never heartbeat; a third member's join starts a
// rebalance, and both hear REBALANCE_IN_PROGRESS from their watch. The
// push is the only way they can learn of it here. Their streams stay open:
// once they are current at the next generation the watches go on there,
// and when one of them leaves, the other hears of that rebalance on the
// same stream (labelled with the generation it was current at), while the
// one that left is told it is unknown and its stream ends.
func TestWatchGroup_RebalanceStarts_EveryWatcherToldWithoutHeartbeating(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	a.rebalMs, b.rebalMs = 30000, 30000
	rebalance(t, ctx, a, b)
	follower := (c.Leader() + 1) % 3

	wa := openWatch(t, ctx, a, c.Leader(), cohortv1.ErrorCode_ERROR_CODE_NONE)
	wb := openWatch(t, ctx, b, follower, cohortv1.ErrorCode_ERROR_CODE_NONE)

	n := newMember(t, c, "g", "t")
	n.rebalMs = 30000
	joined := make(chan error, 1)
	go func() { joined <- n.tryJoin(ctx) }()

	first := a.generation
	for _, w := range []*watchStream{wa, wb} {
		resp := w.expect(t, cohortv1.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS)
		if resp.GetGeneration() != first {
			t.Fatalf("watch of %s reports generation %d, want %d (the one it was current at)", w.m.id, resp.GetGeneration(), first)
		}
	}
	// Told at once, both rejoin and the round completes with one new
	// generation.
	if err := joinAll(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatalf("new member's join: %v", err)
	}
	for _, m := range []*member{a, b, n} {
		if m.generation != first+1 {
			t.Fatalf("member %s at generation %d after the round, want %d", m.id, m.generation, first+1)
		}
	}
	if err := all([]*member{a, b, n}, "sync", func(m *member) error { return m.trySync(ctx) }); err != nil {
		t.Fatal(err)
	}

	// The next rebalance reaches the same streams.
	if _, err := b.client().LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: b.id}}}); err != nil {
		t.Fatalf("b leaves: %v", err)
	}
	if resp := wa.expect(t, cohortv1.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS); resp.GetGeneration() != first+1 {
		t.Fatalf("a's watch reports generation %d for the second rebalance, want %d", resp.GetGeneration(), first+1)
	}
	wb.expect(t, cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_MEMBER_ID)
	wb.expectEnd(t, "")
}

// TestWatchGroup_NotCurrent_AnsweredAtOnce: a watch from a member that is
// not current is answered what its heartbeat would be; one from a member
// that is not in the group ends there.
func TestWatchGroup_NotCurrent_AnsweredAtOnce(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a := newMember(t, c, "g", "t")
	rebalance(t, ctx, a)

	stale := *a
	stale.generation = a.generation - 1
	// Still in the group: the stream stays open for the member's next
	// generation.
	openWatch(t, ctx, &stale, c.Leader(), cohortv1.ErrorCode_ERROR_CODE_ILLEGAL_GENERATION)

	stranger := *a
	stranger.id = "nobody"
	openWatch(t, ctx, &stranger, c.Leader(), cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_MEMBER_ID).expectEnd(t, "")

	unknownGroup := *a
	unknownGroup.group = "no-such-group"
	openWatch(t, ctx, &unknownGroup, c.Leader(), cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_MEMBER_ID).expectEnd(t, "")

	// A malformed request is refused as a whole, naming the field.
	bad := *a
	bad.group = ""
	stream, err := c.Groups(c.Leader()).WatchGroup(ctx, &cohortv1.WatchGroupRequest{GroupId: bad.group, MemberId: a.id, Generation: a.generation})
	if err == nil {
		_, err = stream.Recv()
	}
	if reason(err) != "INVALID_ARGUMENT" {
		t.Fatalf("watch without a group ID: %v, want INVALID_ARGUMENT", err)
	}
}

// TestWatchGroup_SecondWatchOfAMember_ReplacesTheFirst: a member watches
// once; a second watch ends the first (retriable), so a leader holds at
// most one watch per member.
func TestWatchGroup_SecondWatchOfAMember_ReplacesTheFirst(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a := newMember(t, c, "g", "t")
	rebalance(t, ctx, a)
	first := openWatch(t, ctx, a, c.Leader(), cohortv1.ErrorCode_ERROR_CODE_NONE)
	openWatch(t, ctx, a, c.Leader(), cohortv1.ErrorCode_ERROR_CODE_NONE)
	first.expectEnd(t, "COORDINATOR_NOT_AVAILABLE")
}

// TestWatchGroup_LeaderDies_StreamEnds_NewLeaderAnswersFromState: the
// leader holding a watch dies; the stream ends; watching again on the new
// leader finds the member current at the same generation (the state is
// replicated), and a rebalance started there reaches the new watch.
func TestWatchGroup_LeaderDies_StreamEnds_NewLeaderAnswersFromState(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a, b := newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	a.sessionMs, b.sessionMs = 20000, 20000
	a.rebalMs, b.rebalMs = 30000, 30000
	rebalance(t, ctx, a, b)
	old := c.Leader()
	w := openWatch(t, ctx, a, old, cohortv1.ErrorCode_ERROR_CODE_NONE)

	c.Kill(old)
	if _, err := w.stream.Recv(); err == nil {
		t.Fatal("watch on a killed leader went on sending")
	}
	leader := c.WaitServing()
	a.node, b.node = leader, leader
	w = openWatch(t, ctx, a, leader, cohortv1.ErrorCode_ERROR_CODE_NONE)

	if _, err := b.client().LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: b.id}}}); err != nil {
		t.Fatalf("b leaves: %v", err)
	}
	w.expect(t, cohortv1.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS)
}

// TestWatchGroup_LeadershipTransferred_EndsNotLeader: a node that hands
// leadership over (and keeps running) ends its watches with NOT_LEADER, so
// members watch again on the new leader instead of waiting on a node that
// will never tell them anything.
func TestWatchGroup_LeadershipTransferred_EndsNotLeader(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	a := newMember(t, c, "g", "t")
	a.sessionMs = 20000
	rebalance(t, ctx, a)
	old := c.Leader()
	w := openWatch(t, ctx, a, old, cohortv1.ErrorCode_ERROR_CODE_NONE)
	if _, err := cohortv1.NewClusterServiceClient(c.Conn(old)).TransferLeadership(ctx, &cohortv1.TransferLeadershipRequest{}); err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
	w.expectEnd(t, "NOT_LEADER")
	leader := c.WaitServing()
	if leader == old {
		t.Fatalf("node %d still leads after the transfer", old)
	}
	openWatch(t, ctx, a, leader, cohortv1.ErrorCode_ERROR_CODE_NONE)
}
