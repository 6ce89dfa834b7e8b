package assign

// Independent references the property tests check the assignors against.
// Nothing here calls into the package's solver code: claims are resolved,
// optima computed and plans checked from the raw Member values.

import (
	"fmt"
	"slices"
	"sort"
)

// tester is what the helpers need from *testing.T, *testing.B and *rapid.T.
type tester interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type tp struct {
	topic string
	p     int32
}

func (x tp) String() string { return fmt.Sprintf("%s/%d", x.topic, x.p) }

// refInput is an instance seen the simple way.
type refInput struct {
	members []Member
	topics  map[string]int32
	// parts: every partition that must be assigned (topic exists with
	// partitions and has a subscriber), sorted.
	parts []tp
	// subs[tp.topic]: subscriber IDs, sorted.
	subs map[string][]string
	// keeper[x]: the member that may keep x ("" if none).
	keeper map[tp]string
	// topClaimants[x]: members claiming x at its highest claimed generation.
	topClaimants map[tp][]string
}

func subscribesTo(m Member, topic string) bool { return slices.Contains(m.Topics, topic) }

func claimsOf(m Member) map[tp]bool {
	out := map[tp]bool{}
	for _, o := range m.Owned {
		for _, p := range o.Partitions {
			out[tp{o.Topic, p}] = true
		}
	}
	return out
}

func newRefInput(members []Member, topics map[string]int32) refInput {
	r := refInput{members: members, topics: topics, subs: map[string][]string{},
		keeper: map[tp]string{}, topClaimants: map[tp][]string{}}
	for t, n := range topics {
		for _, m := range members {
			if subscribesTo(m, t) {
				r.subs[t] = append(r.subs[t], m.ID)
			}
		}
		sort.Strings(r.subs[t])
		if len(r.subs[t]) == 0 {
			continue
		}
		for p := range n {
			r.parts = append(r.parts, tp{t, p})
		}
	}
	slices.SortFunc(r.parts, func(a, b tp) int {
		if a.topic != b.topic {
			if a.topic < b.topic {
				return -1
			}
			return 1
		}
		return int(a.p - b.p)
	})
	claims := make([]map[tp]bool, len(members))
	for i, m := range members {
		claims[i] = claimsOf(m)
	}
	for _, x := range r.parts {
		best, found := int32(0), false
		for i, m := range members {
			if claims[i][x] && (!found || m.Generation > best) {
				best, found = m.Generation, true
			}
		}
		if !found {
			continue
		}
		var top []string
		for i, m := range members {
			if claims[i][x] && m.Generation == best {
				top = append(top, m.ID)
			}
		}
		sort.Strings(top)
		r.topClaimants[x] = top
		if len(top) == 1 {
			for _, m := range members {
				if m.ID == top[0] && subscribesTo(m, x.topic) {
					r.keeper[x] = m.ID
				}
			}
		}
	}
	return r
}

// owners flattens a plan: partition → member, failing on a partition
// assigned twice.
func owners(t tester, plan Plan) map[tp]string {
	t.Helper()
	out := map[tp]string{}
	for _, m := range plan.Members {
		for _, tps := range m.Topics {
			for _, p := range tps.Partitions {
				x := tp{tps.Topic, p}
				if prev, dup := out[x]; dup {
					t.Fatalf("%v assigned to %s and %s", x, prev, m.MemberID)
				}
				out[x] = m.MemberID
			}
		}
	}
	return out
}

func checkCanonical(t tester, what string, tps []TopicPartitions) {
	t.Helper()
	for i, x := range tps {
		if i > 0 && tps[i-1].Topic >= x.Topic {
			t.Fatalf("%s: topics not sorted and unique: %q then %q", what, tps[i-1].Topic, x.Topic)
		}
		if len(x.Partitions) == 0 {
			t.Fatalf("%s: topic %q with no partitions", what, x.Topic)
		}
		for j := 1; j < len(x.Partitions); j++ {
			if x.Partitions[j-1] >= x.Partitions[j] {
				t.Fatalf("%s: topic %q partitions not sorted and unique: %v", what, x.Topic, x.Partitions)
			}
		}
	}
}

// checkValid checks the invariants every plan has: one entry per member,
// sorted and canonical; every partition of a subscribed topic assigned (or,
// if allowed, withheld) exactly once, only to a subscriber; nothing else.
func checkValid(t tester, r refInput, plan Plan, mayWithhold bool) map[tp]string {
	t.Helper()
	var ids []string
	for _, m := range r.members {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	if len(plan.Members) != len(ids) {
		t.Fatalf("plan has %d members, input %d", len(plan.Members), len(ids))
	}
	byID := map[string]Member{}
	for _, m := range r.members {
		byID[m.ID] = m
	}
	for i, m := range plan.Members {
		if m.MemberID != ids[i] {
			t.Fatalf("plan member %d is %q, want %q", i, m.MemberID, ids[i])
		}
		checkCanonical(t, "assignment of "+m.MemberID, m.Topics)
	}
	checkCanonical(t, "withheld", plan.Withheld)
	own := owners(t, plan)
	withheld := map[tp]bool{}
	for _, x := range plan.Withheld {
		for _, p := range x.Partitions {
			withheld[tp{x.Topic, p}] = true
		}
	}
	if !mayWithhold && len(withheld) > 0 {
		t.Fatalf("plan withholds %v", plan.Withheld)
	}
	for _, x := range r.parts {
		m, ok := own[x]
		switch {
		case ok && withheld[x]:
			t.Fatalf("%v both assigned to %s and withheld", x, m)
		case !ok && !withheld[x]:
			t.Fatalf("%v neither assigned nor withheld", x)
		case ok && !subscribesTo(byID[m], x.topic):
			t.Fatalf("%v assigned to %s, which does not subscribe to %q", x, m, x.topic)
		}
	}
	if len(own)+len(withheld) != len(r.parts) {
		t.Fatalf("plan places %d partitions, want %d (something unknown assigned)", len(own)+len(withheld), len(r.parts))
	}
	return own
}

// cost is the pair Sticky minimises: Σ load², then moves.
type cost struct{ sumSq, moves int }

func (r refInput) cost(own map[tp]string) cost {
	load := map[string]int{}
	for _, m := range own {
		load[m]++
	}
	var c cost
	for _, l := range load {
		c.sumSq += l * l
	}
	for x, k := range r.keeper {
		if own[x] != k {
			c.moves++
		}
	}
	return c
}

func sortedLoadsDesc(members []Member, own map[tp]string) []int {
	load := map[string]int{}
	for _, m := range own {
		load[m]++
	}
	out := make([]int, 0, len(members))
	for _, m := range members {
		out = append(out, load[m.ID])
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// bruteForce enumerates every valid assignment and returns the least cost
// (lexicographic) and the lexicographically least decreasingly-sorted load
// vector.
func (r refInput) bruteForce() (best cost, decMin []int) {
	choice := make([]int, len(r.parts))
	own := map[tp]string{}
	first := true
	for {
		for i, x := range r.parts {
			own[x] = r.subs[x.topic][choice[i]]
		}
		c := r.cost(own)
		v := sortedLoadsDesc(r.members, own)
		if first || c.sumSq < best.sumSq || (c.sumSq == best.sumSq && c.moves < best.moves) {
			best = c
		}
		if first || slices.Compare(v, decMin) < 0 {
			decMin = v
		}
		first = false
		i := 0
		for ; i < len(r.parts); i++ {
			choice[i]++
			if choice[i] < len(r.subs[r.parts[i].topic]) {
				break
			}
			choice[i] = 0
		}
		if i == len(r.parts) {
			return best, decMin
		}
	}
}

// minCostFlow is a plain successive-shortest-path min-cost flow on the
// per-partition graph with scalar costs W·(2k−1) for a member's k-th
// partition and 1 for a partition not given to its keeper, W > P, using
// Bellman-Ford. It returns the least (Σ load², moves).
func (r refInput) minCostFlow() cost {
	P := len(r.parts)
	ids := make([]string, len(r.members))
	for i, m := range r.members {
		ids[i] = m.ID
	}
	M := len(ids)
	W := int64(P + 1)
	src, sink := 0, 1+P+M
	type arc struct {
		to, rev int
		cap     int
		cost    int64
	}
	g := make([][]arc, sink+1)
	add := func(u, v, c int, w int64) {
		g[u] = append(g[u], arc{v, len(g[v]), c, w})
		g[v] = append(g[v], arc{u, len(g[u]) - 1, 0, -w})
	}
	for i, x := range r.parts {
		add(src, 1+i, 1, 0)
		for j, id := range ids {
			if !slices.Contains(r.subs[x.topic], id) {
				continue
			}
			w := int64(1)
			if r.keeper[x] == id {
				w = 0
			}
			add(1+i, 1+P+j, 1, w)
		}
	}
	for j := range ids {
		for k := 1; k <= P; k++ {
			add(1+P+j, sink, 1, W*int64(2*k-1))
		}
	}
	const inf = int64(1) << 60
	total := int64(0)
	for range P {
		dist := make([]int64, sink+1)
		prevNode, prevArc := make([]int, sink+1), make([]int, sink+1)
		for i := range dist {
			dist[i] = inf
		}
		dist[src] = 0
		for changed := true; changed; {
			changed = false
			for u := range g {
				if dist[u] == inf {
					continue
				}
				for ai, a := range g[u] {
					if a.cap > 0 && dist[u]+a.cost < dist[a.to] {
						dist[a.to] = dist[u] + a.cost
						prevNode[a.to], prevArc[a.to] = u, ai
						changed = true
					}
				}
			}
		}
		for v := sink; v != src; v = prevNode[v] {
			a := &g[prevNode[v]][prevArc[v]]
			a.cap--
			g[v][a.rev].cap++
		}
		total += dist[sink]
	}
	nonKept := int(total % W)
	kept := P - nonKept
	return cost{sumSq: int(total / W), moves: len(r.keeper) - kept}
}

// homogeneousOptimum is the closed form for identical subscriptions:
// loads q or q+1, the ceil slots to the members that may keep the most.
func (r refInput) homogeneousOptimum() cost {
	var eligible []string
	for _, m := range r.members {
		for _, t := range m.Topics {
			if len(r.subs[t]) > 0 {
				eligible = append(eligible, m.ID)
				break
			}
		}
	}
	if len(eligible) == 0 {
		return cost{}
	}
	o := map[string]int{}
	for _, k := range r.keeper {
		o[k]++
	}
	counts := make([]int, len(eligible))
	for i, id := range eligible {
		counts[i] = o[id]
	}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	n, P := len(eligible), len(r.parts)
	q, rem := P/n, P%n
	kept := 0
	c := cost{}
	for i, oi := range counts {
		quota := q
		if i < rem {
			quota++
		}
		kept += min(oi, quota)
		c.sumSq += quota * quota
	}
	c.moves = len(r.keeper) - kept
	return c
}
