package raftnode

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestLeaderAcks_FreshQuorumCountsOnlyAnswersInTheTermToLaterRequests(t *testing.T) {
	voters := []raft.ServerID{"a", "b", "c"}
	a := newLeaderAcks()
	before := a.send() // 1: sent before the check
	after := a.mark()
	if a.freshQuorum("a", 5, after, voters) {
		t.Fatal("fresh quorum with no answers at all")
	}
	a.answered("b", 5, before)
	if a.freshQuorum("a", 5, after, voters) {
		t.Fatal("an answer to a request sent before the check counted as fresh")
	}
	later := a.send() // 2
	a.answered("c", 4, later)
	if a.freshQuorum("a", 5, after, voters) {
		t.Fatal("an answer in an older term counted as fresh")
	}
	a.answered("c", 5, later)
	if !a.freshQuorum("a", 5, after, voters) {
		t.Fatal("self and c answered after the check in term 5: want a quorum of 3")
	}
	a.answered("c", 5, before) // an older answer arriving late does not undo a newer one
	if !a.freshQuorum("a", 5, after, voters) {
		t.Fatal("a late answer to an older request replaced a newer one")
	}
	if a.freshQuorum("a", 5, after, []raft.ServerID{"a", "b", "c", "d", "e"}) {
		t.Fatal("2 of 5 voters counted as a quorum")
	}
	if !a.freshQuorum("a", 9, a.mark(), []raft.ServerID{"a"}) {
		t.Fatal("a single voter is its own quorum")
	}
	if a.freshQuorum("x", 5, after, voters) {
		t.Fatal("a node outside the voters counted itself")
	}
}

// raft.VerifyLeader counts an answer to a request sent before the check
// began: a leader paused right after a heartbeat finds the answer waiting
// when it resumes, though the others may have elected a new leader since.
// Node.VerifyLeader must not succeed on it. The test holds the leader's
// answer from one follower (the pause), cuts everything else the leader
// sends from then on (the others moved on), and releases the old answer
// once raft's own check is registered.
func TestVerifyLeader_AnAnswerToARequestSentBeforeTheCheckDoesNotConfirm(t *testing.T) {
	// Slow timeouts: the leader keeps its lease while the test holds its
	// answers.
	c := newTestCluster(t, 3, func(_ int, cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	})
	l := c.leader()
	l.apply(t, createTopic("t", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.node.VerifyLeader(ctx); err != nil {
		t.Fatalf("VerifyLeader on a healthy leader: %v", err)
	}
	var follower *testNode
	for _, tn := range c.nodes {
		if tn != l {
			follower = tn
			if err := tn.node.VerifyLeader(ctx); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("VerifyLeader on follower %s: %v, want ErrNotLeader", tn.node.ID(), err)
			}
		}
	}

	var (
		mu      sync.Mutex
		holding bool
		held    = make(chan struct{})
		release = make(chan struct{})
	)
	cut := errors.New("cut by the test")
	hook := func(id raft.ServerID, pipelined bool, send func() error) error {
		mu.Lock()
		hold := !holding && !pipelined && id == raft.ServerID(follower.node.ID())
		holding = holding || hold
		mu.Unlock()
		if !hold {
			return cut
		}
		if err := send(); err != nil {
			return err
		}
		close(held)
		<-release
		return nil
	}
	l.node.transport.testAppend.Store(&hook)
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(func() {
		l.node.transport.testAppend.Store(nil)
		free()
	})
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer from the follower to hold")
	}

	term, after := l.node.raft.CurrentTerm(), l.node.transport.acks.mark()
	stale := counterValue(t, l.node.metrics.staleVerifies)
	raftSays := l.node.raft.VerifyLeader()
	started := make(chan struct{})
	var once sync.Once
	l.node.testVerifyStarted = func() { once.Do(func() { close(started) }) }
	res := make(chan error, 1)
	go func() {
		vctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res <- l.node.VerifyLeader(vctx)
	}()
	<-started
	// Both checks wait in raft's queue; its leader loop registers them,
	// picking among its ready channels at random. After many round trips
	// through that loop, both are registered all but certainly.
	for range 40 {
		leaderLoopRoundTrip(t, l.node)
	}
	free()

	if err := raftSays.Error(); err != nil {
		t.Fatalf("raft's own check failed (%v): the held answer did not reach it, so this test checked nothing", err)
	}
	if l.node.transport.acks.freshQuorum(raft.ServerID(l.node.ID()), term, after, voterIDs(t, l.node)) {
		t.Fatal("the held answer counted as fresh")
	}
	if err := <-res; err == nil {
		t.Fatal("VerifyLeader succeeded on an answer to a request sent before it began")
	}
	if counterValue(t, l.node.metrics.staleVerifies) == stale {
		t.Fatal("no leadership check was refused for stale answers: the held answer never reached Node.VerifyLeader's round")
	}
}

// leaderLoopRoundTrip hands raft's main loop an AppendEntries from a long
// gone term, which it refuses without changing anything, and waits for
// the answer.
func leaderLoopRoundTrip(t *testing.T, n *Node) {
	t.Helper()
	ch := make(chan raft.RPCResponse, 1)
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: 0}
	n.transport.consumer <- raft.RPC{Command: req, RespChan: ch}
	select {
	case r := <-ch:
		if resp, ok := r.Response.(*raft.AppendEntriesResponse); !ok || resp.Success {
			t.Fatalf("raft answered an AppendEntries of term 0 with %+v (error %v)", r.Response, r.Error)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("raft's main loop did not answer within 5 s")
	}
}

func voterIDs(t *testing.T, n *Node) []raft.ServerID {
	t.Helper()
	var ids []raft.ServerID
	for _, id := range voters(t, n) {
		ids = append(ids, raft.ServerID(id))
	}
	return ids
}
