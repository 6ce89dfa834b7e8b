package raftnode

import (
	"sync"
	"time"
)

// LeadershipEvent is one leadership transition of this node.
type LeadershipEvent struct {
	// IsLeader is true when the node became leader, false when it stopped.
	IsLeader bool
	// Term is the Raft term observed when the transition was delivered.
	Term uint64
	At   time.Time
}

// LeadershipSubscription delivers this node's leadership transitions in
// order, none dropped however slowly it is read: each subscription has its
// own unbounded queue, so a slow reader never blocks raft or other
// subscribers. (raft's own LeaderCh has one consumer and drops values.)
type LeadershipSubscription struct {
	n  *Node
	ch chan LeadershipEvent

	mu      sync.Mutex
	queue   []LeadershipEvent
	wake    chan struct{}
	closed  bool
	stopped chan struct{}
}

// SubscribeLeadership returns a subscription whose first event is the
// node's leadership at the time of the call; later events follow each
// transition. Call Close when done.
func (n *Node) SubscribeLeadership() *LeadershipSubscription {
	s := &LeadershipSubscription{
		n:       n,
		ch:      make(chan LeadershipEvent),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
	n.subsMu.Lock()
	s.push(LeadershipEvent{IsLeader: n.isLeader, Term: n.raft.CurrentTerm(), At: n.now()})
	n.subs[s] = struct{}{}
	n.subsMu.Unlock()
	go s.deliver()
	return s
}

// C receives the events. It is closed after Close or node shutdown.
func (s *LeadershipSubscription) C() <-chan LeadershipEvent { return s.ch }

// Close stops the subscription; pending events are discarded.
func (s *LeadershipSubscription) Close() {
	s.n.subsMu.Lock()
	delete(s.n.subs, s)
	s.n.subsMu.Unlock()
	s.close()
}

func (s *LeadershipSubscription) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stopped)
	}
	s.mu.Unlock()
}

func (s *LeadershipSubscription) push(ev LeadershipEvent) {
	s.mu.Lock()
	if !s.closed {
		s.queue = append(s.queue, ev)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *LeadershipSubscription) deliver() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		var ev LeadershipEvent
		have := len(s.queue) > 0
		if have {
			ev = s.queue[0]
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
		if !have {
			select {
			case <-s.wake:
				continue
			case <-s.stopped:
				return
			}
		}
		select {
		case s.ch <- ev:
		case <-s.stopped:
			return
		}
	}
}

// fanOutLeadership drains raft's NotifyCh (raft blocks on it) and copies
// every transition to every subscription. It runs until raft has shut
// down, so the step-down during Shutdown reaches subscribers too.
func (n *Node) fanOutLeadership() {
	defer n.bgWG.Done()
	for {
		select {
		case v := <-n.notifyCh:
			n.metrics.leadershipChanges.Inc()
			if v {
				n.log.Info("gained raft leadership", "term", n.raft.CurrentTerm())
			} else {
				n.log.Info("lost raft leadership", "term", n.raft.CurrentTerm())
			}
			ev := LeadershipEvent{IsLeader: v, Term: n.raft.CurrentTerm(), At: n.now()}
			n.subsMu.Lock()
			n.isLeader = v
			for s := range n.subs {
				s.push(ev)
			}
			n.subsMu.Unlock()
		case <-n.raftStopped:
			return
		}
	}
}

func (n *Node) closeSubscriptions() {
	n.subsMu.Lock()
	subs := n.subs
	n.subs = map[*LeadershipSubscription]struct{}{}
	n.subsMu.Unlock()
	for s := range subs {
		s.close()
	}
}
