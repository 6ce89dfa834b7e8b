package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// replicaPlan is a server-side group as one replica's FSM holds it: the
// protocol, the generation and each member's partitions by instance ID
// ("topic/partition" sorted), or why it cannot be read.
func replicaPlan(c *testcluster.Cluster, i int, group string) (string, error) {
	n := c.Nodes[i]
	if !c.Live(i) {
		return "", fmt.Errorf("%s is down", n.ID)
	}
	g, ok := n.FSM.Group(group)
	if !ok {
		return "", fmt.Errorf("%s has no group %q", n.ID, group)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s generation %d %s:", g.ProtocolType, g.Generation, g.Protocol)
	members := g.Members.Slice()
	slices.SortFunc(members, func(x, y *fsm.Member) int { return strings.Compare(x.InstanceID, y.InstanceID) })
	for _, m := range members {
		var held []string
		for _, tp := range m.Assignment.Topics {
			for _, p := range tp.Partitions {
				held = append(held, fmt.Sprintf("%s/%d", tp.Topic, p))
			}
		}
		slices.Sort(held)
		fmt.Fprintf(&b, " %s=%v", m.InstanceID, held)
	}
	return b.String(), nil
}

// waitReplicas waits until every live replica holds want for group.
func waitReplicas(t *testing.T, c *testcluster.Cluster, group, want string) {
	t.Helper()
	testcluster.WaitFor(t, 20*time.Second, "every replica holds "+want, func() (bool, string) {
		var off []string
		for i := range c.Nodes {
			if !c.Live(i) {
				continue
			}
			got, err := replicaPlan(c, i, group)
			if err != nil || got != want {
				off = append(off, fmt.Sprintf("%s: %s %v", c.Nodes[i].ID, got, err))
			}
		}
		return len(off) == 0, strings.Join(off, "; ")
	})
}

// TestServerSide_RangeFallbackThroughRaftLog_EveryReplicaHoldsTheRangePlan:
// server-side members that each prefer a different assignor and share
// only range (sticky+range, roundrobin+range, consistent-hash+range) get
// range, computed by every replica's FSM as it applies the entry that
// closes the barrier: every replica holds the same plan, and it is the
// range plan (topic by topic, static members in instance-ID order; sticky
// or roundrobin would spread a and b differently). It stays so across a
// failover, on the restarted replica that replays the log, and in the
// next generation, computed under the new leader.
func TestServerSide_RangeFallbackThroughRaftLog_EveryReplicaHoldsTheRangePlan(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := c.Leader()
	for _, name := range []string{"a", "b"} {
		if _, err := c.Topics(leader).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: 3}); err != nil {
			t.Fatal(err)
		}
	}
	preferences := map[string][]string{"w1": {"sticky", "range"}, "w2": {"roundrobin", "range"}, "w3": {"consistent-hash", "range"}}
	// join sends instance's JoinGroup through node via; its answer waits
	// for the barrier.
	join := func(via int, instance, memberID string) <-chan *cohortv1.JoinGroupResponse {
		out := make(chan *cohortv1.JoinGroupResponse, 1)
		req := &cohortv1.JoinGroupRequest{GroupId: "g", MemberId: memberID, InstanceId: instance, ProtocolType: "server", Topics: []string{"a", "b"},
			SessionTimeoutMs: 30000, RebalanceTimeoutMs: 20000}
		for _, p := range preferences[instance] {
			req.Protocols = append(req.Protocols, &cohortv1.ProtocolMetadata{Name: p})
		}
		groups := c.Groups(via)
		go func() {
			resp, err := groups.JoinGroup(ctx, req)
			if err != nil {
				t.Errorf("%s's JoinGroup: %v", instance, err)
			}
			out <- resp
		}()
		return out
	}
	answered := func(ch <-chan *cohortv1.JoinGroupResponse, gen int32) *cohortv1.JoinGroupResponse {
		t.Helper()
		resp := <-ch
		if resp == nil {
			t.FailNow()
		}
		if resp.GetGeneration() != gen || resp.GetProtocol() != "range" {
			t.Fatalf("join answer %v, want generation %d with protocol range", resp, gen)
		}
		return resp
	}
	preparing := func(members int) {
		t.Helper()
		testcluster.WaitFor(t, 10*time.Second, "g preparing a rebalance", func() (bool, string) {
			d, err := c.Groups(c.Leader()).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
			if err != nil {
				return false, err.Error()
			}
			g := d.GetGroups()[0]
			return g.GetState() == "PreparingRebalance" && len(g.GetMembers()) == members, g.String()
		})
	}

	// w1 alone first (its own sticky), then w2: the barrier closes with
	// both, and only range is common to them. Through the followers, so
	// that the calls are forwarded as a client's would be.
	follower := (leader + 1) % 3
	first := <-join(follower, "w1", "")
	if first == nil {
		t.FailNow()
	}
	w2 := join(follower, "w2", "")
	preparing(2)
	w1 := answered(join(follower, "w1", first.GetMemberId()), 2)
	w2Resp := answered(w2, 2)
	if len(w1.GetMembers()) != 0 || len(w2Resp.GetMembers()) != 0 {
		t.Fatalf("a server-side leader got a member list: %v %v", w1, w2Resp)
	}
	gen2 := "server generation 2 range: w1=[a/0 a/1 b/0 b/1] w2=[a/2 b/2]"
	waitReplicas(t, c, "g", gen2)
	for _, r := range []*cohortv1.JoinGroupResponse{w1, w2Resp} {
		s, err := c.Groups(follower).SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "g", Generation: 2, MemberId: r.GetMemberId()})
		if err != nil || len(s.GetAssignment().GetTopics()) != 2 {
			t.Fatalf("%s's SyncGroup: %v %v", r.GetMemberId(), s, err)
		}
	}

	// The leader fails; the survivors and the restarted replica, which
	// replays the log, hold the same plan.
	c.Kill(leader)
	newLeader := c.WaitServing()
	waitReplicas(t, c, "g", gen2)
	c.Restart(leader)
	waitReplicas(t, c, "g", gen2)

	// Generation 3 under the new leader: w3 joins, w1 and w2 rejoin.
	via := (newLeader + 1) % 3
	w3 := join(via, "w3", "")
	preparing(3)
	w1Again := join(via, "w1", w1.GetMemberId())
	w2Again := join(via, "w2", w2Resp.GetMemberId())
	answered(w1Again, 3)
	answered(w2Again, 3)
	answered(w3, 3)
	waitReplicas(t, c, "g", "server generation 3 range: w1=[a/0 b/0] w2=[a/1 b/1] w3=[a/2 b/2]")
}
