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
	"github.com/cohortlabs/cohort/internal/proc"
)

// localRaft applies every command at once to one FSM, as a one-node
// cluster would, and counts the RemoveMembers it is given.
type localRaft struct {
	fsm     *fsm.FSM
	mu      sync.Mutex
	index   uint64
	removes atomic.Int64
}

func (l *localRaft) Apply(_ context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	if _, ok := cmd.GetKind().(*fsmv1.Command_RemoveMembers); ok {
		l.removes.Add(1)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	return l.fsm.Apply(l.index, cmd), nil
}
func (l *localRaft) Barrier(context.Context) error      { return nil }
func (l *localRaft) VerifyLeader(context.Context) error { return nil }
func (l *localRaft) IsLeader() bool                     { return true }
func (l *localRaft) Term() uint64                       { return 1 }
func (l *localRaft) CommitIndex() uint64                { l.mu.Lock(); defer l.mu.Unlock(); return l.index }
func (l *localRaft) AppliedIndex() uint64               { return l.CommitIndex() }

// servingEngine runs an engine that leads over a localRaft until the test
// ends.
func servingEngine(t *testing.T, tick time.Duration) (*Engine, *localRaft) {
	t.Helper()
	f := fsm.New()
	lr := &localRaft{fsm: f}
	cfg := DefaultConfig()
	cfg.Tick = tick
	return runEngine(t, cfg, lr, f), lr
}

// runEngine starts an engine over r and f that leads until the test ends,
// and waits until it serves.
func runEngine(t *testing.T, cfg Config, r Raft, f *fsm.FSM) *Engine {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	e, err := New(cfg, r, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan bool, 1)
	leading <- true
	done := make(chan struct{})
	go func() { e.Run(ctx, leading); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := e.awaitServing(wctx); err != nil {
		t.Fatalf("the engine did not start serving: %v", err)
	}
	return e
}

// Test_SessionOfAGoneMember_IsExpiredOnce: a session the engine holds for
// a member of a group that no longer exists (a refresh that raced the
// group's deletion) is proposed for removal once, refused, and forgotten;
// it used to be proposed again on every tick, forever.
func Test_SessionOfAGoneMember_IsExpiredOnce(t *testing.T) {
	e, lr := servingEngine(t, 5*time.Millisecond)
	e.mu.Lock()
	e.sessions.set(memberKey{"deleted", "m-1"}, e.cfg.Now().Add(-time.Second))
	e.mu.Unlock()
	// Once the session is forgotten nothing can propose its removal again,
	// so the count then is final.
	pollUntil(t, "the gone member's removal to be proposed and its session forgotten", func() (bool, string) {
		e.mu.Lock()
		_, held := e.sessions.get(memberKey{"deleted", "m-1"})
		e.mu.Unlock()
		n := lr.removes.Load()
		return n > 0 && !held, fmt.Sprintf("%d RemoveMembers proposed, session held: %t", n, held)
	})
	if n := lr.removes.Load(); n != 1 {
		t.Fatalf("%d RemoveMembers proposed for one gone member, want 1", n)
	}
}

// Test_TouchSession_IgnoresAMemberTheFSMNoLongerHas: refreshing the
// session of a member that the FSM has removed (the caller's view of the
// group predates the removal) starts no session.
func Test_TouchSession_IgnoresAMemberTheFSMNoLongerHas(t *testing.T) {
	e, _ := servingEngine(t, time.Hour)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.touchSessionLocked("g", "gone", e.cfg.Now())
	if e.sessions.len() != 0 {
		t.Fatalf("sessions %v after refreshing a member that does not exist", e.sessions)
	}
}

// Test_RetentionSweep_RunsSoonAfterLeadershipIsGained: offsets past their
// retention expire within seconds of a node gaining leadership, not one
// whole check interval later (10 minutes by default, so with leaders
// changing more often they never expired; issue 13, finding 11).
func Test_RetentionSweep_RunsSoonAfterLeadershipIsGained(t *testing.T) {
	f := fsm.New()
	old := time.Now().Add(-time.Hour).UnixMilli()
	for i, cmd := range []*fsmv1.Command{
		{TimestampMs: old, Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: "t", Partitions: 1}}},
		{TimestampMs: old, Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{GroupId: "idle", Generation: -1,
			Offsets: []*fsmv1.OffsetCommit{{Topic: "t", Partition: 0, Offset: 7}}}}},
	} {
		if res := f.Apply(uint64(i+1), cmd); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if f.Stats().Offsets != 1 {
		t.Fatalf("setup: %+v", f.Stats())
	}
	cfg := DefaultConfig()
	cfg.OffsetsRetention = time.Minute
	cfg.OffsetsRetentionCheckInterval = time.Hour
	runEngine(t, cfg, &stampingRaft{localRaft: localRaft{fsm: f, index: 2}}, f)
	proc.WaitFor(t, 10*time.Second, "the hour-old offset of an empty group swept after leadership began (retention 1 min)", func() (bool, string) {
		return f.Stats().Offsets == 0, fmt.Sprintf("%+v", f.Stats())
	})
}

// stampingRaft stamps each command with the wall clock, as raftnode does.
type stampingRaft struct{ localRaft }

func (s *stampingRaft) Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	cmd.TimestampMs = time.Now().UnixMilli()
	return s.localRaft.Apply(ctx, cmd)
}

// lostAnswerRaft applies every command, and for a JoinMember then answers
// as if the proposer's context had ended during commit.
type lostAnswerRaft struct{ localRaft }

func (l *lostAnswerRaft) Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	res, err := l.localRaft.Apply(ctx, cmd)
	if _, join := cmd.GetKind().(*fsmv1.Command_JoinMember); join {
		return nil, fmt.Errorf("%w: the caller's context ended during commit", ErrOutcomeUnknown)
	}
	return res, err
}

// lostAnswerEngine serves over a lostAnswerRaft, with no initial
// rebalance delay.
func lostAnswerEngine(t *testing.T) (*Engine, *fsm.FSM) {
	t.Helper()
	f := fsm.New()
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	return runEngine(t, cfg, &lostAnswerRaft{localRaft{fsm: f}}, f), f
}

// Test_EntryWhoseProposerLeft_StillSetsDeadlines: a JoinMember that was
// applied although its proposer never saw the result (its context ended
// during commit) still gives the new member a session and its group the
// deadline of its next phase: the engine follows the applied entries, not
// the proposers' returns (issue 13, finding 4). Before, such a member had
// no session and its group no timer until the next leader change.
func Test_EntryWhoseProposerLeft_StillSetsDeadlines(t *testing.T) {
	e, f := lostAnswerEngine(t)
	ctx := context.Background()
	_, err := e.JoinGroup(ctx, &cohortv1.JoinGroupRequest{GroupId: "g", InstanceId: "i-1", ProtocolType: "consumer",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000}, "127.0.0.1:1")
	if errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("join: %v, want NOT_LEADER (outcome unknown)", err)
	}
	g, ok := f.Group("g")
	if !ok || g.Members.Len() != 1 || g.State != fsm.CompletingRebalance {
		t.Fatalf("the entry was applied: group %+v", g)
	}
	member := g.Members.Slice()[0].ID
	// Within 0.9 s: before the first retention sweep (1 s after
	// leadership), which reconciles every group and would hide the bug.
	proc.WaitFor(t, 900*time.Millisecond, "a session and a sync deadline after the applied join", func() (bool, string) {
		e.mu.Lock()
		_, session := e.sessions.get(memberKey{"g", member})
		_, sync := e.syncs["g"]
		e.mu.Unlock()
		return session && sync, fmt.Sprintf("session %t, sync deadline %t", session, sync)
	})
}

// Test_PendingIDWhoseJoinLandedUnanswered_IsForgotten: a new member's join
// that was applied although its caller never heard (its context ended
// during commit) turns the pending ID into a member; the ID no longer
// counts as pending. Before, it counted twice (member and pending) until
// its session ran out, and a group near its members-per-group budget
// refused new members it had room for (seen forming a 10,000-member group).
func Test_PendingIDWhoseJoinLandedUnanswered_IsForgotten(t *testing.T) {
	e, f := lostAnswerEngine(t)
	ctx := context.Background()
	req := &cohortv1.JoinGroupRequest{GroupId: "g", ProtocolType: "consumer",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000}
	_, err := e.JoinGroup(ctx, req, "127.0.0.1:1")
	var required *MemberIDRequiredError
	if !errors.As(err, &required) {
		t.Fatalf("first join: %v, want MEMBER_ID_REQUIRED", err)
	}
	pending := func() (int, int) {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.pending), e.pendingPerGroup["g"]
	}
	if n, g := pending(); n != 1 || g != 1 {
		t.Fatalf("after MEMBER_ID_REQUIRED: %d pending IDs, %d for the group; want 1 and 1", n, g)
	}
	req.MemberId = required.MemberID
	if _, err := e.JoinGroup(ctx, req, "127.0.0.1:1"); errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("join with the ID: %v, want NOT_LEADER (outcome unknown)", err)
	}
	if g, ok := f.Group("g"); !ok || g.Members.Len() != 1 || g.Members.Slice()[0].ID != required.MemberID {
		t.Fatalf("the entry was applied: group %+v", g)
	}
	proc.WaitFor(t, 5*time.Second, "the pending ID forgotten once its join was applied", func() (bool, string) {
		n, g := pending()
		return n == 0 && g == 0, fmt.Sprintf("%d pending IDs, %d for the group", n, g)
	})
}
