package fsm

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
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
	for _, m := range g.Members {
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
				for _, m := range g.Members {
					t.Logf("%s epoch %d assigned %v revoking %v target %v", m.ID, m.Epoch, m.Assigned, m.Revoking, m.Target)
				}
				t.Fatalf("state %s after the changes stopped, want Stable", g.State())
			}
			total := 0
			for _, id := range slices.Sorted(maps.Keys(held)) {
				total += held[id].Len()
			}
			if total != 12 || len(g.Members) != 4 {
				t.Fatalf("%d members hold %d partitions, want 4 members holding all 12", len(g.Members), total)
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
