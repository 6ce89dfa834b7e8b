package coordinator

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// The engine's leader-local state (sessions, rebalance and sync deadlines,
// parked calls) follows the stream of applied entries, not the return of
// the calls that proposed them: an entry whose proposer's context ended
// during commit is still applied, and a new member acknowledged then must
// get its session and its group a timer like any other. The FSM tells the
// engine of every applied command (fsm.FSM.Observe) on Raft's applying
// goroutine; appliedQueue takes them without blocking it, and
// followApplied brings the engine in line, in log order.

// appliedEntry is one applied command and its result.
type appliedEntry struct {
	cmd *fsmv1.Command
	res *fsm.ApplyResult
}

// appliedQueue is an unbounded FIFO of applied entries with a wake-up, and
// the index of the last entry observed, for proposers to wait on.
type appliedQueue struct {
	mu       sync.Mutex
	entries  []appliedEntry
	wake     chan struct{}
	observed uint64        // index of the last entry followApplied finished
	progress chan struct{} // closed (and replaced) when observed moves
	// following: followApplied runs; without it entries are not kept (an
	// engine that never ran must not collect every entry in memory).
	following atomic.Bool
}

func newAppliedQueue() *appliedQueue {
	return &appliedQueue{wake: make(chan struct{}, 1), progress: make(chan struct{})}
}

// markObserved records that the entries up to index were observed.
func (q *appliedQueue) markObserved(index uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if index > q.observed {
		q.observed = index
		close(q.progress)
		q.progress = make(chan struct{})
	}
}

// awaitObserved waits until the entry at index was observed, or ctx ends.
func (q *appliedQueue) awaitObserved(ctx context.Context, index uint64) {
	for {
		q.mu.Lock()
		done, ch := q.observed >= index, q.progress
		q.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// push is the FSM's observer: it never blocks.
func (q *appliedQueue) push(cmd *fsmv1.Command, res *fsm.ApplyResult) {
	if _, ok := cmd.GetKind().(*fsmv1.Command_CommitOffsets); ok || !q.following.Load() {
		return // commits change no member, state or deadline
	}
	q.mu.Lock()
	q.entries = append(q.entries, appliedEntry{cmd, res})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns every queued entry, oldest first.
func (q *appliedQueue) take() []appliedEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.entries
	q.entries = nil
	return out
}

// followApplied observes every applied entry until ctx ends. Run sets
// following before it starts it, so no entry applied after Run began is
// dropped. While this node does not serve as leader the entries are
// dropped: a new leader rebuilds from the FSM when it starts serving.
func (e *Engine) followApplied(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.applied.wake:
		}
		for _, a := range e.applied.take() {
			e.mu.Lock()
			serving := e.serving
			e.mu.Unlock()
			if serving {
				e.observe(a.res, a.cmd, a.cmd.GetTimestampMs())
			}
			e.applied.markObserved(a.res.Index)
		}
	}
}
