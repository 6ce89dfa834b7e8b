package client

import (
	"context"
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
	time.Sleep(200 * time.Millisecond) // time passes: a rejoin on the stale message would start within it
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

// TestMember_SharedConn_CallsThroughItAndLeavesItOpen: members given one
// Conn make their calls through it (no dial of their own) and leave it
// open when they close, for the next member that shares it.
func TestMember_SharedConn_CallsThroughItAndLeavesItOpen(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	conn, err := Dial(ConnConfig{Endpoints: []string{n.addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var rec recorder
	cfg := testConfig(&rec)
	cfg.Conn = conn
	m, err := NewMember(cfg)
	if err != nil {
		t.Fatalf("NewMember with a Conn and no Endpoints: %v", err)
	}
	if m.Conn() != conn {
		t.Fatal("the member dialled a Conn of its own")
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	waitFor(t, "the member assigned through the shared Conn", func() bool { return m.Generation() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	// The Conn still works: a second member runs through it.
	cfg2 := testConfig(&rec)
	cfg2.Conn = conn
	m2, _ := startMember(t, cfg2)
	waitFor(t, "a second member assigned through the same Conn", func() bool { return m2.Generation() == 2 })
}
