package assign

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// shape bounds a generated instance.
type shape struct {
	maxTopics, maxParts, maxMembers, maxTotal int
	homogeneous                               bool
}

var (
	tiny   = shape{maxTopics: 3, maxParts: 4, maxMembers: 4, maxTotal: 7}
	medium = shape{maxTopics: 5, maxParts: 10, maxMembers: 7, maxTotal: 36}
	large  = shape{maxTopics: 8, maxParts: 40, maxMembers: 20, maxTotal: 300}
)

// genInstance draws members and topics: topics t0…, some with no
// partitions; members with random (or, if homogeneous, identical)
// subscriptions that may name a missing topic; previous ownership that is
// random and conflicting, with out-of-range and unknown-topic claims, and
// generations from a small set so that ties happen.
func genInstance(t *rapid.T, s shape) ([]Member, map[string]int32) {
	nTopics := rapid.IntRange(1, s.maxTopics).Draw(t, "topics")
	topics := map[string]int32{}
	var names []string
	total := 0
	big := rapid.Bool().Draw(t, "big") // rapid favours small numbers; half the time, do not
	for i := range nTopics {
		name := fmt.Sprintf("t%d", i)
		lo := 0
		if big {
			lo = min(s.maxParts/2, s.maxTotal-total)
		}
		n := rapid.IntRange(lo, min(s.maxParts, s.maxTotal-total)).Draw(t, "partitions "+name)
		total += n
		topics[name] = int32(n)
		names = append(names, name)
	}
	pool := rapid.Permutation([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t"}).Draw(t, "ids")
	lo := 1
	if big {
		lo = max(1, s.maxMembers/2)
	}
	nMembers := rapid.IntRange(lo, min(s.maxMembers, len(pool))).Draw(t, "members")
	candidates := append(slices.Clone(names), "ghost")
	var shared []string
	if s.homogeneous {
		shared = rapid.SliceOfNDistinct(rapid.SampledFrom(candidates), 1, -1, rapid.ID[string]).Draw(t, "shared topics")
	}
	members := make([]Member, nMembers)
	for i := range members {
		m := Member{ID: "member-" + pool[i], Generation: NoGeneration}
		if rapid.IntRange(0, 3).Draw(t, "static") == 0 {
			m.InstanceID = "instance-" + pool[(i+7)%len(pool)]
		}
		if s.homogeneous {
			m.Topics = slices.Clone(shared)
		} else {
			m.Topics = rapid.SliceOfN(rapid.SampledFrom(candidates), 0, len(candidates)+1).Draw(t, "topics of "+m.ID)
		}
		m.Generation = rapid.SampledFrom([]int32{NoGeneration, 1, 2, 3}).Draw(t, "generation of "+m.ID)
		members[i] = m
	}
	// Previous ownership: each partition (plus some that do not exist)
	// claimed by up to two members.
	for _, name := range candidates {
		for p := int32(0); p <= topics[name]; p++ {
			for range rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("claims on %s/%d", name, p)) {
				mi := rapid.IntRange(0, nMembers-1).Draw(t, "claimant")
				members[mi].Owned = append(members[mi].Owned, TopicPartitions{Topic: name, Partitions: []int32{p}})
			}
		}
	}
	return members, topics
}

// permute returns the same instance with every order shuffled: members,
// each member's topics and owned lists (split and repeated), and a fresh
// map built in another insertion order.
func permute(t *rapid.T, members []Member, topics map[string]int32) ([]Member, map[string]int32) {
	out := rapid.Permutation(slices.Clone(members)).Draw(t, "member order")
	for i := range out {
		m := &out[i]
		m.Topics = rapid.Permutation(slices.Clone(m.Topics)).Draw(t, "topic order")
		var owned []TopicPartitions
		for _, o := range m.Owned {
			parts := rapid.Permutation(slices.Clone(o.Partitions)).Draw(t, "partition order")
			owned = append(owned, TopicPartitions{Topic: o.Topic, Partitions: parts})
			if rapid.Bool().Draw(t, "repeat claim") {
				owned = append(owned, TopicPartitions{Topic: o.Topic, Partitions: parts[:1]})
			}
		}
		m.Owned = rapid.Permutation(owned).Draw(t, "owned order")
	}
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	names = rapid.Permutation(names).Draw(t, "map order")
	m := make(map[string]int32, len(names))
	for _, n := range names {
		m[n] = topics[n]
	}
	return out, m
}

// encodePlan is the byte form determinism is judged on: every member's
// encoded assignment, the withheld partitions and the revocations.
func encodePlan(t tester, plan Plan) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := plan.EncodeAssignments([]byte("ud"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range enc {
		fmt.Fprintf(&buf, "%s=%x;", e.MemberID, e.Data)
	}
	w, err := EncodeAssignment(Assignment{Topics: plan.Withheld})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&buf, "withheld=%x;", w)
	for _, r := range plan.Revoked {
		d, err := EncodeAssignment(Assignment{Topics: r.Topics})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&buf, "revoked %s=%x;", r.MemberID, d)
	}
	return buf.Bytes()
}

func mustAssign(t tester, a Assignor, members []Member, topics map[string]int32) Plan {
	t.Helper()
	plan, err := a.Assign(members, topics)
	if err != nil {
		t.Fatalf("%s: %v", a.Name(), err)
	}
	return plan
}

// Every assignor: a valid plan, identical bytes under any permutation of
// the input, and the input left untouched.
func TestProperty_AllAssignors_ValidAndDeterministic(t *testing.T) {
	t.Parallel()
	for _, a := range allAssignors(t) {
		t.Run(a.Name(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				s := medium
				if rapid.Bool().Draw(t, "large") {
					s = large
				}
				s.homogeneous = rapid.Bool().Draw(t, "homogeneous")
				members, topics := genInstance(t, s)
				before := fmt.Sprint(members)
				plan := mustAssign(t, a, members, topics)
				if fmt.Sprint(members) != before {
					t.Fatalf("Assign changed its input")
				}
				checkValid(t, newRefInput(members, topics), plan, a.Name() == NameCooperativeSticky)
				pm, pt := permute(t, members, topics)
				again := mustAssign(t, a, pm, pt)
				if !bytes.Equal(encodePlan(t, plan), encodePlan(t, again)) || !reflect.DeepEqual(plan, again) {
					t.Fatalf("permuted input gives another plan:\n%v\n%v", plan, again)
				}
			})
		})
	}
}

// Sticky is exactly optimal: against brute force over every assignment on
// tiny instances (which also confirms that least Σ load² is the
// decreasingly-minimal load vector), against an independent min-cost flow on
// medium ones, and against the closed form with identical subscriptions.
func TestProperty_Sticky_MatchesBruteForce(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := tiny
		s.homogeneous = rapid.Bool().Draw(t, "homogeneous")
		members, topics := genInstance(t, s)
		r := newRefInput(members, topics)
		own := checkValid(t, r, mustAssign(t, Sticky{}, members, topics), false)
		best, decMin := r.bruteForce()
		if got := r.cost(own); got != best {
			t.Fatalf("sticky cost %+v, brute force %+v", got, best)
		}
		if got := sortedLoadsDesc(members, own); !slices.Equal(got, decMin) {
			t.Fatalf("sticky loads %v, decreasingly-minimal %v", got, decMin)
		}
	})
}

func TestProperty_Sticky_MatchesMinCostFlow(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := medium
		s.homogeneous = rapid.Bool().Draw(t, "homogeneous")
		members, topics := genInstance(t, s)
		r := newRefInput(members, topics)
		own := checkValid(t, r, mustAssign(t, Sticky{}, members, topics), false)
		if got, want := r.cost(own), r.minCostFlow(); got != want {
			t.Fatalf("sticky cost %+v, min-cost flow %+v", got, want)
		}
	})
}

func TestProperty_Sticky_Homogeneous_ClosedForm(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := large
		s.homogeneous = true
		members, topics := genInstance(t, s)
		r := newRefInput(members, topics)
		own := checkValid(t, r, mustAssign(t, Sticky{}, members, topics), false)
		if got, want := r.cost(own), r.homogeneousOptimum(); got != want {
			t.Fatalf("sticky cost %+v, closed form %+v", got, want)
		}
		if spread, _ := loadStats(mustAssign(t, Sticky{}, members, topics), members); spread > 1 {
			t.Fatalf("identical subscriptions but max − min = %d", spread)
		}
		// The general solver agrees with the fast path on these.
		pb, err := newProblem(members, topics)
		if err != nil {
			t.Fatal(err)
		}
		owner := assignByFlow(pb, resolveClaims(pb).keep)
		if got, want := r.cost(checkValid(t, r, pb.plan(owner), false)), r.homogeneousOptimum(); got != want {
			t.Fatalf("flow solver cost %+v, closed form %+v", got, want)
		}
	})
}

// Sticky on realistic histories: the previous plan is sticky's own, then
// members join, leave and change subscriptions; the result is still
// exactly optimal.
func TestProperty_Sticky_Histories_MatchMinCostFlow(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := medium
		s.homogeneous = rapid.Bool().Draw(t, "homogeneous")
		members, topics := genInstance(t, s)
		for i := range members {
			members[i].Owned, members[i].Generation = nil, NoGeneration
		}
		gen := int32(1)
		for range rapid.IntRange(1, 4).Draw(t, "rebalances") {
			plan := mustAssign(t, Sticky{}, members, topics)
			members = nextGeneration(t, members, plan, gen, topics)
			gen++
			r := newRefInput(members, topics)
			own := checkValid(t, r, mustAssign(t, Sticky{}, members, topics), false)
			if got, want := r.cost(own), r.minCostFlow(); got != want {
				t.Fatalf("sticky cost %+v, min-cost flow %+v", got, want)
			}
		}
	})
}

// nextGeneration gives each member what plan assigned it, then applies a
// random change: a member joins, leaves, or changes its subscription.
func nextGeneration(t *rapid.T, members []Member, plan Plan, gen int32, topics map[string]int32) []Member {
	var out []Member
	for _, m := range members {
		tps, _ := plan.Assignment(m.ID)
		m.Owned, m.Generation = tps, gen
		out = append(out, m)
	}
	var names []string
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	switch rapid.IntRange(0, 2).Draw(t, "change") {
	case 0:
		id := fmt.Sprintf("member-new-%d", gen)
		out = append(out, Member{ID: id, Topics: rapid.SliceOfN(rapid.SampledFrom(names), 1, 4).Draw(t, "joiner topics"), Generation: NoGeneration})
	case 1:
		if len(out) > 1 {
			i := rapid.IntRange(0, len(out)-1).Draw(t, "leaver")
			out = slices.Delete(out, i, i+1)
		}
	case 2:
		i := rapid.IntRange(0, len(out)-1).Draw(t, "changer")
		out[i].Topics = rapid.SliceOfN(rapid.SampledFrom(names), 0, 4).Draw(t, "new topics")
	}
	return out
}

// Cooperative-sticky: the target is sticky's; exactly the partitions a live
// top-generation claimant must give up are withheld; Revoked is what each
// member claimed minus what it got; and a second round that starts from
// the first withholds nothing, moves nothing and is still optimal.
func TestProperty_CooperativeSticky_TwoRounds(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := medium
		s.homogeneous = rapid.Bool().Draw(t, "homogeneous")
		members, topics := genInstance(t, s)
		r := newRefInput(members, topics)
		plan := mustAssign(t, CooperativeSticky{}, members, topics)
		own := checkValid(t, r, plan, true)
		target := checkValid(t, r, mustAssign(t, Sticky{}, members, topics), false)
		for _, x := range r.parts {
			mustWithhold := false
			for _, c := range r.topClaimants[x] {
				if c != target[x] {
					mustWithhold = true
				}
			}
			got, assigned := own[x]
			switch {
			case mustWithhold && assigned:
				t.Fatalf("%v: claimed by live %v, target %s, but assigned to %s at once", x, r.topClaimants[x], target[x], got)
			case !mustWithhold && !assigned:
				t.Fatalf("%v withheld, but its claimants %v match the target %s", x, r.topClaimants[x], target[x])
			case assigned && got != target[x]:
				t.Fatalf("%v assigned to %s, target %s", x, got, target[x])
			}
		}
		checkRevoked(t, members, plan)

		// Round two: everyone owns what round one gave it.
		var gen int32 = 4
		next := make([]Member, len(members))
		for i, m := range members {
			tps, _ := plan.Assignment(m.ID)
			next[i] = Member{ID: m.ID, InstanceID: m.InstanceID, Topics: m.Topics, Owned: tps, Generation: gen}
		}
		r2 := newRefInput(next, topics)
		plan2 := mustAssign(t, CooperativeSticky{}, next, topics)
		own2 := checkValid(t, r2, plan2, false)
		for x, m := range own {
			if own2[x] != m {
				t.Fatalf("round two moved %v from %s to %s", x, m, own2[x])
			}
		}
		if len(plan2.Revoked) != 0 {
			t.Fatalf("round two revokes %v", plan2.Revoked)
		}
		if got, want := r2.cost(own2), r2.minCostFlow(); got != want {
			t.Fatalf("round two cost %+v, optimum %+v", got, want)
		}
		if got, want := r2.cost(own2).sumSq, r.cost(target).sumSq; got != want {
			t.Fatalf("round two Σ load² %d, round one target %d", got, want)
		}
	})
}

func checkRevoked(t *rapid.T, members []Member, plan Plan) {
	got := map[string]map[tp]bool{}
	for _, r := range plan.Revoked {
		got[r.MemberID] = map[tp]bool{}
		for _, x := range r.Topics {
			for _, p := range x.Partitions {
				got[r.MemberID][tp{x.Topic, p}] = true
			}
		}
	}
	own := owners(t, plan)
	for _, m := range members {
		want := map[tp]bool{}
		for x := range claimsOf(m) {
			if own[x] != m.ID {
				want[x] = true
			}
		}
		if len(want) == 0 {
			want = nil
		}
		if !reflect.DeepEqual(got[m.ID], want) {
			t.Fatalf("%s revoked %v, want %v", m.ID, got[m.ID], want)
		}
	}
}

// Range and roundrobin are Kafka's, checked against a direct transcription
// of Kafka's RangeAssignor and RoundRobinAssignor.
func TestProperty_RangeAndRoundRobin_AreKafkas(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := large
		s.homogeneous = rapid.Bool().Draw(t, "homogeneous")
		members, topics := genInstance(t, s)
		r := newRefInput(members, topics)
		order := slices.Clone(members)
		slices.SortFunc(order, func(a, b Member) int {
			switch {
			case a.InstanceID != "" && b.InstanceID != "":
				if a.InstanceID != b.InstanceID {
					return cmpString(a.InstanceID, b.InstanceID)
				}
			case a.InstanceID != "":
				return -1
			case b.InstanceID != "":
				return 1
			}
			return cmpString(a.ID, b.ID)
		})
		// Range.
		want := map[tp]string{}
		for topic, n := range topics {
			var subs []Member
			for _, m := range order {
				if subscribesTo(m, topic) {
					subs = append(subs, m)
				}
			}
			if len(subs) == 0 {
				continue
			}
			per, extra := int(n)/len(subs), int(n)%len(subs)
			for i, m := range subs {
				start := per*i + min(i, extra)
				length := per
				if i < extra {
					length++
				}
				for p := start; p < start+length; p++ {
					want[tp{topic, int32(p)}] = m.ID
				}
			}
		}
		if got := checkValid(t, r, mustAssign(t, Range{}, members, topics), false); !reflect.DeepEqual(got, want) {
			t.Fatalf("range:\n got %v\nwant %v", got, want)
		}
		// RoundRobin.
		want = map[tp]string{}
		i := 0
		for _, x := range r.parts {
			for !subscribesTo(order[i%len(order)], x.topic) {
				i++
			}
			want[x] = order[i%len(order)].ID
			i++
		}
		rr := mustAssign(t, RoundRobin{}, members, topics)
		if got := checkValid(t, r, rr, false); !reflect.DeepEqual(got, want) {
			t.Fatalf("roundrobin:\n got %v\nwant %v", got, want)
		}
		if s.homogeneous {
			if spread, _ := loadStats(rr, members); spread > 1 {
				t.Fatalf("roundrobin with identical subscriptions: max − min = %d", spread)
			}
		}
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Consistent-hash: within the cap whenever some assignment is (with
// identical subscriptions, always; otherwise when sticky's optimal maximum
// load is), so that max/avg ≤ c whenever any assignment achieves it.
func TestProperty_ConsistentHash_BoundedLoads(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := large
		s.homogeneous = rapid.Bool().Draw(t, "homogeneous")
		members, topics := genInstance(t, s)
		c := rapid.Float64Range(1, 2).Draw(t, "load factor")
		ch, err := NewConsistentHash(ConsistentHashConfig{LoadFactor: c, VirtualNodes: rapid.IntRange(1, 40).Draw(t, "virtual nodes")})
		if err != nil {
			t.Fatal(err)
		}
		r := newRefInput(members, topics)
		plan := mustAssign(t, ch, members, topics)
		own := checkValid(t, r, plan, false)
		n := 0
		for _, m := range members {
			for _, topic := range m.Topics {
				if topics[topic] > 0 {
					n++
					break
				}
			}
		}
		P := len(r.parts)
		if n == 0 || P == 0 {
			return
		}
		load := map[string]int{}
		for _, m := range own {
			load[m]++
		}
		limit := max((P+n-1)/n, int(math.Floor(c*float64(P)/float64(n))))
		best := 0
		for _, m := range mustAssign(t, Sticky{}, members, topics).Members {
			best = max(best, m.Len())
		}
		if best > limit {
			return // no assignment fits under the cap
		}
		for m, l := range load {
			if l > limit {
				t.Fatalf("%s has %d partitions, cap %d (sticky's max is %d)", m, l, limit, best)
			}
		}
		_, ratio := loadStats(plan, members)
		if s.homogeneous && float64((P+n-1)/n) <= c*float64(P)/float64(n) && ratio > c+1e-9 {
			t.Fatalf("max/avg %.3f > c = %.3f", ratio, c)
		}
	})
}
