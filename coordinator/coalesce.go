package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// Commit coalescing. Offset commits are the hot write path: many members
// commit concurrently, each a small command. Rather than one Raft entry per
// commit, a few proposer goroutines each take every commit waiting at that
// moment and propose them as one Batch entry (group commit). At low
// concurrency a commit finds a free proposer and goes out alone at once, so
// it pays no batching delay; under load the queue fills while entries are in
// flight and each entry carries many commits. Joins take the same path: when
// a large group rebalances, every member rejoins within a round trip of
// hearing of it (WatchGroup), and a burst of a thousand JoinMember entries
// becomes a few Batch entries. So do consumer group heartbeats (KIP-848):
// a new group epoch sends every member's next heartbeat to the log, a
// thousand within one heartbeat interval. The FSM applies a batch's commands in order,
// each with its own result, exactly as it would apply them one by one.

const (
	// commitProposers is how many batches may be in flight at once, so Raft
	// can pipeline entries instead of waiting a round trip between batches.
	// With 4, a commit arriving while four entries replicated waited a
	// whole Raft round in the queue (cohort-bench commits' stage table,
	// docs/benchmarks.md): at 16 concurrent committers the client got
	// 0.43× raw apply's rate, 0.63–0.70× with 32 proposers. With 32, 200
	// commits arriving together took 58 entries (batches of 3); with 16,
	// 17. Under load each entry carries every commit queued when its
	// proposer came free.
	commitProposers = 16
	// maxCommitBatch and maxCommitBatchBytes bound one entry (and so one
	// apply's pause, and what every replica writes at once). A commit
	// larger than the byte bound goes out alone.
	maxCommitBatch      = 512
	maxCommitBatchBytes = 4 << 20
)

type commitRequest struct {
	ctx  context.Context
	cmd  *fsmv1.Command
	size int // encoded size of cmd
	done chan commitResult
	// group is a JoinMember's group: counted in committer.joining from
	// the moment it is queued until its entry is applied (or fails).
	group string
	// queued is when submit queued it; picked when a proposer took it.
	queued, picked time.Time
}

type commitResult struct {
	res *fsm.ApplyResult
	err error
	// applied is when the proposer had its entry's result.
	applied time.Time
}

type committer struct {
	e     *Engine
	queue chan *commitRequest
	once  sync.Once

	mu sync.Mutex
	// held are the rejoins held back, by group (holdJoin).
	held map[string][]*commitRequest
	// joining counts each group's joins queued or being proposed, not yet
	// applied.
	joining map[string]int
}

func (c *committer) start() {
	c.once.Do(func() {
		for range commitProposers {
			go c.run()
		}
	})
}

// submit proposes cmd (a CommitOffsets, a JoinMember or a
// ConsumerHeartbeat) in a batch and waits for its result.
func (c *committer) submit(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	c.start()
	req := &commitRequest{ctx: ctx, cmd: cmd, size: proto.Size(cmd), done: make(chan commitResult, 1), queued: time.Now()}
	if j := cmd.GetJoinMember(); j != nil {
		req.group = j.GetGroupId()
	}
	if !c.holdJoin(req) {
		if req.group != "" {
			c.mu.Lock()
			c.joining[req.group]++
			c.mu.Unlock()
		}
		select {
		case c.queue <- req:
		case <-ctx.Done():
			c.finished(req)
			return nil, ctx.Err()
		}
	}
	select {
	case r := <-req.done:
		if _, commit := cmd.GetKind().(*fsmv1.Command_CommitOffsets); commit && r.err == nil && !r.applied.IsZero() {
			st := c.e.m.commitStages
			st.WithLabelValues(stageQueue).Observe(req.picked.Sub(req.queued).Seconds())
			st.WithLabelValues(stageReplicate).Observe(r.applied.Sub(req.picked).Seconds())
			st.WithLabelValues(stageWake).Observe(time.Since(r.applied).Seconds())
		}
		return r.res, r.err
	case <-ctx.Done():
		// The commit may still be applied: its outcome is unknown, as for
		// any write whose caller gave up. Retrying it is safe.
		return nil, ctx.Err()
	}
}

func (c *committer) run() {
	var next *commitRequest // taken from the queue but over the last batch's bytes
	for {
		first := next
		if first == nil {
			var ok bool
			if first, ok = <-c.queue; !ok {
				return
			}
		}
		next = nil
		batch, size := []*commitRequest{first}, first.size
	drain:
		for len(batch) < maxCommitBatch {
			select {
			case r, ok := <-c.queue:
				if !ok {
					break drain
				}
				if !fits(len(batch), size, r) {
					next = r
					break drain
				}
				batch, size = append(batch, r), size+r.size
			default:
				break drain
			}
		}
		c.propose(batch)
	}
}

func (c *committer) propose(batch []*commitRequest) {
	picked := time.Now()
	live := batch[:0]
	for _, r := range batch {
		r.picked = picked
		if r.ctx.Err() == nil {
			live = append(live, r)
		} else {
			c.finished(r)
			r.done <- commitResult{err: r.ctx.Err()}
		}
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		res, err := c.e.propose(live[0].ctx, live[0].cmd)
		c.finished(live[0])
		live[0].done <- commitResult{res: res, err: err, applied: time.Now()}
		return
	}
	// The batch waits as long as its most patient caller.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var deadline, has = live[0].ctx.Deadline()
	for _, r := range live[1:] {
		if d, ok := r.ctx.Deadline(); !ok {
			has = false
		} else if has && d.After(deadline) {
			deadline = d
		}
	}
	if has {
		var c2 context.CancelFunc
		ctx, c2 = context.WithDeadline(ctx, deadline)
		defer c2()
	}
	b := &fsmv1.Batch{}
	for _, r := range live {
		b.Commands = append(b.Commands, r.cmd)
	}
	res, err := c.e.propose(ctx, &fsmv1.Command{Kind: &fsmv1.Command_Batch{Batch: b}})
	for _, r := range live {
		// Applied (or failed): the FSM's joined count has them now, so
		// they no longer count as on their way (holdJoin).
		c.finished(r)
	}
	if err == nil && hasMembershipChange(live) && c.e.isServing() {
		// As propose does for a command alone: a join's caller acts on
		// an engine in line with its entry (sessions, deadlines).
		c.e.applied.awaitObserved(ctx, res.Index)
	}
	applied := time.Now()
	for i, r := range live {
		switch {
		case err != nil:
			r.done <- commitResult{err: err}
		case res.Err != nil:
			r.done <- commitResult{err: res.Err}
		default:
			r.done <- commitResult{res: res.Batch[i], applied: applied}
		}
	}
	c.e.m.commitBatch.Observe(float64(len(live)))
}

// hasMembershipChange reports whether a batch carries more than commits.
func hasMembershipChange(batch []*commitRequest) bool {
	for _, r := range batch {
		if _, commit := r.cmd.GetKind().(*fsmv1.Command_CommitOffsets); !commit {
			return true
		}
	}
	return false
}

// finished stops counting a join as on its way to the log: its entry was
// applied, or it never will be.
func (c *committer) finished(r *commitRequest) {
	if r.group == "" {
		return
	}
	c.mu.Lock()
	if c.joining[r.group]--; c.joining[r.group] <= 0 {
		delete(c.joining, r.group)
	}
	c.mu.Unlock()
}

// Holding rejoins. When a group rebalances every member rejoins, within a
// heartbeat interval of hearing of it (a whole interval apart for Kafka's
// clients), and each join is parked until the last one is in: only the
// last join's entry, which completes the join phase, is on the round's
// path. So a known member's rejoin into a rebalancing group is held back
// for up to Config.JoinHold, and a group's held rejoins go to the log
// together: at once when they, with the group's joins already on their way,
// are every member still to rejoin (so the round's last join is never
// held), else when the first has waited JoinHold. At 1,000 members a
// round's rejoins took 70-200 entries per generation, each written and
// applied by every replica; now about one per JoinHold. A held join is
// lost with the leadership, as its parked call is: the member is told
// NOT_LEADER and rejoins on the new leader, which is what a Kafka
// coordinator's failover asks of it too (its joins live in memory).

// holdJoin holds r back when it is a known member's first rejoin into a
// rebalancing group, or sends it with the group's held rejoins when they
// are all the group waits for. It reports whether it took r.
func (c *committer) holdJoin(r *commitRequest) bool {
	j := r.cmd.GetJoinMember()
	if j == nil || j.GetNewMember() || c.e.cfg.JoinHold <= 0 {
		return false
	}
	g, ok := c.e.fsm.Group(r.group)
	if !ok || g.State != fsm.PreparingRebalance {
		return false
	}
	if m, known := g.Member(j.GetMember().GetMemberId()); !known || m.Joined {
		return false
	}
	c.mu.Lock()
	held := append(c.held[r.group], r)
	if len(held) < g.Members.Len()-g.Joined()-c.joining[r.group] {
		c.held[r.group] = held
		c.mu.Unlock()
		if len(held) == 1 {
			time.AfterFunc(c.e.cfg.JoinHold, func() { c.sendHeld(r.group) })
		}
		return true
	}
	delete(c.held, r.group)
	c.joining[r.group] += len(held)
	c.mu.Unlock()
	c.send(held)
	return true
}

// sendHeld sends a group's held rejoins, if any, and reports whether the
// group has joins on their way to the log (held until now, or sent).
func (c *committer) sendHeld(group string) bool {
	c.mu.Lock()
	held := c.held[group]
	delete(c.held, group)
	c.joining[group] += len(held)
	if c.joining[group] == 0 {
		delete(c.joining, group)
	}
	pending := c.joining[group] > 0
	c.mu.Unlock()
	c.send(held)
	return pending
}

// send proposes requests taken from the holds (counted in joining
// already) in as few entries as the batch bounds allow. Not through the
// queue: the proposers waiting on it would take one request each.
func (c *committer) send(rs []*commitRequest) {
	for len(rs) > 0 {
		n, size := 1, rs[0].size
		for n < len(rs) && fits(n, size, rs[n]) {
			size += rs[n].size
			n++
		}
		go c.propose(rs[:n])
		rs = rs[n:]
	}
}

// fits reports whether r may join a batch of n requests and size bytes
// (maxCommitBatch, maxCommitBatchBytes).
func fits(n, size int, r *commitRequest) bool {
	return n < maxCommitBatch && size+r.size <= maxCommitBatchBytes
}
