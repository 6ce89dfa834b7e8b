package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// fakeRaft counts VerifyLeader rounds and lets the test hold each round open.
type fakeRaft struct {
	rounds    atomic.Int64
	started   chan int64    // the number of each round as it starts
	release   chan struct{} // one value lets one round finish
	err       error
	cancelled atomic.Int64 // rounds whose context ended first
	commit    atomic.Uint64
	applied   atomic.Uint64
	term      atomic.Uint64
	// appliedReads counts AppliedIndex calls: a read waiting for the FSM
	// to catch up polls it.
	appliedReads atomic.Int64
}

func (f *fakeRaft) Apply(context.Context, *fsmv1.Command) (*fsm.ApplyResult, error) {
	return nil, errors.New("not used")
}
func (f *fakeRaft) Barrier(context.Context) error { return nil }
func (f *fakeRaft) IsLeader() bool                { return true }
func (f *fakeRaft) Term() uint64                  { return f.term.Load() }
func (f *fakeRaft) CommitIndex() uint64           { return f.commit.Load() }
func (f *fakeRaft) AppliedIndex() uint64          { f.appliedReads.Add(1); return f.applied.Load() }
func (f *fakeRaft) VerifyLeader(ctx context.Context) error {
	f.started <- f.rounds.Add(1)
	select {
	case <-f.release:
		return f.err
	case <-ctx.Done():
		f.cancelled.Add(1)
		return ctx.Err()
	}
}

func TestReadBarrier_ReadsShareTheNextRound(t *testing.T) {
	f := &fakeRaft{started: make(chan int64, 10), release: make(chan struct{})}
	b := &readBarrier{raft: f}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The first read starts round 1 and holds it open.
	first := make(chan error, 1)
	go func() { first <- b.wait(ctx, 0) }()
	if r := <-f.started; r != 1 {
		t.Fatalf("first round is %d", r)
	}
	// 50 reads arrive while round 1 is in flight: round 1 began before
	// them, so they may not use it; they all share round 2.
	var wg sync.WaitGroup
	var done atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.wait(ctx, 0); err != nil {
				t.Errorf("read: %v", err)
			}
			done.Add(1)
		}()
	}
	pollUntil(t, "the 50 reads to queue up behind round 1", func() (bool, string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.next == nil {
			return false, "no read waits for a next round"
		}
		return b.next.waiting == 50, fmt.Sprintf("%d reads wait for the next round", b.next.waiting)
	})
	f.release <- struct{}{} // round 1 ends
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if r := <-f.started; r != 2 {
		t.Fatalf("second round is %d", r)
	}
	if done.Load() != 0 {
		t.Fatalf("%d reads were answered by a round that started before they arrived", done.Load())
	}
	f.release <- struct{}{} // round 2 ends: all 50 answered
	wg.Wait()
	if n := f.rounds.Load(); n != 2 {
		t.Fatalf("%d VerifyLeader rounds for 51 reads, want 2", n)
	}
}

func TestReadBarrier_WaitsForApplyAndReportsLostLeadership(t *testing.T) {
	f := &fakeRaft{started: make(chan int64, 10), release: make(chan struct{}, 10)}
	b := &readBarrier{raft: f}
	f.commit.Store(7)
	f.applied.Store(5)
	f.release <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- b.wait(ctx, 0) }()
	// The read's round has passed; it now polls the applied index. Once it
	// has seen index 5 a few times it has had every chance to answer
	// early.
	pollUntil(t, "the read to wait for the FSM to apply index 7", func() (bool, string) {
		select {
		case err := <-res:
			t.Fatalf("read answered (%v) before the FSM applied the commit index it arrived at", err)
		default:
		}
		n := f.appliedReads.Load()
		return n >= 3, fmt.Sprintf("applied index read %d times", n)
	})
	select {
	case err := <-res:
		t.Fatalf("read answered (%v) before the FSM applied the commit index it arrived at", err)
	default:
	}
	f.applied.Store(7)
	if err := <-res; err != nil {
		t.Fatal(err)
	}

	f.err = errors.New("node is not the leader")
	f.release <- struct{}{}
	if err := b.wait(ctx, 0); errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("read after a failed VerifyLeader: %v, want NOT_LEADER", err)
	}
}

// A round's VerifyLeader is cancelled once every read waiting for it has
// given up, and a read arriving after that gets a round of its own rather
// than the abandoned one.
func TestReadBarrier_RoundEndsWhenItsReadsGiveUp(t *testing.T) {
	f := &fakeRaft{started: make(chan int64, 10), release: make(chan struct{})}
	b := &readBarrier{raft: f}
	live, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queuedFor := func(n int) func() (bool, string) {
		return func() (bool, string) {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.next == nil {
				return n == 0, "no next round"
			}
			return b.next.waiting == n, fmt.Sprintf("%d reads wait for the next round", b.next.waiting)
		}
	}

	// Round 1 is held open; its only read gives up later.
	ctx1, giveUp1 := context.WithCancel(live)
	first := make(chan error, 1)
	go func() { first <- b.wait(ctx1, 0) }()
	if r := <-f.started; r != 1 {
		t.Fatalf("first round is %d", r)
	}
	// A read queues for round 2 and gives up before it starts.
	ctx2, giveUp2 := context.WithCancel(live)
	second := make(chan error, 1)
	go func() { second <- b.wait(ctx2, 0) }()
	pollUntil(t, "a read to queue for round 2", queuedFor(1))
	giveUp2()
	if err := <-second; errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("read that gave up: %v, want NOT_LEADER", err)
	}
	// A read with time left queues for a fresh round 2.
	third := make(chan error, 1)
	go func() { third <- b.wait(live, 0) }()
	pollUntil(t, "a read to queue for a fresh round 2", queuedFor(1))

	giveUp1()
	if err := <-first; errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("read that gave up: %v, want NOT_LEADER", err)
	}
	if r := <-f.started; r != 2 {
		t.Fatalf("second round is %d", r)
	}
	if n := f.cancelled.Load(); n != 1 {
		t.Fatalf("%d rounds cancelled, want round 1 only", n)
	}
	f.release <- struct{}{}
	if err := <-third; err != nil {
		t.Fatalf("read on its own round: %v", err)
	}
}

// pollUntil polls cond until it holds, failing the test after 5 s.
func pollUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	proc.WaitFor(t, 5*time.Second, what, cond)
}

// A node can lose leadership and win it again, in a new term, before the
// engine hears of either; its commit index may then lag the new term's. So
// a read is served only in the term the engine's barrier committed in:
// refused when it arrives in another, or when the term moves during its
// round.
func TestReadBarrier_RefusesReadsOutsideTheServingTerm(t *testing.T) {
	f := &fakeRaft{started: make(chan int64, 10), release: make(chan struct{})}
	f.term.Store(7)
	b := &readBarrier{raft: f}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := b.wait(ctx, 6); errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("read arriving in term 7 for an engine serving term 6: %v, want NOT_LEADER", err)
	}
	if n := f.rounds.Load(); n != 0 {
		t.Fatalf("%d VerifyLeader rounds for a read refused on arrival, want 0", n)
	}

	res := make(chan error, 1)
	go func() { res <- b.wait(ctx, 7) }()
	<-f.started
	f.term.Store(8)
	f.release <- struct{}{}
	if err := <-res; errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("read whose term moved from 7 to 8 during its round: %v, want NOT_LEADER", err)
	}

	go func() { res <- b.wait(ctx, 8) }()
	<-f.started
	f.release <- struct{}{}
	if err := <-res; err != nil {
		t.Fatalf("read in the serving term: %v", err)
	}
}
