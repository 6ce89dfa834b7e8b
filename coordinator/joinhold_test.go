package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/internal/testcluster"
)

// holdCluster is cluster's, with the engine's JoinHold set.
func holdCluster(t *testing.T, hold time.Duration) *testcluster.Cluster {
	t.Helper()
	cfg := testcluster.DefaultCoordinator()
	cfg.InitialRebalanceDelay = 200 * time.Millisecond
	cfg.JoinHold = hold
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	createTopic(t, c, "t", 64)
	return c
}

// A rebalance's rejoins share a few log entries: each known member's
// rejoin is held back (here 25 ms, the default) and a group's held rejoins
// go out together, when the first has waited the hold even though the
// round still waits for a member. Thirty-nine rejoins 1 ms apart took one
// entry each before (a join arriving while a proposer is free goes out
// alone). Every member then gets the one new generation, and the round's
// assignment is whole.
func TestJoinHold_ARoundsRejoinsShareAFewEntries(t *testing.T) {
	c := holdCluster(t, 25*time.Millisecond)
	ctx := testCtx(t)
	const n = 40
	members := make([]*member, n)
	for i := range members {
		members[i] = newMember(t, c, "g", "t")
	}
	rebalance(t, ctx, members...)
	gen := members[0].generation

	leader := c.Nodes[c.Leader()]
	before := leader.Node.LastIndex()
	newcomer := newMember(t, c, "g", "t")
	joined := make(chan error, n+1)
	go func() { joined <- newcomer.tryJoin(ctx) }()
	waitState(t, ctx, c, "g", "PreparingRebalance")
	early, last := members[:n-1], members[n-1]
	for i, m := range early {
		go func() {
			time.Sleep(time.Duration(i) * time.Millisecond) // time passes: rejoins spread as heartbeats spread them
			joined <- m.tryJoin(ctx)
		}()
	}
	// Held rejoins reach the log (and park at the barrier) without the
	// round's last: the hold ends on its own.
	waitParked(t, c, n)
	entries := leader.Node.LastIndex() - before
	go func() { joined <- last.tryJoin(ctx) }()
	for range n + 1 {
		if err := <-joined; err != nil {
			t.Fatal(err)
		}
	}
	everyone := append(members, newcomer)
	for _, m := range everyone {
		if m.generation != gen+1 {
			t.Fatalf("member %s at generation %d, want %d (one new generation)", m.id, m.generation, gen+1)
		}
	}
	if err := all(everyone, "sync", func(m *member) error { return m.trySync(ctx) }); err != nil {
		t.Fatal(err)
	}
	checkAssignment(t, "t", 64, everyone...)
	// The newcomer's join and the rejoins (~40 ms: two holds or so): with
	// one entry per rejoin it was 40.
	if entries > 10 {
		t.Fatalf("the newcomer's join and %d rejoins took %d log entries, want at most 10 (rejoins held and sent together)", len(early), entries)
	}
	t.Logf("the newcomer's join and %d rejoins in %d log entries", len(early), entries)
}

// The round's last rejoin is never held: held rejoins go out as soon as
// they are every member the round waits for, so with a hold and a
// rebalance timeout far longer than the test the round still completes.
// And a round that ends at its rebalance timeout sends the rejoins still
// held first: a member that did rejoin is kept, only the one that did not
// is dropped.
func TestJoinHold_HeldRejoinsAreNeverLostOrLate(t *testing.T) {
	c := holdCluster(t, time.Hour)
	ctx := testCtx(t)
	createTopic(t, c, "u", 4)
	trio := func(group string, rebalMs int32) (a, b, d *member) {
		a, b, d = newMember(t, c, group, "t"), newMember(t, c, group, "t"), newMember(t, c, group, "t")
		for _, m := range []*member{a, b, d} {
			m.rebalMs = rebalMs
		}
		rebalance(t, ctx, a, b, d)
		return a, b, d
	}

	// a changes its subscription: the group rebalances, b and d rejoin.
	// Only sending the last rejoin at once (with those held) completes the
	// round: the hold and the rebalance timeout outlast the test.
	a, b, d := trio("everyone", 10*60*1000)
	a.topics = []string{"t", "u"}
	rejoin(t, a, b, d)
	if a.generation != b.generation || b.generation != d.generation {
		t.Fatalf("generations %d, %d, %d after one round, want one", a.generation, b.generation, d.generation)
	}

	// d never rejoins: b's rejoin stays held (one of the two the round
	// waits for) until the 1 s rebalance timeout completes the round.
	a, b, _ = trio("one-missing", 1000)
	a.topics = []string{"t", "u"}
	rejoin(t, a, b)
	var ids []string
	for _, m := range describe(t, c, c.Leader(), "one-missing").GetMembers() {
		ids = append(ids, m.GetMemberId())
	}
	want := []string{a.id, b.id}
	slices.Sort(want)
	if !slices.Equal(ids, want) || a.generation != b.generation {
		t.Fatalf("after the rebalance timeout: members %v, generations %d and %d; want %v at one generation (d dropped)", ids, a.generation, b.generation, want)
	}
}

// rejoin has first join (its new subscription starts the round) and, once
// the group rebalances, the others rejoin, each once.
func rejoin(t *testing.T, first *member, others ...*member) {
	t.Helper()
	// A join left held past the round waits for this (a test's 60 s is
	// longer than a mutant needs).
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- first.tryJoin(ctx) }()
	waitState(t, ctx, first.c, first.group, "PreparingRebalance")
	if err := joinAll(ctx, others...); err != nil {
		t.Fatal(fmt.Errorf("rejoining group %s: %w", first.group, err))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
