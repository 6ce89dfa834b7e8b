package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"pgregory.net/rapid"
)

// The oracles: the figures as the FSM computed them before it kept them
// incrementally (issue 14), a pass over the members each.

func measureOracle(s *State, g *Group) groupSize {
	z := groupSize{bytes: groupBytes(g.ID, g.ProtocolType)}
	for _, m := range g.Members.All() {
		z.bytes += memberBytes(m)
		z.metadata += memberMetadataBytes(m)
	}
	z.subscribed = subscribedOracle(s, g, nil, nil)
	return z
}

func subscribedOracle(s *State, g *Group, skip, extra *Member) int64 {
	seen := map[string]bool{}
	var n int64
	add := func(m *Member) {
		for _, t := range m.Topics {
			if !seen[t] {
				seen[t] = true
				n += int64(s.topics[t])
			}
		}
	}
	for _, m := range g.Members.All() {
		if m != skip {
			add(m)
		}
	}
	if extra != nil {
		add(extra)
	}
	return n
}

func commonProtocolsOracle(g *Group, m, replaced *Member) []string {
	var out []string
	for _, p := range m.Protocols {
		ok := true
		for _, o := range g.Members.All() {
			if o.ID == m.ID || (replaced != nil && o.ID == replaced.ID) {
				continue
			}
			if !o.Supports(p.Name) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, p.Name)
		}
	}
	return out
}

func memberByInstanceOracle(g *Group, instanceID string) (*Member, bool) {
	if instanceID == "" {
		return nil, false
	}
	for _, m := range g.Members.All() {
		if m.InstanceID == instanceID {
			return m, true
		}
	}
	return nil, false
}

func rebalanceTimeoutOracle(g *Group) int64 {
	var t int32
	for _, m := range g.Members.All() {
		t = max(t, m.RebalanceTimeoutMs)
	}
	return int64(t)
}

func allJoinedOracle(g *Group) bool {
	for _, m := range g.Members.All() {
		if !m.Joined {
			return false
		}
	}
	return true
}

// checkDerived compares every figure the state keeps incrementally with
// its recompute from the members, topics and nodes, and says what differs
// ("" when nothing does). It changes nothing: s may share its groups with
// a live FSM.
func checkDerived(s *State) string {
	var partitions, topicBytesSum, nodeBytesSum, groupBytesSum int64
	for name, n := range s.topics {
		partitions += int64(n)
		topicBytesSum += topicBytes(name)
	}
	for _, n := range s.nodes {
		nodeBytesSum += nodeBytes(n)
	}
	for _, id := range sortedKeysOf(s.groups) {
		g := s.groups[id]
		if err := checkGroupDerived(s, g); err != "" {
			return fmt.Sprintf("group %s: %s", id, err)
		}
		groupBytesSum += g.counted
	}
	if partitions != s.partitions || topicBytesSum != s.topicBytes || nodeBytesSum != s.nodeBytes || groupBytesSum != s.groupBytes {
		return fmt.Sprintf("state figures (partitions, topic, node, group bytes) kept %d %d %d %d, recomputed %d %d %d %d",
			s.partitions, s.topicBytes, s.nodeBytes, s.groupBytes, partitions, topicBytesSum, nodeBytesSum, groupBytesSum)
	}
	return ""
}

func checkGroupDerived(s *State, g *Group) string {
	if z := measureOracle(s, g); g.ix.size != z || g.counted != z.bytes {
		return fmt.Sprintf("size kept %+v (counted %d bytes), recomputed %+v", g.ix.size, g.counted, z)
	}
	// What a restore rebuilds is what was kept.
	fresh := deriveIndex(g, s.topics)
	switch {
	case g.ix.joined != fresh.joined:
		return fmt.Sprintf("joined kept %d, recomputed %d", g.ix.joined, fresh.joined)
	case !slices.Equal(g.ix.protocols.all(), fresh.protocols.all()):
		return fmt.Sprintf("protocols kept %v, recomputed %v", g.ix.protocols.all(), fresh.protocols.all())
	case !slices.Equal(g.ix.topics.all(), fresh.topics.all()):
		return fmt.Sprintf("topics kept %v, recomputed %v", g.ix.topics.all(), fresh.topics.all())
	case !slices.Equal(g.ix.timeouts.all(), fresh.timeouts.all()):
		return fmt.Sprintf("timeouts kept %v, recomputed %v", g.ix.timeouts.all(), fresh.timeouts.all())
	case !slices.Equal(g.ix.instances.all(), fresh.instances.all()):
		return fmt.Sprintf("instances kept %v, recomputed %v", g.ix.instances.all(), fresh.instances.all())
	case g.ix.size != fresh.size:
		return fmt.Sprintf("size kept %+v, rebuilt %+v", g.ix.size, fresh.size)
	case g.AllJoined() != allJoinedOracle(g):
		return fmt.Sprintf("AllJoined %v, every member's flag says %v", g.AllJoined(), allJoinedOracle(g))
	case g.RebalanceTimeoutMs() != rebalanceTimeoutOracle(g):
		return fmt.Sprintf("RebalanceTimeoutMs %d, the members' largest %d", g.RebalanceTimeoutMs(), rebalanceTimeoutOracle(g))
	}
	instances := []string{""}
	for _, m := range g.Members.All() {
		instances = append(instances, m.InstanceID, m.InstanceID+"-other")
	}
	for _, inst := range instances {
		m, ok := g.MemberByInstance(inst)
		want, wantOK := memberByInstanceOracle(g, inst)
		if m != want || ok != wantOK {
			return fmt.Sprintf("MemberByInstance(%q) = %v, %v; a scan finds %v, %v", inst, m, ok, want, wantOK)
		}
	}
	// The join checks, for every member as the joiner (its earlier self)
	// and as a newcomer with every protocol and topic the group's
	// members name, each replacing nobody or any member.
	outsider := &Member{ID: "outsider"}
	seenProto, seenTopic := map[string]bool{}, map[string]bool{}
	for _, m := range g.Members.All() {
		for _, p := range m.Protocols {
			if !seenProto[p.Name] {
				seenProto[p.Name] = true
				outsider.Protocols = append(outsider.Protocols, Protocol{Name: p.Name})
			}
		}
		for _, t := range m.Topics {
			if !seenTopic[t] {
				seenTopic[t] = true
				outsider.Topics = append(outsider.Topics, t)
			}
		}
	}
	outsider.Protocols = append(outsider.Protocols, Protocol{Name: "nobody-else"})
	outsider.Topics = append(outsider.Topics, "t1", "t2", "t3", "t4")
	slices.Sort(outsider.Topics)
	outsider.Topics = slices.Compact(outsider.Topics)
	joiners := append(g.Members.Slice(), outsider)
	replaced := append([]*Member{nil}, g.Members.Slice()...)
	for _, m := range joiners {
		for _, r := range replaced {
			if got, want := commonProtocols(g, m, r), commonProtocolsOracle(g, m, r); !slices.Equal(got, want) {
				return fmt.Sprintf("commonProtocols(%s, replacing %v) = %v, a scan finds %v", m.ID, r, got, want)
			}
			if got, want := s.subscribedPartitions(g, r, m), subscribedOracle(s, g, r, m); got != want {
				return fmt.Sprintf("subscribedPartitions(without %v, with %s) = %d, a scan finds %d", r, m.ID, got, want)
			}
		}
	}
	return ""
}

// Members of every kind: static or not, with timeouts, protocols and
// topics that differ, so that the counts rise and fall.
var (
	derivedMembers   = []string{"a", "b", "c", "d", "e", "f"}
	derivedInstances = []string{"", "", "i1", "i2", "i3"}
	derivedTimeouts  = []int{1000, 3000, 3000, 60000}
	derivedProtocols = [][]string{{"range"}, {"range", "roundrobin"}, {"roundrobin", "range"}, {"sticky", "range"}, {"custom"}}
	derivedTopics    = []string{"t1", "t2", "t3", "t4"}
)

// genDerivedJoin draws a join into g1 or g2 (g2 mostly server-side) from
// derivedMembers: a known member's rejoin, changed or not, or a new one,
// static or not.
func genDerivedJoin(rt *rapid.T, f *FSM, now int64) *fsmv1.Command {
	group := rapid.SampledFrom(propGroups).Draw(rt, "group")
	g, _ := f.Group(group)
	j := join{
		group:       group,
		member:      rapid.SampledFrom(derivedMembers).Draw(rt, "member"),
		instance:    rapid.SampledFrom(derivedInstances).Draw(rt, "instance"),
		topics:      rapid.SliceOfNDistinct(rapid.SampledFrom(derivedTopics), 0, 4, rapid.ID[string]).Draw(rt, "topics"),
		protocols:   rapid.SampledFrom(derivedProtocols).Draw(rt, "protocols"),
		rebalanceMs: int32(rapid.SampledFrom(derivedTimeouts).Draw(rt, "timeout")),
		delayMs:     int32(rapid.SampledFrom([]int{0, 0, 500}).Draw(rt, "delay")),
		newMember:   rapid.IntRange(0, 4).Draw(rt, "new") > 0,
		metadata:    rapid.SampledFrom([]string{"", "x", "longer metadata"}).Draw(rt, "metadata"),
	}
	if (group == propServerGroup) != (rapid.IntRange(0, 9).Draw(rt, "otherType") == 0) {
		j.protocolType = ServerProtocolType
		j.protocols = rapid.SampledFrom(propServerProtocols[:4]).Draw(rt, "serverProtocols")
		j.metadata = ""
	}
	if g != nil && g.Members.Len() > 0 && rapid.Bool().Draw(rt, "known") {
		m := rapid.SampledFrom(g.Members.Slice()).Draw(rt, "knownMember")
		j.member, j.instance, j.newMember = m.ID, m.InstanceID, false
		if rapid.Bool().Draw(rt, "unchanged") {
			j.topics, j.protocols, j.rebalanceMs, j.protocolType = m.Topics, nil, m.RebalanceTimeoutMs, g.ProtocolType
			for _, p := range m.Protocols {
				j.protocols = append(j.protocols, p.Name)
			}
			j.metadata = string(m.Protocols[0].Metadata)
		}
	}
	return at(now, j)
}

// genDerivedLeave draws a RemoveMembers naming one to three members of a
// group, by member ID or by instance ID, some unknown.
func genDerivedLeave(rt *rapid.T, f *FSM, now int64) *fsmv1.Command {
	group := rapid.SampledFrom(propGroups).Draw(rt, "group")
	rm := &fsmv1.RemoveMembers{GroupId: group, Reason: fsmv1.RemoveReason_REMOVE_REASON_LEAVE}
	g, _ := f.Group(group)
	for range rapid.IntRange(1, 3).Draw(rt, "leavers") {
		ref := &fsmv1.MemberRef{MemberId: rapid.SampledFrom(derivedMembers).Draw(rt, "leaver")}
		if g != nil && g.Members.Len() > 0 && rapid.IntRange(0, 3).Draw(rt, "real") > 0 {
			m := rapid.SampledFrom(g.Members.Slice()).Draw(rt, "realLeaver")
			ref.MemberId = m.ID
			if m.InstanceID != "" && rapid.Bool().Draw(rt, "byInstance") {
				ref.MemberId, ref.InstanceId = "", m.InstanceID
			}
		}
		rm.Members = append(rm.Members, ref)
	}
	return &fsmv1.Command{TimestampMs: now, Kind: &fsmv1.Command_RemoveMembers{RemoveMembers: rm}}
}

// After random joins (protocols, topics, timeouts and instances that
// differ), leaves, completions, syncs, topic changes, commits, budget
// changes and snapshot restores, every derived figure equals its recompute
// from the members: the incremental figures are the ones a replica
// restored from a snapshot computes, so every replica decides budget
// refusals alike.
func TestProperty_DerivedFiguresEqualRecompute(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		f := New()
		now := int64(1000)
		if rapid.Bool().Draw(rt, "budgets") {
			f.Apply(1, SetBudgetsCommand(Budgets{
				MembersPerGroup:              int64(rapid.IntRange(2, 8).Draw(rt, "maxMembers")),
				SubscribedPartitionsPerGroup: int64(rapid.IntRange(1, 12).Draw(rt, "maxSubscribed")),
				MetadataBytesPerGroup:        int64(rapid.IntRange(50, 400).Draw(rt, "maxMetadata")),
				StateBytes:                   int64(rapid.IntRange(1000, 8000).Draw(rt, "maxState")),
			}))
		}
		for i := range rapid.IntRange(1, 150).Draw(rt, "steps") {
			now += int64(rapid.IntRange(0, 2000).Draw(rt, "elapsed"))
			var cmd *fsmv1.Command
			switch rapid.IntRange(0, 9).Draw(rt, "step") {
			case 0, 1, 2, 3:
				cmd = genDerivedJoin(rt, f, now)
			case 4:
				cmd = genDerivedLeave(rt, f, now)
			case 5:
				// Snapshot and restore: the rebuilt figures are the kept ones,
				// and the sequence goes on from the restored state.
				snap := snapshotOf(rt, f)
				restored := New()
				if err := restored.Restore(bytes.NewReader(snap)); err != nil {
					rt.Fatalf("restore: %v", err)
				}
				f.Read(func(s *State) {
					restored.Read(func(r *State) {
						for id, g := range s.groups {
							if rg := r.groups[id]; rg.ix.size != g.ix.size || rg.counted != g.counted || rg.ix.joined != g.ix.joined ||
								rg.RebalanceTimeoutMs() != g.RebalanceTimeoutMs() {
								rt.Fatalf("group %s restored with figures %+v (counted %d), kept %+v (counted %d)", id, rg.ix, rg.counted, g.ix, g.counted)
							}
						}
						if r.bytes() != s.bytes() {
							rt.Fatalf("state restored with size %d, kept %d", r.bytes(), s.bytes())
						}
					})
				})
				restored.SetAppliedIndex(f.AppliedIndex())
				f = restored
				continue
			default:
				// Completions, syncs, topic changes, commits, deletions,
				// expiries and budgets, as the invariants test draws them.
				cmd = genCommand(rt, f, now)
			}
			if rapid.IntRange(0, 4).Draw(rt, "current") > 0 {
				cmd.Version = CommandVersion
			}
			data, err := EncodeCommand(cmd)
			if err != nil {
				rt.Fatalf("encode: %v", err)
			}
			f.ApplyEntry(f.AppliedIndex()+1, data)
			var err2 string
			f.Read(func(s *State) { err2 = checkDerived(s) })
			if err2 != "" {
				rt.Fatalf("step %d, after %v: %s", i, cmd, err2)
			}
		}
	})
}

// A copy of a frozen group that changes its derived tables copies them
// first: the frozen group's stay as they were.
func TestDerived_FrozenGroupsTablesUnchangedByItsCopy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	h.ok(at(2, join{group: "g", member: "a", instance: "i-a", topics: []string{"t"}, protocols: []string{"range"}, rebalanceMs: 5000, newMember: true}))
	frozen := h.group("g")
	before := fmt.Sprintf("%+v", frozen.ix)
	h.ok(at(3, join{group: "g", member: "b", instance: "i-b", topics: []string{"t", "u"}, protocols: []string{"range", "sticky"}, rebalanceMs: 9000, newMember: true}))
	h.ok(at(4, remove{group: "g", members: []string{"a"}}))
	if after := fmt.Sprintf("%+v", frozen.ix); after != before {
		t.Fatalf("the frozen group's figures changed:\n%s\nto\n%s", before, after)
	}
	g := h.group("g")
	if _, ok := g.MemberByInstance("i-a"); ok || g.RebalanceTimeoutMs() != 9000 || count(&g.ix.protocols, "range") != 1 {
		t.Fatalf("the live group's figures: %+v", g.ix)
	}
	if m, ok := frozen.MemberByInstance("i-a"); !ok || m.ID != "a" || frozen.RebalanceTimeoutMs() != 5000 {
		t.Fatalf("the frozen group's lookups: %v %v, timeout %d", m, ok, frozen.RebalanceTimeoutMs())
	}
}

// A snapshot whose group gives one instance ID to two members (which the
// FSM never does) is refused rather than restored into a static-member
// index that could name only one of them.
func TestSnapshot_DuplicateInstanceIDRefused(t *testing.T) {
	t.Parallel()
	pg := &fsmv1.Group{GroupId: "g", State: fsmv1.GroupState(PreparingRebalance)}
	for _, id := range []string{"a", "b"} {
		pg.Members = append(pg.Members, &fsmv1.Member{Spec: &fsmv1.MemberSpec{
			MemberId: id, InstanceId: "same", SessionTimeoutMs: 1, RebalanceTimeoutMs: 1,
			Protocols: []*fsmv1.Protocol{{Name: "range"}},
		}})
	}
	if _, err := groupFromProto(pg); err == nil {
		t.Fatal("a group with one instance ID on two members restored")
	}
	pg.Members[1].Spec.InstanceId = "other"
	if _, err := groupFromProto(pg); err != nil {
		t.Fatalf("distinct instance IDs: %v", err)
	}
}

// A sortedMap holds what a plain map holds, in key order, across chunk
// splits and deletions; a copy taken before a change (as a frozen group
// shares its tables with its copy) keeps its entries whatever the later
// epochs do.
func TestSortedMap_MatchesAMapAndFrozenCopiesKeepTheirEntries(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		var sm sortedMap[int, int]
		want := map[int]int{}
		type frozen struct {
			sm   sortedMap[int, int]
			want []sortedEntry[int, int]
		}
		var copies []frozen
		epoch := uint64(1)
		for range rapid.IntRange(0, 600).Draw(rt, "ops") {
			k := rapid.IntRange(0, 400).Draw(rt, "key")
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				// The value is frozen: later changes happen under a new epoch.
				copies = append(copies, frozen{sm, sm.all()})
				epoch++
			case 1, 2, 3:
				sm.delete(epoch, k)
				delete(want, k)
			default:
				sm.set(epoch, k, k*10+int(epoch))
				want[k] = k*10 + int(epoch)
			}
			v, ok := sm.get(k)
			if wv, wok := want[k]; v != wv || ok != wok {
				rt.Fatalf("get(%d) = %d, %v; want %d, %v", k, v, ok, wv, wok)
			}
		}
		var all []sortedEntry[int, int]
		for _, k := range slices.Sorted(maps.Keys(want)) {
			all = append(all, sortedEntry[int, int]{k, want[k]})
		}
		if got := sm.all(); !slices.Equal(got, all) {
			rt.Fatalf("entries %v, want %v", got, all)
		}
		if last, ok := sm.last(); ok != (len(all) > 0) || ok && last != all[len(all)-1] {
			rt.Fatalf("last %v %v, entries %v", last, ok, all)
		}
		for _, ch := range sm.chunks {
			if len(ch.entries) == 0 || len(ch.entries) >= 2*chunkSize {
				rt.Fatalf("a chunk of %d entries", len(ch.entries))
			}
		}
		for i, c := range copies {
			if got := c.sm.all(); !slices.Equal(got, c.want) {
				rt.Fatalf("copy %d changed: %v, was %v", i, got, c.want)
			}
		}
	})
}
