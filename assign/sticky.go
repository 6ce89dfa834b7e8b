package assign

import (
	"cmp"
	"slices"
	"strings"
)

// Sticky is the sticky assignor, exact in both of its goals.
//
// Balance. Among all assignments that give every partition of a subscribed
// topic to exactly one of its subscribers, Sticky returns one whose load
// vector (partitions per member) is decreasingly minimal: sorted in
// decreasing order it is lexicographically smallest. The feasible load
// vectors are the integer points of a polymatroid base (an M-convex set),
// and for those Frank and Murota ("Discrete decreasing minimization",
// Math. Programming 2022) show decreasing-minimal = increasingly-maximal =
// least Σ load². So the plan at once has the smallest possible maximum load,
// the largest possible minimum load (hence the smallest max − min), and the
// least sum of squares; with identical subscriptions that is max − min ≤ 1.
// The sorted load vector of such an assignment is unique, the assignment is
// not.
//
// Stickiness. Among the assignments with that optimal balance, Sticky
// returns one with the fewest moves, a move being a partition whose previous
// owner is still a member subscribed to its topic and which now goes to
// another member. Partitions with no such owner (new, or whose owner left
// or unsubscribed) are placed wherever balance needs them and never count.
//
// Previous ownership comes from each member's Owned and Generation. When
// several members claim one partition, the claim with the highest
// generation wins; if two or more members claim it at that same highest
// generation (a bug or a zombie that was never fenced), nobody owns it: as
// Kafka does, the claims are invalidated and the partition is treated as
// unowned. A winner that no longer subscribes to the topic keeps nothing;
// the partition does not fall back to an older claim.
//
// Two exact algorithms give these plans. When every member with a
// subscription subscribes to the same topics, a closed form (see
// assignHomogeneous) runs in O(P + N log N). Otherwise a min-cost flow on
// the graph topics → members with convex load costs (see flow.go) solves the
// two objectives lexicographically.
type Sticky struct{}

// Name implements Assignor.
func (Sticky) Name() string { return NameSticky }

// Assign implements Assignor.
func (Sticky) Assign(members []Member, topics map[string]int32) (Plan, error) {
	pb, err := newProblem(members, topics)
	if err != nil {
		return Plan{}, err
	}
	cl := resolveClaims(pb)
	return pb.plan(solveSticky(pb, cl.keep)), nil
}

// CooperativeSticky is KIP-429's cooperative-sticky assignor. It computes
// the same target as Sticky, then withholds every partition that a live
// member (one in members) claims at the partition's highest claimed
// generation but that the target gives to someone else: such a partition is
// assigned to nobody in this round, so that its owner revokes it before
// anyone else starts it, and is handed out in the following rebalance
// (Plan.Withheld, Plan.Revoked, Plan.NeedsFollowUp). Partitions whose owner
// left, or that nobody owned, are assigned at once; all other partitions
// stay with their owners and never stop. When the members rejoin owning
// what this round gave them, the next round withholds nothing.
type CooperativeSticky struct{}

// Name implements Assignor.
func (CooperativeSticky) Name() string { return NameCooperativeSticky }

// Assign implements Assignor.
func (CooperativeSticky) Assign(members []Member, topics map[string]int32) (Plan, error) {
	pb, err := newProblem(members, topics)
	if err != nil {
		return Plan{}, err
	}
	cl := resolveClaims(pb)
	owner := solveSticky(pb, cl.keep)
	for mi := range pb.members {
		m := &pb.members[mi]
		for _, g := range m.owned {
			if m.generation == cl.topGen[g] && owner[g] != int32(mi) {
				owner[g] = -1
			}
		}
	}
	plan := pb.plan(owner)
	plan.Revoked = revoked(pb, plan)
	return plan, nil
}

// claims is the resolved previous ownership.
type claims struct {
	// topGen[g] is the highest generation any member claims g at; only
	// meaningful for claimed partitions.
	topGen []int32
	// keep[g] is the member that may keep g (the sole claimant at topGen
	// that still subscribes to g's topic), or -1.
	keep []int32
}

func resolveClaims(pb *problem) claims {
	n := pb.nparts()
	cl := claims{topGen: make([]int32, n), keep: make([]int32, n)}
	const unclaimed, tied = -1, -2
	for g := range cl.keep {
		cl.keep[g] = unclaimed
	}
	for mi := range pb.members {
		m := &pb.members[mi]
		for _, g := range m.owned {
			switch {
			case cl.keep[g] == unclaimed || m.generation > cl.topGen[g]:
				cl.topGen[g], cl.keep[g] = m.generation, int32(mi)
			case m.generation == cl.topGen[g]:
				cl.keep[g] = tied
			}
		}
	}
	for mi := range pb.members {
		m := &pb.members[mi]
		t := -1
		for _, g := range m.owned {
			if cl.keep[g] != int32(mi) {
				continue
			}
			if t < 0 || g >= pb.base[t+1] {
				t = pb.topicOf(g)
			}
			if !pb.subscribes(mi, t) {
				cl.keep[g] = -1
			}
		}
	}
	for g, k := range cl.keep {
		if k < 0 {
			cl.keep[g] = -1
		}
	}
	return cl
}

// solveSticky returns the sticky target: global partition → member index.
func solveSticky(pb *problem, keep []int32) []int32 {
	if pb.homogeneous() {
		return assignHomogeneous(pb, keep)
	}
	return assignByFlow(pb, keep)
}

// homogeneous reports whether every member with a subscription subscribes
// to every topic of the problem (each of which has a subscriber), so that
// any partition may go to any such member.
func (pb *problem) homogeneous() bool {
	for mi := range pb.members {
		if k := len(pb.members[mi].topics); k != 0 && k != len(pb.topics) {
			return false
		}
	}
	return true
}

// assignHomogeneous is the closed form for identical subscriptions.
//
// With n subscribing members and P partitions, write P = q·n + r. The
// balanced load vectors are exactly those with r members at q+1 and n − r
// at q (anything else has max − min ≥ 2, or max > q+1, and is beaten by
// moving one partition from a largest to a smallest member). Let o_m be the
// number of partitions member m may keep (keep[g] == m). A member with load
// L_m keeps at most min(o_m, L_m) partitions, so the kept total of any
// balanced assignment is at most Σ min(o_m, L_m). Going from q to q+1 raises
// min(o_m, ·) by exactly 1 when o_m > q and by 0 otherwise, so the sum is
// largest when the r ceil slots go to the members with the largest o_m
// (ties by member ID, for determinism): that bound is K* = Σ min(o_m, quota_m).
// The bound is reached: every member keeps min(o_m, quota_m) of its own
// partitions (its lowest-numbered ones) and the partitions left over, whose
// number is exactly Σ (quota_m − kept_m) because Σ quota_m = P, fill the
// remaining slots. Moves = (partitions with a keeper) − K*, the minimum.
func assignHomogeneous(pb *problem, keep []int32) []int32 {
	owner := make([]int32, pb.nparts())
	for g := range owner {
		owner[g] = -1
	}
	var eligible []int
	for mi := range pb.members {
		if len(pb.members[mi].topics) > 0 {
			eligible = append(eligible, mi)
		}
	}
	if len(eligible) == 0 {
		return owner
	}
	own := make([]int, len(pb.members))
	for _, k := range keep {
		if k >= 0 {
			own[k]++
		}
	}
	n, total := len(eligible), pb.nparts()
	q, r := total/n, total%n
	byOwn := slices.Clone(eligible)
	slices.SortStableFunc(byOwn, func(a, b int) int { return cmp.Compare(own[b], own[a]) })
	quota := make([]int, len(pb.members))
	for i, mi := range byOwn {
		quota[mi] = q
		if i < r {
			quota[mi] = q + 1
		}
	}
	need := make([]int, len(pb.members))
	for _, mi := range eligible {
		kept := 0
		for _, g := range pb.members[mi].owned {
			if kept < quota[mi] && keep[g] == int32(mi) {
				owner[g] = int32(mi)
				kept++
			}
		}
		need[mi] = quota[mi] - kept
	}
	fillRoundRobin(owner, eligible, need, 0, total)
	return owner
}

// fillRoundRobin deals the unowned partitions of [from, to), ascending, to
// the members in order that still need some, one each per turn, so that a
// member's new partitions spread over topics.
func fillRoundRobin(owner []int32, order []int, need []int, from, to int) {
	needy := make([]int, 0, len(order))
	for _, mi := range order {
		if need[mi] > 0 {
			needy = append(needy, mi)
		}
	}
	g := from
	for len(needy) > 0 {
		next := needy[:0]
		for _, mi := range needy {
			for g < to && owner[g] >= 0 {
				g++
			}
			if g == to {
				return // cannot happen: free partitions = Σ need
			}
			owner[g] = int32(mi)
			if need[mi]--; need[mi] > 0 {
				next = append(next, mi)
			}
		}
		needy = next
	}
}

// revoked lists, per member, its claimed partitions (as it sent them, any
// topic) that the plan does not give it.
func revoked(pb *problem, plan Plan) []MemberAssignment {
	var out []MemberAssignment
	for mi := range pb.members {
		src := pb.members[mi].src
		if len(src.Owned) == 0 {
			continue
		}
		assigned := plan.Members[mi].Topics
		var lost []TopicPartitions
		for _, tp := range canonicalTopicPartitions(src.Owned) {
			i, ok := slices.BinarySearchFunc(assigned, tp.Topic, func(a TopicPartitions, t string) int {
				return strings.Compare(a.Topic, t)
			})
			var have []int32
			if ok {
				have = assigned[i].Partitions
			}
			var gone []int32
			for _, p := range tp.Partitions {
				if _, ok := slices.BinarySearch(have, p); !ok {
					gone = append(gone, p)
				}
			}
			if len(gone) > 0 {
				lost = append(lost, TopicPartitions{Topic: tp.Topic, Partitions: gone})
			}
		}
		if len(lost) > 0 {
			out = append(out, MemberAssignment{MemberID: pb.members[mi].id, Topics: lost})
		}
	}
	return out
}

// canonicalTopicPartitions returns a copy of tps merged by topic, topics
// sorted, partitions sorted and unique, empty topics dropped.
func canonicalTopicPartitions(tps []TopicPartitions) []TopicPartitions {
	out := make([]TopicPartitions, 0, len(tps))
	for _, tp := range tps {
		if len(tp.Partitions) == 0 {
			continue
		}
		out = append(out, TopicPartitions{Topic: tp.Topic, Partitions: slices.Clone(tp.Partitions)})
	}
	slices.SortStableFunc(out, func(a, b TopicPartitions) int { return strings.Compare(a.Topic, b.Topic) })
	merged := out[:0]
	for _, tp := range out {
		if n := len(merged); n > 0 && merged[n-1].Topic == tp.Topic {
			merged[n-1].Partitions = append(merged[n-1].Partitions, tp.Partitions...)
			continue
		}
		merged = append(merged, tp)
	}
	for i := range merged {
		slices.Sort(merged[i].Partitions)
		merged[i].Partitions = slices.Compact(merged[i].Partitions)
	}
	return merged
}
