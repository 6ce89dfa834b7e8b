package coordinator_test

import (
	"context"
	"fmt"
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
// rejoin is held back (up to 25 ms, the default) and a group's held rejoins
// go out together. Forty members rejoining over about 120 ms, as members
// do when they hear of a rebalance at their next heartbeat, took one entry
// each before (a join arriving while a proposer is free goes out alone);
// now they take about one per 25 ms. Every member still gets the one new
// generation, and the round's assignment is whole.
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
	joined := make(chan error, 1)
	go func() { joined <- newcomer.tryJoin(ctx) }()
	// The newcomer's join starts the round; the others rejoin 3 ms apart.
	time.Sleep(50 * time.Millisecond) // time passes: the newcomer's join is applied first
	err := all(members, "rejoin", func(m *member) error {
		var i int
		for i = range members {
			if members[i] == m {
				break
			}
		}
		time.Sleep(time.Duration(i) * 3 * time.Millisecond) // time passes: rejoins spread as heartbeats spread them
		return m.tryJoin(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	entries := leader.Node.LastIndex() - before
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
	// The newcomer's join, the rejoins (~120 ms: about 5 holds) and
	// nothing else: with one entry per rejoin it was about 40.
	if entries > 15 {
		t.Fatalf("the round's %d joins took %d log entries, want at most 15 (rejoins held and sent together)", n+1, entries)
	}
	t.Logf("%d joins in %d log entries", n+1, entries)
}

// The round's last rejoin is never held: held rejoins go out as soon as
// they are every member the round waits for, so a round completes at once
// with a hold far longer than any test. And a round that ends at its
// rebalance timeout sends the rejoins still held first: a member that did
// rejoin is kept, only the one that did not is dropped.
func TestJoinHold_HeldRejoinsAreNeverLostOrLate(t *testing.T) {
	c := holdCluster(t, time.Hour)
	ctx := testCtx(t)
	a, b, d := newMember(t, c, "g", "t"), newMember(t, c, "g", "t"), newMember(t, c, "g", "t")
	for _, m := range []*member{a, b, d} {
		m.rebalMs = 1000
	}
	rebalance(t, ctx, a, b, d)

	// a changes its subscription: the group rebalances; b and d rejoin.
	// With the hour's hold, only sending the last rejoin at once (with
	// those held) completes the round.
	createTopic(t, c, "u", 4)
	a.topics = []string{"t", "u"}
	start := time.Now()
	rejoin(t, a, b, d)
	if took := time.Since(start); took > 800*time.Millisecond {
		t.Fatalf("the round took %v with everyone rejoining: the last rejoin waited (the rebalance timeout is 1 s)", took)
	}
	if a.generation != b.generation || b.generation != d.generation {
		t.Fatalf("generations %d, %d, %d after one round, want one", a.generation, b.generation, d.generation)
	}
	if err := all([]*member{a, b, d}, "sync", func(m *member) error { return m.trySync(ctx) }); err != nil {
		t.Fatal(err)
	}

	// Again, and d never rejoins: b's rejoin stays held (one of the two the
	// round waits for) until the rebalance timeout completes the round.
	a.topics = []string{"t"}
	rejoin(t, a, b)
	got := describe(t, c, c.Leader(), "g")
	var ids []string
	for _, m := range got.GetMembers() {
		ids = append(ids, m.GetMemberId())
	}
	if len(ids) != 2 || a.generation != b.generation || fmt.Sprint(ids) != fmt.Sprint(sorted(a.id, b.id)) {
		t.Fatalf("after the rebalance timeout: members %v, generations %d and %d; want %s and %s at one generation (d dropped)", ids, a.generation, b.generation, a.id, b.id)
	}
}

// rejoin has first join (its new subscription starts the round) and, once
// that is applied, the others rejoin, each once.
func rejoin(t *testing.T, first *member, others ...*member) {
	t.Helper()
	// A join left held past the round waits for this (a test's 60 s is
	// longer than a mutant needs).
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- first.tryJoin(ctx) }()
	time.Sleep(100 * time.Millisecond) // time passes: first's join is applied, the group rebalances
	if err := joinAll(ctx, others...); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func sorted(a, b string) []string {
	if a > b {
		a, b = b, a
	}
	return []string{a, b}
}
