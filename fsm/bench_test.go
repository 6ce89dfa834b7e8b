package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"testing"
	"time"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// The FSM benchmarks measure decode + apply of encoded log entries, the work
// one core does per entry on every node. Results: docs/benchmarks.md.

func encode(b *testing.B, cmd *fsmv1.Command) []byte {
	data, err := EncodeCommand(cmd)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// benchGroup builds a Stable group of n members subscribed to topic "t"
// (partitions partitions, dealt round-robin) and returns the index used.
func benchGroup(b *testing.B, f *FSM, idx uint64, group string, n int, partitions int32) uint64 {
	apply := func(k isKind) {
		idx++
		if res := f.ApplyEntry(idx, encode(b, at(int64(idx), k))); res.Err != nil {
			b.Fatalf("setup %s: %v", group, res.Err)
		}
	}
	for i := 0; i < n; i++ {
		apply(join{group: group, member: fmt.Sprintf("m%02d", i), topics: []string{"t"}, newMember: true})
	}
	g, _ := f.Group(group)
	for _, m := range g.Members.All() { // everyone rejoins: the barrier closes
		if !m.Joined {
			apply(join{group: group, member: m.ID, topics: []string{"t"}})
		}
	}
	g, _ = f.Group(group)
	if g.State != CompletingRebalance {
		b.Fatalf("setup %s: %s", group, g.State)
	}
	apply(roundRobinSync(g, partitions))
	return idx
}

func roundRobinSync(g *Group, partitions int32) syncCmd {
	p := plan{}
	for i := int32(0); i < partitions; i++ {
		m := g.Members.Slice()[int(i)%g.Members.Len()].ID
		if p[m] == nil {
			p[m] = map[string][]int32{}
		}
		p[m]["t"] = append(p[m]["t"], i)
	}
	return syncCmd{g.ID, g.Generation, g.LeaderID, p}
}

// BenchmarkApplyJoin: a new member joins an empty group and completes the
// join phase in the same apply (the commonest join entry).
func BenchmarkApplyJoin(b *testing.B) {
	f := New()
	entries := make([][]byte, b.N)
	for i := range entries {
		entries[i] = encode(b, at(int64(i), join{group: fmt.Sprintf("g%d", i), member: "m-0123456789abcdef", topics: []string{"t"}, newMember: true}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i, e := range entries {
		if res := f.ApplyEntry(uint64(i+1), e); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
}

// BenchmarkApplySync: the leader's plan for a 10-member group over 100
// partitions, validated and stored.
func BenchmarkApplySync(b *testing.B) {
	const groups, members, partitions = 500, 10, 100
	f := New()
	var idx uint64 = 1
	f.ApplyEntry(idx, encode(b, at(0, createTopic{"t", partitions})))
	for i := 0; i < groups; i++ {
		idx = benchGroup(b, f, idx, fmt.Sprintf("g%d", i), members, partitions)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		// Every group rebalances (leader rejoin, then the followers) so
		// that it waits for a plan again.
		var syncs [][]byte
		for i := 0; i < groups && done+len(syncs) < b.N; i++ {
			id := fmt.Sprintf("g%d", i)
			g, _ := f.Group(id)
			for _, m := range g.Members.All() {
				idx++
				f.ApplyEntry(idx, encode(b, at(int64(idx), join{group: id, member: m.ID, topics: []string{"t"}})))
			}
			g, _ = f.Group(id)
			syncs = append(syncs, encode(b, at(int64(idx), roundRobinSync(g, partitions))))
		}
		b.StartTimer()
		for _, e := range syncs {
			idx++
			if res := f.ApplyEntry(idx, e); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
		done += len(syncs)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
}

// BenchmarkApplyCommit: one member commits its 10 partitions, fenced.
func BenchmarkApplyCommit(b *testing.B) {
	const members, partitions = 10, 100
	f := New()
	var idx uint64 = 1
	f.ApplyEntry(idx, encode(b, at(0, createTopic{"t", partitions})))
	idx = benchGroup(b, f, idx, "g", members, partitions)
	g, _ := f.Group("g")
	entries := make([][]byte, members)
	for i, m := range g.Members.All() {
		var ps []int32
		for _, tp := range m.Assignment.Topics {
			ps = append(ps, tp.Partitions...)
		}
		entries[i] = encode(b, at(int64(idx), commit{group: "g", generation: g.Generation, member: m.ID, topic: "t", partitions: ps, offset: 12345}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		idx++
		res := f.ApplyEntry(idx, entries[i%members])
		if res.Err != nil || res.Partitions[0].Err != nil {
			b.Fatal(res.Err, res.Partitions[0].Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
	b.ReportMetric(float64(b.N*partitions/members)/b.Elapsed().Seconds(), "offsets/s")
}

// BenchmarkSnapshot10kGroups1MOffsets: 10,000 groups of 10 members, each
// with 100 committed offsets (1,000,000 in all). Reports the time Apply is
// held by Snapshot (the copy-on-write copy), the time to write and to
// restore, the snapshot's size and the process's peak RSS.
func BenchmarkSnapshot10kGroups1MOffsets(b *testing.B) {
	const groups, members, partitions = 10000, 10, 100
	f := New()
	var idx uint64 = 1
	f.ApplyEntry(idx, encode(b, at(0, createTopic{"t", partitions})))
	for i := 0; i < groups; i++ {
		id := fmt.Sprintf("group-%05d", i)
		idx = benchGroup(b, f, idx, id, members, partitions)
		g, _ := f.Group(id)
		for _, m := range g.Members.All() {
			idx++
			var ps []int32
			for _, tp := range m.Assignment.Topics {
				ps = append(ps, tp.Partitions...)
			}
			f.ApplyEntry(idx, encode(b, at(int64(idx), commit{group: id, generation: g.Generation, member: m.ID, topic: "t", partitions: ps, offset: int64(idx)})))
		}
	}
	if st := f.Stats(); st.Groups != groups || st.Members != groups*members || st.Offsets != groups*partitions {
		b.Fatalf("setup: %+v", st)
	}
	runtime.GC()
	b.ResetTimer()
	var hold, write, restore time.Duration
	var size int64
	for i := 0; i < b.N; i++ {
		start := time.Now()
		snap := f.Snapshot()
		hold += time.Since(start)

		start = time.Now()
		var buf bytes.Buffer
		n, err := snap.WriteTo(&buf)
		if err != nil {
			b.Fatal(err)
		}
		write += time.Since(start)
		size = n

		start = time.Now()
		if _, err := ReadSnapshot(io.Reader(&buf)); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(start)
	}
	b.ReportMetric(float64(hold.Microseconds())/float64(b.N), "hold-µs")
	b.ReportMetric(write.Seconds()*1000/float64(b.N), "write-ms")
	b.ReportMetric(restore.Seconds()*1000/float64(b.N), "restore-ms")
	b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
	}
}

// BenchmarkRebalanceRound1000Members: one full rebalance of a 1,000-member
// group — the leader rejoins, then the other 999 — reported per join. A
// join copies the member it changes, not the group's members.
func BenchmarkRebalanceRound1000Members(b *testing.B) {
	const members, partitions = 1000, 1000
	f := New()
	var idx uint64 = 1
	f.ApplyEntry(idx, encode(b, at(0, createTopic{"t", partitions})))
	idx = benchGroup(b, f, idx, "g", members, partitions)
	g, _ := f.Group("g")
	order := make([]string, 0, members)
	order = append(order, g.LeaderID)
	for _, m := range g.Members.All() {
		if m.ID != g.LeaderID {
			order = append(order, m.ID)
		}
	}
	entries := make([][]byte, len(order))
	for i, id := range order {
		entries[i] = encode(b, at(int64(idx), join{group: "g", member: id, topics: []string{"t"}}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, e := range entries {
			idx++
			if res := f.ApplyEntry(idx, e); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*members), "µs/join")
}

// BenchmarkConsumerJoinLeave measures a KIP-848 consumer group member's
// join and leave (two entries per iteration) against the group's size: each
// computes every member's target with the uniform (sticky) assignor, so
// the cost grows with members plus partitions (the topic has members + 64
// partitions), linearly.
func BenchmarkConsumerJoinLeave(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			h := newHarness(b)
			h.ok(at(1, createTopic{"t", int32(n + 64)}))
			ts := int64(2)
			for i := range n {
				ts++
				h.ok(at(ts, hb{group: "g", member: fmt.Sprintf("m%05d", i), topics: []string{"t"}}))
			}
			b.ResetTimer()
			for i := range b.N {
				ts++
				h.ok(at(ts, hb{group: "g", member: fmt.Sprintf("x%05d", i), topics: []string{"t"}}))
				ts++
				h.ok(at(ts, hb{group: "g", member: fmt.Sprintf("x%05d", i), epoch: -1}))
			}
		})
	}
}

// BenchmarkConsumerRebalanceRound is one KIP-848 rebalance of a settled
// group of n members, as the replicas see it: a member joins, then every
// member heartbeats (confirming what it holds) until the group is Stable
// again; then it leaves, and the same. A heartbeat the leader answers from
// its state (QuietHeartbeat) costs no entry. Under rules 6 every member's
// next heartbeat is an entry; under rules 7 the join's own entry moves the
// members it leaves alone. entries/round is what each replica applies.
func BenchmarkConsumerRebalanceRound(b *testing.B) {
	for _, rules := range []uint32{6, 7} {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("rules=%d/members=%d", rules, n), func(b *testing.B) {
				h := newHarness(b)
				h.ok(at(1, createTopic{"t", int32(n + 8)}))
				ts := int64(2)
				for i := range n {
					ts++
					h.ok(at(ts, hb{group: "g", member: fmt.Sprintf("m%05d", i), topics: []string{"t"}, rules: rules}))
				}
				settleRound(b, h, &ts, rules)
				entries := 0
				b.ResetTimer()
				for i := range b.N {
					id := fmt.Sprintf("x%05d", i)
					ts++
					h.ok(at(ts, hb{group: "g", member: id, topics: []string{"t"}, rules: rules}))
					entries += 1 + settleRound(b, h, &ts, rules)
					ts++
					h.ok(at(ts, hb{group: "g", member: id, epoch: -1, rules: rules}))
					entries += 1 + settleRound(b, h, &ts, rules)
				}
				b.ReportMetric(float64(entries)/float64(2*b.N), "entries/round")
			})
		}
	}
}

// settleRound heartbeats every member of consumer group "g", each at the
// epoch its client was last told and confirming what it holds, until the
// group is Stable; a heartbeat QuietHeartbeat answers is not applied. It
// returns the entries applied.
func settleRound(b testing.TB, h *harness, ts *int64, rules uint32) int {
	told := map[string]int32{}
	applied := 0
	for range 8 {
		g := readConsumerGroup(h, "g")
		if g.State() == ConsumerStable {
			return applied
		}
		for _, m := range g.Members.All() {
			g := readConsumerGroup(h, "g") // as the heartbeats before this one left it
			m, _ := g.Member(m.ID)
			e, ok := told[m.ID]
			if !ok {
				e = m.Epoch
				if m.AdvancedFrom > 0 {
					e = m.AdvancedFrom
				}
			}
			beat := hb{group: "g", member: m.ID, epoch: e, owned: owned(m.Assigned), rules: rules}
			if r, quiet := g.QuietHeartbeat(heartbeatOf(beat)); quiet {
				told[m.ID] = r.Epoch
				continue
			}
			*ts++
			told[m.ID] = h.ok(at(*ts, beat)).Consumer.Epoch
			applied++
		}
	}
	b.Fatalf("consumer group g not Stable after 8 rounds of heartbeats")
	return 0
}

func readConsumerGroup(h *harness, id string) *ConsumerGroup {
	var g *ConsumerGroup
	h.f.Read(func(s *State) { g, _ = s.ConsumerGroup(id) })
	return g
}
