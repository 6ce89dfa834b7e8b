package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// A member sends one OffsetCommit at a time. Commits made while one is in
// flight wait, and go together in the next request: the way a Kafka
// producer fills its next batch while a request is outstanding. One
// request, one Raft entry and one fsync then carry many callers' commits;
// a commit made while none is in flight is sent at once, with no added wait.

// The most a batched request carries: far below the coordinator's limits
// (100,000 offsets) and gRPC's 4 MiB message. A commit larger than this
// goes in a request of its own, as it would alone.
const (
	maxBatchOffsets = 4096
	maxBatchBytes   = 1 << 20
)

// commitQueue holds the commits waiting for the request in flight.
type commitQueue struct {
	mu      sync.Mutex
	sending bool // a request is in flight; waiting is sent after it
	waiting []*pendingCommit
}

// pendingCommit is one Commit call: what it asks and, once done is
// closed, what the request that carried it answered.
type pendingCommit struct {
	ctx     context.Context
	gen     int32
	id      string
	offsets []PartitionOffset
	done    chan struct{}
	err     error                    // the request's error
	refused map[TopicPartition]error // per-partition refusals
}

// Commit commits offsets with the member's current generation and member
// ID. A request refused as a whole returns an *Error (test with errors.Is:
// ErrRebalanceInProgress, ErrIllegalGeneration, ErrUnknownMemberID, ...);
// if only some partitions are refused (NOT_OWNER, UNKNOWN_TOPIC_OR_PARTITION,
// ...) it returns a *CommitError and the others were stored. NOT_LEADER and
// Unavailable are retried unchanged until ctx ends. A refusal that means the
// member is out of date makes it heartbeat at once, so it rejoins promptly.
//
// Commit is safe to call from many goroutines: commits made while another
// of the member's commits is in flight are sent together in one request
// when it returns (the last of them wins for a partition named twice).
// When ctx ends first, Commit returns ctx's error; the commit is then
// either not sent or its outcome is unknown, as with any timed-out call.
func (m *Member) Commit(ctx context.Context, offsets []PartitionOffset) error {
	m.mu.Lock()
	gen, id, state := m.generation, m.memberID, m.state
	m.mu.Unlock()
	if state == stopped {
		return ErrClosed
	}
	if id == "" || gen == NoGeneration {
		return ErrNotJoined
	}
	p := &pendingCommit{ctx: ctx, gen: gen, id: id, offsets: offsets, done: make(chan struct{})}
	q := &m.commits
	q.mu.Lock()
	q.waiting = append(q.waiting, p)
	first := !q.sending
	q.sending = true
	q.mu.Unlock()
	if first {
		// Nothing was in flight: send now, on the caller's goroutine, and
		// leave what queued meanwhile to a goroutine of its own.
		batch := q.next()
		if batch != nil {
			m.sendCommits(batch)
			batch = q.nextAfter(batch)
		}
		if batch != nil {
			go func() {
				for ; batch != nil; batch = q.nextAfter(batch) {
					m.sendCommits(batch)
				}
			}()
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		select {
		case <-p.done: // answered as ctx ended: the answer is known
		default:
			return m.commitFailed(p, ctx.Err())
		}
	}
	if p.err != nil {
		return m.commitFailed(p, p.err)
	}
	var cerr *CommitError
	for _, o := range offsets {
		if perr, ok := p.refused[o.TopicPartition]; ok {
			if cerr == nil {
				cerr = &CommitError{Group: m.cfg.GroupID, Generation: gen, Partitions: map[TopicPartition]error{}}
			}
			cerr.Partitions[o.TopicPartition] = perr
		}
	}
	if cerr != nil {
		return cerr
	}
	return nil
}

func (m *Member) commitFailed(p *pendingCommit, err error) error {
	if errors.Is(err, ErrRebalanceInProgress) || errors.Is(err, ErrIllegalGeneration) || errors.Is(err, ErrUnknownMemberID) {
		m.pokeHeartbeat()
	}
	return fmt.Errorf("cohort: commit %d offset(s) to group %q generation %d as %q: %w", len(p.offsets), m.cfg.GroupID, p.gen, p.id, err)
}

// next takes the next request's commits off the queue: the oldest waiting
// commit and the others of the same generation and member ID, within the
// batch limits. Commits whose caller has given up are dropped unsent. With
// none left it marks the queue idle and returns nil.
func (q *commitQueue) next() []*pendingCommit {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []*pendingCommit
	rest := q.waiting[:0]
	offsets, bytes := 0, 0
	for _, p := range q.waiting {
		if p.ctx.Err() != nil {
			continue
		}
		n, b := len(p.offsets), offsetBytes(p.offsets)
		switch {
		case len(batch) == 0:
		case p.gen != batch[0].gen || p.id != batch[0].id,
			offsets+n > maxBatchOffsets || bytes+b > maxBatchBytes:
			rest = append(rest, p)
			continue
		}
		batch = append(batch, p)
		offsets, bytes = offsets+n, bytes+b
	}
	clear(q.waiting[len(rest):])
	q.waiting = rest
	q.sending = batch != nil
	return batch
}

// nextAfter is next once the callers of answered, the request just
// answered, have had a chance to commit again. When it carried several
// callers (commits are arriving concurrently) the sender yields its
// processor once first: the callers it woke run, and those that commit
// again at once join the next request instead of waiting a whole round
// behind it. PostgreSQL's commit_delay with commit_siblings does the same
// with a timer; a yield costs microseconds and never waits for callers
// that are not ready. One caller (C=1) is sent at once, as before.
func (q *commitQueue) nextAfter(answered []*pendingCommit) []*pendingCommit {
	if len(answered) > 1 {
		runtime.Gosched()
	}
	return q.next()
}

// offsetBytes is about what offsets take in a request.
func offsetBytes(offsets []PartitionOffset) int {
	n := 0
	for _, o := range offsets {
		n += 16 + len(o.Topic) + len(o.Metadata)
	}
	return n
}

// sendCommits sends batch as one OffsetCommit and hands every caller in it
// the answer.
func (m *Member) sendCommits(batch []*pendingCommit) {
	head := batch[0]
	req := &cohortv1.OffsetCommitRequest{
		GroupId: m.cfg.GroupID, Generation: head.gen, MemberId: head.id, InstanceId: m.cfg.InstanceID,
	}
	ctx := head.ctx
	if len(batch) == 1 {
		req.Offsets = make([]*cohortv1.OffsetCommitPartition, 0, len(head.offsets))
		for _, o := range head.offsets {
			req.Offsets = append(req.Offsets, commitPartition(o))
		}
	} else {
		// A partition two callers name is sent once, with the later offset.
		at := map[TopicPartition]int{}
		for _, p := range batch {
			for _, o := range p.offsets {
				if i, ok := at[o.TopicPartition]; ok {
					req.Offsets[i] = commitPartition(o)
					continue
				}
				at[o.TopicPartition] = len(req.Offsets)
				req.Offsets = append(req.Offsets, commitPartition(o))
			}
		}
		var cancel context.CancelFunc
		ctx, cancel = batchContext(batch)
		defer cancel()
	}
	resp, err := m.groups.OffsetCommit(ctx, req)
	var refused map[TopicPartition]error
	if err == nil {
		for _, r := range resp.GetPartitions() {
			if perr := fromCode(r.GetError(), r.GetErrorMessage()); perr != nil {
				if refused == nil {
					refused = map[TopicPartition]error{}
				}
				refused[TopicPartition{r.GetTopic(), r.GetPartition()}] = perr
			}
		}
	}
	for _, p := range batch {
		p.err, p.refused = err, refused
		close(p.done)
	}
}

func commitPartition(o PartitionOffset) *cohortv1.OffsetCommitPartition {
	return &cohortv1.OffsetCommitPartition{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata}
}

// batchContext is the context of a request that carries several callers'
// commits: it keeps the first caller's values, ends at the latest of their
// deadlines (none if one has none), and is cancelled once every caller
// has given up.
func batchContext(batch []*pendingCommit) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	cancelDeadline := context.CancelFunc(func() {})
	if !latest.IsZero() {
		ctx, cancelDeadline = context.WithDeadline(ctx, latest)
	}
	var left atomic.Int32
	left.Store(int32(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, p := range batch {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancelDeadline()
		cancel()
	}
}
