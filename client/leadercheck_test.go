package client

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// infoNode is a fakeNode that also answers ClusterService NodeInfo with
// the leader and term the test sets. A frozen one holds NodeInfo until the
// caller gives up, as a stopped process does.
type infoNode struct {
	*fakeNode
	cohortv1.UnimplementedClusterServiceServer

	imu    sync.Mutex
	leader string
	term   uint64
	frozen bool
	asked  int
}

// infoNode starts a fake node that answers NodeInfo on a fresh loopback port.
func (c *fakeCluster) infoNode() *infoNode {
	c.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatalf("listen: %v", err)
	}
	fn := &fakeNode{c: c, addr: lis.Addr().String(), srv: grpc.NewServer(), refuse: map[string][]error{}}
	n := &infoNode{fakeNode: fn}
	cohortv1.RegisterGroupCoordinatorServer(fn.srv, fn)
	cohortv1.RegisterTopicsServer(fn.srv, fn)
	cohortv1.RegisterClusterServiceServer(fn.srv, n)
	go func() { _ = fn.srv.Serve(lis) }()
	c.t.Cleanup(fn.srv.Stop)
	return n
}

// names makes NodeInfo name leader in term.
func (n *infoNode) names(leader string, term uint64) {
	n.imu.Lock()
	defer n.imu.Unlock()
	n.leader, n.term = leader, term
}

// freeze makes NodeInfo hang, and the next call of each method.
func (n *infoNode) freeze(methods ...string) {
	n.imu.Lock()
	n.frozen = true
	n.imu.Unlock()
	for _, m := range methods {
		n.refuseNext(m, errHang)
	}
}

// thaw makes NodeInfo answer again.
func (n *infoNode) thaw() {
	n.imu.Lock()
	defer n.imu.Unlock()
	n.frozen = false
}

func (n *infoNode) askedTimes() int {
	n.imu.Lock()
	defer n.imu.Unlock()
	return n.asked
}

func (n *infoNode) NodeInfo(ctx context.Context, _ *cohortv1.NodeInfoRequest) (*cohortv1.NodeInfoResponse, error) {
	n.imu.Lock()
	n.asked++
	frozen, leader, term := n.frozen, n.leader, n.term
	n.imu.Unlock()
	if frozen {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &cohortv1.NodeInfoResponse{GrpcAddress: n.addr, LeaderGrpcAddress: leader, Term: term}, nil
}

// checkConn is a Conn whose attempts would wait 30 s, checking the leader
// every interval.
func checkConn(t *testing.T, every time.Duration, endpoints ...string) *Conn {
	t.Helper()
	c, err := Dial(ConnConfig{Endpoints: endpoints, RetryBackoffMin: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond,
		RequestTimeout: 30 * time.Second, LeaderCheckInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// leaderOf makes every node name leader (term 1), in NodeInfo and in the
// cohort-leader header, and sends one call so that conn goes to it.
func leaderOf(t *testing.T, conn *Conn, leader *infoNode, nodes ...*infoNode) {
	t.Helper()
	for _, n := range append(nodes, leader) {
		n.names(leader.addr, 1)
		n.setLeader(leader.addr)
	}
	if _, err := conn.Topics().CreateTopic(context.Background(), &cohortv1.CreateTopicRequest{Name: "warm", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if conn.Leader() != leader.addr {
		t.Fatalf("Leader() = %q, want %s", conn.Leader(), leader.addr)
	}
}

// createTopicAsync sends CreateTopic in the background.
func createTopicAsync(conn *Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1})
		done <- err
	}()
	return done
}

// await returns what done delivers, failing after 10 s (the attempts'
// own timeout is 30 s: only the leader check answers in time).
func await(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits on the frozen leader after 10 s")
		return nil
	}
}

// checkGoroutines counts the goroutines running the leader check.
func checkGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "client.(*leaderCheck)") || strings.Contains(g, "client.(*Conn).askLeader") {
			n++
		}
	}
	return n
}

func TestConn_FrozenLeader_AbandonedWhenAnotherNodeNamesTheNewLeader(t *testing.T) {
	c := newFakeCluster(t)
	old, follower, next := c.infoNode(), c.infoNode(), c.infoNode()
	conn := checkConn(t, 20*time.Millisecond, old.addr, follower.addr, next.addr)
	leaderOf(t, conn, old, follower, next)

	old.freeze("CreateTopic")
	done := createTopicAsync(conn)
	// The others have not heard of a new leader yet and name the frozen
	// one: the call keeps waiting.
	waitFor(t, "the others asked three times", func() bool { return follower.askedTimes() >= 3 && next.askedTimes() >= 3 })
	select {
	case err := <-done:
		t.Fatalf("the call ended while every node named its target the leader: %v", err)
	default:
	}
	if n := c.count("CreateTopic"); n != 2 {
		t.Fatalf("CreateTopic sent %d times while the others named the frozen leader, want 2 (warm-up, the hung attempt)", n)
	}

	// An election: the follower hears of the new leader first.
	next.setLeader(next.addr)
	follower.names(next.addr, 2)
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
	calls := c.callsOf("CreateTopic")
	if len(calls) != 3 || calls[1].node != old.addr || calls[2].node != next.addr || !proto_equal(calls[1].req, calls[2].req) {
		t.Fatalf("want the same request on the frozen leader, then on the new one: %v", calls)
	}
	if conn.Leader() != next.addr {
		t.Fatalf("Leader() = %q, want the new leader %s", conn.Leader(), next.addr)
	}
	if old.askedTimes() != 0 {
		t.Fatalf("the attempt's own target was asked %d times", old.askedTimes())
	}
	waitFor(t, "no leader check left running", func() bool { return checkGoroutines() == 0 })
}

func TestConn_FrozenLeader_DownAndFrozenPeersDoNotBlockTheSwitch(t *testing.T) {
	c := newFakeCluster(t)
	old, hung, next := c.infoNode(), c.infoNode(), c.infoNode()
	dead := deadAddr(t)
	conn := checkConn(t, 20*time.Millisecond, old.addr, dead, hung.addr, next.addr)
	leaderOf(t, conn, old, hung, next)

	old.freeze("CreateTopic")
	hung.freeze()
	next.setLeader(next.addr)
	next.names(next.addr, 2)
	if err := await(t, createTopicAsync(conn)); err != nil {
		t.Fatal(err)
	}
	calls := c.callsOf("CreateTopic")
	if len(calls) != 3 || calls[2].node != next.addr {
		t.Fatalf("want the hung attempt answered by the new leader: %v", calls)
	}
}

func TestConn_SlowCallOnTheLeaderTheOthersName_IsNotAbandoned(t *testing.T) {
	c := newFakeCluster(t)
	leader, follower, stale, candidate := c.infoNode(), c.infoNode(), c.infoNode(), c.infoNode()
	conn := checkConn(t, 20*time.Millisecond, leader.addr, follower.addr, stale.addr, candidate.addr)
	leaderOf(t, conn, leader, follower, stale, candidate)
	for _, n := range []*infoNode{leader, follower} {
		n.names(leader.addr, 3)
	}
	// A follower cut off since an older term names its old leader; a
	// candidate that keeps losing elections has a high term and no leader.
	stale.names(deadAddr(t), 2)
	candidate.names("", 9)

	// The leader holds the call, as it holds a JoinGroup at the barrier.
	release := holdCommits(c)
	done := commitAsync(conn)
	waitFor(t, "ten leader checks", func() bool { return follower.askedTimes() >= 10 })
	release()
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
	if calls := c.callsOf("OffsetCommit"); len(calls) != 1 {
		t.Fatalf("a slow call on the leader every node names was sent %d times: %v", len(calls), calls)
	}
	if conn.Leader() != leader.addr {
		t.Fatalf("Leader() = %q, want %s", conn.Leader(), leader.addr)
	}
}

// holdCommits makes every node hold OffsetCommit until the returned
// function is called, like a call the leader parks.
func holdCommits(c *fakeCluster) (release func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.commit = func(r *cohortv1.OffsetCommitRequest) *cohortv1.OffsetCommitResponse {
		<-ch
		return &cohortv1.OffsetCommitResponse{}
	}
	c.mu.Unlock()
	return func() { close(ch) }
}

// commitAsync sends a standalone OffsetCommit in the background.
func commitAsync(conn *Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := conn.Groups().OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: -1})
		done <- err
	}()
	return done
}

func TestConn_LeaderCheck_IgnoresANodeNamingALeaderOfAnOlderTerm(t *testing.T) {
	c := newFakeCluster(t)
	old, follower, next := c.infoNode(), c.infoNode(), c.infoNode()
	conn := checkConn(t, 20*time.Millisecond, old.addr, follower.addr, next.addr)
	leaderOf(t, conn, old, follower, next)
	// old freezes; the others elect next in term 2; the client follows.
	old.freeze("CreateTopic")
	next.setLeader(next.addr)
	next.names(next.addr, 2)
	follower.names(next.addr, 2)
	if err := await(t, createTopicAsync(conn)); err != nil {
		t.Fatal(err)
	}
	if conn.Leader() != next.addr {
		t.Fatalf("Leader() = %q, want %s", conn.Leader(), next.addr)
	}

	// old resumes still believing it leads in term 1, while the follower
	// that knows better does not answer: during a slow call on next, old's
	// is the only claim the check hears.
	old.thaw()
	follower.freeze()
	release := holdCommits(c)
	asked := old.askedTimes()
	done := commitAsync(conn)
	waitFor(t, "old asked three times during the call", func() bool { return old.askedTimes() >= asked+3 })
	release()
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
	if calls := c.callsOf("OffsetCommit"); len(calls) != 1 || calls[0].node != next.addr {
		t.Fatalf("want the commit sent once, to the leader of the newest term: %v", calls)
	}
}

func TestConn_FastCalls_SendNoLeaderCheck(t *testing.T) {
	c := newFakeCluster(t)
	leader, follower := c.infoNode(), c.infoNode()
	// An interval far above a loopback call, even on a loaded machine.
	conn := checkConn(t, time.Second, follower.addr, leader.addr)
	follower.refuseNext("CreateTopic", errNotLeader)
	leaderOf(t, conn, leader, follower)
	for range 50 {
		if _, err := conn.Topics().CreateTopic(context.Background(), &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := leader.askedTimes(), follower.askedTimes(); a != 0 || b != 0 {
		t.Fatalf("fast calls asked the nodes for the leader %d and %d times, want 0", a, b)
	}
	if checkGoroutines() != 0 {
		t.Fatal("a leader check runs although every call answered at once")
	}
}

func TestConn_LeaderCheckOff_WaitsOutTheAttempt(t *testing.T) {
	c := newFakeCluster(t)
	old, next := c.infoNode(), c.infoNode()
	conn := checkConn(t, -1, old.addr, next.addr)
	leaderOf(t, conn, old, next)
	next.setLeader(next.addr)
	next.names(next.addr, 2)
	old.freeze("CreateTopic")
	start := time.Now()
	_, err := conn.Topics().CreateTopic(context.Background(), &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}, AttemptTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("answered after %v, before the attempt timeout: the check is not off", waited)
	}
	if next.askedTimes() != 0 {
		t.Fatalf("the check is off, yet %s was asked %d times", next.addr, next.askedTimes())
	}
}

func TestConn_LeaderCheck_EndsWithTheAttempt(t *testing.T) {
	c := newFakeCluster(t)
	old, hung := c.infoNode(), c.infoNode()
	// Probes get a deadline of one interval (500 ms); the call's context
	// ends 200 ms into the first round, while the probe of the frozen
	// peer still waits.
	conn := checkConn(t, 500*time.Millisecond, old.addr, hung.addr)
	leaderOf(t, conn, old, hung)
	old.freeze("CreateTopic")
	hung.freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1})
	if err == nil {
		t.Fatal("answered by a frozen node")
	}
	if hung.askedTimes() != 1 {
		t.Fatalf("the frozen peer was asked %d times, want once (one round)", hung.askedTimes())
	}
	// Far less than the 300 ms the probe of the frozen peer had left: only
	// the goroutines' own exit may still be under way.
	proc.WaitFor(t, 50*time.Millisecond, "no leader-check goroutine outlives the call", func() (bool, string) {
		n := checkGoroutines()
		return n == 0, fmt.Sprintf("%d running", n)
	})
}

func TestConfig_LeaderCheckIsOnByDefaultAndOffWhenNegative(t *testing.T) {
	if got := (ConnConfig{}).withDefaults().LeaderCheckInterval; got != DefaultLeaderCheckInterval {
		t.Fatalf("ConnConfig default %v, want %v", got, DefaultLeaderCheckInterval)
	}
	if got := (Config{}).withDefaults().connConfig().LeaderCheckInterval; got != DefaultLeaderCheckInterval {
		t.Fatalf("a Member's Conn gets %v, want %v", got, DefaultLeaderCheckInterval)
	}
	if got := (Config{LeaderCheckInterval: -1}).withDefaults().connConfig().LeaderCheckInterval; got >= 0 {
		t.Fatalf("a negative interval became %v: the check would run", got)
	}
}

// TestConn_BarrierCall_ChecksLessOftenAndStillSwitches: a call that waits
// at a barrier (AttemptTimeout, as JoinGroup and SyncGroup send) checks the
// leader barrierCheckFactor times less often than other calls, so that
// every member parked in a large rebalance does not probe the cluster
// several times a second; on a frozen leader it still moves to the new one.
func TestConn_BarrierCall_ChecksLessOftenAndStillSwitches(t *testing.T) {
	c := newFakeCluster(t)
	old, follower, next := c.infoNode(), c.infoNode(), c.infoNode()
	const every = 20 * time.Millisecond
	conn := checkConn(t, every, old.addr, follower.addr, next.addr)
	leaderOf(t, conn, old, follower, next)

	old.freeze("CreateTopic")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}, AttemptTimeout(30*time.Second))
		done <- err
	}()
	// An ordinary call would have asked the follower about twenty times by
	// the end of this wait.
	time.Sleep(20 * every) // time passes: twenty check intervals of an ordinary call

	if n := follower.askedTimes(); n > 3 {
		t.Fatalf("a barrier call asked the follower %d times in %v, want at most %v/(%d×%v)+1", n, 20*every, 20*every, barrierCheckFactor, every)
	}
	next.setLeader(next.addr)
	follower.names(next.addr, 2)
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
	if calls := c.callsOf("CreateTopic"); len(calls) != 3 || calls[2].node != next.addr {
		t.Fatalf("want the barrier call answered by the new leader: %v", calls)
	}
}
