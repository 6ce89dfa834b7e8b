package fsm

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// under stamps cmd with command rules v.
func under(v uint32, cmd *fsmv1.Command) *fsmv1.Command {
	cmd.Version = v
	return cmd
}

func TestRules_AnEntryUnderNewerRulesIsNotApplied(t *testing.T) {
	h := newHarness(t)
	if err := h.f.LimitRules(1); err != nil {
		t.Fatal(err)
	}
	if h.f.MaxRules() != 1 {
		t.Fatalf("MaxRules %d after LimitRules(1)", h.f.MaxRules())
	}
	h.ok(under(1, at(1, createTopic{"t", 3})))
	before, applied := snapshotBytes(t, h.f), h.f.AppliedIndex()
	res := h.apply(under(2, at(2, createTopic{"u", 3})))
	if !errors.Is(res.Err, ErrNewerRules) {
		t.Fatalf("entry under rules 2 on an FSM that applies 1: %v, want ErrNewerRules", res.Err)
	}
	if !bytes.Equal(before, snapshotBytes(t, h.f)) || h.f.AppliedIndex() != applied {
		t.Fatalf("the refused entry changed the state or moved the applied index (%d -> %d)", applied, h.f.AppliedIndex())
	}
	for _, v := range []uint32{0, CommandVersion + 1} {
		if err := New().LimitRules(v); err == nil {
			t.Fatalf("LimitRules(%d) accepted", v)
		}
	}
	if New().MaxRules() != CommandVersion {
		t.Fatalf("a new FSM applies rules up to %d, want CommandVersion %d", New().MaxRules(), CommandVersion)
	}
}

func TestRules_RegistryKeepsEachNodesStatedRules(t *testing.T) {
	h := newHarness(t)
	h.ok(under(2, at(1, registerNode{"n1", "127.0.0.1:1", "127.0.0.1:2"})))
	cmd := at(2, registerNode{"n1", "127.0.0.1:1", "127.0.0.1:2"})
	cmd.GetRegisterNode().MaxCommandVersion = 2
	h.ok(under(2, cmd))
	// A registration that does not say (an admin's, an older binary's)
	// keeps what the node said.
	h.ok(under(2, at(3, registerNode{"n1", "127.0.0.1:5", "127.0.0.1:2"})))
	if n := h.f.Nodes(); len(n) != 1 || n[0].MaxCommandVersion != 2 || n[0].GRPCAddress != "127.0.0.1:5" {
		t.Fatalf("registry %+v, want n1 at 127.0.0.1:5 with rules 2", n)
	}
	restored := New()
	if err := restored.Restore(bytes.NewReader(snapshotBytes(t, h.f))); err != nil {
		t.Fatal(err)
	}
	if n := restored.Nodes(); len(n) != 1 || n[0].MaxCommandVersion != 2 {
		t.Fatalf("restored registry %+v lost the stated rules", n)
	}
}

// Rules 2 (issue 13, finding 10): a group whose leader left names no
// leader until its join completes; under rules 1 it named the member that
// left, and a log written then replays so.
func TestRules2_AGroupWhoseLeaderLeftNamesNoLeader(t *testing.T) {
	for _, rules := range []uint32{1, 2} {
		h := newHarness(t)
		h.ok(under(rules, at(1, createTopic{"t", 4})))
		h.ok(under(rules, at(2, join{group: "g", member: "a", topics: []string{"t"}, newMember: true})))
		h.ok(under(rules, at(3, syncCmd{group: "g", generation: 1, member: "a", plan: plan{"a": {"t": {0, 1, 2, 3}}}})))
		h.ok(under(rules, at(4, join{group: "g", member: "b", topics: []string{"t"}, newMember: true})))
		h.ok(under(rules, at(5, join{group: "g", member: "a", topics: []string{"t"}})))
		g := h.group("g")
		if g.State != CompletingRebalance || g.LeaderID != "a" {
			t.Fatalf("rules %d: setup: %s led by %q", rules, g.State, g.LeaderID)
		}
		h.ok(under(rules, at(6, remove{group: "g", members: []string{"a"}, reason: fsmv1.RemoveReason_REMOVE_REASON_LEAVE})))
		g = h.group("g")
		want := map[uint32]string{1: "a", 2: ""}[rules]
		if g.State != PreparingRebalance || g.LeaderID != want {
			t.Fatalf("rules %d: after the leader left: %s led by %q, want PreparingRebalance led by %q", rules, g.State, g.LeaderID, want)
		}
	}
}

// Rules 2 (issue 13, finding 7): the leader of a server-side group that
// lost its JoinGroup answer and rejoins unchanged gets the generation's
// answer again, like any member, instead of forcing a rebalance.
func TestRules2_AServerSideLeadersUnchangedRejoinForcesNoRebalance(t *testing.T) {
	for _, rules := range []uint32{1, 2} {
		h := stableServerGroup(t, "a", "b")
		g := h.group("g")
		gen, leader := g.Generation, g.LeaderID
		res := h.ok(under(rules, at(10, serverJoin("g", leader, []string{"sticky"}, "", false))))
		g = res.Group
		switch {
		case rules == 2 && (g.State != Stable || g.Generation != gen):
			t.Fatalf("rules 2: the leader's unchanged rejoin moved the group to %s, generation %d (was Stable, %d)", g.State, g.Generation, gen)
		case rules == 1 && g.State != PreparingRebalance:
			t.Fatalf("rules 1: the leader's unchanged rejoin left the group %s; a log written under rules 1 must replay as it was", g.State)
		}
	}
}

// Rules 2 (issue 13, finding 6): a cooperative member commits in its
// revocation callback, after the sync that took the partitions away. The
// member that owned a partition in the previous generation may commit it
// while nobody owns it; once another member owns it, or from any other
// member, the commit is NOT_OWNER. Under rules 1 it was always NOT_OWNER.
func TestRules2_ThePreviousOwnerCommitsWhatItGaveUpWhileNobodyOwnsIt(t *testing.T) {
	for _, rules := range []uint32{1, 2} {
		h := newHarness(t)
		ok := func(c isKind) *ApplyResult { return h.ok(under(rules, at(1, c))) }
		ok(createTopic{"t", 2})
		ok(join{group: "g", member: "a", topics: []string{"t"}, newMember: true})
		ok(syncCmd{group: "g", generation: 1, member: "a", plan: plan{"a": {"t": {0, 1}}}})
		ok(join{group: "g", member: "b", topics: []string{"t"}, newMember: true})
		ok(join{group: "g", member: "a", topics: []string{"t"}})
		// Generation 2, first cooperative round: a keeps 0 and gives up 1,
		// which nobody gets yet.
		ok(syncCmd{group: "g", generation: 2, member: "a", plan: plan{"a": {"t": {0}}, "b": {}}})
		res := ok(commit{group: "g", generation: 2, member: "a", topic: "t", partitions: []int32{1}, offset: 7})
		got := res.Partitions[0].Err
		if rules == 1 {
			wantCode(t, got, errcode.NotOwner)
			continue
		}
		if got != nil {
			t.Fatalf("rules 2: the previous owner's commit of a partition nobody owns: %v", got)
		}
		res = ok(commit{group: "g", generation: 2, member: "b", topic: "t", partitions: []int32{1}, offset: 8})
		wantCode(t, res.Partitions[0].Err, errcode.NotOwner) // b never owned it
		// Generation 3 hands partition 1 to b: a's commit of it is refused.
		ok(join{group: "g", member: "a", topics: []string{"t"}})
		ok(join{group: "g", member: "b", topics: []string{"t"}})
		ok(syncCmd{group: "g", generation: 3, member: h.group("g").LeaderID, plan: plan{"a": {"t": {0}}, "b": {"t": {1}}}})
		res = ok(commit{group: "g", generation: 3, member: "a", topic: "t", partitions: []int32{1}, offset: 9})
		wantCode(t, res.Partitions[0].Err, errcode.NotOwner)
		if v, _ := h.f.state.Offset("g", "t", 1); v.Offset != 7 {
			t.Fatalf("offset of t/1 is %d, want 7", v.Offset)
		}
		// The previous assignments survive a snapshot.
		restored := New()
		if err := restored.Restore(bytes.NewReader(snapshotBytes(t, h.f))); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snapshotBytes(t, restored), snapshotBytes(t, h.f)) {
			t.Fatal("a restored state differs from the original")
		}
		g, _ := restored.Group("g")
		if a, _ := g.Member("a"); !a.PreviousAssignment.Owns("t", 0) || a.PreviousAssignment.Owns("t", 1) {
			t.Fatalf("restored member a's previous assignment %+v, want generation 2's (t/0)", a.PreviousAssignment)
		}
	}
}

func TestRules_ASnapshotOfNewerRulesIsRefused(t *testing.T) {
	h := newHarness(t)
	h.ok(under(2, at(1, createTopic{"t", 1})))
	old := New()
	if err := old.LimitRules(1); err != nil {
		t.Fatal(err)
	}
	if err := old.Restore(bytes.NewReader(snapshotBytes(t, h.f))); !errors.Is(err, ErrNewerRules) {
		t.Fatalf("restoring a snapshot of rules-2 entries with rules 1: %v, want ErrNewerRules", err)
	}
	if hasTopicIn(old, "t") {
		t.Fatal("the refused snapshot was restored")
	}
	same := New()
	if err := same.Restore(bytes.NewReader(snapshotBytes(t, h.f))); err != nil {
		t.Fatalf("restoring with rules 2: %v", err)
	}
}

func hasTopicIn(f *FSM, name string) (ok bool) {
	f.Read(func(s *State) { _, ok = s.Partitions(name) })
	return ok
}

// Rules 3: a static member replaced while its group completes a rebalance
// starts the round again, since the leader may be computing a plan that
// names the old member ID, which SyncGroup would refuse (Kafka does the
// same). Under rules 2 the group stayed in CompletingRebalance, waiting
// for a plan it could not accept until the rebalance timeout.
func TestRules3_AStaticMemberReplacedWhileCompletingRebalanceRestartsTheRound(t *testing.T) {
	for _, rules := range []uint32{2, 3} {
		h := newHarness(t)
		ok := func(c isKind) *ApplyResult { return h.ok(under(rules, at(1, c))) }
		ok(createTopic{"t", 2})
		ok(join{group: "g", member: "a", topics: []string{"t"}, newMember: true})
		ok(syncCmd{group: "g", generation: 1, member: "a", plan: plan{"a": {"t": {0, 1}}}})
		ok(join{group: "g", member: "s-old", instance: "i-1", topics: []string{"t"}, newMember: true})
		ok(join{group: "g", member: "a", topics: []string{"t"}})
		if g := h.group("g"); g.State != CompletingRebalance || g.Generation != 2 {
			t.Fatalf("rules %d: setup: %s generation %d", rules, g.State, g.Generation)
		}
		g := ok(join{group: "g", member: "s-new", instance: "i-1", topics: []string{"t"}, newMember: true}).Group
		if _, old := g.Member("s-old"); old {
			t.Fatalf("rules %d: the old incarnation is still a member", rules)
		}
		switch {
		case rules == 3 && g.State != PreparingRebalance:
			t.Fatalf("rules 3: the replacement left the group %s at generation %d; want a new round", g.State, g.Generation)
		case rules == 2 && (g.State != CompletingRebalance || g.Generation != 2):
			t.Fatalf("rules 2: the replacement moved the group to %s generation %d; a log written under rules 2 must replay as it was", g.State, g.Generation)
		}
		if rules == 3 {
			// a rejoins; the round completes with the replacement in it.
			g = ok(join{group: "g", member: "a", topics: []string{"t"}}).Group
			if _, in := g.Member("s-new"); g.State != CompletingRebalance || g.Generation != 3 || !in {
				t.Fatalf("rules 3: after a rejoined: %s generation %d", g.State, g.Generation)
			}
		}
	}
}

// Rules 5: a registration records the node's Kafka listener address. Under
// rules 4 the field is ignored, so a replica whose binary knows it and
// one whose binary does not record the same registry.
func TestRules5_ARegistrationRecordsTheKafkaAddress(t *testing.T) {
	register := func(id, kafka string) *fsmv1.Command {
		cmd := at(1, registerNode{id, "127.0.0.1:1", "127.0.0.1:2"})
		cmd.GetRegisterNode().KafkaAddress = kafka
		return cmd
	}
	for _, rules := range []uint32{4, 5} {
		h := newHarness(t)
		h.ok(under(rules, register("n1", "127.0.0.1:9092")))
		h.ok(under(rules, register("n2", "")))
		want := map[uint32]string{4: "", 5: "127.0.0.1:9092"}[rules]
		n := h.f.Nodes()
		if len(n) != 2 || n[0].KafkaAddress != want || n[1].KafkaAddress != "" {
			t.Fatalf("rules %d: registry %+v, want n1 with Kafka address %q and n2 with none", rules, n, want)
		}
		restored := New()
		if err := restored.Restore(bytes.NewReader(snapshotBytes(t, h.f))); err != nil {
			t.Fatal(err)
		}
		if n := restored.Nodes(); len(n) != 2 || n[0].KafkaAddress != want {
			t.Fatalf("rules %d: restored registry %+v, want n1 with Kafka address %q", rules, n, want)
		}
		if rules == 5 {
			// Registering again without one says the listener is gone.
			h.ok(under(rules, register("n1", "")))
			if n := h.f.Nodes(); n[0].KafkaAddress != "" {
				t.Fatalf("rules 5: n1 re-registered without a Kafka address still has %q", n[0].KafkaAddress)
			}
		}
	}
}

func TestRules5_AnInvalidKafkaAddressIsRefused(t *testing.T) {
	h := newHarness(t)
	cmd := at(1, registerNode{"n1", "127.0.0.1:1", "127.0.0.1:2"})
	cmd.GetRegisterNode().KafkaAddress = strings.Repeat("k", MaxNameLength+1)
	res := h.refused(under(5, cmd), errcode.InvalidArgument)
	if !strings.Contains(res.Err.Error(), "kafka_address") {
		t.Fatalf("refusal %q does not name kafka_address", res.Err)
	}
	// Under rules 4 the field is not read, so it cannot refuse anything.
	h.ok(under(4, cmd))
	if n := h.f.Nodes(); len(n) != 1 || n[0].KafkaAddress != "" {
		t.Fatalf("rules 4: registry %+v, want n1 without a Kafka address", n)
	}
}

// TestRules5_DeleteOffsets: Kafka's OffsetDelete. Offsets of a topic no
// member subscribes to are deleted, those of a subscribed topic stay
// (GROUP_SUBSCRIBED_TO_TOPIC), partition by partition in one command; an
// unknown group is refused whole; under rules 4 the command changes
// nothing.
func TestRules5_DeleteOffsets(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	h.ok(at(2, createTopic{"old", 2}))
	// Offsets of "old" from before the group had members, then member a
	// subscribing to t alone.
	h.ok(at(3, commit{group: "g", generation: -1, topic: "old", partitions: []int32{0, 1}, offset: 9}))
	h.ok(at(4, join{group: "g", member: "a", topics: []string{"t"}, newMember: true}))
	h.ok(at(5, syncCmd{"g", 1, "a", plan{"a": {"t": {0, 1, 2, 3}}}}))
	h.ok(at(6, commit{group: "g", generation: 1, member: "a", topic: "t", partitions: []int32{0}, offset: 5}))
	offsetsOf := func() map[string]int64 {
		out := map[string]int64{}
		h.f.Read(func(s *State) {
			for _, e := range s.Offsets("g") {
				out[e.Key.String()] = e.Value.Offset
			}
		})
		return out
	}
	before := offsetsOf()
	if len(before) != 3 {
		t.Fatalf("offsets before: %v, want t/0, old/0, old/1", before)
	}

	res := h.refused(under(4, at(9, deleteOffsets{"g", "old", []int32{0}})), errcode.InvalidArgument)
	if !strings.Contains(res.Err.Error(), "rules 5") {
		t.Fatalf("refusal under rules 4: %q, want it to name rules 5", res.Err)
	}
	h.refused(under(5, at(9, deleteOffsets{"nope", "old", []int32{0}})), errcode.GroupIDNotFound)
	h.refused(under(5, at(9, deleteOffsets{"g", "old", nil})), errcode.InvalidArgument)
	if got := offsetsOf(); !maps.Equal(got, before) {
		t.Fatalf("refused deletes changed the offsets: %v, before %v", got, before)
	}

	res = h.ok(under(5, at(10, deleteOffsets{"g", "old", []int32{0, 7}})))
	wantCode(t, res.Partitions[0].Err, errcode.None)
	wantCode(t, res.Partitions[1].Err, errcode.None) // nothing to delete
	res = h.ok(under(5, at(11, deleteOffsets{"g", "t", []int32{0}})))
	wantCode(t, res.Partitions[0].Err, errcode.GroupSubscribedToTopic)
	want := map[string]int64{"t/0": 5, "old/1": 9}
	if got := offsetsOf(); !maps.Equal(got, want) {
		t.Fatalf("offsets after the deletes: %v, want %v", got, want)
	}
	// The state's size follows the deletion, as a snapshot's would.
	restored := New()
	if err := restored.Restore(bytes.NewReader(snapshotBytes(t, h.f))); err != nil {
		t.Fatal(err)
	}
	live, _ := h.f.Usage()
	if u, _ := restored.Usage(); u != live {
		t.Fatalf("usage after restore %+v differs from the live state's %+v", u, live)
	}
}
