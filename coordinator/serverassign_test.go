package coordinator_test

import (
	"context"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// TestServerSide_RefusesAssignorsTheFSMCannotRun: a server-side join naming
// cooperative-sticky or an unknown assignor is INCONSISTENT_GROUP_PROTOCOL
// before anything is proposed (the group is not created), and a server-side
// group leader's join answer lists no members.
func TestServerSide_RefusesAssignorsTheFSMCannotRun(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader := c.Leader()
	if _, err := c.Topics(leader).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	join := func(group string, protocols ...string) (*cohortv1.JoinGroupResponse, error) {
		r := &cohortv1.JoinGroupRequest{GroupId: group, InstanceId: "i-1", ProtocolType: "server", Topics: []string{"t"},
			SessionTimeoutMs: 2000, RebalanceTimeoutMs: 3000}
		for _, p := range protocols {
			r.Protocols = append(r.Protocols, &cohortv1.ProtocolMetadata{Name: p})
		}
		return c.Groups(leader).JoinGroup(ctx, r)
	}
	for _, protocols := range [][]string{{"cooperative-sticky"}, {"sticky", "cooperative-sticky"}, {"my-own"}} {
		_, err := join("refused", protocols...)
		if reason(err) != "INCONSISTENT_GROUP_PROTOCOL" {
			t.Fatalf("protocols %v: %v", protocols, err)
		}
	}
	d, err := c.Groups(leader).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"refused"}})
	if err != nil || d.GetGroups()[0].GetState() != "Dead" {
		t.Fatalf("refused joins created the group: %v %v", d, err)
	}
	// A static member joins at once (no MEMBER_ID_REQUIRED round trip); it is
	// the leader, and gets no member list: the FSM already assigned.
	resp, err := join("ok", "sticky")
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetLeaderId() != resp.GetMemberId() || len(resp.GetMembers()) != 0 || resp.GetProtocol() != "sticky" {
		t.Fatalf("join answer %v", resp)
	}
	s, err := c.Groups(leader).SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: "ok", Generation: resp.GetGeneration(), MemberId: resp.GetMemberId()})
	if err != nil || len(s.GetAssignment().GetTopics()) != 1 || len(s.GetAssignment().GetTopics()[0].GetPartitions()) != 4 {
		t.Fatalf("sync: %v %v", s, err)
	}
}
