package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// callbackLog records one member's rebalance callbacks.
type callbackLog struct {
	mu       sync.Mutex
	assigned []callbackEvent
	revoked  [][]TopicPartition
}

type callbackEvent struct {
	generation int32
	partitions []TopicPartition
}

func (l *callbackLog) config(cfg Config) Config {
	cfg.OnAssigned = func(_ context.Context, gen int32, a []TopicPartition) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.assigned = append(l.assigned, callbackEvent{gen, a})
	}
	cfg.OnRevoked = func(_ context.Context, r []TopicPartition) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.revoked = append(l.revoked, r)
	}
	return cfg
}

// reset forgets everything recorded so far.
func (l *callbackLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.assigned, l.revoked = nil, nil
}

func (l *callbackLog) get() ([]callbackEvent, [][]TopicPartition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.assigned), slices.Clone(l.revoked)
}

// settledOn reports whether every member is in one generation and together
// they hold each of the topic's partitions exactly once.
func settledOn(ms []*Member, partitions int) (int32, bool) {
	gen := ms[0].Generation()
	seen := map[TopicPartition]bool{}
	for _, m := range ms {
		if m.Generation() != gen || gen == NoGeneration {
			return 0, false
		}
		for _, tp := range m.Assignment() {
			if seen[tp] {
				return 0, false
			}
			seen[tp] = true
		}
	}
	return gen, len(seen) == partitions
}

// waitStable waits until the members have settled and stayed so (same
// generation) for a while: no follow-up rebalance is pending.
func waitStable(t *testing.T, what string, ms []*Member, partitions int) int32 {
	t.Helper()
	var gen int32
	var since time.Time
	testcluster.WaitFor(t, 25*time.Second, what, func() (bool, string) {
		g, ok := settledOn(ms, partitions)
		switch {
		case !ok:
			since = time.Time{}
			return false, "not settled"
		case g != gen || since.IsZero():
			gen, since = g, time.Now()
			return false, "settled, watching"
		}
		return time.Since(since) > 400*time.Millisecond, "settled, watching"
	})
	return gen
}

func createTopic(t *testing.T, ctx context.Context, endpoints []string, partitions int32) string {
	t.Helper()
	conn, err := Dial(ConnConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	name := fmt.Sprintf("topic-%d", time.Now().UnixNano())
	if _, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: partitions}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	return name
}

// dialCluster dials endpoints for the test's length.
func dialCluster(t *testing.T, endpoints []string) *Conn {
	t.Helper()
	conn, err := Dial(ConnConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestRealCluster_CooperativeSticky_EleventhMemberOnlyTakesWhatMoves: ten
// members share 60 partitions with cooperative-sticky; an eleventh joins.
// Round one withholds the five partitions that move (one from each of five
// members), round two hands them to the newcomer: the group converges in
// exactly two generations, only the moved partitions are revoked, the other
// 55 are never revoked, and no kept partition is ever re-assigned.
func TestRealCluster_CooperativeSticky_EleventhMemberOnlyTakesWhatMoves(t *testing.T) {
	const partitions = 60
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := createTopic(t, ctx, c.Addrs(), partitions)
	base := Config{
		Endpoints: c.Addrs(), GroupID: topic, Topics: []string{topic}, Protocols: []string{"cooperative-sticky"},
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 50 * time.Millisecond, RebalanceTimeout: 10 * time.Second,
	}
	var members []*Member
	logs := make([]*callbackLog, 11)
	start := func(i int) {
		logs[i] = &callbackLog{}
		cfg := logs[i].config(base)
		cfg.ClientID = fmt.Sprintf("c%02d", i)
		m, _ := startMember(t, cfg)
		members = append(members, m)
	}
	for i := range 10 {
		start(i)
	}
	g0 := waitStable(t, "ten members holding 6 partitions each", members, partitions)
	before := map[int][]TopicPartition{}
	for i, m := range members {
		before[i] = m.Assignment()
		if len(before[i]) != 6 {
			t.Fatalf("member %d holds %d partitions", i, len(before[i]))
		}
		logs[i].reset()
	}

	start(10)
	g := waitStable(t, "eleven members", members, partitions)
	if g != g0+2 {
		t.Fatalf("the join took generations %d → %d, want two", g0, g)
	}
	newcomer := members[10].Assignment()
	if len(newcomer) != 5 {
		t.Fatalf("newcomer holds %v", newcomer)
	}
	var moved []TopicPartition
	for i := range 10 {
		after := members[i].Assignment()
		lost := diffPartitions(before[i], after)
		if gained := diffPartitions(after, before[i]); len(gained) > 0 {
			t.Errorf("member %d gained %v", i, gained)
		}
		moved = append(moved, lost...)
		assigned, revoked := logs[i].get()
		var revokedAll []TopicPartition
		for _, r := range revoked {
			revokedAll = append(revokedAll, r...)
		}
		sortTopicPartitions(revokedAll)
		if !slices.Equal(revokedAll, lost) {
			t.Errorf("member %d: revoked %v, but lost %v (kept partitions must never be revoked)", i, revoked, lost)
		}
		for _, a := range assigned {
			if len(a.partitions) > 0 {
				t.Errorf("member %d was assigned %v in generation %d", i, a.partitions, a.generation)
			}
		}
	}
	sortTopicPartitions(moved)
	if len(moved) != 5 || !slices.Equal(moved, newcomer) {
		t.Fatalf("moved %v, newcomer holds %v", moved, newcomer)
	}
	// The newcomer got nothing in round one (withheld) and its five in
	// round two.
	assigned, revoked := logs[10].get()
	if len(revoked) != 0 || len(assigned) != 2 || assigned[0].generation != g0+1 || len(assigned[0].partitions) != 0 ||
		assigned[1].generation != g0+2 || !slices.Equal(assigned[1].partitions, newcomer) {
		t.Fatalf("newcomer callbacks: assigned %v revoked %v", assigned, revoked)
	}
}

// TestRealCluster_ServerSide_FailoverInTheMiddleOfTheRebalance: members
// with ServerSideAssignor "sticky" (no plan computed by any client). A
// fourth member joins and the leader node is killed while the join barrier
// is open; the group completes on the new leader in one generation, with
// the FSM's sticky plan (three moves, the minimum), identical on every
// replica.
func TestRealCluster_ServerSide_FailoverInTheMiddleOfTheRebalance(t *testing.T) {
	const partitions = 12
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := createTopic(t, ctx, c.Addrs(), partitions)
	conn := dialCluster(t, c.Addrs())
	base := Config{
		Endpoints: c.Addrs(), GroupID: topic, Topics: []string{topic}, ServerSideAssignor: "sticky",
		// Old members do not watch the group and heartbeat once a
		// second, so the barrier a join opens stays open long enough to
		// kill the leader inside it (watching, they rejoin within
		// milliseconds and the round is over before the kill).
		SessionTimeout: 8 * time.Second, HeartbeatInterval: time.Second, RebalanceTimeout: 15 * time.Second,
		DisableWatch: true,
	}
	var members []*Member
	start := func(i int) {
		cfg := base
		cfg.ClientID = fmt.Sprintf("c%d", i)
		m, _ := startMember(t, cfg)
		members = append(members, m)
	}
	for i := range 3 {
		start(i)
	}
	g0 := waitStable(t, "three server-side members", members, partitions)
	before := map[int][]TopicPartition{}
	for i, m := range members {
		before[i] = m.Assignment()
	}

	start(3)
	testcluster.WaitFor(t, 10*time.Second, "the join barrier to open", func() (bool, string) {
		resp, err := conn.Groups().DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{topic}})
		if err != nil {
			return false, err.Error()
		}
		d := resp.GetGroups()[0]
		return d.GetState() == "PreparingRebalance" && d.GetGeneration() == g0, fmt.Sprintf("%s at generation %d", d.GetState(), d.GetGeneration())
	})
	leader := c.Leader()
	killed := c.Nodes[leader].Server // Kill forgets the node's server; its FSM stays readable
	c.Kill(leader)
	// The test is about a failover inside the rebalance: the killed leader
	// must not have applied the round's completion, or the new leader only
	// had a finished generation to serve.
	if grp, ok := killed.FSM.Group(topic); !ok || grp.State != fsm.PreparingRebalance || grp.Generation != g0 {
		last := "no group"
		if ok {
			last = fmt.Sprintf("%s at generation %d", grp.State, grp.Generation)
		}
		t.Fatalf("the leader was killed after the rebalance it was meant to interrupt: it last applied %s, want PreparingRebalance at generation %d", last, g0)
	}
	c.WaitServing()

	g := waitStable(t, "four members after the failover", members, partitions)
	if g != g0+1 {
		t.Fatalf("generation %d → %d: the failover cost an extra rebalance", g0, g)
	}
	moves := 0
	for i := range 3 {
		after := members[i].Assignment()
		if len(after) != 3 || len(diffPartitions(after, before[i])) != 0 {
			t.Fatalf("member %d: %v → %v (sticky keeps a subset)", i, before[i], after)
		}
		moves += len(diffPartitions(before[i], after))
	}
	if moves != 3 || len(members[3].Assignment()) != 3 {
		t.Fatalf("moves %d, newcomer %v", moves, members[3].Assignment())
	}
	// Every live replica computed and stored the same plan.
	plans := map[string]string{}
	for i, n := range c.Nodes {
		if !c.Live(i) {
			continue
		}
		testcluster.WaitFor(t, 5*time.Second, "replica "+n.ID+" to apply the generation", func() (bool, string) {
			grp, ok := n.FSM.Group(topic)
			return ok && grp.Generation == g && grp.State == fsm.Stable, "behind"
		})
		grp, _ := n.FSM.Group(topic)
		if grp.ProtocolType != "server" || grp.Protocol != "sticky" {
			t.Fatalf("replica %s: protocol type %q protocol %q", n.ID, grp.ProtocolType, grp.Protocol)
		}
		plan := map[string][]fsm.TopicPartitions{}
		for _, m := range grp.Members.All() {
			plan[m.ID] = m.Assignment.Topics
		}
		plans[n.ID] = fmt.Sprint(slices.Sorted(maps.Keys(plan)), plan)
	}
	var first string
	for id, p := range plans {
		if first != "" && p != first {
			t.Fatalf("replicas disagree: %s has %s, another %s", id, p, first)
		}
		first = p
	}
}

// TestRealCluster_ServerSide_LeaderKilledBetweenJoinAndSync drives the
// protocol by hand: the FSM computes the plan in the entry that closes the
// barrier, the leader node dies before anyone syncs, and the new leader
// answers both SyncGroups (no assignments sent) from its own replica.
func TestRealCluster_ServerSide_LeaderKilledBetweenJoinAndSync(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := createTopic(t, ctx, c.Addrs(), 6)
	conn := dialCluster(t, c.Addrs())
	groups := conn.Groups()
	join := func(memberID string) (*cohortv1.JoinGroupResponse, error) {
		return groups.JoinGroup(ctx, &cohortv1.JoinGroupRequest{
			GroupId: topic, MemberId: memberID, ProtocolType: "server", Topics: []string{topic},
			Protocols:        []*cohortv1.ProtocolMetadata{{Name: "range"}},
			SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000,
		})
	}
	newID := func() string {
		_, err := join("")
		var perr *Error
		if !errors.As(err, &perr) || perr.Metadata["member_id"] == "" {
			t.Fatalf("join without ID: %v", err)
		}
		return perr.Metadata["member_id"]
	}
	a, b := newID(), newID()
	if _, err := join(a); err != nil { // alone: generation 1 at once
		t.Fatal(err)
	}
	// b joins (the barrier opens, b waits) and a rejoins: the barrier
	// closes in a's entry, which also stores the plan.
	bDone := make(chan *cohortv1.JoinGroupResponse, 1)
	go func() {
		resp, err := join(b)
		if err != nil {
			t.Errorf("join b: %v", err)
		}
		bDone <- resp
	}()
	testcluster.WaitFor(t, 10*time.Second, "b to join", func() (bool, string) {
		resp, err := groups.DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{topic}})
		return err == nil && len(resp.GetGroups()[0].GetMembers()) == 2, fmt.Sprint(err)
	})
	ra, err := join(a)
	if err != nil {
		t.Fatal(err)
	}
	rb := <-bDone
	if ra.GetGeneration() != 2 || rb.GetGeneration() != 2 || len(ra.GetMembers())+len(rb.GetMembers()) != 0 {
		t.Fatalf("join answers: %v / %v (a server-side leader gets no member list)", ra, rb)
	}

	c.Kill(c.Leader())
	c.WaitServing()
	got := map[string][]TopicPartition{}
	for _, id := range []string{a, b} {
		resp, err := groups.SyncGroup(ctx, &cohortv1.SyncGroupRequest{GroupId: topic, Generation: 2, MemberId: id})
		if err != nil {
			t.Fatalf("sync %s after failover: %v", id, err)
		}
		got[id] = fromProto(resp.GetAssignment())
	}
	first, second := a, b
	if b < a {
		first, second = b, a
	}
	// range: the member that sorts first gets partitions 0-2.
	want := map[string][]TopicPartition{
		first:  {{topic, 0}, {topic, 1}, {topic, 2}},
		second: {{topic, 3}, {topic, 4}, {topic, 5}},
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("assignments after failover: %v, want %v", got, want)
	}
}

// The KIP-429 idiom: a cooperative member commits, in OnRevoked, the
// partitions it gives up, after the sync that took them away (issue 13,
// finding 6). The commit is accepted (the member owned them in the
// previous generation and nobody owns them yet), and a callback slower
// than the session timeout costs the member nothing: the client
// heartbeats while it runs.
func TestRealCluster_CooperativeSticky_CommitInASlowOnRevoked(t *testing.T) {
	const partitions = 4
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	topic := createTopic(t, ctx, c.Addrs(), partitions)
	const session = time.Second
	base := Config{
		Endpoints: c.Addrs(), GroupID: topic, Topics: []string{topic}, Protocols: []string{"cooperative-sticky"},
		SessionTimeout: session, HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: 20 * time.Second,
	}
	var (
		first      *Member
		mu         sync.Mutex
		revoked    []TopicPartition
		commitErrs []error
	)
	cfg := base
	cfg.ClientID = "first"
	cfg.OnRevoked = func(ctx context.Context, r []TopicPartition) {
		time.Sleep(3 * session) // time passes: longer than the session, only heartbeats keep the member
		var offs []PartitionOffset
		for _, tp := range r {
			offs = append(offs, PartitionOffset{TopicPartition: tp, Offset: 100 + int64(tp.Partition)})
		}
		err := first.Commit(ctx, offs)
		mu.Lock()
		defer mu.Unlock()
		revoked = append(revoked, r...)
		commitErrs = append(commitErrs, err)
	}
	first, _ = startMember(t, cfg)
	waitStable(t, "the first member holding every partition", []*Member{first}, partitions)
	id := first.MemberID()

	cfg = base
	cfg.ClientID = "second"
	second, _ := startMember(t, cfg)
	proc.WaitFor(t, 60*time.Second, "two members holding two partitions each", func() (bool, string) {
		_, ok := settledOn([]*Member{first, second}, partitions)
		return ok && len(second.Assignment()) == partitions/2, fmt.Sprintf("first %v, second %v", first.Assignment(), second.Assignment())
	})

	mu.Lock()
	gotRevoked, gotErrs := slices.Clone(revoked), slices.Clone(commitErrs)
	mu.Unlock()
	if len(gotRevoked) != partitions/2 || len(gotErrs) != 1 {
		t.Fatalf("OnRevoked gave up %v with %d commits; want %d partitions in one call", gotRevoked, len(gotErrs), partitions/2)
	}
	if gotErrs[0] != nil {
		t.Fatalf("commit in OnRevoked of the partitions given up: %v", gotErrs[0])
	}
	if got := first.MemberID(); got != id {
		t.Fatalf("the first member is now %q, was %q: its session expired during the slow callback", got, id)
	}
	conn, err := Dial(ConnConfig{Endpoints: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fetched, err := FetchOffsets(ctx, conn.Groups(), &cohortv1.OffsetFetchRequest{GroupId: topic})
	if err != nil {
		t.Fatal(err)
	}
	committed := map[int32]int64{}
	for _, p := range fetched {
		committed[p.GetPartition()] = p.GetOffset()
	}
	for _, tp := range gotRevoked {
		if committed[tp.Partition] != 100+int64(tp.Partition) {
			t.Fatalf("committed offsets %v: partition %d, given up and committed in OnRevoked, is missing", committed, tp.Partition)
		}
	}
	if owned := second.Assignment(); !slices.Equal(owned, gotRevoked) {
		t.Fatalf("the second member holds %v, the first gave up %v", owned, gotRevoked)
	}
}
