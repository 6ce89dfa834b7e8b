package client

import (
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// TestWatch_OneStreamAcrossGenerations_StaleMessagesIgnored: a member's
// watch stays open across rebalances. A message about a generation the
// member has already left (it learned of that change otherwise) is
// ignored; one about its current generation makes it rejoin at once,
// although its heartbeats are a minute apart; and the rejoin does not
// open a second stream.
func TestWatch_OneStreamAcrossGenerations_StaleMessagesIgnored(t *testing.T) {
	c := newFakeCluster(t)
	c.watch = make(chan *cohortv1.WatchGroupResponse)
	n := c.node()
	var rec recorder
	cfg := testConfig(&rec, n.addr)
	cfg.HeartbeatInterval = time.Minute
	cfg.SessionTimeout = 3 * time.Minute
	m, _ := startMember(t, cfg)
	waitFor(t, "the member assigned and watching", func() bool {
		return m.Generation() == 1 && c.count("WatchGroup") == 1
	})

	// About generation 0: stale. Sent on the stream (the send returns
	// once the member's stream took it), it must not start a rejoin.
	c.watch <- &cohortv1.WatchGroupResponse{Error: cohortv1.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS, Generation: 0}
	time.Sleep(200 * time.Millisecond)
	if joins := c.count("JoinGroup"); m.Generation() != 1 || joins != 2 {
		t.Fatalf("after a stale message: generation %d, %d JoinGroup calls; want 1 and 2 (MEMBER_ID_REQUIRED, then the join)", m.Generation(), joins)
	}

	c.watch <- &cohortv1.WatchGroupResponse{Error: cohortv1.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS, Generation: 1}
	waitFor(t, "the member rejoined into generation 2", func() bool { return m.Generation() == 2 })
	// The same stream tells it of the next rebalance too.
	c.watch <- &cohortv1.WatchGroupResponse{Error: cohortv1.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS, Generation: 2}
	waitFor(t, "the member rejoined into generation 3", func() bool { return m.Generation() == 3 })
	if w := c.count("WatchGroup"); w != 1 {
		t.Fatalf("%d WatchGroup streams over three generations, want one", w)
	}
	if hb := c.count("Heartbeat"); hb != 0 {
		t.Fatalf("%d heartbeats: the rejoins were not the watch's doing", hb)
	}
}
