package raftnode

import (
	"context"
	"testing"
	"time"
)

// A leader cut off from its followers must not acknowledge an entry it
// cannot commit: Apply returns an error once the caller's deadline passes
// (outcome unknown), and no replica applies the entry meanwhile. The
// leader's lease is stretched so that the wait ends on the caller's
// deadline rather than on the leader stepping down.
func TestMultiNode_ApplyWithoutQuorum_IsNotAcknowledged(t *testing.T) {
	slow := func(_ int, c *Config) {
		c.HeartbeatTimeout = 2 * time.Second
		c.ElectionTimeout = 2 * time.Second
		c.LeaderLeaseTimeout = 2 * time.Second
	}
	c := newTestCluster(t, 3, slow)
	leader := c.leader()
	leader.apply(t, createTopic("before", 1))
	for _, tn := range c.nodes {
		if tn != leader {
			tn.crash()
		}
	}
	applied := leader.node.AppliedIndex()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := leader.node.Apply(ctx, createTopic("uncommitted", 1))
	if err == nil {
		t.Fatalf("apply without a quorum acknowledged (result %+v); want an error", res)
	}
	if got := leader.fsm.Stats().Topics; got != 1 {
		t.Fatalf("the leader holds %d topics; the entry no follower stored was applied", got)
	}
	if got := leader.node.AppliedIndex(); got != applied {
		t.Fatalf("applied index moved from %d to %d without a quorum", applied, got)
	}
}
