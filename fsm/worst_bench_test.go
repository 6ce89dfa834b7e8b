package fsm

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// The worst-case benchmarks measure the most expensive entry of each
// command kind that the default budgets let into the log: the bound on the
// work one entry costs every replica (and costs again on every replay).
// Each builds the state at the budgets once, then per iteration restores
// it (untimed) and applies the one entry. Results: docs/benchmarks.md.
// Run with: go test -run '^$' -bench WorstApply -benchtime 3x ./fsm/

// applier applies v1 commands to an FSM during a benchmark's setup.
type applier struct {
	b   *testing.B
	f   *FSM
	idx uint64
}

func (a *applier) apply(c isKind) *ApplyResult {
	a.idx++
	res := a.f.Apply(a.idx, v1(at(int64(a.idx), c)))
	if res.Err != nil {
		a.b.Fatalf("setup: %T: %v", c, res.Err)
	}
	return res
}

// worstApply benchmarks applying the command cmd returns to the state
// setup builds under the default budgets; check says whether the result is
// the one the case is about.
func worstApply(b *testing.B, setup func(a *applier), cmd func(f *FSM) isKind, check func(f *FSM, res *ApplyResult) error) {
	a := &applier{b: b, f: New()}
	a.f.Apply(1, SetBudgetsCommand(DefaultBudgets()))
	a.idx = 1
	setup(a)
	var snap bytes.Buffer
	if _, err := a.f.Snapshot().WriteTo(&snap); err != nil {
		b.Fatal(err)
	}
	a.f = nil
	runtime.GC()
	b.ReportMetric(float64(snap.Len()), "snapshot-bytes")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		f := New()
		if err := f.Restore(bytes.NewReader(snap.Bytes())); err != nil {
			b.Fatal(err)
		}
		c := v1(at(1<<40, cmd(f)))
		runtime.GC()
		b.StartTimer()
		res := f.Apply(f.AppliedIndex()+1, c)
		b.StopTimer()
		if err := check(f, res); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func succeeded(_ *FSM, res *ApplyResult) error {
	if res.Err != nil {
		return res.Err
	}
	for _, p := range res.Partitions {
		if p.Err != nil {
			return p.Err
		}
	}
	return nil
}

// fullGroupMembers is the members-per-group budget, each with metadata so
// that the group holds its metadata budget.
var (
	worstBudgets = DefaultBudgets()
	fullGroup    = int(worstBudgets.MembersPerGroup)
	// per-member metadata filling the group's metadata budget (the ID,
	// client ID and host, and topic names count too).
	fullGroupMetadata = strings.Repeat("x", int(worstBudgets.MetadataBytesPerGroup)/fullGroup-64)
)

// hugeTopics creates two topics at the partitions-per-topic budget: a
// group subscribing to both is at its subscribed-partitions budget.
func hugeTopics(a *applier) {
	per := int32(worstBudgets.PartitionsPerTopic)
	a.apply(createTopic{"a", per})
	a.apply(createTopic{"b", per})
}

// fullGroupJoining joins fullGroup members to group g on topics a and b
// and has all but the last of them rejoin, so that the last rejoin
// completes the join phase.
func fullGroupJoining(a *applier, protocolType string) *Group {
	hugeTopics(a)
	j := func(id string, newMember bool) join {
		return join{group: "g", member: id, topics: []string{"a", "b"}, protocols: []string{"sticky"}, protocolType: protocolType, metadata: fullGroupMetadata, newMember: newMember}
	}
	for i := range fullGroup {
		a.apply(j(fmt.Sprintf("m%05d", i), true))
	}
	g, _ := a.f.Group("g")
	var waiting []string
	for _, m := range g.Members.All() {
		if !m.Joined {
			waiting = append(waiting, m.ID)
		}
	}
	for _, id := range waiting[:len(waiting)-1] {
		a.apply(j(id, false))
	}
	g, _ = a.f.Group("g")
	return g
}

func lastToRejoin(g *Group) string {
	for _, m := range g.Members.All() {
		if !m.Joined {
			return m.ID
		}
	}
	return ""
}

// A server-side group at every per-group budget: the last rejoin completes
// the join phase and the FSM assigns all 32,768 partitions to 10,000
// members in the same apply.
func BenchmarkWorstApply_JoinCompletingServerSideAssignment(b *testing.B) {
	var last string
	worstApply(b, func(a *applier) { last = lastToRejoin(fullGroupJoining(a, ServerProtocolType)) },
		func(*FSM) isKind {
			return join{group: "g", member: last, topics: []string{"a", "b"}, protocols: []string{"sticky"}, protocolType: ServerProtocolType, metadata: fullGroupMetadata}
		},
		func(f *FSM, res *ApplyResult) error {
			if g, _ := f.Group("g"); res.Err != nil || g.State != Stable {
				return fmt.Errorf("join: %v, group %s", res.Err, g.State)
			}
			return nil
		})
}

// The leader's plan for a client-side group at every per-group budget:
// 32,768 partitions over 10,000 members.
func BenchmarkWorstApply_SyncFullPlan(b *testing.B) {
	var sync syncCmd
	worstApply(b, func(a *applier) {
		g := fullGroupJoining(a, "consumer")
		a.apply(join{group: "g", member: lastToRejoin(g), topics: []string{"a", "b"}, protocols: []string{"sticky"}, metadata: fullGroupMetadata})
		g, _ = a.f.Group("g")
		p := plan{}
		per := int32(worstBudgets.PartitionsPerTopic)
		for i := range 2 * per {
			m := g.Members.Slice()[int(i)%g.Members.Len()].ID
			if p[m] == nil {
				p[m] = map[string][]int32{}
			}
			t := []string{"a", "b"}[i/per]
			p[m][t] = append(p[m][t], i%per)
		}
		sync = syncCmd{g.ID, g.Generation, g.LeaderID, p}
	}, func(*FSM) isKind { return sync }, succeeded)
}

// A commit as large as the leader batches (4 MiB): 32,768 new offsets with
// 100 bytes of metadata each, by the member that owns them all.
func BenchmarkWorstApply_CommitLargestBatch(b *testing.B) {
	var gen int32
	per := int32(worstBudgets.PartitionsPerTopic)
	worstApply(b, func(a *applier) {
		hugeTopics(a)
		a.apply(join{group: "g", member: "m", topics: []string{"a", "b"}, newMember: true})
		g, _ := a.f.Group("g")
		all := make([]int32, per)
		for i := range all {
			all[i] = int32(i)
		}
		a.apply(syncCmd{"g", g.Generation, "m", plan{"m": {"a": all, "b": all}}})
		gen = g.Generation
	}, func(*FSM) isKind {
		c := &fsmv1.CommitOffsets{GroupId: "g", Generation: gen, MemberId: "m"}
		meta := strings.Repeat("m", 100)
		for _, t := range []string{"a", "b"} {
			for p := range per {
				c.Offsets = append(c.Offsets, &fsmv1.OffsetCommit{Topic: t, Partition: p, Offset: 1, Metadata: meta})
			}
		}
		return rawCommit{c}
	}, succeeded)
}

// rawCommit is a commit built by hand.
type rawCommit struct{ c *fsmv1.CommitOffsets }

func (r rawCommit) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_CommitOffsets{CommitOffsets: r.c}
}

// Every member of a full group leaves in one entry.
func BenchmarkWorstApply_RemoveFullGroup(b *testing.B) {
	var ids []string
	worstApply(b, func(a *applier) {
		g := fullGroupJoining(a, "consumer")
		for _, m := range g.Members.All() {
			ids = append(ids, m.ID)
		}
	}, func(*FSM) isKind { return remove{group: "g", members: ids} }, succeeded)
}

// The join phase of a full group times out with all but one member
// missing: they are removed in one CompleteJoin.
func BenchmarkWorstApply_CompleteJoinDroppingFullGroup(b *testing.B) {
	var gen int32
	worstApply(b, func(a *applier) {
		hugeTopics(a)
		for i := range fullGroup {
			a.apply(join{group: "g", member: fmt.Sprintf("m%05d", i), topics: []string{"a", "b"}, metadata: fullGroupMetadata, newMember: true})
		}
		g, _ := a.f.Group("g")
		gen = g.Generation
	}, func(*FSM) isKind { return completeJoin{group: "g", generation: gen} }, succeeded)
}

// manyGroups fills the groups budget with one-member groups subscribed to
// topic t.
func manyGroups(a *applier) {
	a.apply(createTopic{"t", 1})
	for i := range int(worstBudgets.Groups) {
		a.apply(join{group: fmt.Sprintf("g%06d", i), member: "m", topics: []string{"t"}, newMember: true})
	}
}

// A topic every one of the budget's 100,000 groups subscribes to grows:
// every group starts a rebalance.
func BenchmarkWorstApply_AddPartitionsRebalancingEveryGroup(b *testing.B) {
	worstApply(b, manyGroups, func(*FSM) isKind { return addPartitions{"t", 2} }, succeeded)
}

// manyOffsets fills the state budget with committed offsets of topic a
// (standalone commits of groups of 16,384 offsets).
func manyOffsets(a *applier, groups int) {
	per := int32(worstBudgets.PartitionsPerTopic)
	a.apply(createTopic{"a", per})
	for g := range groups {
		c := &fsmv1.CommitOffsets{GroupId: fmt.Sprintf("g%04d", g), Generation: -1}
		for p := range per {
			c.Offsets = append(c.Offsets, &fsmv1.OffsetCommit{Topic: "a", Partition: p, Offset: 1})
		}
		a.apply(rawCommit{c})
	}
}

// offsetGroups is how many groups of 16,384 offsets fit the state budget.
func offsetGroups() int {
	return int(worstBudgets.StateBytes / (int64(worstBudgets.PartitionsPerTopic) * (offsetBytes("a", "") + 8)))
}

// A topic whose offsets fill the state budget is deleted.
func BenchmarkWorstApply_DeleteTopicDroppingEveryOffset(b *testing.B) {
	worstApply(b, func(a *applier) { manyOffsets(a, offsetGroups()) },
		func(*FSM) isKind { return deleteTopic("a") }, succeeded)
}

// Retention expires every offset of a state at its budget.
func BenchmarkWorstApply_ExpireOffsetsDroppingEveryGroup(b *testing.B) {
	worstApply(b, func(a *applier) { manyOffsets(a, offsetGroups()) },
		func(*FSM) isKind { return expire(1) },
		func(f *FSM, res *ApplyResult) error {
			if res.Err != nil || f.Stats().Groups != 0 {
				return fmt.Errorf("expire: %v, %d groups left", res.Err, f.Stats().Groups)
			}
			return nil
		})
}

// BenchmarkStateHeap measures what the state's size estimate (the
// state-bytes budget's measure) costs in live heap, for the shapes that
// fill it: offsets, member metadata, many small groups, topics. The
// heap/estimate ratio is what docs/security.md's memory arithmetic uses.
func BenchmarkStateHeap(b *testing.B) {
	shapes := []struct {
		name  string
		build func(a *applier)
	}{
		{"offsets", func(a *applier) { manyOffsets(a, 60) }},
		{"member-metadata", func(a *applier) { fullGroupJoining(a, "consumer") }},
		{"one-member-groups", manyGroups},
		{"topics", func(a *applier) {
			for i := range int(worstBudgets.Topics) {
				a.apply(createTopic{fmt.Sprintf("topic-%05d", i), 16})
			}
		}},
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				a := &applier{b: b, f: New()}
				sh.build(a)
				runtime.GC()
				runtime.ReadMemStats(&after)
				u, _ := a.f.Usage()
				heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
				b.ReportMetric(float64(u.StateBytes)/(1<<20), "estimate-MiB")
				b.ReportMetric(heap/(1<<20), "heap-MiB")
				b.ReportMetric(heap/float64(u.StateBytes), "heap/estimate")
				runtime.KeepAlive(a.f)
			}
		})
	}
}
