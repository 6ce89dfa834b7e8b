package assign

import (
	"fmt"
	"testing"
)

// scenario is one of the benchmark scenarios of docs/assignors.md.
type scenario struct {
	name   string
	topics map[string]int32
	// start is the stable group; then join adds joiner, then leave removes
	// leaver. subs gives each member's topics.
	start  []string
	joiner string
	leaver string
	subs   func(id string) []string
	// leaveFirst: the scenario is stable → leave → rejoin (S4).
	leaveFirst bool
}

func memberName(i int) string { return fmt.Sprintf("member-%04d", i) }

func allTopicNames(topics map[string]int32) []string {
	out := make([]string, 0, len(topics))
	for t := range topics {
		out = append(out, t)
	}
	return out
}

func homogeneousScenario(name string, nTopics, nParts, nMembers int) scenario {
	topics := make(map[string]int32, nTopics)
	for i := range nTopics {
		topics[fmt.Sprintf("topic-%03d", i)] = int32(nParts)
	}
	names := allTopicNames(topics)
	sc := scenario{name: name, topics: topics, subs: func(string) []string { return names }}
	for i := range nMembers {
		sc.start = append(sc.start, memberName(i))
	}
	sc.joiner = memberName(nMembers)
	sc.leaver = sc.joiner
	return sc
}

func scenarios() []scenario {
	s4 := scenario{name: "S4", topics: map[string]int32{}, leaveFirst: true}
	for i := range 10 {
		s4.topics[fmt.Sprintf("topic-%03d", i)] = 24
	}
	for i := range 12 {
		s4.start = append(s4.start, memberName(i))
	}
	s4.subs = func(id string) []string {
		var i int
		fmt.Sscanf(id, "member-%04d", &i)
		return []string{
			fmt.Sprintf("topic-%03d", i%10),
			fmt.Sprintf("topic-%03d", (i+3)%10),
			fmt.Sprintf("topic-%03d", (i+7)%10),
		}
	}
	s4.leaver, s4.joiner = memberName(0), memberName(0)
	return []scenario{
		homogeneousScenario("S1", 1, 120, 10),
		homogeneousScenario("S2", 20, 50, 100),
		homogeneousScenario("S3", 100, 100, 1000),
		s4,
	}
}

// membersOwning builds the members ids, each owning what prev gave it in
// generation gen.
func (sc scenario) membersOwning(ids []string, prev Plan, gen int32) []Member {
	out := make([]Member, len(ids))
	for i, id := range ids {
		m := Member{ID: id, Topics: sc.subs(id), Generation: NoGeneration}
		if tps, ok := prev.Assignment(id); ok && len(tps) > 0 {
			m.Owned, m.Generation = tps, gen
		}
		out[i] = m
	}
	return out
}

// step is one rebalance of a scenario run.
type step struct {
	members []Member
	before  Plan // the stable plan before the step
	after   Plan // the stable plan after it (cooperative: after round two)
	rounds  int
	// withheld in the first round (cooperative only).
	withheld int
}

// rebalance runs a to convergence from prev for the group ids.
func (sc scenario) rebalance(tb testing.TB, a Assignor, ids []string, prev Plan, gen int32) step {
	st := step{before: prev}
	members := sc.membersOwning(ids, prev, gen)
	st.members = members
	for round := 1; ; round++ {
		plan, err := a.Assign(members, sc.topics)
		if err != nil {
			tb.Fatalf("%s %s: %v", sc.name, a.Name(), err)
		}
		if round == 1 {
			st.withheld = countPartitions(plan.Withheld)
		}
		if !plan.NeedsFollowUp() || round == 3 {
			st.after, st.rounds = plan, round
			return st
		}
		gen++
		members = sc.membersOwning(ids, plan, gen)
	}
}

func countPartitions(tps []TopicPartitions) int {
	n := 0
	for _, tp := range tps {
		n += len(tp.Partitions)
	}
	return n
}

// movedFrom counts partitions that before gave to a member still in after
// and after gives to someone else: the partitions a live member had to give
// up.
func movedFrom(before, after Plan) int {
	owner := map[string]map[int32]string{}
	for _, m := range after.Members {
		for _, tp := range m.Topics {
			if owner[tp.Topic] == nil {
				owner[tp.Topic] = map[int32]string{}
			}
			for _, p := range tp.Partitions {
				owner[tp.Topic][p] = m.MemberID
			}
		}
	}
	n := 0
	for _, m := range before.Members {
		if _, live := after.Assignment(m.MemberID); !live {
			continue
		}
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				if owner[tp.Topic][p] != m.MemberID {
					n++
				}
			}
		}
	}
	return n
}

// loadStats returns max − min and max/avg of the plan's loads over members
// with a subscription.
func loadStats(plan Plan, members []Member) (spread int, ratio float64) {
	subscribed := map[string]bool{}
	for _, m := range members {
		subscribed[m.ID] = len(m.Topics) > 0
	}
	lo, hi, sum, n := 1<<62, 0, 0, 0
	for _, m := range plan.Members {
		if !subscribed[m.MemberID] {
			continue
		}
		l := m.Len()
		lo, hi, sum, n = min(lo, l), max(hi, l), sum+l, n+1
	}
	if n == 0 || sum == 0 {
		return 0, 0
	}
	return hi - lo, float64(hi) / (float64(sum) / float64(n))
}

func without(ids []string, id string) []string {
	var out []string
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// run plays the scenario: stable start, then join and leave (or leave and
// rejoin), returning the join and leave steps.
func (sc scenario) run(tb testing.TB, a Assignor) (join, leave step) {
	start := sc.rebalance(tb, a, sc.start, Plan{}, 0)
	if sc.leaveFirst {
		// S4: stable, one leaves, it rejoins.
		leave = sc.rebalance(tb, a, without(sc.start, sc.leaver), start.after, 1)
		join = sc.rebalance(tb, a, sc.start, leave.after, 2)
		return join, leave
	}
	grown := append(append([]string(nil), sc.start...), sc.joiner)
	join = sc.rebalance(tb, a, grown, start.after, 1)
	leave = sc.rebalance(tb, a, without(grown, sc.leaver), join.after, 2)
	return join, leave
}

func allAssignors(tb testing.TB) []Assignor {
	var out []Assignor
	for _, name := range Names() {
		a, err := Lookup(name)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func TestScenarioSmoke(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios() {
		for _, a := range allAssignors(t) {
			join, leave := sc.run(t, a)
			s, r := loadStats(join.after, join.members)
			t.Logf("%s %-18s join moved=%d withheld=%d rounds=%d spread=%d ratio=%.3f leave moved=%d", sc.name, a.Name(),
				movedFrom(join.before, join.after), join.withheld, join.rounds, s, r, movedFrom(leave.before, leave.after))
		}
	}
}

// S4's sticky plans, join and leave, cost exactly what the independent
// min-cost flow says is optimal.
func TestSticky_S4_IsOptimal(t *testing.T) {
	t.Parallel()
	sc := scenarios()[3]
	join, leave := sc.run(t, Sticky{})
	for _, st := range []step{leave, join} {
		r := newRefInput(st.members, sc.topics)
		own := checkValid(t, r, st.after, false)
		if got, want := r.cost(own), r.minCostFlow(); got != want {
			t.Fatalf("S4 sticky cost %+v, min-cost flow %+v", got, want)
		}
	}
}
