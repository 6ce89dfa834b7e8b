package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// owned is an Assignment as the map a heartbeat states it with.
func owned(a Assignment) map[string][]int32 {
	out := map[string][]int32{}
	for _, tp := range a.Topics {
		out[tp.Topic] = tp.Partitions
	}
	return out
}

// checkDisjoint fails if a partition is held (assigned or being revoked)
// by two members of the consumer group, or if the group's kept size is not
// its recount.
func checkDisjoint(t testing.TB, g *ConsumerGroup) {
	t.Helper()
	if g.bytes != consumerBytes(g) {
		t.Fatalf("consumer group %s: the size kept, %d, differs from a recount, %d", g.ID, g.bytes, consumerBytes(g))
	}
	holder := map[partitionKey]string{}
	for _, m := range g.Members.All() {
		for k := range partitionSet(union(m.Assigned, m.Revoking)) {
			if prev, ok := holder[k]; ok {
				t.Fatalf("consumer group %s: %s/%d held by %s and %s", g.ID, k.topic, k.partition, prev, m.ID)
			}
			holder[k] = m.ID
		}
	}
}

func consumerGroup(t testing.TB, h *harness, id string) *ConsumerGroup {
	t.Helper()
	var g *ConsumerGroup
	h.f.Read(func(s *State) { g, _ = s.ConsumerGroup(id) })
	if g == nil {
		t.Fatalf("no consumer group %q", id)
	}
	checkDisjoint(t, g)
	return g
}

// TestConsumer_RevocationBeforeAssignment walks KIP-848's reconciliation:
// a second member's join gives it a target the first member still holds;
// the first is told to revoke (keeping its epoch), confirms, moves to the
// new epoch, and only then does the second get the partitions. No
// partition is ever held by both.
func TestConsumer_RevocationBeforeAssignment(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	res := h.ok(at(2, hb{group: "g", member: "a", topics: []string{"t"}}))
	if r := res.Consumer; r.Epoch != 1 || r.Assigned.Len() != 4 {
		t.Fatalf("first member: epoch %d with %d partitions, want epoch 1 with all 4", r.Epoch, r.Assigned.Len())
	}
	res = h.ok(at(3, hb{group: "g", member: "b", topics: []string{"t"}}))
	if r := res.Consumer; r.Epoch != 2 || r.Assigned.Len() != 0 {
		t.Fatalf("second member: epoch %d with %v, want epoch 2 with nothing yet (a holds its target)", r.Epoch, r.Assigned)
	}
	if st := consumerGroup(t, h, "g").State(); st != ConsumerReconciling {
		t.Fatalf("state %s, want Reconciling", st)
	}
	// a's heartbeat at epoch 1: told to give up b's target, epoch kept.
	res = h.ok(at(4, hb{group: "g", member: "a", epoch: 1}))
	a, _ := consumerGroup(t, h, "g").Member("a")
	if res.Consumer.Epoch != 1 || a.Revoking.Len() != 2 || res.Consumer.Assigned.Len() != 2 {
		t.Fatalf("a after the rebalance: epoch %d, assigned %v, revoking %v; want epoch 1, 2 kept, 2 being revoked", res.Consumer.Epoch, res.Consumer.Assigned, a.Revoking)
	}
	// b asks again before a confirmed: still nothing.
	if res = h.ok(at(5, hb{group: "g", member: "b", epoch: 2})); res.Consumer.Assigned.Len() != 0 {
		t.Fatalf("b got %v while a was still revoking it", res.Consumer.Assigned)
	}
	// a confirms it owns only what it kept: epoch 2.
	res = h.ok(at(6, hb{group: "g", member: "a", epoch: 1, owned: owned(assignedTo(t, h, "a"))}))
	if res.Consumer.Epoch != 2 || res.Consumer.Assigned.Len() != 2 {
		t.Fatalf("a after confirming: epoch %d with %v, want epoch 2 with 2", res.Consumer.Epoch, res.Consumer.Assigned)
	}
	if res = h.ok(at(7, hb{group: "g", member: "b", epoch: 2})); res.Consumer.Assigned.Len() != 2 {
		t.Fatalf("b after a released: %v, want its 2 partitions", res.Consumer.Assigned)
	}
	g := consumerGroup(t, h, "g")
	if g.State() != ConsumerStable || g.Epoch != 2 {
		t.Fatalf("group %s at epoch %d, want Stable at 2", g.State(), g.Epoch)
	}
	// b leaves: a gets everything back at epoch 3.
	h.ok(at(8, hb{group: "g", member: "b", epoch: -1}))
	if res = h.ok(at(9, hb{group: "g", member: "a", epoch: 2})); res.Consumer.Epoch != 3 || res.Consumer.Assigned.Len() != 4 {
		t.Fatalf("a after b left: epoch %d with %v, want epoch 3 with all 4", res.Consumer.Epoch, res.Consumer.Assigned)
	}
}

// assignedTo is what member id of group g may consume now.
func assignedTo(t *testing.T, h *harness, id string) Assignment {
	m, _ := consumerGroup(t, h, "g").Member(id)
	return m.Assigned
}

// TestConsumer_Refusals: what a heartbeat or commit is refused for, and
// that a refusal changes nothing.
func TestConsumer_Refusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 2}))
	h.ok(at(2, hb{group: "g", member: "a", topics: []string{"t"}}))
	h.ok(at(3, join{group: "classic", member: "x", topics: []string{"t"}, newMember: true}))
	before := snapshotBytes(t, h.f)
	cases := []struct {
		name string
		cmd  isKind
		code errcode.Code
	}{
		{"an unknown member", hb{group: "g", member: "zz", epoch: 1}, errcode.UnknownMemberID},
		{"a wrong epoch", hb{group: "g", member: "a", epoch: 7}, errcode.FencedMemberEpoch},
		{"an unknown group", hb{group: "nope", member: "a", epoch: 1}, errcode.UnknownMemberID},
		{"an unknown assignor", hb{group: "g", member: "b", topics: []string{"t"}, assignor: "roundrobin"}, errcode.UnsupportedAssignor},
		{"a classic group's ID", hb{group: "classic", member: "b", topics: []string{"t"}}, errcode.InconsistentGroupProtocol},
		{"a negative epoch", hb{group: "g", member: "a", epoch: -3}, errcode.InvalidArgument},
		{"a classic join to a consumer group", join{group: "g", member: "y", topics: []string{"t"}, newMember: true}, errcode.InconsistentGroupProtocol},
		{"a commit at a stale epoch", commit{group: "g", generation: 0, member: "a", topic: "t", partitions: []int32{0}, offset: 1}, errcode.StaleMemberEpoch},
		{"a memberless commit to a group with members", commit{group: "g", generation: -1, topic: "t", partitions: []int32{0}, offset: 1}, errcode.UnknownMemberID},
	}
	for _, tc := range cases {
		cmd := at(10, tc.cmd)
		cmd.Version = 5
		h.refused(cmd, tc.code)
	}
	if !bytes.Equal(snapshotBytes(t, h.f), before) {
		t.Fatal("a refused command changed the state")
	}
	rules4 := at(10, hb{group: "g", member: "b", topics: []string{"t"}})
	rules4.Version = 4
	if res := h.refused(rules4, errcode.InvalidArgument); !strings.Contains(res.Err.Error(), "rules 5") {
		t.Fatalf("refusal under rules 4: %q, want it to name rules 5", res.Err)
	}
	// A commit at the member's epoch is stored.
	cmd := at(11, commit{group: "g", generation: 1, member: "a", topic: "t", partitions: []int32{0, 1}, offset: 9})
	cmd.Version = 5
	res := h.ok(cmd)
	wantCode(t, res.Partitions[0].Err, errcode.None)
	h.f.Read(func(s *State) {
		if v, ok := s.Offset("g", "t", 1); !ok || v.Offset != 9 {
			t.Fatalf("commit at the member's epoch not stored: %+v %v", v, ok)
		}
	})
}

// TestConsumer_SnapshotRoundTrip: consumer groups, mid-reconciliation,
// restore to the same bytes and the same size estimate.
func TestConsumer_SnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 6}))
	h.ok(at(2, createTopic{"u", 3}))
	h.ok(at(3, hb{group: "g", member: "a", topics: []string{"t", "u"}}))
	h.ok(at(4, hb{group: "g", member: "b", topics: []string{"t"}, assignor: AssignorRange, instance: "i-b"}))
	h.ok(at(5, hb{group: "g", member: "a", epoch: 1})) // revoking
	h.ok(at(6, hb{group: "h", member: "c", topics: []string{"u"}}))
	data := snapshotBytes(t, h.f)
	restored := New()
	if err := restored.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, restored); !bytes.Equal(again, data) {
		t.Fatal("a restored state snapshots to other bytes")
	}
	live, _ := h.f.Usage()
	if u, _ := restored.Usage(); u != live {
		t.Fatalf("usage after restore %+v, live %+v", u, live)
	}
	var ids []string
	restored.Read(func(s *State) {
		for _, g := range s.ConsumerGroups() {
			ids = append(ids, g.ID)
		}
	})
	if !slices.Equal(ids, []string{"g", "h"}) {
		t.Fatalf("restored consumer groups %v", ids)
	}
}

// TestConsumer_ConvergesAndStaysDisjoint drives members through joins,
// leaves and subscription changes, each answering every heartbeat by
// confirming what it was told to keep, and checks after every command that
// no partition is held twice; once the changes stop and everyone has
// heartbeated a few times, the group is Stable and every subscribed
// partition is held.
func TestConsumer_ConvergesAndStaysDisjoint(t *testing.T) {
	t.Parallel()
	for _, assignor := range ConsumerAssignors() {
		t.Run(assignor, func(t *testing.T) {
			h := newHarness(t)
			h.ok(at(1, createTopic{"t", 7}))
			h.ok(at(2, createTopic{"u", 5}))
			ts := int64(3)
			epoch := map[string]int32{}
			held := map[string]Assignment{}
			beat := func(id string) {
				ts++
				cmd := at(ts, hb{group: "g", member: id, epoch: epoch[id], owned: owned(held[id])})
				if epoch[id] == 0 {
					cmd = at(ts, hb{group: "g", member: id, topics: []string{"t", "u"}, assignor: assignor})
				}
				res := h.ok(cmd)
				epoch[id], held[id] = res.Consumer.Epoch, res.Consumer.Assigned
				consumerGroup(t, h, "g")
			}
			leave := func(id string) {
				ts++
				h.ok(at(ts, hb{group: "g", member: id, epoch: -1}))
				delete(epoch, id)
				delete(held, id)
			}
			ids := []string{"m0", "m1", "m2", "m3", "m4"}
			for round := range 12 {
				switch round {
				case 2:
					beat("m3")
				case 4:
					leave("m1")
				case 6:
					beat("m4")
				}
				for _, id := range ids {
					if _, in := epoch[id]; in || round == 0 && id < "m3" {
						beat(id)
					}
				}
			}
			g := consumerGroup(t, h, "g")
			if g.State() != ConsumerStable {
				for _, m := range g.Members.All() {
					t.Logf("%s epoch %d assigned %v revoking %v target %v", m.ID, m.Epoch, m.Assigned, m.Revoking, m.Target)
				}
				t.Fatalf("state %s after the changes stopped, want Stable", g.State())
			}
			total := 0
			for _, id := range slices.Sorted(maps.Keys(held)) {
				total += held[id].Len()
			}
			if total != 12 || g.Members.Len() != 4 {
				t.Fatalf("%d members hold %d partitions, want 4 members holding all 12", g.Members.Len(), total)
			}
		})
	}
}

// TestConsumer_TopicChangesMoveTheEpoch: a topic created, grown or deleted
// under a consumer group's subscription gives the group a new epoch whose
// targets cover the topic's new partitions (none once it is deleted), and
// the members reconcile to them.
func TestConsumer_TopicChangesMoveTheEpoch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 2}))
	res := h.ok(at(2, hb{group: "g", member: "a", topics: []string{"t", "later"}}))
	epoch := res.Consumer.Epoch
	steps := []struct {
		cmd  isKind
		want int // partitions a holds once reconciled
	}{
		{createTopic{"later", 3}, 5},
		{addPartitions{"t", 4}, 7},
		{deleteTopic("later"), 4},
	}
	for i, st := range steps {
		h.ok(at(int64(10*i+3), st.cmd))
		g := consumerGroup(t, h, "g")
		if g.Epoch <= epoch {
			t.Fatalf("step %d: the group stayed at epoch %d", i, g.Epoch)
		}
		a, _ := g.Member("a")
		// a confirms what it holds; a second heartbeat takes the rest.
		res = h.ok(at(int64(10*i+4), hb{group: "g", member: "a", epoch: epoch, owned: owned(a.Assigned)}))
		res = h.ok(at(int64(10*i+5), hb{group: "g", member: "a", epoch: res.Consumer.Epoch, owned: owned(res.Consumer.Assigned)}))
		if res.Consumer.Epoch != g.Epoch || res.Consumer.Assigned.Len() != st.want {
			t.Fatalf("step %d: a at epoch %d with %d partitions, want epoch %d with %d", i, res.Consumer.Epoch, res.Consumer.Assigned.Len(), g.Epoch, st.want)
		}
		epoch = res.Consumer.Epoch
	}
}

// settle heartbeats every member of consumer group "g" in ID order, each
// confirming what it holds, until the group is Stable, and returns it.
func settle(t *testing.T, h *harness, ts *int64) *ConsumerGroup {
	t.Helper()
	for range 8 {
		g := consumerGroup(t, h, "g")
		if g.State() == ConsumerStable {
			return g
		}
		for _, m := range g.Members.All() {
			if m.Departed() {
				continue
			}
			*ts++
			h.ok(at(*ts, hb{group: "g", member: m.ID, epoch: m.Epoch, owned: owned(m.Assigned)}))
		}
	}
	t.Fatalf("consumer group g not Stable after 8 rounds of heartbeats: %s", consumerGroup(t, h, "g").State())
	return nil
}

// heldBy is the partitions member id of g holds, as topic/partition strings.
func heldBy(g *ConsumerGroup, id string) []string {
	m, ok := g.Member(id)
	if !ok {
		return nil
	}
	var out []string
	for _, tp := range m.Assigned.Topics {
		for _, p := range tp.Partitions {
			out = append(out, fmt.Sprintf("%s/%d", tp.Topic, p))
		}
	}
	return out
}

// TestConsumer_RegexSubscription (rules 6): a member subscribed by a
// regular expression gets the partitions of every topic whose whole name
// it matches; a topic created that it matches moves the epoch and is
// assigned, one it does not match leaves the group alone; a new expression
// moves the epoch; a bad one is refused, naming it, and changes nothing;
// the expression survives a snapshot.
func TestConsumer_RegexSubscription(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for i, name := range []string{"orders-eu", "orders-us", "payments", "xorders-eu"} {
		h.ok(at(int64(i+1), createTopic{name, 2}))
	}
	ts := int64(10)
	re := func(s string) *string { return &s }
	h.ok(at(ts, hb{group: "g", member: "a", regex: re("orders-.*")}))
	g := settle(t, h, &ts)
	if got := heldBy(g, "a"); !slices.Equal(got, []string{"orders-eu/0", "orders-eu/1", "orders-us/0", "orders-us/1"}) {
		t.Fatalf("a subscribed to orders-.* holds %v, want both partitions of orders-eu and orders-us only (the match is of whole names)", got)
	}
	epoch := g.Epoch

	ts++
	h.ok(at(ts, createTopic{"orders-asia", 1}))
	if g = consumerGroup(t, h, "g"); g.Epoch == epoch {
		t.Fatal("a topic the expression matches was created and the group kept its epoch")
	}
	g = settle(t, h, &ts)
	if got := heldBy(g, "a"); !slices.Contains(got, "orders-asia/0") || len(got) != 5 {
		t.Fatalf("after orders-asia was created a holds %v, want its 4 and orders-asia/0", got)
	}
	epoch = g.Epoch
	ts++
	h.ok(at(ts, createTopic{"orders", 1}))
	if g = consumerGroup(t, h, "g"); g.Epoch != epoch {
		t.Fatalf("a topic the expression does not match moved the epoch %d -> %d", epoch, g.Epoch)
	}

	// A second member by name and regex: the union.
	ts++
	h.ok(at(ts, hb{group: "g", member: "b", topics: []string{"payments"}, regex: re("orders-(eu|us)")}))
	g = settle(t, h, &ts)
	if n := len(heldBy(g, "a")) + len(heldBy(g, "b")); n != 7 || !slices.Contains(heldBy(g, "b"), "payments/0") && !slices.Contains(heldBy(g, "a"), "payments/0") {
		t.Fatalf("a holds %v and b %v: want the 7 partitions of orders-asia, orders-eu, orders-us and payments between them", heldBy(g, "a"), heldBy(g, "b"))
	}
	if slices.Contains(heldBy(g, "a"), "payments/0") || slices.Contains(heldBy(g, "a"), "payments/1") {
		t.Fatalf("a, not subscribed to payments, holds %v", heldBy(g, "a"))
	}

	// Refusals change nothing.
	before := snapshotBytes(t, h.f)
	b, _ := g.Member("b")
	for _, tc := range []struct {
		name string
		cmd  hb
		code errcode.Code
		says string
	}{
		{"an unbalanced expression", hb{group: "g", member: "c", regex: re("orders-(")}, errcode.InvalidRegularExpression, "orders-("},
		{"an expression one parenthesis from escaping its anchors", hb{group: "g", member: "c", regex: re("a)|(b")}, errcode.InvalidRegularExpression, "a)|(b"},
		{"an expression too long", hb{group: "g", member: "c", regex: re(strings.Repeat("x", MaxTopicRegexBytes+1))}, errcode.InvalidRegularExpression, "over the limit"},
		{"an expression too complex", hb{group: "g", member: "c", regex: re("x{1,1000}y{1,1000}")}, errcode.InvalidRegularExpression, "instructions"},
		{"a bad new expression of a member", hb{group: "g", member: "b", epoch: b.Epoch, regex: re("[z-a]")}, errcode.InvalidRegularExpression, "[z-a]"},
		{"an expression under rules 5", hb{group: "g", member: "c", regex: re("orders-.*"), rules: 5}, errcode.InvalidArgument, "rules 6"},
	} {
		ts++
		if res := h.refused(at(ts, tc.cmd), tc.code); !strings.Contains(res.Err.Error(), tc.says) {
			t.Errorf("%s: refused with %q, want it to name %q", tc.name, res.Err, tc.says)
		}
	}
	if !bytes.Equal(snapshotBytes(t, h.f), before) {
		t.Fatal("a refused heartbeat changed the state")
	}

	// A new expression moves the epoch; the snapshot keeps it, and the
	// restored state still follows it.
	ts++
	h.ok(at(ts, hb{group: "g", member: "a", epoch: consumerMember(t, h, "a").Epoch, regex: re("pay.*")}))
	if g2 := consumerGroup(t, h, "g"); g2.Epoch == g.Epoch {
		t.Fatal("a member's new expression kept the group's epoch")
	}
	data := snapshotBytes(t, h.f)
	restored := New()
	if err := restored.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, restored), data) {
		t.Fatal("a restored state with expressions snapshots to other bytes")
	}
	r := &harness{t: t, f: restored}
	var e0 int32
	restored.Read(func(s *State) { g, _ := s.ConsumerGroup("g"); e0 = g.Epoch })
	r.ok(at(ts+1, createTopic{"payroll", 1}))
	restored.Read(func(s *State) {
		g, _ := s.ConsumerGroup("g")
		if m, _ := g.Member("a"); m.Regex != "pay.*" || g.Epoch == e0 {
			t.Fatalf("restored: a's expression %q, epoch %d -> %d after payroll was created; want pay.* and a new epoch", m.Regex, e0, g.Epoch)
		}
	})
}

func consumerMember(t *testing.T, h *harness, id string) *ConsumerMember {
	t.Helper()
	m, ok := consumerGroup(t, h, "g").Member(id)
	if !ok {
		t.Fatalf("no member %s in consumer group g", id)
	}
	return m
}

// TestConsumer_StaticMemberRejoinsWithItsAssignment (rules 6, Kafka's
// static membership): a static member's leave (epoch -2) keeps it with
// what it holds and moves no epoch; its old ID is fenced; a new member
// with its instance ID takes its place, its partitions and its epoch with
// no rebalance; one whose subscription changed rebalances; a departed
// member removed (its session ran out) gives its partitions to the others.
// Under rules 5 the same leave removes the member.
func TestConsumer_StaticMemberRejoinsWithItsAssignment(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 4}))
	ts := int64(2)
	h.ok(at(ts, hb{group: "g", member: "a", topics: []string{"t"}, instance: "i-a"}))
	ts++
	h.ok(at(ts, hb{group: "g", member: "b", topics: []string{"t"}}))
	g := settle(t, h, &ts)
	epoch, aHeld := g.Epoch, heldBy(g, "a")
	aEpoch := consumerMember(t, h, "a").Epoch
	if len(aHeld) != 2 {
		t.Fatalf("a holds %v, want 2 of 4", aHeld)
	}

	ts++
	if res := h.ok(at(ts, hb{group: "g", member: "a", epoch: -2})); res.Consumer.Epoch != DepartedEpoch {
		t.Fatalf("a static leave answered epoch %d, want %d", res.Consumer.Epoch, DepartedEpoch)
	}
	g = consumerGroup(t, h, "g")
	if a := consumerMember(t, h, "a"); g.Epoch != epoch || !a.Departed() || !slices.Equal(heldBy(g, "a"), aHeld) {
		t.Fatalf("after a's static leave: group epoch %d (was %d), a at epoch %d holding %v; want the epoch kept and a departed holding %v", g.Epoch, epoch, a.Epoch, heldBy(g, "a"), aHeld)
	}
	ts++
	h.refused(at(ts, hb{group: "g", member: "a", epoch: aEpoch}), errcode.FencedMemberEpoch)
	ts++
	h.ok(at(ts, hb{group: "g", member: "a", epoch: -2})) // a leave resent: no change
	// The instance comes back as a new member: a's place, partitions and
	// epoch, and no rebalance.
	ts++
	res := h.ok(at(ts, hb{group: "g", member: "a2", topics: []string{"t"}, instance: "i-a"}))
	g = consumerGroup(t, h, "g")
	if _, still := g.Member("a"); still || g.Epoch != epoch || res.Consumer.Epoch != aEpoch || !slices.Equal(heldBy(g, "a2"), aHeld) || g.State() != ConsumerStable {
		t.Fatalf("after i-a rejoined as a2: a still in %v, group epoch %d (was %d), a2 at epoch %d (want %d) holding %v (want %v), state %s (want Stable)",
			still, g.Epoch, epoch, res.Consumer.Epoch, aEpoch, heldBy(g, "a2"), aHeld, g.State())
	}
	// While a2 is active, its instance is taken.
	ts++
	h.refused(at(ts, hb{group: "g", member: "a3", topics: []string{"t"}, instance: "i-a"}), errcode.UnreleasedInstanceID)

	// A return with another subscription rebalances.
	ts++
	h.ok(at(ts, hb{group: "g", member: "a2", epoch: -2}))
	ts++
	h.ok(at(ts, createTopic{"u", 2}))
	ts++
	epoch = consumerGroup(t, h, "g").Epoch
	h.ok(at(ts, hb{group: "g", member: "a3", topics: []string{"t", "u"}, instance: "i-a"}))
	if g = consumerGroup(t, h, "g"); g.Epoch == epoch {
		t.Fatal("i-a came back subscribed to another topic and the group kept its epoch")
	}
	g = settle(t, h, &ts)
	if n := len(heldBy(g, "a3")) + len(heldBy(g, "b")); n != 6 {
		t.Fatalf("a3 holds %v and b %v, want the 6 partitions of t and u between them", heldBy(g, "a3"), heldBy(g, "b"))
	}

	// A departed member removed (the leader's expiry, epoch -1): b gets all.
	ts++
	h.ok(at(ts, hb{group: "g", member: "a3", epoch: -2}))
	ts++
	h.ok(at(ts, hb{group: "g", member: "a3", epoch: -1}))
	g = settle(t, h, &ts)
	if g.Members.Len() != 1 || len(heldBy(g, "b")) != 4 {
		t.Fatalf("after the departed member's removal: %d members, b holds %v; want b alone with all of t", g.Members.Len(), heldBy(g, "b"))
	}

	// Rules 6 brought the departed state: a static leave under them keeps
	// the member too.
	ts++
	h.ok(at(ts, hb{group: "g", member: "r", topics: []string{"t"}, instance: "i-r", rules: 6}))
	ts++
	h.ok(at(ts, hb{group: "g", member: "r", epoch: -2, rules: 6}))
	if r, still := consumerGroup(t, h, "g").Member("r"); !still || !r.Departed() {
		t.Fatal("under rules 6 a static member's leave removed it")
	}

	// Under rules 5 a static leave is a leave.
	ts++
	h.ok(at(ts, hb{group: "g", member: "s", topics: []string{"t"}, instance: "i-s", rules: 5}))
	ts++
	h.ok(at(ts, hb{group: "g", member: "s", epoch: -2, rules: 5}))
	if _, still := consumerGroup(t, h, "g").Member("s"); still {
		t.Fatal("under rules 5 a static member's leave kept it")
	}
}

// TestConsumer_RebalanceAdvancesMembersAtTheirTarget (rules 7): a join
// moves every member whose target is what it holds to the new epoch in
// the same entry, so that only the members whose partitions change write
// entries. Their clients still state the epoch they were told: a
// heartbeat at it is answered without an entry (QuietHeartbeat), a commit
// at it is accepted, across a second rebalance too; an epoch from before
// the advance is fenced. The advance survives a snapshot, and under rules
// 6 the members stay at their epoch until they heartbeat.
func TestConsumer_RebalanceAdvancesMembersAtTheirTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.ok(at(1, createTopic{"t", 6}))
	h.ok(at(2, createTopic{"u", 2}))
	ts := int64(3)
	for _, id := range []string{"a", "b", "c"} {
		ts++
		h.ok(at(ts, hb{group: "g", member: id, topics: []string{"t"}}))
	}
	g := settle(t, h, &ts)
	e := g.Epoch
	told := map[string]int32{} // the epoch each member's client was last told
	for _, m := range g.Members.All() {
		told[m.ID] = m.Epoch
	}

	ts++
	h.ok(at(ts, hb{group: "g", member: "d", topics: []string{"t"}}))
	g = consumerGroup(t, h, "g")
	var advanced, stayed []string
	for _, m := range g.Members.All() {
		switch {
		case m.ID == "d":
		case m.Epoch == e+1 && m.AdvancedFrom == e && assignmentsEqual(m.Assigned, m.Target):
			advanced = append(advanced, m.ID)
		case m.Epoch == e && m.AdvancedFrom == 0 && !assignmentsEqual(m.Assigned, m.Target):
			stayed = append(stayed, m.ID)
		default:
			t.Fatalf("after d joined at epoch %d: member %s at epoch %d advanced from %d, holding %v for a target of %v", e+1, m.ID, m.Epoch, m.AdvancedFrom, m.Assigned, m.Target)
		}
	}
	if len(advanced) == 0 || len(stayed) == 0 {
		t.Fatalf("after d joined: advanced %v, stayed %v; want both (6 partitions over 4 members moves some)", advanced, stayed)
	}
	x := advanced[0]
	if r, ok := g.QuietHeartbeat(heartbeatOf(hb{group: "g", member: x, epoch: told[x]})); !ok || r.Epoch != e+1 {
		t.Fatalf("%s's heartbeat at the epoch it was told (%d): quiet %v, answer %+v; want epoch %d without an entry", x, told[x], ok, r, e+1)
	}
	ts++
	h.ok(at(ts, commit{group: "g", generation: told[x], member: x, topic: "t", partitions: []int32{0}, offset: 5}))
	ts++
	h.refused(at(ts, commit{group: "g", generation: e - 1, member: x, topic: "t", partitions: []int32{0}, offset: 6}), errcode.StaleMemberEpoch)
	ts++
	h.refused(at(ts, hb{group: "g", member: x, epoch: e - 1}), errcode.FencedMemberEpoch)

	// A second rebalance before x heartbeats (f joins for u alone): x's
	// target is unchanged again, and the epoch it was told still holds.
	ts++
	h.ok(at(ts, hb{group: "g", member: "f", topics: []string{"u"}}))
	m := consumerMember(t, h, x)
	if m.Epoch != e+2 || m.AdvancedFrom != e {
		t.Fatalf("%s after the second rebalance: epoch %d advanced from %d, want %d from %d", x, m.Epoch, m.AdvancedFrom, e+2, e)
	}
	data := snapshotBytes(t, h.f)
	restored := New()
	if err := restored.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	restored.Read(func(s *State) {
		rg, _ := s.ConsumerGroup("g")
		if rm, _ := rg.Member(x); rm.AdvancedFrom != e || rm.Epoch != e+2 {
			t.Fatalf("restored %s: epoch %d advanced from %d, want %d from %d", x, rm.Epoch, rm.AdvancedFrom, e+2, e)
		}
	})
	ts++
	h.ok(at(ts, commit{group: "g", generation: told[x], member: x, topic: "t", partitions: []int32{0}, offset: 7}))
	// Applied (its owned partitions stated), the heartbeat tells x its
	// epoch; the one it stated stays accepted, in case the answer is lost.
	ts++
	if res := h.ok(at(ts, hb{group: "g", member: x, epoch: told[x], owned: owned(m.Assigned)})); res.Consumer.Epoch != e+2 {
		t.Fatalf("%s's applied heartbeat answered epoch %d, want %d", x, res.Consumer.Epoch, e+2)
	}
	if m = consumerMember(t, h, x); m.AdvancedFrom != 0 || m.PreviousEpoch != told[x] {
		t.Fatalf("%s after its heartbeat: advanced from %d, previous epoch %d; want 0 and %d", x, m.AdvancedFrom, m.PreviousEpoch, told[x])
	}
	ts++
	h.ok(at(ts, hb{group: "g", member: x, epoch: told[x]}))
	ts++
	h.refused(at(ts, commit{group: "g", generation: told[x], member: x, topic: "t", partitions: []int32{0}, offset: 8}), errcode.StaleMemberEpoch)
	g = settle(t, h, &ts)
	if n := len(heldBy(g, "a")) + len(heldBy(g, "b")) + len(heldBy(g, "c")) + len(heldBy(g, "d")) + len(heldBy(g, "f")); n != 8 {
		t.Fatalf("settled group holds %d partitions, want all 8", n)
	}

	// Under rules 6 a join leaves the others at their epoch.
	h6 := newHarness(t)
	h6.ok(at(1, createTopic{"t", 6}))
	ts = 2
	for _, id := range []string{"a", "b", "c"} {
		ts++
		h6.ok(at(ts, hb{group: "g", member: id, topics: []string{"t"}, rules: 6}))
	}
	e = settle(t, h6, &ts).Epoch
	ts++
	h6.ok(at(ts, hb{group: "g", member: "d", topics: []string{"t"}, rules: 6}))
	for _, m := range consumerGroup(t, h6, "g").Members.All() {
		if m.ID != "d" && (m.Epoch != e || m.AdvancedFrom != 0) {
			t.Fatalf("rules 6: member %s at epoch %d advanced from %d after d joined, want %d, not advanced", m.ID, m.Epoch, m.AdvancedFrom, e)
		}
	}
}

// heartbeatOf is the ConsumerHeartbeat command h builds.
func heartbeatOf(h hb) *fsmv1.ConsumerHeartbeat {
	var c fsmv1.Command
	h.set(&c)
	return c.GetConsumerHeartbeat()
}
