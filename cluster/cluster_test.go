package cluster_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/raftnode"
	"github.com/cohortlabs/cohort/rpc"
	"github.com/cohortlabs/cohort/server"
)

var waitFor = testcluster.WaitFor

func start(t *testing.T, size int, mod func(i int, c *cluster.Config)) *testcluster.Cluster {
	t.Helper()
	return testcluster.Start(t, size, testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Cluster: mod})
}

func voters(t *testing.T, n *raftnode.Node) []string {
	t.Helper()
	c, err := n.Configuration()
	if err != nil {
		t.Fatalf("configuration of %s: %v", n.ID(), err)
	}
	var out []string
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out
}

func suffrage(t *testing.T, n *raftnode.Node, id string) (raft.ServerSuffrage, bool) {
	t.Helper()
	c, err := n.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers {
		if string(s.ID) == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

func follower(c *testcluster.Cluster, leader int) int {
	for i := range c.Nodes {
		if i != leader && c.Live(i) {
			return i
		}
	}
	return -1
}

func TestMultiNode_BootstrapExpect_FormsOneClusterAndRegistersEveryNode(t *testing.T) {
	c := start(t, 3, nil)
	leader := c.Leader()
	for _, n := range c.Nodes {
		waitFor(t, 10*time.Second, n.ID+" sees three voters", func() (bool, string) {
			got := voters(t, n.Node)
			return slices.Equal(got, []string{"n1", "n2", "n3"}), fmt.Sprintf("voters %v", got)
		})
		if n.Node.HadExistingState() {
			t.Fatalf("%s reports existing state on first start", n.ID)
		}
	}
	// Every node registers its gRPC address through the leader.
	waitFor(t, 20*time.Second, "all three nodes in every node registry", func() (bool, string) {
		for _, n := range c.Nodes {
			reg := n.FSM.Nodes()
			if len(reg) != 3 {
				return false, fmt.Sprintf("%s's registry: %+v", n.ID, reg)
			}
			for i, e := range reg {
				want := c.Nodes[i]
				if e.ID != want.ID || e.GRPCAddress != c.Addr(i) || e.RaftAddress != want.Node.RaftAddress() || e.MaxCommandVersion != fsm.CommandVersion {
					return false, fmt.Sprintf("%s's registry entry %+v, want %s %s %s applying rules %d", n.ID, e, want.ID, c.Addr(i), want.Node.RaftAddress(), fsm.CommandVersion)
				}
			}
			if !n.Cluster.Registered() || !n.Cluster.FormationDone() {
				return false, n.ID + " not registered or formed yet"
			}
		}
		return true, ""
	})
	for _, n := range c.Nodes {
		if got := n.Cluster.LeaderGRPCAddress(); got != c.Addr(leader) {
			t.Fatalf("%s: leader gRPC address %q, want %q", n.ID, got, c.Addr(leader))
		}
	}
	// Every server said it applies this binary's rules: the leader writes
	// under them.
	waitFor(t, 10*time.Second, "the leader to write under this binary's command rules", func() (bool, string) {
		got := c.Nodes[leader].Node.CommandRules()
		return got == fsm.CommandVersion, fmt.Sprintf("rules %d", got)
	})
}

// Join addresses that are host names (localhost), as a headless service's
// are, go through the resolver rather than IP literals.
func TestMultiNode_BootstrapExpect_JoinByHostName(t *testing.T) {
	c := start(t, 3, func(_ int, cc *cluster.Config) {
		named := make([]string, len(cc.Join))
		for i, j := range cc.Join {
			named[i] = strings.Replace(j, "127.0.0.1", "localhost", 1)
		}
		cc.Join = named
	})
	for _, n := range c.Nodes {
		waitFor(t, 10*time.Second, n.ID+" sees three voters", func() (bool, string) {
			got := voters(t, n.Node)
			return slices.Equal(got, []string{"n1", "n2", "n3"}), fmt.Sprintf("voters %v", got)
		})
	}
}

// A follower restarted from its data dir on another raft address, as a
// Kubernetes pod recreated with a new IP would be, hears from no leader:
// it registers its new address through the join addresses, the leader
// moves it in the configuration (keeping it a voter), and it catches up.
func TestMultiNode_NewRaftAddress_LeaderFollowsIt(t *testing.T) {
	c := start(t, 3, nil)
	leader := c.Leader()
	f := follower(c, leader)
	id := c.Nodes[f].ID
	oldAddr := c.Nodes[f].Node.RaftAddress()
	c.Kill(f)
	c.RestartWith(f, func(cfg *server.Config) { cfg.Raft.RaftBind = "127.0.0.1:0" })
	newAddr := c.Nodes[f].Node.RaftAddress()
	if newAddr == oldAddr {
		t.Fatalf("the restarted node kept raft address %s", oldAddr)
	}
	waitFor(t, 30*time.Second, "the leader to move the server to its new address", func() (bool, string) {
		conf, err := c.Nodes[leader].Node.Configuration()
		if err != nil {
			return false, err.Error()
		}
		for _, s := range conf.Servers {
			if string(s.ID) == id {
				return string(s.Address) == newAddr && s.Suffrage == raft.Voter, fmt.Sprintf("%s at %s (%v)", s.ID, s.Address, s.Suffrage)
			}
		}
		return false, "server missing from the configuration"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Topics(leader).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "after-move", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the moved node to catch up", func() (bool, string) {
		got := c.Nodes[f].FSM.Stats().Topics
		return got == 1, fmt.Sprintf("%d topics", got)
	})
	// The leader stops first, gracefully, so that it never replicates to a
	// stopped node. hashicorp/raft v1.8.0 logs a failed pipelined append
	// with the follower's address read without the lock it is written
	// under (pipelineSend reads followerReplication.peer; the move to the
	// new address wrote it under peerLock): the race detector reports that
	// read when the moved node stops first while entries go to it, as
	// happened once in CI.
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if err := c.Nodes[leader].Shutdown(stopCtx); err != nil {
		t.Fatalf("stop the leader: %v", err)
	}
}

// The membership operations through a follower's gRPC service (so every
// call is forwarded to the leader, and demoting the leader is forwarded on
// to the next one), idempotent, with refusals as ErrorInfo reasons.
func TestMultiNode_Membership_JoinPromoteDemoteRemove_IdempotentAndSafe(t *testing.T) {
	c := start(t, 3, nil)
	leader := c.Leader()
	f := follower(c, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := cohortv1.NewClusterServiceClient(c.Conn(f))

	// A fourth node joins as a non-voter and stays one.
	n4 := c.Add("n4", func(cc *cluster.Config) { cc.Join = []string{c.Addr(f)}; cc.JoinAsNonvoter = true })
	waitFor(t, 20*time.Second, "n4 a non-voter", func() (bool, string) {
		s, ok := suffrage(t, c.Nodes[leader].Node, "n4")
		return ok && s == raft.Nonvoter, "not yet"
	})

	// Adding it again with the same address changes nothing; another address conflicts.
	resp, err := cl.AddNonvoter(ctx, &cohortv1.AddNonvoterRequest{NodeId: "n4", RaftAddress: n4.Node.RaftAddress()})
	if err != nil || resp.GetChanged() {
		t.Fatalf("repeated add-nonvoter: %v, %v", resp, err)
	}
	_, err = cl.AddNonvoter(ctx, &cohortv1.AddNonvoterRequest{NodeId: "n4", RaftAddress: "127.0.0.1:1"})
	if status.Code(err) != codes.FailedPrecondition || rpc.Reason(err) != "CONFIGURATION_CONFLICT" {
		t.Fatalf("add-nonvoter with another address: %v (reason %q), want FailedPrecondition CONFIGURATION_CONFLICT", err, rpc.Reason(err))
	}

	// Promote, twice.
	waitFor(t, 20*time.Second, "promote n4", func() (bool, string) {
		r, err := cl.Promote(ctx, &cohortv1.PromoteRequest{NodeId: "n4"})
		return err == nil && r.GetChanged(), fmt.Sprint(r, err)
	})
	if r, err := cl.Promote(ctx, &cohortv1.PromoteRequest{NodeId: "n4"}); err != nil || r.GetChanged() {
		t.Fatalf("repeated promote: %v, %v", r, err)
	}

	// Demoting the leader moves leadership first, then demotes it.
	oldIdx := leader
	old := c.Nodes[leader].ID
	r, err := cl.Demote(ctx, &cohortv1.DemoteRequest{NodeId: old})
	if err != nil || !r.GetChanged() {
		t.Fatalf("demote the leader: %v, %v", r, err)
	}
	leader = c.Leader()
	if leader < 0 || c.Nodes[leader].ID == old {
		t.Fatalf("%s still leads after its demotion (leader index %d)", old, leader)
	}
	if s, _ := suffrage(t, c.Nodes[leader].Node, old); s != raft.Nonvoter {
		t.Fatalf("%s is still a voter", old)
	}

	// Remove the demoted node: it notices and reports itself removed.
	r2, err := cl.RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: old})
	if err != nil || !r2.GetChanged() {
		t.Fatalf("remove %s: %v, %v", old, r2, err)
	}
	select {
	case <-c.Nodes[oldIdx].Cluster.Removed():
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not notice its removal", old)
	}
	if r, err := cl.RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: old}); err != nil || r.GetChanged() {
		t.Fatalf("repeated remove: %v, %v", r, err)
	}
	_, err = cl.RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: "nobody"})
	if status.Code(err) != codes.NotFound || rpc.Reason(err) != "UNKNOWN_SERVER" {
		t.Fatalf("remove an unknown server: %v (reason %q), want NotFound UNKNOWN_SERVER", err, rpc.Reason(err))
	}

	// add-voter of a fresh node waits for it to catch up, then promotes it.
	n5 := c.Add("n5", nil)
	r3, err := cl.AddVoter(ctx, &cohortv1.AddVoterRequest{NodeId: "n5", RaftAddress: n5.Node.RaftAddress(), GrpcAddress: n5.Cluster.GRPCAddress()})
	if err != nil || !r3.GetChanged() {
		t.Fatalf("add-voter n5: %v, %v", r3, err)
	}
	if s, _ := suffrage(t, c.Nodes[leader].Node, "n5"); s != raft.Voter {
		t.Fatal("n5 is not a voter after add-voter")
	}
	st, err := cl.Status(ctx, &cohortv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetServers()) != 4 || st.GetLeaderId() != c.Nodes[leader].ID {
		t.Fatalf("status: %v", st)
	}
}

// add-voter of a server that never catches up (nothing answers at its
// address) fails when the call's deadline passes and leaves the
// configuration as it was, instead of a non-voter that never catches up.
func TestMultiNode_AddVoterNeverCatchesUp_RemovedAgain(t *testing.T) {
	c := start(t, 3, nil)
	leader := c.Leader()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cl := cohortv1.NewClusterServiceClient(c.Conn(leader))
	_, err = cl.AddVoter(ctx, &cohortv1.AddVoterRequest{NodeId: "ghost", RaftAddress: addr, GrpcAddress: addr})
	if err == nil || !strings.Contains(err.Error(), "removed again") {
		t.Fatalf("add-voter of a dead server: %v, want an error saying it was removed again", err)
	}
	if _, ok := suffrage(t, c.Nodes[c.Leader()].Node, "ghost"); ok {
		t.Fatal("the server add-voter could not promote is still in the configuration")
	}
}
