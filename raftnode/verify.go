package raftnode

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Leadership verification that a read can rely on.
//
// raft.VerifyLeader counts a follower's vote from the next AppendEntries
// answer it processes, including an answer to a request sent before the
// verification began. A leader paused (SIGSTOP, a long GC, a stalled VM)
// right after sending a heartbeat finds the follower's answer waiting when
// it resumes; by then the others may have elected a new leader and
// committed writes, and raft vouches for the deposed leader with the old
// answer. A read served on that word is stale (the chaos suite's
// pause-leader fault found one).
//
// So the transport numbers every AppendEntries request it sends and notes,
// per peer, the newest one the peer answered in the sender's term
// (leaderAcks). Node.VerifyLeader takes the number before asking raft, and
// succeeds only once a quorum of the voters (the leader counting itself)
// answered, in the term the check began in, a request numbered after it:
// each of them recognised this node as leader after the check began. A
// round raft vouched for with older answers is asked again; its
// heartbeats bring fresh ones, or raft's refusal.

// leaderAcks numbers AppendEntries requests in send order and keeps, per
// peer, the newest one answered in its own term.
type leaderAcks struct {
	sent atomic.Uint64
	mu   sync.Mutex
	// acked[peer] is the newest request the peer answered without a
	// higher term: the term it was sent in and its number.
	acked map[raft.ServerID]ackMark
}

type ackMark struct{ term, seq uint64 }

func newLeaderAcks() *leaderAcks { return &leaderAcks{acked: map[raft.ServerID]ackMark{}} }

// send numbers a request about to go out.
func (a *leaderAcks) send() uint64 { return a.sent.Add(1) }

// mark is the number of the last request sent so far: requests numbered
// above it are sent after this call.
func (a *leaderAcks) mark() uint64 { return a.sent.Load() }

// answered notes that peer answered request seq, sent in term, in that
// same term.
func (a *leaderAcks) answered(peer raft.ServerID, term, seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.acked[peer]; term > m.term || term == m.term && seq > m.seq {
		a.acked[peer] = ackMark{term: term, seq: seq}
	}
}

// freshQuorum reports whether a quorum of voters answered, in term, a
// request numbered above after; self counts without answering.
func (a *leaderAcks) freshQuorum(self raft.ServerID, term, after uint64, voters []raft.ServerID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	fresh := 0
	for _, v := range voters {
		if m := a.acked[v]; v == self || m.term == term && m.seq > after {
			fresh++
		}
	}
	return fresh > len(voters)/2
}

// AppendEntries sends the request through the TCP transport and notes the
// answer for VerifyLeader.
func (c *commitObservingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress,
	args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	seq := c.acks.send()
	if err := c.run(id, false, func() error { return c.NetworkTransport.AppendEntries(id, target, args, resp) }); err != nil {
		return err
	}
	if resp.Term == args.Term {
		c.acks.answered(id, args.Term, seq)
	}
	return nil
}

// run sends one request, through the test hook when one is set.
func (c *commitObservingTransport) run(id raft.ServerID, pipelined bool, send func() error) error {
	if hook := c.testAppend.Load(); hook != nil {
		return (*hook)(id, pipelined, send)
	}
	return send()
}

// AppendEntriesPipeline opens the TCP transport's pipeline with its
// answers noted for VerifyLeader too.
func (c *commitObservingTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	inner, err := c.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	p := &ackingPipeline{AppendPipeline: inner, c: c, id: id, seqs: map[*raft.AppendEntriesRequest]uint64{},
		out: make(chan raft.AppendFuture), stop: make(chan struct{})}
	go p.relay()
	return p, nil
}

// ackingPipeline numbers the requests of a pipeline and notes each answer
// as raft consumes it.
type ackingPipeline struct {
	raft.AppendPipeline
	c        *commitObservingTransport
	id       raft.ServerID
	mu       sync.Mutex
	seqs     map[*raft.AppendEntriesRequest]uint64 // requests awaiting an answer
	out      chan raft.AppendFuture
	stop     chan struct{}
	stopOnce sync.Once
}

func (p *ackingPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	p.mu.Lock()
	p.seqs[args] = p.c.acks.send()
	p.mu.Unlock()
	var f raft.AppendFuture
	err := p.c.run(p.id, true, func() (err error) {
		f, err = p.AppendPipeline.AppendEntries(args, resp)
		return err
	})
	if err != nil {
		p.mu.Lock()
		delete(p.seqs, args)
		p.mu.Unlock()
		return nil, err
	}
	return f, nil
}

func (p *ackingPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

func (p *ackingPipeline) relay() {
	in := p.AppendPipeline.Consumer()
	for {
		select {
		case f := <-in:
			req, resp := f.Request(), f.Response()
			p.mu.Lock()
			seq, ok := p.seqs[req]
			delete(p.seqs, req)
			p.mu.Unlock()
			if ok && f.Error() == nil && resp.Term == req.Term {
				p.c.acks.answered(p.id, req.Term, seq)
			}
			select {
			case p.out <- f:
			case <-p.stop:
				return
			}
		case <-p.stop:
			return
		}
	}
}

func (p *ackingPipeline) Close() error {
	p.stopOnce.Do(func() { close(p.stop) })
	return p.AppendPipeline.Close()
}

// VerifyLeader checks with a quorum that this node still leads: it
// returns nil only once a quorum of voters answered, in this node's
// current term, a request sent after the call began (see leaderAcks).
func (n *Node) VerifyLeader(ctx context.Context) error {
	term, after := n.raft.CurrentTerm(), n.transport.acks.mark()
	for {
		err := n.WaitFuture(ctx, "verify leader", func(time.Duration) raft.Future {
			f := n.raft.VerifyLeader()
			if n.testVerifyStarted != nil {
				n.testVerifyStarted()
			}
			return f
		})
		if err != nil {
			return err
		}
		if now := n.raft.CurrentTerm(); now != term {
			return fmt.Errorf("verify leader: %w: the term moved from %d to %d", ErrNotLeader, term, now)
		}
		c, err := n.Configuration()
		if err != nil {
			return fmt.Errorf("verify leader: %w", err)
		}
		var voters []raft.ServerID
		for _, s := range c.Servers {
			if s.Suffrage == raft.Voter {
				voters = append(voters, s.ID)
			}
		}
		if n.transport.acks.freshQuorum(raft.ServerID(n.id), term, after, voters) {
			return nil
		}
		n.metrics.staleVerifies.Inc()
	}
}
