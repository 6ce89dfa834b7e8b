package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/cohortlabs/cohort/assign"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"pgregory.net/rapid"
)

// The universe random command sequences draw from: small, so that commands
// collide on the same groups, members and partitions often.
var (
	propGroups    = []string{"g1", "g2"}
	propMembers   = []string{"m1", "m2", "m3", "m4"}
	propInstances = []string{"", "", "i1", "i2"}
	propTopics    = []string{"t1", "t2", "t3"}
	propProtocols = [][]string{{"range"}, {"range", "roundrobin"}, {"roundrobin"}}
	// Group g2 is mostly server-side (the FSM assigns); cooperative-sticky
	// is refused there.
	propServerGroup     = "g2"
	propServerProtocols = [][]string{{"sticky"}, {"range", "sticky"}, {"consistent-hash"}, {"roundrobin"}, {"cooperative-sticky"}}
)

// genCommand draws one command, mostly plausible given the current state
// (current generations, real members, valid plans), sometimes not.
func genCommand(rt *rapid.T, f *FSM, now int64) *fsmv1.Command {
	var s *State
	f.Read(func(st *State) { s = st.clone() })
	group := rapid.SampledFrom(propGroups).Draw(rt, "group")
	g, exists := s.groups[group]
	pick := func(label string) *Member {
		if !exists || g.Members.Len() == 0 {
			return nil
		}
		return rapid.SampledFrom(g.Members.Slice()).Draw(rt, label)
	}
	generation := func() int32 {
		if exists && rapid.IntRange(0, 9).Draw(rt, "currentGen") > 1 {
			return g.Generation
		}
		return int32(rapid.IntRange(-1, 4).Draw(rt, "gen"))
	}
	topicsOf := func() []string {
		return rapid.SliceOfNDistinct(rapid.SampledFrom(propTopics), 0, 3, rapid.ID[string]).Draw(rt, "topics")
	}
	var k isKind
	switch rapid.IntRange(0, 14).Draw(rt, "kind") {
	case 14:
		// Small budgets, so that commands hit them.
		b := Budgets{}
		for _, fld := range BudgetFields() {
			*fld.Value(&b) = int64(rapid.IntRange(0, 40).Draw(rt, fld.Name)) * int64(rapid.SampledFrom([]int{1, 1, 100}).Draw(rt, fld.Name+"Scale"))
		}
		cmd := SetBudgetsCommand(b)
		cmd.TimestampMs = now
		return cmd
	case 0:
		k = createTopic{rapid.SampledFrom(propTopics).Draw(rt, "topic"), int32(rapid.IntRange(0, 4).Draw(rt, "partitions"))}
	case 1:
		if rapid.Bool().Draw(rt, "delete") {
			k = deleteTopic(rapid.SampledFrom(propTopics).Draw(rt, "topic"))
		} else {
			k = addPartitions{rapid.SampledFrom(propTopics).Draw(rt, "topic"), int32(rapid.IntRange(1, 6).Draw(rt, "partitions"))}
		}
	case 2, 3, 4:
		j := join{group: group, topics: topicsOf(), protocols: rapid.SampledFrom(propProtocols).Draw(rt, "protocols"),
			delayMs: int32(rapid.SampledFrom([]int{0, 0, 500}).Draw(rt, "delay")), rebalanceMs: 3000}
		if (group == propServerGroup) != (rapid.IntRange(0, 9).Draw(rt, "otherType") == 0) {
			j.protocolType = ServerProtocolType
			j.protocols = rapid.SampledFrom(propServerProtocols).Draw(rt, "serverProtocols")
			j.metadata = genServerMetadata(rt)
		}
		if m := pick("member"); m != nil && rapid.Bool().Draw(rt, "known") {
			j.member, j.instance = m.ID, m.InstanceID
			if rapid.IntRange(0, 3).Draw(rt, "sameMeta") > 0 {
				j.topics, j.protocols, j.protocolType, j.metadata = m.Topics, nil, g.ProtocolType, string(m.Protocols[0].Metadata)
				for _, p := range m.Protocols {
					j.protocols = append(j.protocols, p.Name)
				}
			}
		} else {
			j.member = rapid.SampledFrom(propMembers).Draw(rt, "member") + fmt.Sprint(now%3)
			j.instance = rapid.SampledFrom(propInstances).Draw(rt, "instance")
			j.newMember = rapid.IntRange(0, 9).Draw(rt, "new") > 0
		}
		k = j
	case 5:
		k = completeJoin{group, generation(), rapid.Bool().Draw(rt, "initialDelay")}
	case 6, 7:
		sc := syncCmd{group: group, generation: generation(), plan: plan{}}
		if exists {
			sc.member = g.LeaderID
			if m := pick("syncer"); m != nil && rapid.IntRange(0, 4).Draw(rt, "byLeader") == 0 {
				sc.member = m.ID
			}
			valid := rapid.IntRange(0, 4).Draw(rt, "validPlan") > 0
			for _, t := range propTopics {
				n := s.topics[t]
				if !valid {
					n = int32(rapid.IntRange(0, 3).Draw(rt, "n"))
				}
				for p := int32(0); p < n; p++ {
					var subs []*Member
					for _, m := range g.Members.All() {
						if !valid || m.Subscribes(t) {
							subs = append(subs, m)
						}
					}
					if len(subs) == 0 {
						continue
					}
					m := rapid.SampledFrom(subs).Draw(rt, "owner")
					if sc.plan[m.ID] == nil {
						sc.plan[m.ID] = map[string][]int32{}
					}
					sc.plan[m.ID][t] = append(sc.plan[m.ID][t], p)
				}
			}
		}
		k = sc
	case 8:
		r := remove{group: group, reason: fsmv1.RemoveReason_REMOVE_REASON_SESSION_EXPIRED}
		if m := pick("leaver"); m != nil {
			r.members = append(r.members, m.ID)
		}
		if rapid.Bool().Draw(rt, "alsoUnknown") {
			r.members = append(r.members, "zz")
		}
		k = r
	case 9, 10, 11:
		c := commit{group: group, topic: rapid.SampledFrom(propTopics).Draw(rt, "topic"), offset: int64(rapid.IntRange(-1, 100).Draw(rt, "offset"))}
		c.partitions = rapid.SliceOfNDistinct(rapid.Int32Range(0, 4), 1, 3, rapid.ID[int32]).Draw(rt, "partitions")
		if m := pick("committer"); m != nil && rapid.IntRange(0, 4).Draw(rt, "standalone") > 0 {
			c.member, c.generation = m.ID, generation()
			if len(m.Assignment.Topics) > 0 && rapid.Bool().Draw(rt, "owned") {
				tp := rapid.SampledFrom(m.Assignment.Topics).Draw(rt, "ownedTopic")
				c.topic, c.partitions = tp.Topic, tp.Partitions
			}
		} else {
			c.generation = -1
		}
		k = c
	case 12:
		if rapid.Bool().Draw(rt, "batch") {
			// Two commands in one entry, as the leader coalesces commits.
			// Only commits are batched by the engine; a batch that deletes
			// and recreates a group would defeat the per-command
			// generation check below.
			first, second := genCommand(rt, f, now), genCommand(rt, f, now)
			if first.GetCommitOffsets() != nil && second.GetCommitOffsets() != nil {
				return &fsmv1.Command{TimestampMs: now, Kind: &fsmv1.Command_Batch{Batch: &fsmv1.Batch{Commands: []*fsmv1.Command{first, second}}}}
			}
		}
		k = deleteGroups{group}
	default:
		k = expire(int64(rapid.IntRange(1, 5000).Draw(rt, "retention")))
	}
	cmd := at(now, k)
	// Mostly commands under today's rules; some written before budgets.
	if rapid.IntRange(0, 4).Draw(rt, "current") > 0 {
		cmd.Version = CommandVersion
	}
	return cmd
}

// genServerMetadata draws a server-side member's metadata: none, bytes that
// do not decode, or a subscription claiming random partitions at a random
// generation (possibly conflicting with other members' claims).
func genServerMetadata(rt *rapid.T) string {
	switch rapid.IntRange(0, 3).Draw(rt, "metaKind") {
	case 0:
		return ""
	case 1:
		return "\x00\x01garbage"
	}
	sub := assign.Subscription{Generation: int32(rapid.IntRange(-1, 4).Draw(rt, "claimGen"))}
	for _, t := range rapid.SliceOfNDistinct(rapid.SampledFrom(propTopics), 0, 2, rapid.ID[string]).Draw(rt, "claimTopics") {
		ps := rapid.SliceOfNDistinct(rapid.Int32Range(0, 5), 1, 3, rapid.ID[int32]).Draw(rt, "claimPartitions")
		sub.Owned = append(sub.Owned, assign.TopicPartitions{Topic: t, Partitions: ps})
	}
	b, err := assign.EncodeSubscription(sub)
	if err != nil {
		rt.Fatalf("encode subscription: %v", err)
	}
	return string(b)
}

// checkInvariants asserts what must hold after every command, given the
// state before it (pre) and the result.
func checkInvariants(rt *rapid.T, pre, post *State, cmd *fsmv1.Command, res *ApplyResult, preBytes, postBytes []byte) {
	if res.Err != nil && !bytes.Equal(preBytes, postBytes) {
		rt.Fatalf("refused command %v (%v) changed the state", cmd, res.Err)
	}
	// The size estimate and the groups' derived figures kept command by
	// command are those computed afresh.
	if err := checkDerived(post); err != "" {
		rt.Fatalf("after %v: %s", cmd, err)
	}
	// Growth under today's rules never passes a budget that was set. (A
	// server-side plan, computed when a join round closes, is bounded by
	// the subscribed-partitions budget instead: it may not fail.)
	checked := false
	switch cmd.GetKind().(type) {
	case *fsmv1.Command_CreateTopic, *fsmv1.Command_AddPartitions, *fsmv1.Command_SyncAssignment,
		*fsmv1.Command_CommitOffsets, *fsmv1.Command_RegisterNode:
		checked = true
	case *fsmv1.Command_JoinMember:
		checked = res.ServerAssignment == nil
	}
	if checked && cmd.GetVersion() >= 1 && res.Err == nil {
		b, u := post.budgets, post.usage()
		for _, f := range []struct {
			name        string
			limit, used int64
			pre         int64
		}{
			{"topics", b.Topics, u.Topics, int64(len(pre.topics))},
			{"partitions", b.Partitions, u.Partitions, pre.partitions},
			{"groups", b.Groups, u.Groups, int64(len(pre.groups))},
			// Both under the rules the usage is figured under: a
			// command under newer rules re-figures the state before it.
			{"state-bytes", b.StateBytes, u.StateBytes, pre.estimateUnder(post.rulesSeen)},
		} {
			if f.limit > 0 && f.used > f.limit && f.used > f.pre {
				rt.Fatalf("after %v: %s grew from %d to %d, over the budget of %d", cmd, f.name, f.pre, f.used, f.limit)
			}
		}
	}
	members := 0
	for id, g := range post.groups {
		members += g.Members.Len()
		if old, ok := pre.groups[id]; ok && g.Generation < old.Generation {
			rt.Fatalf("group %s generation went back from %d to %d after %v", id, old.Generation, g.Generation, cmd)
		}
		for i := 1; i < g.Members.Len(); i++ {
			if g.Members.Slice()[i-1].ID >= g.Members.Slice()[i].ID {
				rt.Fatalf("group %s members not sorted", id)
			}
		}
		if (g.State == Stable || g.State == CompletingRebalance) && g.Members.Len() > 0 {
			if _, ok := g.Member(g.LeaderID); !ok {
				rt.Fatalf("group %s in %s has leader %q who is not a member", id, g.State, g.LeaderID)
			}
		}
		if g.State == Empty && g.Members.Len() > 0 {
			rt.Fatalf("group %s is Empty with %d members", id, g.Members.Len())
		}
		if g.ProtocolType == ServerProtocolType && g.State == CompletingRebalance {
			rt.Fatalf("server-side group %s waits for a leader's plan", id)
		}
		if g.ProtocolType == ServerProtocolType && g.State == Stable && res.JoinCompleted && res.Group != nil && res.Group.ID == id {
			// The FSM's own plan leaves no partition of a subscribed topic out.
			for _, t := range slices.Sorted(maps.Keys(post.topics)) {
				if !slices.ContainsFunc(g.Members.Slice(), func(m *Member) bool { return m.Subscribes(t) }) {
					continue
				}
				for p := int32(0); p < post.topics[t]; p++ {
					if !slices.ContainsFunc(g.Members.Slice(), func(m *Member) bool { return m.Assignment.Owns(t, p) }) {
						rt.Fatalf("server-side group %s: %s/%d unassigned after %v (%+v)", id, t, p, cmd, res.ServerAssignment)
					}
				}
			}
		}
		if g.State != Stable {
			continue
		}
		owner := map[string]string{}
		for _, m := range g.Members.All() {
			for _, tp := range m.Assignment.Topics {
				n, ok := post.topics[tp.Topic]
				if !ok {
					rt.Fatalf("stable group %s: member %s owns partitions of missing topic %s", id, m.ID, tp.Topic)
				}
				if !m.Subscribes(tp.Topic) {
					rt.Fatalf("stable group %s: member %s owns %s without subscribing", id, m.ID, tp.Topic)
				}
				for _, p := range tp.Partitions {
					key := fmt.Sprintf("%s/%d", tp.Topic, p)
					if p < 0 || p >= n {
						rt.Fatalf("stable group %s: %s owns %s beyond %d partitions", id, m.ID, key, n)
					}
					if prev, dup := owner[key]; dup {
						rt.Fatalf("stable group %s: %s owned by %s and %s", id, key, prev, m.ID)
					}
					owner[key] = m.ID
				}
			}
		}
	}
	if members != post.members {
		rt.Fatalf("member counter %d, actual %d", post.members, members)
	}
	// Every stored offset came from its owner in the current generation, or
	// (command rules 2, KIP-429) from the member that owned it in the
	// previous generation while nobody owns it yet, or from a standalone
	// commit to a group without members.
	if c := cmd.GetCommitOffsets(); c != nil && res.Err == nil {
		g, existed := pre.groups[c.GetGroupId()]
		for i, o := range c.GetOffsets() {
			if res.Partitions[i].Err != nil {
				continue
			}
			if c.GetMemberId() == "" {
				if existed && g.Members.Len() > 0 {
					rt.Fatalf("standalone commit accepted for group %s with members", c.GetGroupId())
				}
				continue
			}
			m, ok := g.Member(c.GetMemberId())
			owns := ok && m.Assignment.Owns(o.GetTopic(), o.GetPartition())
			gaveUp := ok && cmd.GetVersion() >= 2 && m.PreviousAssignment.Owns(o.GetTopic(), o.GetPartition()) &&
				!slices.ContainsFunc(g.Members.Slice(), func(other *Member) bool { return other.Assignment.Owns(o.GetTopic(), o.GetPartition()) })
			if !existed || !ok || c.GetGeneration() != g.Generation || g.State == CompletingRebalance || !(owns || gaveUp) {
				rt.Fatalf("commit of %s/%d by %s at generation %d accepted, but it was not the owner in the current generation", o.GetTopic(), o.GetPartition(), c.GetMemberId(), c.GetGeneration())
			}
		}
	}
}

func snapshotOf(rt *rapid.T, f *FSM) []byte {
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		rt.Fatalf("snapshot: %v", err)
	}
	return buf.Bytes()
}

func TestProperty_RandomCommandsKeepInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		f := New()
		var log [][]byte
		var results []*ApplyResult
		now := int64(1000)
		steps := rapid.IntRange(1, 120).Draw(rt, "steps")
		cut := rapid.IntRange(0, steps).Draw(rt, "snapshotAt")
		var cutSnap []byte
		for i := 0; i < steps; i++ {
			if i == cut {
				cutSnap = snapshotOf(rt, f)
			}
			now += int64(rapid.IntRange(0, 2000).Draw(rt, "elapsed"))
			cmd := genCommand(rt, f, now)
			data, err := EncodeCommand(cmd)
			if err != nil {
				rt.Fatalf("encode: %v", err)
			}
			var pre *State
			f.Read(func(s *State) { pre = s.clone() })
			preBytes := snapshotOf(rt, f)
			res := f.ApplyEntry(uint64(i+1), data)
			var post *State
			f.Read(func(s *State) { post = s.clone() })
			checkInvariants(rt, pre, post, cmd, res, preBytes, snapshotOf(rt, f))
			log = append(log, data)
			results = append(results, res)
		}
		if cutSnap == nil {
			cutSnap = snapshotOf(rt, f)
		}
		final := snapshotOf(rt, f)

		// Two FSMs fed the same log hold byte-identical snapshots.
		replay := New()
		for i, data := range log {
			replay.ApplyEntry(uint64(i+1), data)
		}
		if !bytes.Equal(final, snapshotOf(rt, replay)) {
			rt.Fatalf("replaying the same log gave a different snapshot")
		}

		// Snapshot → restore → the same state and the same results.
		restored := New()
		if err := restored.Restore(bytes.NewReader(cutSnap)); err != nil {
			rt.Fatalf("restore: %v", err)
		}
		for i := cut; i < len(log); i++ {
			res := restored.ApplyEntry(uint64(i+1), log[i])
			if errcode.Of(res.Err) != errcode.Of(results[i].Err) || res.JoinCompleted != results[i].JoinCompleted {
				rt.Fatalf("entry %d after restore: %v completed=%v, originally %v completed=%v", i, res.Err, res.JoinCompleted, results[i].Err, results[i].JoinCompleted)
			}
			for j := range res.Partitions {
				if errcode.Of(res.Partitions[j].Err) != errcode.Of(results[i].Partitions[j].Err) {
					rt.Fatalf("entry %d partition %d after restore: %v, originally %v", i, j, res.Partitions[j].Err, results[i].Partitions[j].Err)
				}
			}
		}
		if !bytes.Equal(final, snapshotOf(rt, restored)) {
			rt.Fatalf("restore then replay gave a different state")
		}
	})
}
