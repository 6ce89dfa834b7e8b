package ops

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// groupCalls makes a consumer group's calls by hand, one request at a
// time, so that a test decides who joins when and what each is told.
type groupCalls struct {
	t            *testing.T
	gc           cohortv1.GroupCoordinatorClient
	endpoints    []string
	group, topic string
}

func newGroupCalls(t *testing.T, endpoints []string, group, topic string) *groupCalls {
	conn, err := grpc.NewClient(endpoints[0], client.Credentials{}.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &groupCalls{t: t, gc: cohortv1.NewGroupCoordinatorClient(conn), endpoints: endpoints, group: group, topic: topic}
}

type joinResult struct {
	resp *cohortv1.JoinGroupResponse
	err  error
}

// joinAsync sends a JoinGroup (a new dynamic member's two: the first is
// answered MEMBER_ID_REQUIRED with its ID) and delivers the answer, which
// waits for the join barrier.
func (g *groupCalls) joinAsync(memberID, instance string) <-chan joinResult {
	out := make(chan joinResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		req := &cohortv1.JoinGroupRequest{GroupId: g.group, MemberId: memberID, InstanceId: instance, ProtocolType: "consumer",
			Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, Topics: []string{g.topic},
			SessionTimeoutMs: 30000, RebalanceTimeoutMs: 20000}
		resp, err := g.gc.JoinGroup(ctx, req)
		if id := assignedMemberID(err); id != "" && memberID == "" && instance == "" {
			req.MemberId = id
			resp, err = g.gc.JoinGroup(ctx, req)
		}
		out <- joinResult{resp, err}
	}()
	return out
}

// joined waits for a join's answer and fails the test on an error.
func (g *groupCalls) joined(ch <-chan joinResult, who string) *cohortv1.JoinGroupResponse {
	g.t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			g.t.Fatalf("%s's JoinGroup: %v", who, r.err)
		}
		return r.resp
	case <-time.After(60 * time.Second):
		g.t.Fatalf("%s's JoinGroup not answered in 60 s", who)
		return nil
	}
}

// assignedMemberID is the member ID a MEMBER_ID_REQUIRED answer hands out.
func assignedMemberID(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == "MEMBER_ID_REQUIRED" {
			return ei.GetMetadata()["member_id"]
		}
	}
	return ""
}

type syncResult struct {
	partitions []int32
	err        error
}

// syncAsync sends a SyncGroup with plan (member ID → partitions; nil from
// a follower) and delivers the caller's share.
func (g *groupCalls) syncAsync(gen int32, memberID, instance string, plan map[string][]int32) <-chan syncResult {
	out := make(chan syncResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		req := &cohortv1.SyncGroupRequest{GroupId: g.group, Generation: gen, MemberId: memberID, InstanceId: instance}
		for id, ps := range plan {
			req.Assignments = append(req.Assignments, &cohortv1.MemberAssignment{MemberId: id,
				Assignment: &cohortv1.Assignment{Topics: []*cohortv1.TopicPartitions{{Topic: g.topic, Partitions: ps}}}})
		}
		resp, err := g.gc.SyncGroup(ctx, req)
		var ps []int32
		for _, tp := range resp.GetAssignment().GetTopics() {
			ps = append(ps, tp.GetPartitions()...)
		}
		slices.Sort(ps)
		out <- syncResult{ps, err}
	}()
	return out
}

// synced waits for a sync's answer and checks the share.
func (g *groupCalls) synced(ch <-chan syncResult, who string, want ...int32) {
	g.t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || !slices.Equal(r.partitions, want) {
			g.t.Fatalf("%s's SyncGroup: %v %v, want partitions %v", who, r.partitions, r.err, want)
		}
	case <-time.After(60 * time.Second):
		g.t.Fatalf("%s's SyncGroup not answered in 60 s", who)
	}
}

// describe is the group as the leader knows it.
func (g *groupCalls) describe() *cohortv1.GroupDescription {
	g.t.Helper()
	d, err := describeGroup(g.endpoints, g.group, client.Credentials{})
	if err != nil {
		g.t.Fatal(err)
	}
	return d
}

// waitState waits until the group is in state with n members.
func (g *groupCalls) waitState(state string, n int) *cohortv1.GroupDescription {
	g.t.Helper()
	var d *cohortv1.GroupDescription
	proc.WaitFor(g.t, 20*time.Second, fmt.Sprintf("group %s %s with %d members", g.group, state, n), func() (bool, string) {
		var err error
		d, err = describeGroup(g.endpoints, g.group, client.Credentials{})
		if err != nil {
			return false, err.Error()
		}
		return d.GetState() == state && len(d.GetMembers()) == n, fmt.Sprintf("%s gen %d, %d members", d.GetState(), d.GetGeneration(), len(d.GetMembers()))
	})
	return d
}

// instanceHolders are the member IDs the group lists for instance.
func instanceHolders(d *cohortv1.GroupDescription, instance string) []string {
	var ids []string
	for _, m := range d.GetMembers() {
		if m.GetInstanceId() == instance {
			ids = append(ids, m.GetMemberId())
		}
	}
	return ids
}

// generation2WithStaticMember forms generation 1 with a dynamic leader
// alone (holding every partition) and generation 2 with the static member
// worker-1 joined beside it; it returns both member IDs.
func (g *groupCalls) generation2WithStaticMember() (leader, static string) {
	g.t.Helper()
	d1 := g.joined(g.joinAsync("", ""), "leader")
	leader = d1.GetMemberId()
	g.synced(g.syncAsync(d1.GetGeneration(), leader, "", map[string][]int32{leader: {0, 1, 2, 3}}), "leader", 0, 1, 2, 3)
	s1Join := g.joinAsync("", "worker-1")
	g.waitState("PreparingRebalance", 2)
	d2 := g.joined(g.joinAsync(leader, ""), "leader")
	s1 := g.joined(s1Join, "worker-1")
	if d2.GetLeaderId() != leader || d2.GetGeneration() != 2 || len(d2.GetMembers()) != 2 {
		g.t.Fatalf("generation 2 answer %v", d2)
	}
	return leader, s1.GetMemberId()
}

// checkFenced sends every member request the replaced incarnation could
// make with its old member ID: each must be FENCED_INSTANCE_ID (not
// UNKNOWN_MEMBER_ID, which would have it rejoin and fence its successor).
func (g *groupCalls) checkFenced(gen int32, oldID, instance string) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, hbErr := g.gc.Heartbeat(ctx, &cohortv1.HeartbeatRequest{GroupId: g.group, Generation: gen, MemberId: oldID, InstanceId: instance})
	_, commitErr := g.gc.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: g.group, Generation: gen, MemberId: oldID, InstanceId: instance,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: g.topic, Partition: 0, Offset: 99}}})
	_, syncErr := g.gc.SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: g.group, Generation: gen, MemberId: oldID, InstanceId: instance})
	_, joinErr := g.gc.JoinGroup(ctx, &cohortv1.JoinGroupRequest{GroupId: g.group, MemberId: oldID, InstanceId: instance, ProtocolType: "consumer",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}, Topics: []string{g.topic}, SessionTimeoutMs: 30000, RebalanceTimeoutMs: 20000})
	for call, err := range map[string]error{"Heartbeat": hbErr, "OffsetCommit": commitErr, "SyncGroup": syncErr, "JoinGroup": joinErr} {
		if r := client.Reason(err); r != "FENCED_INSTANCE_ID" {
			g.t.Errorf("the replaced member %s's %s: %v (reason %q), want FENCED_INSTANCE_ID", oldID, call, err, r)
		}
	}
	if got, err := fetchOffsets(g.endpoints, g.group, client.Credentials{}); err != nil || got[0] == 99 {
		g.t.Errorf("offsets after the replaced member's commit: %v %v: its commit was stored", got, err)
	}
	if g.t.Failed() {
		g.t.FailNow()
	}
}

// checkComplete checks that the group is Stable in gen with the members
// ids, each holding what want says, and every partition of the topic
// assigned once.
func (g *groupCalls) checkComplete(gen int32, leader string, want map[string][]int32) {
	g.t.Helper()
	d := g.waitState("Stable", len(want))
	if d.GetGeneration() != gen || d.GetLeaderId() != leader {
		g.t.Fatalf("group at generation %d led by %s, want generation %d led by %s", d.GetGeneration(), d.GetLeaderId(), gen, leader)
	}
	var all []int32
	for _, m := range d.GetMembers() {
		var ps []int32
		for _, tp := range m.GetAssignment().GetTopics() {
			ps = append(ps, tp.GetPartitions()...)
		}
		slices.Sort(ps)
		w, ok := want[m.GetMemberId()]
		if !ok || !slices.Equal(ps, w) {
			g.t.Fatalf("member %s (instance %q) holds %v, want %v (a member of %v)", m.GetMemberId(), m.GetInstanceId(), ps, w, want)
		}
		all = append(all, ps...)
	}
	slices.Sort(all)
	if !slices.Equal(all, []int32{0, 1, 2, 3}) {
		g.t.Fatalf("partitions assigned: %v, want each of 0..3 once", all)
	}
}

// TestProcess_StaticMemberReplacedDuringRebalance_OneMemberOldIDFenced: a
// static member is replaced by a new process with its instance ID while
// the group prepares a rebalance (a third member joined, the static one
// has not rejoined yet). The replacement takes its place at the barrier:
// the group never lists two members for the instance, the old member ID's
// Heartbeat, OffsetCommit, SyncGroup and JoinGroup are FENCED_INSTANCE_ID,
// the barrier completes once the leader rejoins with the replacement
// counted as joined, and the next generation's assignment covers every
// partition with the replacement in it.
func TestProcess_StaticMemberReplacedDuringRebalance_OneMemberOldIDFenced(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "4")
	g := newGroupCalls(t, c.grpcAddrs("n1", "n2", "n3"), "billing", "orders")

	leader, old := g.generation2WithStaticMember()
	s1Sync := g.syncAsync(2, old, "worker-1", nil)
	g.synced(g.syncAsync(2, leader, "", map[string][]int32{leader: {0, 1}, old: {2, 3}}), "leader", 0, 1)
	g.synced(s1Sync, "worker-1", 2, 3)

	// A third member starts a rebalance; before the static member rejoins,
	// a new process with its instance ID joins.
	eJoin := g.joinAsync("", "")
	g.waitState("PreparingRebalance", 3)
	s2Join := g.joinAsync("", "worker-1")
	var replacement string
	proc.WaitFor(t, 20*time.Second, "worker-1 held by a new member ID", func() (bool, string) {
		d := g.describe()
		ids := instanceHolders(d, "worker-1")
		if len(ids) == 1 && ids[0] != old {
			replacement = ids[0]
		}
		return replacement != "", fmt.Sprintf("%s with %d members, worker-1 held by %v", d.GetState(), len(d.GetMembers()), ids)
	})
	if d := g.describe(); d.GetState() != "PreparingRebalance" || len(d.GetMembers()) != 3 {
		t.Fatalf("after the replacement: %s with %d members, want PreparingRebalance with 3", d.GetState(), len(d.GetMembers()))
	}
	g.checkFenced(2, old, "worker-1")

	// The leader rejoins: the barrier completes with the replacement.
	d3 := g.joined(g.joinAsync(leader, ""), "leader")
	s2 := g.joined(s2Join, "worker-1's replacement")
	e := g.joined(eJoin, "third member")
	if d3.GetGeneration() != 3 || d3.GetLeaderId() != leader || s2.GetMemberId() != replacement || s2.GetGeneration() != 3 || e.GetGeneration() != 3 {
		t.Fatalf("generation 3 answers: leader %v, replacement %v, third %v", d3, s2, e)
	}
	var listed []string
	for _, m := range d3.GetMembers() {
		listed = append(listed, m.GetMemberId())
	}
	slices.Sort(listed)
	want := []string{leader, replacement, e.GetMemberId()}
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("the leader's member list %v, want %v", listed, want)
	}
	s2Sync := g.syncAsync(3, replacement, "worker-1", nil)
	eSync := g.syncAsync(3, e.GetMemberId(), "", nil)
	g.synced(g.syncAsync(3, leader, "", map[string][]int32{leader: {0, 1}, replacement: {2}, e.GetMemberId(): {3}}), "leader", 0, 1)
	g.synced(s2Sync, "worker-1's replacement", 2)
	g.synced(eSync, "third member", 3)
	g.checkComplete(3, leader, map[string][]int32{leader: {0, 1}, replacement: {2}, e.GetMemberId(): {3}})
	g.checkFenced(3, old, "worker-1")
}

// TestProcess_StaticGroupLeaderReplaced_ReplacementLeads: the group's
// leader is a static member, replaced by a new process with its instance
// ID while the group is Stable. The replacement takes over its member
// slot and its assignment without a rebalance, and the leadership: its
// join answer names it leader and lists the members, DescribeGroups
// names it, and at the next rebalance it is the one that gets the member
// list and whose plan the group takes. The old member ID is fenced.
func TestProcess_StaticGroupLeaderReplaced_ReplacementLeads(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "4")
	g := newGroupCalls(t, c.grpcAddrs("n1", "n2", "n3"), "billing", "orders")

	s1 := g.joined(g.joinAsync("", "worker-1"), "worker-1")
	old := s1.GetMemberId()
	if s1.GetLeaderId() != old {
		t.Fatalf("worker-1 alone is not the leader: %v", s1)
	}
	g.synced(g.syncAsync(1, old, "worker-1", map[string][]int32{old: {0, 1, 2, 3}}), "worker-1", 0, 1, 2, 3)
	otherJoin := g.joinAsync("", "")
	g.waitState("PreparingRebalance", 2)
	s1 = g.joined(g.joinAsync(old, "worker-1"), "worker-1")
	other := g.joined(otherJoin, "the other member").GetMemberId()
	if s1.GetLeaderId() != old || s1.GetGeneration() != 2 {
		t.Fatalf("generation 2 answer %v", s1)
	}
	otherSync := g.syncAsync(2, other, "", nil)
	g.synced(g.syncAsync(2, old, "worker-1", map[string][]int32{old: {0, 1}, other: {2, 3}}), "worker-1", 0, 1)
	g.synced(otherSync, "the other member", 2, 3)

	// The replacement joins a Stable group unchanged: no rebalance, and
	// the leadership is its.
	s2 := g.joined(g.joinAsync("", "worker-1"), "worker-1's replacement")
	replacement := s2.GetMemberId()
	if replacement == old || s2.GetGeneration() != 2 || s2.GetLeaderId() != replacement || len(s2.GetMembers()) != 2 {
		t.Fatalf("the replacement's join answer %v: want generation 2, led by itself (not %s), listing both members", s2, old)
	}
	g.synced(g.syncAsync(2, replacement, "worker-1", nil), "worker-1's replacement", 0, 1)
	g.checkComplete(2, replacement, map[string][]int32{replacement: {0, 1}, other: {2, 3}})
	if ids := instanceHolders(g.describe(), "worker-1"); !slices.Equal(ids, []string{replacement}) {
		t.Fatalf("worker-1 held by %v, want only %s", ids, replacement)
	}
	g.checkFenced(2, old, "worker-1")

	// The next rebalance: the replacement gets the member list and its
	// plan is the group's.
	thirdJoin := g.joinAsync("", "")
	g.waitState("PreparingRebalance", 3)
	otherRejoin := g.joinAsync(other, "")
	s2 = g.joined(g.joinAsync(replacement, "worker-1"), "worker-1's replacement")
	third := g.joined(thirdJoin, "third member").GetMemberId()
	g.joined(otherRejoin, "the other member")
	if s2.GetGeneration() != 3 || s2.GetLeaderId() != replacement || len(s2.GetMembers()) != 3 {
		t.Fatalf("generation 3 answer to the replacement %v: want it to lead and list 3 members", s2)
	}
	otherSync = g.syncAsync(3, other, "", nil)
	thirdSync := g.syncAsync(3, third, "", nil)
	plan := map[string][]int32{replacement: {0}, other: {1, 2}, third: {3}}
	g.synced(g.syncAsync(3, replacement, "worker-1", plan), "worker-1's replacement", 0)
	g.synced(otherSync, "the other member", 1, 2)
	g.synced(thirdSync, "third member", 3)
	g.checkComplete(3, replacement, plan)
}

// TestProcess_StaticMemberReplacedWhileCompletingRebalance_GroupCompletes:
// a static member is replaced after the join barrier completed, while the
// leader computes its plan from a member list that names the old member
// ID. The replacement starts the round again (command rules 3, as Kafka),
// so that plan is refused with REBALANCE_IN_PROGRESS, nothing is
// assigned to the old ID, and the old ID is fenced. The leader rejoins,
// gets a member list naming the replacement, and the group completes
// with it: one member per instance, every partition assigned.
func TestProcess_StaticMemberReplacedWhileCompletingRebalance_GroupCompletes(t *testing.T) {
	c := newCluster(t)
	c.waitCurrentRules(c.waitVotersAfterForm(3))
	c.mustCtl("topics", "create", "orders", "--partitions", "4")
	g := newGroupCalls(t, c.grpcAddrs("n1", "n2", "n3"), "billing", "orders")

	leader, old := g.generation2WithStaticMember()
	s1Sync := g.syncAsync(2, old, "worker-1", nil)
	g.waitState("CompletingRebalance", 2)

	s2Join := g.joinAsync("", "worker-1")
	var replacement string
	proc.WaitFor(t, 20*time.Second, "worker-1 held by a new member ID", func() (bool, string) {
		ids := instanceHolders(g.describe(), "worker-1")
		if len(ids) == 1 && ids[0] != old {
			replacement = ids[0]
		}
		return replacement != "", fmt.Sprint(ids)
	})
	select {
	case r := <-s1Sync:
		if client.Reason(r.err) != "FENCED_INSTANCE_ID" {
			t.Fatalf("the replaced member's parked SyncGroup: %v %v, want FENCED_INSTANCE_ID", r.partitions, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the replaced member's parked SyncGroup still waits after its replacement joined")
	}
	// The leader's plan from the old member list.
	r := <-g.syncAsync(2, leader, "", map[string][]int32{leader: {0, 1}, old: {2, 3}})
	if reason := client.Reason(r.err); reason != "REBALANCE_IN_PROGRESS" {
		t.Fatalf("the leader's plan naming the replaced member: %v %v, want REBALANCE_IN_PROGRESS (the replacement starts the round again)", r.partitions, r.err)
	}
	g.checkFenced(2, old, "worker-1")

	// The leader rejoins, as a client does after REBALANCE_IN_PROGRESS.
	lj := g.joined(g.joinAsync(leader, ""), "leader")
	s2 := g.joined(s2Join, "worker-1's replacement")
	gen := lj.GetGeneration()
	var listed []string
	for _, m := range lj.GetMembers() {
		listed = append(listed, m.GetMemberId())
	}
	slices.Sort(listed)
	want := []string{leader, replacement}
	slices.Sort(want)
	if lj.GetLeaderId() != leader || !slices.Equal(listed, want) || s2.GetMemberId() != replacement || s2.GetGeneration() != gen {
		t.Fatalf("after the leader rejoined: leader's answer %v, replacement's %v; want one generation listing %v", lj, s2, want)
	}
	s2Sync := g.syncAsync(gen, replacement, "worker-1", nil)
	plan := map[string][]int32{leader: {0, 1}, replacement: {2, 3}}
	g.synced(g.syncAsync(gen, leader, "", plan), "leader", 0, 1)
	g.synced(s2Sync, "worker-1's replacement", 2, 3)
	g.checkComplete(gen, leader, plan)
	g.checkFenced(gen, old, "worker-1")
}
