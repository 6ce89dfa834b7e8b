package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func proto_equal(a, b proto.Message) bool { return proto.Equal(a, b) }

func testConn(t *testing.T, endpoints ...string) *Conn {
	t.Helper()
	c, err := Dial(ConnConfig{Endpoints: endpoints, RetryBackoffMin: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConn_FollowsLeaderHeader(t *testing.T) {
	c := newFakeCluster(t)
	follower, leader := c.node(), c.node()
	follower.setLeader(leader.addr)
	leader.setLeader(leader.addr)
	conn := testConn(t, follower.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		if _, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	calls := c.callsOf("CreateTopic")
	if calls[0].node != follower.addr || calls[1].node != leader.addr || calls[2].node != leader.addr {
		t.Fatalf("want follower once then the leader: %v", calls)
	}
	if conn.Leader() != leader.addr {
		t.Fatalf("Leader() = %q", conn.Leader())
	}
}

func TestConn_NotLeaderWithHeader_GoesToLeaderAtOnce(t *testing.T) {
	c := newFakeCluster(t)
	a, b := c.node(), c.node()
	a.setLeader(b.addr)
	a.refuseNext("CreateTopic", errNotLeader)
	conn := testConn(t, a.addr)
	if _, err := conn.Topics().CreateTopic(context.Background(), &cohortv1.CreateTopicRequest{Name: "t", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	calls := c.callsOf("CreateTopic")
	if len(calls) != 2 || calls[1].node != b.addr || !proto.Equal(calls[0].req, calls[1].req) {
		t.Fatalf("calls: %v", calls)
	}
}

func TestConn_RotatesPastDeadAndRefusingEndpoints(t *testing.T) {
	c := newFakeCluster(t)
	busy, good := c.node(), c.node()
	busy.refuseNext("CreateTopic", errCoordNotAvail)
	conn := testConn(t, deadAddr(t), busy.addr, good.addr)
	if _, err := conn.Topics().CreateTopic(context.Background(), &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	calls := c.callsOf("CreateTopic")
	if len(calls) != 2 || calls[0].node != busy.addr || calls[1].node != good.addr {
		t.Fatalf("calls: %v", calls)
	}
}

func TestConn_ProtocolErrorsAreNotRetried(t *testing.T) {
	for _, e := range []error{errInvalidArg, errRebalance, status.Error(codes.PermissionDenied, "no")} {
		c := newFakeCluster(t)
		n := c.node()
		n.refuseNext("CreateTopic", e)
		conn := testConn(t, n.addr)
		_, err := conn.Topics().CreateTopic(context.Background(), &cohortv1.CreateTopicRequest{Name: "t"})
		if status.Code(err) != status.Code(e) || c.count("CreateTopic") != 1 {
			t.Fatalf("%v: got %v after %d calls", e, err, c.count("CreateTopic"))
		}
	}
}

func TestConn_RetriesAreBoundedByContext(t *testing.T) {
	conn := testConn(t, deadAddr(t), deadAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := conn.Groups().Heartbeat(ctx, &cohortv1.HeartbeatRequest{GroupId: "g"})
	var last interface{ GRPCStatus() *status.Status }
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &last) || last.GRPCStatus().Code() != codes.Unavailable {
		t.Fatalf("want the context's error and the last Unavailable, got %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("retries outlived the context: %v", elapsed)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Groups().Heartbeat(context.Background(), &cohortv1.HeartbeatRequest{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestBackoff_HasJitterAndIsBounded(t *testing.T) {
	b := newBackoff(10*time.Millisecond, 80*time.Millisecond)
	seen := map[time.Duration]bool{}
	for attempt := range 12 {
		ceiling := min(10*time.Millisecond<<attempt, 80*time.Millisecond)
		for range 50 {
			d := b.delay(attempt)
			if d < ceiling/2 || d > ceiling {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, ceiling/2, ceiling)
			}
			seen[d] = true
		}
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct delays: no jitter", len(seen))
	}
	// Extremes of the random source stay inside the bounds.
	for _, r := range []float64{0, 0.999999} {
		b.rand = func() float64 { return r }
		if d := b.delay(1000); d < 40*time.Millisecond || d > 80*time.Millisecond {
			t.Fatalf("rand %v: delay %v", r, d)
		}
	}
}

func TestConn_HungNode_AttemptTimesOutAndNextEndpointAnswers(t *testing.T) {
	c := newFakeCluster(t)
	hung, good := c.node(), c.node()
	hung.refuseNext("CreateTopic", errHang)
	conn := testConn(t, hung.addr, good.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}, AttemptTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	calls := c.callsOf("CreateTopic")
	if len(calls) != 2 || calls[0].node != hung.addr || calls[1].node != good.addr {
		t.Fatalf("calls: %v", calls)
	}
}
