package raftnode

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Test_Node_NewRaftAddress_LeaderFollowsIt restarts a follower from its data
// dir on a different raft address, as a Kubernetes pod recreated with a new
// IP would: it hears from no leader, so it registers its new address
// through the join addresses, the leader moves it in the configuration
// (keeping it a voter), and it catches up.
func Test_Node_NewRaftAddress_LeaderFollowsIt(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.leader()
	leader.apply(t, createTopic("before", 1))
	waitConverged(t, leader, c.nodes...)

	var follower *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	oldAddr := follower.node.RaftAddress()
	follower.stop()
	cfg := follower.cfg
	cfg.RaftBind = "127.0.0.1:0" // a new address
	moved := startTestNode(t, cfg, nil)
	newAddr := moved.node.RaftAddress()
	if newAddr == oldAddr {
		t.Fatalf("the restarted node kept raft address %s", oldAddr)
	}
	waitFor(t, 20*time.Second, "the leader to move the server to its new address", func() (bool, string) {
		conf, err := leader.node.Configuration()
		if err != nil {
			return false, err.Error()
		}
		for _, s := range conf.Servers {
			if string(s.ID) == moved.node.ID() {
				return string(s.Address) == newAddr && s.Suffrage == raft.Voter, fmt.Sprintf("%s at %s (%v)", s.ID, s.Address, s.Suffrage)
			}
		}
		return false, "server missing from the configuration"
	})
	for i := range 5 {
		leader.apply(t, createTopic(fmt.Sprintf("after-%d", i), 1))
	}
	waitConverged(t, leader, leader, moved)
	if s := moved.fsm.Stats(); s.Topics != 6 {
		t.Fatalf("moved node has %d topics, want 6", s.Topics)
	}
}
