package raftnode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func clusterClient(t *testing.T, tn *testNode) cohortv1.ClusterServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(tn.lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cohortv1.NewClusterServiceClient(conn)
}

func suffrage(t *testing.T, n *Node, id string) (raft.ServerSuffrage, bool) {
	t.Helper()
	c, err := n.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	s, ok := findServer(c, id)
	return s.Suffrage, ok
}

// Test_MultiNode_Membership_JoinPromoteDemoteRemove_IdempotentAndSafe runs
// the membership operations in-process, through a follower's gRPC service
// (so every call is forwarded to the leader).
func Test_MultiNode_Membership_JoinPromoteDemoteRemove_IdempotentAndSafe(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.leader()
	var follower *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := clusterClient(t, follower)

	// A fourth node joins as a non-voter and stays one.
	n4 := startTestNode(t, Config{
		NodeID: "n4", DataDir: t.TempDir(), RaftBind: "127.0.0.1:0", Join: []string{follower.lis.Addr().String()},
		JoinAsNonvoter: true, PollInterval: 50 * time.Millisecond, Logger: testLogger(),
	}, nil)
	waitFor(t, 20*time.Second, "n4 a non-voter", func() (bool, string) {
		s, ok := suffrage(t, leader.node, "n4")
		return ok && s == raft.Nonvoter, "not yet"
	})

	// Adding it again with the same address changes nothing; another address conflicts.
	resp, err := cl.AddNonvoter(ctx, &cohortv1.AddNonvoterRequest{NodeId: "n4", RaftAddress: n4.node.RaftAddress()})
	if err != nil || resp.GetChanged() {
		t.Fatalf("repeated add-nonvoter: %v, %v", resp, err)
	}
	if _, err := cl.AddNonvoter(ctx, &cohortv1.AddNonvoterRequest{NodeId: "n4", RaftAddress: "127.0.0.1:1"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("add-nonvoter with another address: %v, want FailedPrecondition", err)
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
	old := leader.node.ID()
	r, err := cl.Demote(ctx, &cohortv1.DemoteRequest{NodeId: old})
	if err != nil || !r.GetChanged() {
		t.Fatalf("demote the leader: %v, %v", r, err)
	}
	newLeader := c.leader(append(slices.Clone(c.nodes), n4)...)
	if newLeader.node.ID() == old {
		t.Fatalf("%s still leads after its demotion", old)
	}
	if s, _ := suffrage(t, newLeader.node, old); s != raft.Nonvoter {
		t.Fatalf("%s is still a voter", old)
	}

	// Remove the demoted node: it notices and reports itself removed.
	r2, err := cl.RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: old})
	if err != nil || !r2.GetChanged() {
		t.Fatalf("remove %s: %v, %v", old, r2, err)
	}
	select {
	case <-leader.node.Removed():
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not notice its removal", old)
	}
	if r, err := cl.RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: old}); err != nil || r.GetChanged() {
		t.Fatalf("repeated remove: %v, %v", r, err)
	}
	if _, err := cl.RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: "nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("remove an unknown server: %v, want NotFound", err)
	}

	// add-voter of a fresh node waits for it to catch up, then promotes it.
	n5 := startTestNode(t, Config{NodeID: "n5", DataDir: t.TempDir(), RaftBind: "127.0.0.1:0", PollInterval: 50 * time.Millisecond, Logger: testLogger()}, nil)
	r3, err := cl.AddVoter(ctx, &cohortv1.AddVoterRequest{NodeId: "n5", RaftAddress: n5.node.RaftAddress(), GrpcAddress: n5.lis.Addr().String()})
	if err != nil || !r3.GetChanged() {
		t.Fatalf("add-voter n5: %v, %v", r3, err)
	}
	if s, _ := suffrage(t, newLeader.node, "n5"); s != raft.Voter {
		t.Fatal("n5 is not a voter after add-voter")
	}
	st, err := cl.Status(ctx, &cohortv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetServers()) != 4 || st.GetLeaderId() != newLeader.node.ID() {
		t.Fatalf("status: %v", st)
	}
}
