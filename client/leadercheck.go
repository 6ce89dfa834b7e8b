package client

import (
	"context"
	"slices"
	"sync"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// A frozen leader (SIGSTOP, a long GC or VM pause) keeps its TCP
// connections open, so an attempt sent to it neither fails nor answers: it
// waits out its whole timeout, although the other nodes elect a new leader
// about a second after the freeze. The leader check asks those other nodes,
// while an attempt is slow, which leader they know, and abandons the
// attempt as soon as they name another node. Resending is safe for every
// request: the attempt timeout resends the same request anyway, only
// later (see Conn).
//
// A leader that is merely slow to answer (a JoinGroup parked at the join
// barrier) is the leader the others name, so its call is never abandoned.

// leaderClaim is one node's answer to "who leads?".
type leaderClaim struct {
	leader string // the leader's gRPC address; "" when the node knows none
	term   uint64 // the answering node's Raft term
	by     string // the address of the node that answered
}

// leaderCheck checks the leader while one attempt is outstanding.
type leaderCheck struct {
	c       *Conn
	target  string
	every   time.Duration
	ctx     context.Context // the attempt's: the checks end with it
	abandon context.CancelFunc
	timer   *time.Timer
	done    chan struct{}
	// switchTo is set, before abandon is called, to the claim the attempt
	// was abandoned for; read only after done is closed.
	switchTo leaderClaim
}

// barrierCheckFactor is how many times less often an attempt that waits at
// a barrier (a call with AttemptTimeout) checks the leader: every 2 s at
// the default interval.
const barrierCheckFactor = 8

// checkLeader starts checking, one interval (every) from now and then
// every interval until actx ends, whether the other nodes name a leader
// other than target; if they do, it cancels the attempt with abandon. It
// returns nil when the check is off. The caller must end actx, then call
// stop.
func (c *Conn) checkLeader(actx context.Context, target string, abandon context.CancelFunc, every time.Duration) *leaderCheck {
	if every <= 0 {
		return nil
	}
	lc := &leaderCheck{c: c, target: target, every: every, ctx: actx, abandon: abandon, done: make(chan struct{})}
	// A timer rather than a goroutine: an attempt that answers within the
	// interval (nearly all) starts nothing and sends nothing.
	lc.timer = time.AfterFunc(every, lc.run)
	return lc
}

// stop waits for the checks to end (the attempt's context must have
// ended) and reports the claim the attempt was abandoned for, if it was.
// No probe outlives it.
func (lc *leaderCheck) stop() (leaderClaim, bool) {
	if lc == nil || lc.timer.Stop() {
		return leaderClaim{}, false
	}
	<-lc.done
	return lc.switchTo, lc.switchTo.leader != ""
}

func (lc *leaderCheck) run() {
	defer close(lc.done)
	for {
		if claim, ok := lc.round(); ok {
			lc.switchTo = claim
			lc.abandon()
			return
		}
		select {
		case <-lc.ctx.Done():
			return
		case <-time.After(lc.every):
		}
	}
}

// round asks every other node once, each with a deadline of one interval,
// and reports the leader to switch to, if any: the one named in the
// highest term, when that term is not older than one the Conn already saw
// named and the leader is not the attempt's target.
func (lc *leaderCheck) round() (leaderClaim, bool) {
	peers, ok := lc.c.peers(lc.target)
	if !ok || len(peers) == 0 {
		return leaderClaim{}, false
	}
	pctx, cancel := context.WithTimeout(lc.ctx, lc.every)
	defer cancel()
	answers := make([]leaderClaim, len(peers))
	var wg sync.WaitGroup
	for i, addr := range peers {
		wg.Go(func() { answers[i] = lc.c.askLeader(pctx, addr) })
	}
	wg.Wait()
	if lc.ctx.Err() != nil {
		return leaderClaim{}, false
	}
	var best leaderClaim
	for _, a := range answers {
		// A node that knows no leader (a candidate, or a follower whose
		// leader went quiet) says nothing about who leads; its term,
		// possibly raised by elections it keeps losing, is not counted.
		if a.leader != "" && (best.leader == "" || a.term > best.term) {
			best = a
		}
	}
	if best.leader == "" || !lc.c.newestClaim(best) {
		return leaderClaim{}, false
	}
	// A follower that has not heard of the new leader yet names the
	// frozen one: keep waiting.
	return best, best.leader != lc.target
}

// peers are the addresses to ask, besides target: the configured
// endpoints and every node this Conn has connected to (a leader learned
// from the cohort-leader header need not be an endpoint). ok is false once
// the Conn is closed.
func (c *Conn) peers(target string) (out []string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false
	}
	out = append(out, c.cfg.Endpoints...)
	for addr := range c.conns {
		out = append(out, addr)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(a string) bool { return a == target }), true
}

// askLeader asks the node at addr which leader it knows. NodeInfo is
// public and answered by the node itself, never forwarded, so a frozen
// leader cannot hold it; a node that does not answer within ctx (down,
// frozen, unreachable) gives an empty claim.
func (c *Conn) askLeader(ctx context.Context, addr string) leaderClaim {
	cc, err := c.connTo(addr)
	if err != nil {
		return leaderClaim{}
	}
	info, err := cohortv1.NewClusterServiceClient(cc).NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
	if err != nil {
		return leaderClaim{}
	}
	return leaderClaim{leader: info.GetLeaderGrpcAddress(), term: info.GetTerm(), by: addr}
}

// newestClaim records claim's term and reports whether it is at least
// the highest term any check of this Conn has seen a leader named in:
// Raft terms only rise, so a node naming a leader in an older term (a
// follower cut off from the election, an old leader just resumed) is
// stale.
func (c *Conn) newestClaim(claim leaderClaim) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if claim.term < c.checkedTerm {
		return false
	}
	c.checkedTerm = claim.term
	return true
}
