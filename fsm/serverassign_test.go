package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/assign"
	"github.com/cohortlabs/cohort/errcode"
)

func serverJoin(group, member string, protocols []string, metadata string, newMember bool) join {
	return join{group: group, member: member, topics: []string{"t"}, protocols: protocols, protocolType: ServerProtocolType, metadata: metadata, newMember: newMember}
}

// ownedBy returns member → partitions of topic t, for comparisons.
func ownedBy(g *Group) map[string][]int32 {
	out := map[string][]int32{}
	for _, m := range g.Members.All() {
		for _, tp := range m.Assignment.Topics {
			out[m.ID] = append(out[m.ID], tp.Partitions...)
		}
	}
	return out
}

// stableServerGroup forms a server-side group "g" of the given members on
// topic "t" (12 partitions) with the sticky assignor.
func stableServerGroup(t *testing.T, members ...string) *harness {
	t.Helper()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 12}))
	for _, id := range members {
		h.ok(at(2, serverJoin("g", id, []string{"sticky"}, "", true)))
	}
	g := h.group("g")
	for _, m := range g.Members.All() {
		if !m.Joined {
			h.ok(at(3, serverJoin("g", m.ID, []string{"sticky"}, "", false)))
		}
	}
	if g := h.group("g"); g.State != Stable || g.Members.Len() != len(members) {
		t.Fatalf("setup: group %s with %d members", g.State, g.Members.Len())
	}
	return h
}

func TestServerSide_JoinCompletionAssignsAndGoesStable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 6}))
	res := h.ok(at(2, serverJoin("g", "a", []string{"range"}, "", true)))
	if !res.JoinCompleted || res.Group.State != Stable || res.ServerAssignment == nil || res.ServerAssignment.Assignor != "range" {
		t.Fatalf("first join: completed=%v state=%s report=%+v", res.JoinCompleted, res.Group.State, res.ServerAssignment)
	}
	if got := ownedBy(res.Group)["a"]; !slices.Equal(got, []int32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("sole member owns %v", got)
	}
	// A second member: the group rebalances; when both have joined the FSM
	// assigns, with no SyncAssignment in between.
	h.ok(at(3, serverJoin("g", "b", []string{"range"}, "", true)))
	res = h.ok(at(4, serverJoin("g", "a", []string{"range"}, "", false)))
	g := res.Group
	if !res.JoinCompleted || g.State != Stable || g.Generation != 2 {
		t.Fatalf("after rejoin: %s generation %d completed=%v", g.State, g.Generation, res.JoinCompleted)
	}
	if got := ownedBy(g); !slices.Equal(got["a"], []int32{0, 1, 2}) || !slices.Equal(got["b"], []int32{3, 4, 5}) {
		t.Fatalf("range plan: %v", got)
	}
	if len(res.ServerAssignment.Notes) != 0 {
		t.Fatalf("notes: %v", res.ServerAssignment.Notes)
	}
	// SyncGroup (from anyone) is a retry answered from Stable; commits are
	// fenced by the FSM's plan.
	h.ok(at(5, syncCmd{group: "g", generation: 2, member: "b"}))
	if r := h.ok(at(6, commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{3, 0}, offset: 7})); r.Partitions[0].Err != nil || errcode.Of(r.Partitions[1].Err) != errcode.NotOwner {
		t.Fatalf("commit: %v %v", r.Partitions[0].Err, r.Partitions[1].Err)
	}
}

func TestServerSide_StickyKeepsTheFSMRecordOfThePreviousGeneration(t *testing.T) {
	t.Parallel()
	h := stableServerGroup(t, "a", "b", "c")
	before := ownedBy(h.group("g"))
	// A fourth member joins; everyone rejoins with no metadata at all: the
	// FSM's record alone makes the plan sticky (3 moves, the minimum).
	h.ok(at(10, serverJoin("g", "d", []string{"sticky"}, "", true)))
	var res *ApplyResult
	for _, id := range []string{"a", "b", "c"} {
		res = h.ok(at(11, serverJoin("g", id, []string{"sticky"}, "", false)))
	}
	if !res.JoinCompleted || res.ServerAssignment.RecordClaims != 12 {
		t.Fatalf("completion: %v %+v", res.JoinCompleted, res.ServerAssignment)
	}
	after := ownedBy(res.Group)
	moves := 0
	for _, id := range []string{"a", "b", "c"} {
		if len(after[id]) != 3 {
			t.Fatalf("member %s has %v", id, after[id])
		}
		for _, p := range after[id] {
			if !slices.Contains(before[id], p) {
				t.Fatalf("member %s gained %d: %v → %v", id, p, before, after)
			}
		}
		moves += len(before[id]) - len(after[id])
	}
	if moves != 3 || len(after["d"]) != 3 {
		t.Fatalf("moves %d, joiner %v", moves, after["d"])
	}
}

func TestServerSide_MetadataClaimsFillWhatTheRecordDoesNotPlace(t *testing.T) {
	t.Parallel()
	h := stableServerGroup(t, "a", "b")
	g := h.group("g")
	gen := g.Generation
	prev := ownedBy(g)
	h.ok(at(20, remove{group: "g", members: []string{"a", "b"}}))
	if g := h.group("g"); g.State != Empty {
		t.Fatalf("after everyone left: %s", g.State)
	}
	// They come back with new IDs, claiming what they had and one partition
	// of the other.
	md := func(owned []int32, gen int32) string {
		b, err := assign.EncodeSubscription(assign.Subscription{Topics: []string{"t"}, Owned: []assign.TopicPartitions{{Topic: "t", Partitions: owned}}, Generation: gen})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	h.ok(at(21, serverJoin("g", "a2", []string{"sticky"}, md(append(slices.Clone(prev["a"]), prev["b"][1]), gen), true)))
	// The join above completed alone (sole member): rejoin both.
	h.ok(at(22, serverJoin("g", "b2", []string{"sticky"}, md(append(slices.Clone(prev["b"]), prev["a"][0]), gen), true)))
	res := h.ok(at(23, serverJoin("g", "a2", []string{"sticky"}, md(append(slices.Clone(prev["a"]), prev["b"][1]), gen), false)))
	if !res.JoinCompleted {
		t.Fatal("join did not complete")
	}
	after := ownedBy(res.Group)
	// a2 had the group alone for a generation (the FSM's record now says it
	// owns everything), so the record wins over both metadata claims: the
	// sticky plan keeps a2's quota and b2 gets the rest.
	if len(after["a2"]) != 6 || len(after["b2"]) != 6 || res.ServerAssignment.RecordClaims != 12 {
		t.Fatalf("plan %v, report %+v", after, res.ServerAssignment)
	}
}

func TestServerSide_MetadataClaimsAfterEveryoneLeft(t *testing.T) {
	t.Parallel()
	// Both members rejoin in one round (the initial delay keeps the barrier
	// open), so their metadata claims are the only previous ownership.
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	md := func(owned []int32, gen int32) string {
		b, err := assign.EncodeSubscription(assign.Subscription{Topics: []string{"t"}, Owned: []assign.TopicPartitions{{Topic: "t", Partitions: owned}}, Generation: gen})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	j := serverJoin("g", "x", []string{"sticky"}, md([]int32{0, 3}, 5), true)
	j.delayMs = 1000
	h.ok(at(10, j))
	// y claims 3 at an older generation (x wins it) and 1, 2.
	j = serverJoin("g", "y", []string{"sticky"}, md([]int32{1, 2, 3}, 4), true)
	j.delayMs = 1000
	h.ok(at(20, j))
	res := h.ok(at(2000, completeJoin{"g", 0, true}))
	after := ownedBy(res.Group)
	if !slices.Equal(after["x"], []int32{0, 3}) || !slices.Equal(after["y"], []int32{1, 2}) {
		t.Fatalf("plan %v, report %+v", after, res.ServerAssignment)
	}
	if res.ServerAssignment.MetadataClaims != 4 || res.ServerAssignment.RecordClaims != 0 {
		t.Fatalf("report %+v", res.ServerAssignment)
	}
}

func TestServerSide_UndecodableMetadataIsNoClaimAndIsReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	res := h.ok(at(2, serverJoin("g", "a", []string{"sticky"}, "\x00\x00not a subscription", true)))
	if res.Group.State != Stable || len(ownedBy(res.Group)["a"]) != 4 {
		t.Fatalf("state %s plan %v", res.Group.State, ownedBy(res.Group))
	}
	notes := res.ServerAssignment.Notes
	if len(notes) != 1 || !strings.Contains(notes[0], `member "a": metadata does not decode`) {
		t.Fatalf("notes %q", notes)
	}
}

func TestServerSide_RefusesCooperativeAndUnknownAssignors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, protocols := range [][]string{{"cooperative-sticky"}, {"sticky", "cooperative-sticky"}, {"my-own"}} {
		res := h.refused(at(1, serverJoin("g", "a", protocols, "", true)), errcode.InconsistentGroupProtocol)
		wantCode(t, res.Err, errcode.InconsistentGroupProtocol)
	}
	// The same protocols are fine for a client-side group.
	h.ok(at(2, join{group: "g", member: "a", topics: []string{"t"}, protocols: []string{"cooperative-sticky"}, newMember: true}))
	if err := CheckServerProtocols("m", ServerAssignors()); err != nil {
		t.Fatalf("every server assignor: %v", err)
	}
}

func TestServerSide_AssignorFailureFallsBackToRange(t *testing.T) {
	t.Parallel()
	// A group whose protocol the FSM cannot run (a log written before the
	// join check, say) still gets a plan, and the fallback is reported.
	s := NewState()
	s.topics["t"] = 4
	g := &Group{ID: "g", ProtocolType: ServerProtocolType, Protocol: "no-such-assignor", Generation: 1, State: CompletingRebalance, epoch: s.epoch,
		Members: memberListOf(&Member{ID: "a", Topics: []string{"t"}, Joined: true}, &Member{ID: "b", Topics: []string{"t"}, Joined: true})}
	rep := s.assignServerSide(5, g, map[string]Assignment{})
	if rep.Assignor != "range" || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "falling back") {
		t.Fatalf("report %+v", rep)
	}
	if g.State != Stable || fmt.Sprint(ownedBy(g)) != "map[a:[0 1] b:[2 3]]" {
		t.Fatalf("%s %v", g.State, ownedBy(g))
	}
}

func TestServerSide_TopicChangeReassigns(t *testing.T) {
	t.Parallel()
	h := stableServerGroup(t, "a", "b")
	h.ok(at(30, addPartitions{"t", 16}))
	var res *ApplyResult
	for _, id := range []string{"a", "b"} {
		res = h.ok(at(31, serverJoin("g", id, []string{"sticky"}, "", false)))
	}
	after := ownedBy(res.Group)
	if len(after["a"]) != 8 || len(after["b"]) != 8 {
		t.Fatalf("after adding partitions: %v", after)
	}
}

// BenchmarkServerSideJoinCompletion is the cost server-side assignment adds
// to the apply that closes the barrier (the FSM is blocked meanwhile): a
// 100-member group on 20 topics × 50 partitions (identical subscriptions),
// where each round one member's changed metadata starts a rebalance and the
// timed apply is the last rejoin, which runs the assignor.
func BenchmarkServerSideJoinCompletion(b *testing.B) {
	// "client-side" is the baseline: the same apply for a group whose
	// leader assigns (it only goes to CompletingRebalance).
	for _, assignor := range []string{"client-side", "sticky", "range", "consistent-hash"} {
		b.Run(assignor, func(b *testing.B) {
			protocolType, protocols, want := ServerProtocolType, []string{assignor}, Stable
			if assignor == "client-side" {
				protocolType, protocols, want = "consumer", []string{"sticky"}, CompletingRebalance
			}
			const members, topics, partitions = 100, 20, 50
			f := New()
			var idx uint64
			apply := func(k isKind) *ApplyResult {
				idx++
				res := f.ApplyEntry(idx, encode(b, at(int64(idx), k)))
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				return res
			}
			var names []string
			for i := range topics {
				names = append(names, fmt.Sprintf("topic-%02d", i))
				apply(createTopic{names[i], partitions})
			}
			md := func(gen int32) string {
				sub, err := assign.EncodeSubscription(assign.Subscription{Topics: names, Generation: gen})
				if err != nil {
					b.Fatal(err)
				}
				return string(sub)
			}
			mj := func(i int, newMember bool, metadata string) join {
				return join{group: "g", member: fmt.Sprintf("member-%03d", i), topics: names, protocols: protocols, protocolType: protocolType, newMember: newMember, metadata: metadata}
			}
			for i := range members {
				apply(mj(i, true, ""))
			}
			for i := range members {
				apply(mj(i, false, ""))
			}
			if g, _ := f.Group("g"); g.State != want {
				b.Fatalf("setup: %s", g.State)
			}
			// Each round: every member but the last rejoins (not timed),
			// then the last one's join, which completes the barrier, is.
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				b.StopTimer()
				apply(mj(members-1, false, md(int32(n)))) // changed metadata: → Preparing
				for i := range members - 2 {
					apply(mj(i, false, ""))
				}
				last := encode(b, at(int64(idx+1), mj(members-2, false, "")))
				b.StartTimer()
				idx++
				res := f.ApplyEntry(idx, last)
				if res.Err != nil || !res.JoinCompleted || res.Group.State != want {
					b.Fatalf("%v completed=%v", res.Err, res.JoinCompleted)
				}
			}
		})
	}
}

// A sole member switching its group between client-side and server-side
// assignment rebalances, so the new type's rule decides who assigns (found
// by the property test: a CompletingRebalance group turned "server" would
// have waited for a leader's plan forever).
func TestServerSide_SoleMemberSwitchingTypeRebalances(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	res := h.ok(at(2, join{group: "g", member: "a", topics: []string{"t"}, protocols: []string{"range"}, newMember: true}))
	if res.Group.State != CompletingRebalance {
		t.Fatalf("client-side: %s", res.Group.State)
	}
	res = h.ok(at(3, serverJoin("g", "a", []string{"range"}, "", false)))
	if g := res.Group; g.State != Stable || g.Generation != 2 || g.Members.Slice()[0].Assignment.Len() != 4 {
		t.Fatalf("after switching to server: %s generation %d %v", g.State, g.Generation, ownedBy(g))
	}
	res = h.ok(at(4, join{group: "g", member: "a", topics: []string{"t"}, protocols: []string{"range"}}))
	if g := res.Group; g.State != CompletingRebalance || g.Generation != 3 || g.Members.Slice()[0].Assignment.Len() != 0 {
		t.Fatalf("after switching back: %s generation %d", g.State, g.Generation)
	}
}
