package coordinator_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/server"
)

// budgetCluster is a three-node cluster whose nodes are configured with b.
func budgetCluster(t *testing.T, b fsm.Budgets) *testcluster.Cluster {
	t.Helper()
	cfg := testcluster.DefaultCoordinator()
	cfg.Budgets = b
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	testcluster.WaitFor(t, 10*time.Second, "every replica holds the configured budgets", func() (bool, string) {
		for _, n := range c.Nodes {
			if got := n.FSM.Budgets(); got != b {
				return false, n.ID + " holds " + fmtBudgets(got)
			}
		}
		return true, ""
	})
	return c
}

func fmtBudgets(b fsm.Budgets) string {
	var s strings.Builder
	for _, f := range fsm.BudgetFields() {
		s.WriteString(f.Name + "=" + strconv.FormatInt(*f.Value(&b), 10) + " ")
	}
	return s.String()
}

// Work the FSM would refuse is answered by the leader without a log entry:
// commits that are fenced or name no partition it would store, and joins
// and topic changes over a budget. The reproduction: 40 refused
// commits of 3.9 MiB grew the data directory by 176 MiB.
func TestBudgets_RefusedWorkNeverReachesTheLog(t *testing.T) {
	b := fsm.DefaultBudgets()
	b.Topics, b.SubscribedPartitionsPerGroup = 2, 8
	c := budgetCluster(t, b)
	ctx := testCtx(t)
	createTopic(t, c, "t", 6)
	createTopic(t, c, "u", 6)
	a := newMember(t, c, "g", "t")
	rebalance(t, ctx, a)

	leader := c.Nodes[c.Leader()]
	last := leader.Node.LastIndex()
	refused := func(what string, err error, wantReason string) {
		t.Helper()
		if reason(err) != wantReason {
			t.Fatalf("%s: %v, want %s", what, err, wantReason)
		}
		if got := leader.Node.LastIndex(); got != last {
			t.Fatalf("%s was refused but the log grew from %d to %d", what, last, got)
		}
	}
	big := strings.Repeat("x", 1<<20)
	commit := func(gen int32, member string, topic string, parts ...int32) (*cohortv1.OffsetCommitResponse, error) {
		req := &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: gen, MemberId: member}
		for _, p := range parts {
			req.Offsets = append(req.Offsets, &cohortv1.OffsetCommitPartition{Topic: topic, Partition: p, Offset: 1, Metadata: big[:1000]})
		}
		return c.Groups(c.Leader()).OffsetCommit(ctx, req)
	}
	_, err := commit(a.generation+1, a.id, "t", 0)
	refused("a commit of a future generation", err, "ILLEGAL_GENERATION")
	_, err = commit(a.generation, "stranger", "t", 0)
	refused("a commit by a stranger", err, "UNKNOWN_MEMBER_ID")
	resp, err := commit(a.generation, a.id, "nope", 0, 1, 2)
	if err != nil || resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("a commit to a topic that does not exist: %v %v", resp, err)
	}
	refused("a commit of only unknown partitions", nil, "")

	// Over budget: a fourth topic, a join subscribing to 12 partitions.
	_, err = c.Topics(c.Leader()).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "v", Partitions: 1})
	refused("a topic over the topics budget", err, "BUDGET_EXCEEDED")
	if !strings.Contains(err.Error(), "budget topics") {
		t.Fatalf("the refusal %q does not name the budget", err)
	}
	greedy := newMember(t, c, "g", "t", "u")
	greedy.node = c.Leader()
	greedy.id = "" // the first round trip hands out an ID without a log entry
	err = greedy.tryJoin(ctx)
	refused("a join subscribing the group to 12 partitions", err, "BUDGET_EXCEEDED")
	if !strings.Contains(err.Error(), "subscribed-partitions-per-group") || !strings.Contains(err.Error(), "12") {
		t.Fatalf("the refusal %q does not name the budget and the value", err)
	}

	// What fits still goes through the log.
	if resp, err := commit(a.generation, a.id, "t", 0); err != nil || resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
		t.Fatalf("a valid commit: %v %v", resp, err)
	}
	if leader.Node.LastIndex() == last {
		t.Fatal("a valid commit did not reach the log")
	}
}

// Pending members (handed an ID, not yet joined) count toward the group's
// size, and the leader keeps a bounded number of them.
func TestBudgets_PendingMembersAreBounded(t *testing.T) {
	cfg := testcluster.DefaultCoordinator()
	cfg.Budgets.MembersPerGroup = 2
	cfg.MaxPendingMembers = 3
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	createTopic(t, c, "t", 2)
	ctx := testCtx(t)
	first := func(group string) error {
		_, err := c.Groups(c.Leader()).JoinGroup(ctx, newMember(t, c, group, "t").joinRequest())
		return err
	}
	for range 2 {
		if err := first("g"); reason(err) != "MEMBER_ID_REQUIRED" {
			t.Fatalf("a newcomer's first join: %v", err)
		}
	}
	if err := first("g"); reason(err) != "GROUP_MAX_SIZE_REACHED" || !strings.Contains(err.Error(), "members-per-group") {
		t.Fatalf("a third newcomer to a group of two pending: %v, want GROUP_MAX_SIZE_REACHED naming the budget", err)
	}
	if err := first("h"); reason(err) != "MEMBER_ID_REQUIRED" {
		t.Fatalf("a newcomer to another group: %v", err)
	}
	if err := first("i"); reason(err) != "COORDINATOR_NOT_AVAILABLE" {
		t.Fatalf("a fourth pending member over --max-pending-members 3: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
}

// The budgets are the leader's configuration, made replicated state by a
// SetBudgets entry: when every node is restarted with other budgets, the
// next leader writes them.
func TestBudgets_NewLeaderAdoptsItsConfiguredBudgets(t *testing.T) {
	b := fsm.DefaultBudgets()
	c := budgetCluster(t, b)
	b.Groups = 7
	for i := range c.Nodes {
		c.Kill(i)
		c.RestartWith(i, func(cfg *server.Config) { cfg.Coordinator.Budgets = b })
		c.WaitServing()
	}
	testcluster.WaitFor(t, 20*time.Second, "the new budgets replicated", func() (bool, string) {
		for _, n := range c.Nodes {
			if got := n.FSM.Budgets(); got != b {
				return false, n.ID + ": " + fmtBudgets(got)
			}
		}
		return true, ""
	})
}

// A request's list of members, groups or states is bounded by what can
// exist: a LeaveGroup naming more members than a group may hold, a
// DeleteGroups naming more groups than the cluster may hold (each becomes
// one log entry that every replica applies and replays), and a ListGroups
// filter naming more states than there are (matched against every group
// under the state's read lock) are refused before any work. Lists at the
// bound are served.
func TestBudgets_RequestListsBoundedByWhatCanExist(t *testing.T) {
	b := fsm.DefaultBudgets()
	b.Groups, b.MembersPerGroup = 3, 4
	c := budgetCluster(t, b)
	ctx := testCtx(t)
	createTopic(t, c, "t", 6)
	a := newMember(t, c, "g", "t")
	rebalance(t, ctx, a)
	leader := c.Nodes[c.Leader()]
	groups := c.Groups(c.Leader())

	refs := func(n int) []*cohortv1.LeaveMember {
		var out []*cohortv1.LeaveMember
		for i := range n {
			out = append(out, &cohortv1.LeaveMember{MemberId: "stranger-" + strconv.Itoa(i)})
		}
		return out
	}
	last := leader.Node.LastIndex()
	refused := func(what string, err error, says string) {
		t.Helper()
		if reason(err) != "INVALID_ARGUMENT" || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: %v, want INVALID_ARGUMENT naming %q", what, err, says)
		}
		if got := leader.Node.LastIndex(); got != last {
			t.Fatalf("%s was refused but the log grew from %d to %d", what, last, got)
		}
	}
	_, err := groups.LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: append(refs(4), &cohortv1.LeaveMember{MemberId: a.id})})
	refused("a leave naming 5 members where a group holds 4", err, "members-per-group budget")
	_, err = groups.DeleteGroups(ctx, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"g", "h", "i", "j"}})
	refused("a delete naming 4 groups where the cluster holds 3", err, "groups budget")
	states := []string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Reconciling"}
	_, err = groups.ListGroups(ctx, &cohortv1.ListGroupsRequest{States: append(states, "Stable")})
	refused("a states filter of 6", err, "states names 6 states")

	// The member was not removed, the group not deleted.
	if err := a.heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat after the refused leave and delete: %v", err)
	}
	// At the bounds the calls are served.
	listed, err := groups.ListGroups(ctx, &cohortv1.ListGroupsRequest{States: states})
	if err != nil || len(listed.GetGroups()) != 1 || listed.GetGroups()[0].GetGroupId() != "g" {
		t.Fatalf("a filter naming every state: %v %v, want group g", listed, err)
	}
	left, err := groups.LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: refs(4)})
	if err != nil || len(left.GetMembers()) != 4 {
		t.Fatalf("a leave naming 4 strangers: %v %v, want an answer for each", left, err)
	}
	deleted, err := groups.DeleteGroups(ctx, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"h", "i", "j"}})
	if err != nil || len(deleted.GetGroups()) != 3 {
		t.Fatalf("a delete naming 3 groups: %v %v, want an answer for each", deleted, err)
	}
}
