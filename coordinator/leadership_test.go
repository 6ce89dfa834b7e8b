package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// steeredRaft is a one-node Raft the test steers: commands are applied at
// once to one FSM (localRaft); leadership, the term, the leadership
// barrier and VerifyLeader's answer are the test's; Apply and VerifyLeader
// calls are counted.
type steeredRaft struct {
	localRaft
	leader    atomic.Bool
	term      atomic.Uint64
	applies   atomic.Int64
	verifies  atomic.Int64
	verifyErr atomic.Pointer[error]

	// While hold is set, Barrier signals barrierEntered and waits for
	// barrierRelease (or its context).
	hold           atomic.Bool
	barrierEntered chan struct{}
	barrierRelease chan struct{}
}

func newSteeredRaft(f *fsm.FSM) *steeredRaft {
	r := &steeredRaft{localRaft: localRaft{fsm: f}, barrierEntered: make(chan struct{}, 16), barrierRelease: make(chan struct{})}
	r.term.Store(1)
	return r
}

func (r *steeredRaft) Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	if !r.leader.Load() {
		return nil, ErrNotProposed
	}
	r.applies.Add(1)
	return r.localRaft.Apply(ctx, cmd)
}

func (r *steeredRaft) Barrier(ctx context.Context) error {
	if !r.hold.Load() {
		return nil
	}
	r.barrierEntered <- struct{}{}
	select {
	case <-r.barrierRelease:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *steeredRaft) VerifyLeader(context.Context) error {
	r.verifies.Add(1)
	if err := r.verifyErr.Load(); err != nil {
		return *err
	}
	return nil
}

func (r *steeredRaft) IsLeader() bool { return r.leader.Load() }
func (r *steeredRaft) Term() uint64   { return r.term.Load() }

// fakeClock is the engine's clock, moved only by the test: deadlines pass
// when the test says, however slowly the machine runs.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// steeredEngine is an engine over a steeredRaft whose leadership the test
// hands out and takes back.
type steeredEngine struct {
	*Engine
	raft    *steeredRaft
	clock   *fakeClock
	leading chan bool
}

// newSteeredEngine runs an engine that does not lead yet, with 100 ms
// sessions allowed, no initial delay, a 5 ms tick and a fake clock, until
// the test ends.
func newSteeredEngine(t *testing.T) *steeredEngine {
	t.Helper()
	f := fsm.New()
	s := &steeredEngine{raft: newSteeredRaft(f), clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}, leading: make(chan bool, 4)}
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	cfg.MinSessionTimeout = 100 * time.Millisecond
	cfg.Tick = 5 * time.Millisecond
	cfg.Now = s.clock.Now
	cfg.Logger = slog.New(slog.DiscardHandler)
	e, err := New(cfg, s.raft, f)
	if err != nil {
		t.Fatal(err)
	}
	s.Engine = e
	ctx, cancel := context.WithCancel(context.Background())
	s.leading <- false
	done := make(chan struct{})
	go func() { e.Run(ctx, s.leading); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// lead makes the node leader in a new term, as Raft would, and tells the
// engine.
func (s *steeredEngine) lead() {
	s.raft.term.Add(1)
	s.raft.leader.Store(true)
	s.leading <- true
}

// follow takes leadership away and waits until the engine has stopped
// serving.
func (s *steeredEngine) follow(t *testing.T) {
	t.Helper()
	s.raft.leader.Store(false)
	s.leading <- false
	pollUntil(t, "the engine to stop serving", func() (bool, string) {
		return !s.isServing(), "still serving"
	})
}

// awaitServing waits until the engine serves.
func (s *steeredEngine) awaitServing(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Engine.awaitServing(ctx); err != nil {
		t.Fatalf("the engine did not start serving: %v", err)
	}
}

// stableMember creates topic t (one partition), and a static member alone
// in group g, synced and Stable, with a session of sessionMs; it commits
// offset 42 for t/0. It returns the member's ID and generation.
func stableMember(t *testing.T, e *Engine, sessionMs int32) (string, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.CreateTopic(ctx, "t", 1); err != nil {
		t.Fatal(err)
	}
	join, err := e.JoinGroup(ctx, &cohortv1.JoinGroupRequest{GroupId: "g", InstanceId: "i-1", ProtocolType: "consumer",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, Topics: []string{"t"},
		SessionTimeoutMs: sessionMs, RebalanceTimeoutMs: 60_000}, "127.0.0.1:1")
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	id, gen := join.GetMemberId(), join.GetGeneration()
	if _, err := e.SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "g", Generation: gen, MemberId: id, InstanceId: "i-1",
		Assignments: []*cohortv1.MemberAssignment{{MemberId: id, Assignment: &cohortv1.Assignment{
			Topics: []*cohortv1.TopicPartitions{{Topic: "t", Partitions: []int32{0}}}}}}}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if g, _ := e.fsm.Group("g"); g == nil || g.State != fsm.Stable {
		t.Fatalf("setup: group %+v, want Stable", g)
	}
	resp, err := e.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: gen, MemberId: id, InstanceId: "i-1",
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 42}}})
	if err != nil || resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
		t.Fatalf("commit: %v %v", resp, err)
	}
	return id, gen
}

// An OffsetFetch served by the leader is linearizable because it costs a
// VerifyLeader round: a leader deposed without knowing it would otherwise
// answer from its own, possibly stale, FSM. The round's answer decides:
// a failed round is NOT_LEADER, not an answer.
func TestOffsetFetch_OnTheLeader_CostsAVerifyLeaderRound(t *testing.T) {
	s := newSteeredEngine(t)
	s.lead()
	s.awaitServing(t)
	stableMember(t, s.Engine, 10_000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	before := s.raft.verifies.Load()
	resp, err := s.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g"})
	if err != nil || len(resp.GetPartitions()) != 1 || resp.GetPartitions()[0].GetOffset() != 42 {
		t.Fatalf("OffsetFetch on the leader: %v %v, want offset 42", resp, err)
	}
	if n := s.raft.verifies.Load() - before; n != 1 {
		t.Fatalf("OffsetFetch on the leader took %d VerifyLeader rounds, want 1", n)
	}

	deposed := errors.New("a newer term exists: this node no longer leads")
	s.raft.verifyErr.Store(&deposed)
	before = s.raft.verifies.Load()
	resp, err = s.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g"})
	if errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("OffsetFetch when VerifyLeader fails: %v %v, want NOT_LEADER", resp, err)
	}
	if n := s.raft.verifies.Load() - before; n != 1 {
		t.Fatalf("a refused OffsetFetch took %d VerifyLeader rounds, want 1", n)
	}
	// A stale read asks for no round.
	before = s.raft.verifies.Load()
	if _, err := s.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g", AllowStale: true}); err != nil {
		t.Fatalf("stale OffsetFetch: %v", err)
	}
	if n := s.raft.verifies.Load() - before; n != 0 {
		t.Fatalf("a stale OffsetFetch took %d VerifyLeader rounds, want 0", n)
	}
}

// A node that becomes leader serves nothing until its leadership barrier
// has completed: until then its FSM may lack entries the old leader
// committed (a member's join, a commit), so a join, sync, heartbeat,
// commit or fetch it answered could contradict them. Each is refused
// NOT_LEADER and nothing is proposed; once the barrier completes, each is
// served.
func TestNewLeader_ServesNothingBeforeItsBarrier(t *testing.T) {
	s := newSteeredEngine(t)
	s.lead()
	s.awaitServing(t)
	id, gen := stableMember(t, s.Engine, 10_000)
	s.follow(t)

	s.raft.hold.Store(true)
	s.lead()
	pollUntil(t, "the new leader to start its barrier", func() (bool, string) {
		select {
		case <-s.raft.barrierEntered:
			return true, ""
		default:
		}
		if s.isServing() {
			t.Fatal("the new leader serves although its leadership barrier has not completed")
		}
		return false, "no barrier yet"
	})
	applies := s.raft.applies.Load()
	// JoinGroup comes last: a leader's rejoin starts a new generation,
	// which would fence the others once served.
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"SyncGroup", func(ctx context.Context) error {
			_, err := s.SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "g", Generation: gen, MemberId: id, InstanceId: "i-1"})
			return err
		}},
		{"Heartbeat", func(ctx context.Context) error {
			return s.Heartbeat(ctx, &cohortv1.HeartbeatRequest{GroupId: "g", Generation: gen, MemberId: id, InstanceId: "i-1"})
		}},
		{"OffsetCommit", func(ctx context.Context) error {
			_, err := s.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: gen, MemberId: id, InstanceId: "i-1",
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 43}}})
			return err
		}},
		{"OffsetFetch", func(ctx context.Context) error {
			_, err := s.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g"})
			return err
		}},
		{"JoinGroup", func(ctx context.Context) error {
			_, err := s.JoinGroup(ctx, &cohortv1.JoinGroupRequest{GroupId: "g", MemberId: id, InstanceId: "i-1", ProtocolType: "consumer",
				Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, Topics: []string{"t"},
				SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 60_000}, "127.0.0.1:1")
			return err
		}},
	}
	// The barrier is held until released below, so each call's wait can
	// only end by its own deadline.
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.call(ctx)
		cancel()
		if errcode.Of(err) != errcode.NotLeader {
			t.Errorf("%s before the new leader's barrier completed: %v, want NOT_LEADER", c.name, err)
		}
	}
	if n := s.raft.applies.Load() - applies; n != 0 {
		t.Errorf("%d commands proposed before the new leader's barrier completed, want none", n)
	}
	if t.Failed() {
		return
	}

	close(s.raft.barrierRelease)
	s.awaitServing(t)
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.call(ctx)
		cancel()
		if err != nil {
			t.Errorf("%s after the barrier: %v", c.name, err)
		}
	}
}

// A node that led, lost leadership and leads again re-arms every member's
// session deadline from its FSM, as a node leading for the first time
// does: while it followed, members heartbeated to another leader, which it
// never heard. So a member's deadline is a session timeout after the
// leadership returned, not one it held from its earlier leadership (nor
// none): a member silent since is expired then, not before. The engine's
// clock is the test's, so a deadline passes exactly when the test moves
// the clock.
func TestSessions_ExpireAfterLeadershipReturnsToANodeThatLedBefore(t *testing.T) {
	const session = 300 * time.Millisecond
	s := newSteeredEngine(t)
	s.lead()
	s.awaitServing(t)
	id, _ := stableMember(t, s.Engine, int32(session.Milliseconds()))
	s.follow(t)
	s.clock.advance(10 * session) // the member heartbeats to the other leader

	s.lead()
	s.awaitServing(t)
	returned := s.clock.Now()
	s.mu.Lock()
	deadline, armed := s.sessions.get(memberKey{"g", id})
	s.mu.Unlock()
	if want := returned.Add(session); !armed || !deadline.Equal(want) {
		t.Fatalf("member's session deadline when leadership returned: %v (armed %t), want %v: a session timeout from then", deadline.Sub(returned), armed, session)
	}
	// The member never speaks again: a session timeout (plus a tick) later
	// it must be removed, with no more time passing.
	s.clock.advance(session + s.cfg.Tick)
	pollUntil(t, "the silent member to expire one session timeout after leadership returned", func() (bool, string) {
		g, _ := s.fsm.Group("g")
		if _, ok := g.Member(id); !ok {
			return true, ""
		}
		s.mu.Lock()
		_, armed := s.sessions.get(memberKey{"g", id})
		s.mu.Unlock()
		return false, fmt.Sprintf("member %s still in group g (%s), session deadline armed: %t", id, g.State, armed)
	})
}
