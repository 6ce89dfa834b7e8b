package assign

import "slices"

// Range is Kafka's RangeAssignor: for each topic on its own, the topic's
// subscribers in Kafka member order (static members by instance ID, then
// the others by member ID) get contiguous ranges of partitions, the first
// P mod n of them one partition more than the rest. Per topic, loads differ
// by at most one; across topics the extras pile up on the first members.
type Range struct{}

// Name implements Assignor.
func (Range) Name() string { return NameRange }

// Assign implements Assignor.
func (Range) Assign(members []Member, topics map[string]int32) (Plan, error) {
	pb, err := newProblem(members, topics)
	if err != nil {
		return Plan{}, err
	}
	rank := make([]int, len(pb.members))
	for r, mi := range pb.kafkaOrder() {
		rank[mi] = r
	}
	owner := make([]int32, pb.nparts())
	for ti := range pb.topics {
		t := &pb.topics[ti]
		subs := append([]int(nil), t.subscribers...)
		sortByRank(subs, rank)
		n := len(subs)
		per, extra := t.count/n, t.count%n
		g := pb.base[ti]
		for i, mi := range subs {
			size := per
			if i < extra {
				size++
			}
			for range size {
				owner[g] = int32(mi)
				g++
			}
		}
	}
	return pb.plan(owner), nil
}

// RoundRobin is Kafka's RoundRobinAssignor: all partitions of all subscribed
// topics sorted by (topic, partition) are dealt in turn to the members in
// Kafka member order, a member being skipped for a partition of a topic it
// does not subscribe to. With identical subscriptions loads differ by at
// most one.
type RoundRobin struct{}

// Name implements Assignor.
func (RoundRobin) Name() string { return NameRoundRobin }

// Assign implements Assignor.
func (RoundRobin) Assign(members []Member, topics map[string]int32) (Plan, error) {
	pb, err := newProblem(members, topics)
	if err != nil {
		return Plan{}, err
	}
	order := pb.kafkaOrder()
	owner := make([]int32, pb.nparts())
	next := 0 // position in order of the member to deal to next
	for ti := range pb.topics {
		for g := pb.base[ti]; g < pb.base[ti+1]; g++ {
			// The topic has a subscriber, so this loop ends within one turn.
			for !pb.subscribes(order[next], ti) {
				next = (next + 1) % len(order)
			}
			owner[g] = int32(order[next])
			next = (next + 1) % len(order)
		}
	}
	return pb.plan(owner), nil
}

func sortByRank(mis []int, rank []int) {
	slices.SortFunc(mis, func(a, b int) int { return rank[a] - rank[b] })
}
