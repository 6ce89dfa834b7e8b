package fsm

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// BenchmarkJoinCostBySize measures the entries a group's members send one
// at a time (a join, a rejoin, a leave) against the group's size: each
// should cost the same in a 10,000-member group as in a 10-member one
// (issue 14). Only the apply that closes a join round, and the one that
// opens it, may cost a pass over the members: they run once per
// generation. Every member is static (an instance ID), as in a large
// deployment that restarts its consumers in place; the budgets are the
// defaults with room for the largest group, so every budget check runs.
//
// Each iteration applies one encoded entry to a copy-on-write copy of the
// same state (as after a snapshot, every group is frozen and is copied
// before it changes, as it is after every apply), so the group's size stays
// the one named, whatever b.N. Run with -benchtime=200x or so: every
// iteration holds its own copy.
func BenchmarkJoinCostBySize(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("join-new/members=%d", n), func(b *testing.B) {
			// A new dynamic member joins a group that is rebalancing (its
			// leader rejoined; the others have not yet).
			benchEntry(b, scaleStates(b, n).preparing, at(1<<40, join{group: "g", member: "new-member", topics: []string{"t"}, newMember: true}))
		})
		b.Run(fmt.Sprintf("join-new-static/members=%d", n), func(b *testing.B) {
			benchEntry(b, scaleStates(b, n).preparing, at(1<<40, join{group: "g", member: "new-member", instance: "new-instance", topics: []string{"t"}, newMember: true}))
		})
		b.Run(fmt.Sprintf("rejoin/members=%d", n), func(b *testing.B) {
			// A member that has not rejoined yet rejoins, unchanged.
			id := scaleMember(n / 2)
			benchEntry(b, scaleStates(b, n).preparing, at(1<<40, join{group: "g", member: id, instance: scaleInstance(n / 2), topics: []string{"t"}}))
		})
		b.Run(fmt.Sprintf("leave-preparing/members=%d", n), func(b *testing.B) {
			// A member leaves while the group rebalances.
			benchEntry(b, scaleStates(b, n).preparing, at(1<<40, remove{group: "g", members: []string{scaleMember(n / 2)}}))
		})
		b.Run(fmt.Sprintf("group-copy/members=%d", n), func(b *testing.B) {
			// What every entry above pays to copy the frozen group before
			// changing it (Group.clone: the member list's slice of chunks,
			// a pointer per up to 128 members; the chunk an entry changes
			// is copied when it is first changed).
			g := scaleStates(b, n).preparing.groups["g"]
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if c := g.clone(uint64(i) + 1<<62); c.Members.Len() != n {
					b.Fatal(c.Members.Len())
				}
			}
		})
		b.Run(fmt.Sprintf("leave-stable/members=%d", n), func(b *testing.B) {
			// A member leaves a Stable group: the leave opens a rebalance
			// (prepareRebalance, a pass over the members, once per
			// generation).
			benchEntry(b, scaleStates(b, n).stable, at(1<<40, remove{group: "g", members: []string{scaleMember(n / 2)}}))
		})
	}
}

// benchEntry applies cmd to a fresh copy-on-write copy of base in every
// iteration. The copies are made before the timer starts rather than
// between timed applies, so that stopping the timer (a stop-the-world
// read of the memory statistics) does not leave every apply a cold cache.
func benchEntry(b *testing.B, base *State, cmd *fsmv1.Command) {
	data := encode(b, v1(cmd))
	fs := make([]*FSM, b.N)
	for i := range fs {
		fs[i] = &FSM{state: base.clone()}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i, f := range fs {
		fs[i] = nil // each copy is garbage once applied, as in a node
		res := f.ApplyEntry(1, data)
		if res.Err != nil || res.Group.State != PreparingRebalance || res.JoinCompleted {
			b.Fatalf("the entry: %v, left the group %s (join completed: %v)", res.Err, res.Group.State, res.JoinCompleted)
		}
		for _, m := range res.Members {
			if m.Err != nil {
				b.Fatal(m.Err)
			}
		}
	}
}

func scaleMember(i int) string   { return fmt.Sprintf("member-%05d", i) }
func scaleInstance(i int) string { return fmt.Sprintf("instance-%05d", i) }

// scaleState is one size's states: a Stable group "g" of n static members
// subscribed to topic "t" (100 partitions dealt round-robin), and the same
// group once its leader rejoined (PreparingRebalance, nobody else rejoined).
type scaleState struct {
	stable, preparing *State
}

var (
	scaleMu     sync.Mutex
	scaleStatus = map[int]scaleState{}
)

// scaleStates builds (once per size and process) the states
// BenchmarkJoinCostBySize applies to.
func scaleStates(b *testing.B, n int) scaleState {
	scaleMu.Lock()
	defer scaleMu.Unlock()
	if st, ok := scaleStatus[n]; ok {
		return st
	}
	b.StopTimer()
	defer b.StartTimer()
	budgets := DefaultBudgets()
	budgets.MembersPerGroup = 1 << 20
	f := New()
	var idx uint64
	apply := func(k isKind) *ApplyResult {
		idx++
		res := f.Apply(idx, v1(at(int64(idx), k)))
		if res.Err != nil {
			b.Fatalf("setup of %d members: %T: %v", n, k, res.Err)
		}
		return res
	}
	idx++
	f.Apply(idx, SetBudgetsCommand(budgets))
	apply(createTopic{"t", 100})
	for i := range n {
		apply(join{group: "g", member: scaleMember(i), instance: scaleInstance(i), topics: []string{"t"}, newMember: true})
	}
	g, _ := f.Group("g")
	for _, m := range g.Members.All() { // everyone rejoins: the barrier closes
		if !m.Joined {
			apply(join{group: "g", member: m.ID, instance: m.InstanceID, topics: []string{"t"}})
		}
	}
	g, _ = f.Group("g")
	if g.State != CompletingRebalance {
		b.Fatalf("setup of %d members: %s", n, g.State)
	}
	apply(roundRobinSync(g, 100))
	var st scaleState
	var err error
	if st.stable, err = ReadSnapshot(bytes.NewReader(snapshotBytes(b, f))); err != nil {
		b.Fatal(err)
	}
	leader, _ := g.Member(g.LeaderID)
	apply(join{group: "g", member: leader.ID, instance: leader.InstanceID, topics: []string{"t"}})
	if g, _ = f.Group("g"); g.State != PreparingRebalance || g.Members.Len() != n {
		b.Fatalf("setup of %d members: %s with %d members", n, g.State, g.Members.Len())
	}
	if m, _ := g.Member(scaleMember(n / 2)); m.Joined {
		b.Fatalf("setup of %d members: %s is the leader", n, m.ID)
	}
	st.preparing = f.state
	scaleStatus[n] = st
	return st
}
