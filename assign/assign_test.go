package assign

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestLookup_KnowsEveryName(t *testing.T) {
	t.Parallel()
	for _, name := range Names() {
		a, err := Lookup(name)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", name, err)
		}
		if a.Name() != name {
			t.Fatalf("Lookup(%q).Name() = %q", name, a.Name())
		}
	}
	if !slices.IsSorted(Names()) {
		t.Fatalf("Names() not sorted: %v", Names())
	}
	if _, err := Lookup("cooperative"); !errors.Is(err, ErrUnknownAssignor) {
		t.Fatalf("Lookup(unknown): %v", err)
	}
}

func TestNewConsistentHash_ValidatesConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []ConsistentHashConfig{{LoadFactor: 0.9}, {LoadFactor: -1}, {VirtualNodes: -1}, {VirtualNodes: maxVirtualNodes + 1}} {
		if _, err := NewConsistentHash(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	c, err := NewConsistentHash(ConsistentHashConfig{})
	if err != nil || c.LoadFactor() != DefaultLoadFactor {
		t.Fatalf("defaults: %v %v", c, err)
	}
	if got := c.Cap(120, 11); got != 13 { // ⌊1.25·120/11⌋ = 13 ≥ ⌈120/11⌉ = 11
		t.Fatalf("Cap(120, 11) = %d", got)
	}
	if got := c.Cap(3, 2); got != 2 { // ⌈3/2⌉ wins over ⌊1.875⌋
		t.Fatalf("Cap(3, 2) = %d", got)
	}
}

func TestAssign_RejectsInvalidInput(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		members []Member
		topics  map[string]int32
	}{
		"empty member ID":    {[]Member{{ID: ""}}, nil},
		"duplicate member":   {[]Member{{ID: "a"}, {ID: "a"}}, nil},
		"negative partition": {[]Member{{ID: "a", Topics: []string{"t"}}}, map[string]int32{"t": -1}},
	}
	for _, a := range allAssignors(t) {
		for name, c := range cases {
			if _, err := a.Assign(c.members, c.topics); !errors.Is(err, ErrInvalidInput) {
				t.Errorf("%s, %s: %v", a.Name(), name, err)
			}
		}
	}
}

func TestAssign_NoMembers(t *testing.T) {
	t.Parallel()
	for _, a := range allAssignors(t) {
		plan, err := a.Assign(nil, map[string]int32{"t": 3})
		if err != nil || len(plan.Members) != 0 || plan.NeedsFollowUp() {
			t.Errorf("%s: %+v %v", a.Name(), plan, err)
		}
	}
}

func tps(kv ...any) []TopicPartitions {
	var out []TopicPartitions
	for i := 0; i < len(kv); i += 2 {
		out = append(out, TopicPartitions{Topic: kv[i].(string), Partitions: kv[i+1].([]int32)})
	}
	return out
}

func assignmentOf(t *testing.T, plan Plan, id string) []TopicPartitions {
	t.Helper()
	got, ok := plan.Assignment(id)
	if !ok {
		t.Fatalf("%s not in plan", id)
	}
	return got
}

// The examples of Kafka's RangeAssignor and RoundRobinAssignor javadoc.
func TestRangeAndRoundRobin_KafkaExamples(t *testing.T) {
	t.Parallel()
	two := map[string]int32{"t0": 3, "t1": 3}
	members := []Member{{ID: "C1", Topics: []string{"t0", "t1"}}, {ID: "C0", Topics: []string{"t1", "t0"}}}
	plan := mustAssign(t, Range{}, members, two)
	if got, want := assignmentOf(t, plan, "C0"), tps("t0", []int32{0, 1}, "t1", []int32{0, 1}); !reflect.DeepEqual(got, want) {
		t.Errorf("range C0 = %v, want %v", got, want)
	}
	if got, want := assignmentOf(t, plan, "C1"), tps("t0", []int32{2}, "t1", []int32{2}); !reflect.DeepEqual(got, want) {
		t.Errorf("range C1 = %v, want %v", got, want)
	}
	plan = mustAssign(t, RoundRobin{}, members, two)
	if got, want := assignmentOf(t, plan, "C0"), tps("t0", []int32{0, 2}, "t1", []int32{1}); !reflect.DeepEqual(got, want) {
		t.Errorf("roundrobin C0 = %v, want %v", got, want)
	}
	if got, want := assignmentOf(t, plan, "C1"), tps("t0", []int32{1}, "t1", []int32{0, 2}); !reflect.DeepEqual(got, want) {
		t.Errorf("roundrobin C1 = %v, want %v", got, want)
	}
	// Differing subscriptions: C0 {t0}, C1 {t0, t1}, C2 {t0, t1, t2}.
	plan = mustAssign(t, RoundRobin{}, []Member{
		{ID: "C0", Topics: []string{"t0"}}, {ID: "C1", Topics: []string{"t0", "t1"}}, {ID: "C2", Topics: []string{"t0", "t1", "t2"}},
	}, map[string]int32{"t0": 1, "t1": 2, "t2": 3})
	for id, want := range map[string][]TopicPartitions{
		"C0": tps("t0", []int32{0}), "C1": tps("t1", []int32{0}), "C2": tps("t1", []int32{1}, "t2", []int32{0, 1, 2}),
	} {
		if got := assignmentOf(t, plan, id); !reflect.DeepEqual(got, want) {
			t.Errorf("roundrobin %s = %v, want %v", id, got, want)
		}
	}
}

// Static members come first in Kafka's order, by instance ID.
func TestRange_StaticMembersOrderedByInstanceID(t *testing.T) {
	t.Parallel()
	plan := mustAssign(t, Range{}, []Member{
		{ID: "a", Topics: []string{"t"}}, {ID: "z", InstanceID: "i-1", Topics: []string{"t"}},
	}, map[string]int32{"t": 3})
	if got := assignmentOf(t, plan, "z"); !reflect.DeepEqual(got, tps("t", []int32{0, 1})) {
		t.Fatalf("static member z got %v", got)
	}
}

func TestSticky_ConflictingClaims(t *testing.T) {
	t.Parallel()
	topics := map[string]int32{"t": 4}
	cases := []struct {
		name    string
		members []Member
		want    map[string][]int32
	}{{
		// b is a zombie from generation 2 still claiming 0 and 1; a owns 0
		// and 2 in generation 3. a's claim on 0 wins; b keeps 1.
		name: "highest generation wins",
		members: []Member{
			{ID: "a", Topics: []string{"t"}, Owned: tps("t", []int32{0, 2}), Generation: 3},
			{ID: "b", Topics: []string{"t"}, Owned: tps("t", []int32{0, 1}), Generation: 2},
		},
		want: map[string][]int32{"a": {0, 2}, "b": {1, 3}},
	}, {
		// The same claim at the same generation: nobody owns 0; balance
		// gives it to b, and a keeps 1 and 2 ...
		name: "tie invalidates both claims",
		members: []Member{
			{ID: "a", Topics: []string{"t"}, Owned: tps("t", []int32{0, 1, 2}), Generation: 3},
			{ID: "b", Topics: []string{"t"}, Owned: tps("t", []int32{0}), Generation: 3},
		},
		want: map[string][]int32{"a": {1, 2}, "b": {0, 3}},
	}, {
		// The winner no longer subscribes: 0 does not fall back to b's
		// older claim.
		name: "winner unsubscribed",
		members: []Member{
			{ID: "a", Topics: []string{"u"}, Owned: tps("t", []int32{0}), Generation: 5},
			{ID: "b", Topics: []string{"t"}, Owned: tps("t", []int32{0, 1}), Generation: 4},
			{ID: "c", Topics: []string{"t"}, Owned: tps("t", []int32{2, 3}), Generation: 5},
		},
		want: map[string][]int32{"a": nil, "b": {0, 1}, "c": {2, 3}},
	}}
	for _, c := range cases {
		plan := mustAssign(t, Sticky{}, c.members, topics)
		for id, want := range c.want {
			var wantTPs []TopicPartitions
			if want != nil {
				wantTPs = tps("t", want)
			}
			if got := assignmentOf(t, plan, id); !reflect.DeepEqual(got, wantTPs) {
				t.Errorf("%s: %s got %v, want %v", c.name, id, got, wantTPs)
			}
		}
	}
}

// A tie between two live claimants: whoever gets the partition, the other
// may still be consuming it, so cooperative-sticky withholds it.
func TestCooperativeSticky_TieIsWithheld(t *testing.T) {
	t.Parallel()
	plan := mustAssign(t, CooperativeSticky{}, []Member{
		{ID: "a", Topics: []string{"t"}, Owned: tps("t", []int32{0, 1}), Generation: 3},
		{ID: "b", Topics: []string{"t"}, Owned: tps("t", []int32{0}), Generation: 3},
	}, map[string]int32{"t": 2})
	if !reflect.DeepEqual(plan.Withheld, tps("t", []int32{0})) {
		t.Fatalf("withheld %v", plan.Withheld)
	}
	if !plan.NeedsFollowUp() {
		t.Fatal("NeedsFollowUp false with withheld partitions")
	}
}

// Cooperative-sticky on S1's join: the ten moved partitions are withheld
// and revoked from their owners, nothing else stops, and the second round
// hands them to the new member.
func TestCooperativeSticky_JoinRevokesOnlyMoved(t *testing.T) {
	t.Parallel()
	sc := homogeneousScenario("S1", 1, 120, 10)
	start := sc.rebalance(t, CooperativeSticky{}, sc.start, Plan{}, 0)
	ids := append(slices.Clone(sc.start), sc.joiner)
	members := sc.membersOwning(ids, start.after, 1)
	round1 := mustAssign(t, CooperativeSticky{}, members, sc.topics)
	if got := countPartitions(round1.Withheld); got != 10 {
		t.Fatalf("withheld %d partitions, want 10", got)
	}
	revoked := 0
	for _, r := range round1.Revoked {
		revoked += r.Len()
	}
	if revoked != 10 || len(assignmentOf(t, round1, sc.joiner)) != 0 {
		t.Fatalf("revoked %d, joiner got %v", revoked, assignmentOf(t, round1, sc.joiner))
	}
	round2 := mustAssign(t, CooperativeSticky{}, sc.membersOwning(ids, round1, 2), sc.topics)
	if round2.NeedsFollowUp() || len(round2.Revoked) != 0 {
		t.Fatalf("round two withholds %v, revokes %v", round2.Withheld, round2.Revoked)
	}
	if got := (MemberAssignment{Topics: assignmentOf(t, round2, sc.joiner)}).Len(); got != 10 {
		t.Fatalf("joiner has %d partitions after round two", got)
	}
}
