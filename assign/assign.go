package assign

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Protocol names, as members advertise them in JoinGroup and as Lookup
// accepts them.
const (
	NameRange             = "range"
	NameRoundRobin        = "roundrobin"
	NameSticky            = "sticky"
	NameCooperativeSticky = "cooperative-sticky"
	NameConsistentHash    = "consistent-hash"
)

// NoGeneration is the generation of a member that owned nothing before
// (Kafka's DEFAULT_GENERATION).
const NoGeneration int32 = -1

var (
	// ErrUnknownAssignor is returned by Lookup for a name no assignor has.
	ErrUnknownAssignor = errors.New("assign: unknown assignor")
	// ErrInvalidInput is returned by Assign when the members or topics are
	// unusable: an empty or duplicate member ID, a negative partition count.
	ErrInvalidInput = errors.New("assign: invalid input")
)

// TopicPartitions is a set of partitions of one topic. In everything this
// package returns, partitions are sorted and unique; in input they may come
// in any order and repeat.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// Member is one group member as an assignor sees it.
type Member struct {
	// ID is the member ID the coordinator gave the member; unique in the group.
	ID string
	// InstanceID is the static member's group.instance.id (KIP-345), or "".
	// range and roundrobin order static members by it (as Kafka does);
	// consistent-hash places a static member on the ring by it, so a
	// restarted static member gets its old ring position back.
	InstanceID string
	// Topics the member subscribes to, any order, duplicates allowed.
	Topics []string
	// Owned is what the member owned in generation Generation, from its
	// subscription metadata. Only sticky, cooperative-sticky read it.
	Owned []TopicPartitions
	// Generation of Owned; NoGeneration when the member owned nothing.
	Generation int32
}

// MemberAssignment is one member's partitions in a Plan.
type MemberAssignment struct {
	MemberID string
	// Topics sorted by name, each with sorted partitions; topics with no
	// partition are left out.
	Topics []TopicPartitions
}

// Len is the number of partitions in the assignment.
func (a MemberAssignment) Len() int {
	n := 0
	for _, tp := range a.Topics {
		n += len(tp.Partitions)
	}
	return n
}

// Plan is an assignor's answer.
type Plan struct {
	// Members holds one entry per input member, sorted by MemberID; a member
	// that gets nothing has an entry with no topics.
	Members []MemberAssignment
	// Withheld (cooperative-sticky only) lists partitions assigned to nobody
	// in this round because a live member still owns them and must revoke
	// them first; the next rebalance hands them out. Sorted.
	Withheld []TopicPartitions
	// Revoked (cooperative-sticky only) lists, per member, the partitions it
	// claimed in its metadata that are not in its new assignment: the member
	// stops them and, if any were withheld, rejoins at once for the second
	// round. Only members with something revoked appear, sorted by MemberID.
	Revoked []MemberAssignment
}

// Assignment returns the member's partitions and whether the member is in
// the plan.
func (p Plan) Assignment(memberID string) ([]TopicPartitions, bool) {
	i, ok := slices.BinarySearchFunc(p.Members, memberID, func(a MemberAssignment, id string) int {
		return strings.Compare(a.MemberID, id)
	})
	if !ok {
		return nil, false
	}
	return p.Members[i].Topics, true
}

// NeedsFollowUp reports whether the plan withheld partitions, so that the
// group must rebalance once more (cooperative-sticky's second round) before
// every partition is consumed.
func (p Plan) NeedsFollowUp() bool { return len(p.Withheld) > 0 }

// Assignor computes a Plan. Implementations are pure and deterministic: no
// hidden state, and the result does not depend on the order of members,
// of their topics and owned partitions, or of map iteration.
type Assignor interface {
	// Name is the protocol name members advertise.
	Name() string
	// Assign assigns every partition of every topic in topics that at
	// least one member subscribes to (cooperative-sticky may withhold some
	// for one round). Subscribed topics missing from topics are ignored, as
	// are owned partitions of unknown topics or out of range.
	Assign(members []Member, topics map[string]int32) (Plan, error)
}

// Names returns the protocol names Lookup knows, sorted.
func Names() []string {
	return []string{NameConsistentHash, NameCooperativeSticky, NameRange, NameRoundRobin, NameSticky}
}

// Lookup returns the assignor registered under a protocol name, with its
// default configuration.
func Lookup(name string) (Assignor, error) {
	switch name {
	case NameRange:
		return Range{}, nil
	case NameRoundRobin:
		return RoundRobin{}, nil
	case NameSticky:
		return Sticky{}, nil
	case NameCooperativeSticky:
		return CooperativeSticky{}, nil
	case NameConsistentHash:
		return NewConsistentHash(ConsistentHashConfig{})
	}
	return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownAssignor, name, strings.Join(Names(), ", "))
}

// ---- the canonical problem every assignor works on ----

// problem is the input with every order removed: members sorted by ID,
// topics sorted by name, partitions numbered globally in (topic, partition)
// order. Only topics with at least one partition and one subscriber are in
// it; nothing else can be assigned.
type problem struct {
	members []pmember
	topics  []ptopic
	// base[t] is the global index of topic t's partition 0; base[len(topics)]
	// is the number of partitions.
	base []int
}

type pmember struct {
	id, instance string
	// topics are indices into problem.topics, ascending.
	topics []int
	// owned are the global indices of the member's claims that exist,
	// ascending and unique, whether or not it still subscribes to them.
	owned      []int
	generation int32
	// src is the input member, for Revoked.
	src *Member
}

type ptopic struct {
	name  string
	count int
	// subscribers are member indices, ascending.
	subscribers []int
}

func (pb *problem) nparts() int { return pb.base[len(pb.topics)] }

// topicOf returns the topic index of global partition g.
func (pb *problem) topicOf(g int) int {
	i, _ := slices.BinarySearch(pb.base, g+1)
	return i - 1
}

func newProblem(members []Member, topics map[string]int32) (*problem, error) {
	pb := &problem{members: make([]pmember, len(members))}
	for i := range members {
		m := &members[i]
		if m.ID == "" {
			return nil, fmt.Errorf("%w: member %d has an empty ID", ErrInvalidInput, i)
		}
		pb.members[i] = pmember{id: m.ID, instance: m.InstanceID, generation: m.Generation, src: m}
	}
	slices.SortFunc(pb.members, func(a, b pmember) int { return strings.Compare(a.id, b.id) })
	for i := 1; i < len(pb.members); i++ {
		if pb.members[i].id == pb.members[i-1].id {
			return nil, fmt.Errorf("%w: member ID %q appears twice", ErrInvalidInput, pb.members[i].id)
		}
	}

	// Topics: those with partitions and a subscriber, sorted. Members of
	// a group usually share one topic list, so a list equal to the previous
	// member's is not walked again.
	subscribed := make(map[string]struct{}, len(topics))
	var last []string
	for i := range members {
		ts := members[i].Topics
		if i > 0 && slices.Equal(ts, last) {
			continue
		}
		last = ts
		for _, t := range ts {
			subscribed[t] = struct{}{}
		}
	}
	names := make([]string, 0, len(topics))
	for name, n := range topics {
		if n < 0 {
			return nil, fmt.Errorf("%w: topic %q has %d partitions", ErrInvalidInput, name, n)
		}
		if _, ok := subscribed[name]; ok && n > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	index := make(map[string]int, len(names))
	pb.topics = make([]ptopic, len(names))
	pb.base = make([]int, len(names)+1)
	for i, name := range names {
		index[name] = i
		pb.topics[i] = ptopic{name: name, count: int(topics[name])}
		pb.base[i+1] = pb.base[i] + int(topics[name])
	}

	var lastIdx []int
	last = nil
	nsubs := make([]int, len(names))
	for mi := range pb.members {
		m := &pb.members[mi]
		if mi > 0 && slices.Equal(m.src.Topics, last) {
			m.topics = lastIdx // shared, never written
		} else {
			m.topics = make([]int, 0, len(m.src.Topics))
			for _, t := range m.src.Topics {
				if ti, ok := index[t]; ok {
					m.topics = append(m.topics, ti)
				}
			}
			m.topics = sortUnique(m.topics)
			last, lastIdx = m.src.Topics, m.topics
		}
		for _, ti := range m.topics {
			nsubs[ti]++
		}
		n := 0
		for _, tp := range m.src.Owned {
			n += len(tp.Partitions)
		}
		if n == 0 {
			continue
		}
		m.owned = make([]int, 0, n)
		for _, tp := range m.src.Owned {
			ti, ok := index[tp.Topic]
			if !ok {
				continue
			}
			for _, p := range tp.Partitions {
				if p >= 0 && int(p) < pb.topics[ti].count {
					m.owned = append(m.owned, pb.base[ti]+int(p))
				}
			}
		}
		m.owned = sortUnique(m.owned)
	}
	// With identical subscriptions (the common case) every topic has the
	// same subscribers: share one list rather than build a list per topic.
	homogeneous, eligible := true, []int(nil)
	for mi := range pb.members {
		switch len(pb.members[mi].topics) {
		case 0:
		case len(pb.topics):
			eligible = append(eligible, mi)
		default:
			homogeneous = false
		}
	}
	if homogeneous {
		for ti := range pb.topics {
			pb.topics[ti].subscribers = eligible // shared, never written
		}
		return pb, nil
	}
	for ti := range pb.topics {
		pb.topics[ti].subscribers = make([]int, 0, nsubs[ti])
	}
	for mi := range pb.members {
		for _, ti := range pb.members[mi].topics {
			pb.topics[ti].subscribers = append(pb.topics[ti].subscribers, mi)
		}
	}
	return pb, nil
}

// sortUnique sorts s and drops repeats, in place.
func sortUnique(s []int) []int {
	if !slices.IsSorted(s) {
		slices.Sort(s)
	}
	return slices.Compact(s)
}

// subscribes reports whether member mi subscribes to topic ti.
func (pb *problem) subscribes(mi, ti int) bool {
	_, ok := slices.BinarySearch(pb.members[mi].topics, ti)
	return ok
}

// plan turns owner (global partition → member index, or -1) into a Plan.
func (pb *problem) plan(owner []int32) Plan {
	counts := make([]int, len(pb.members))
	for _, m := range owner {
		if m >= 0 {
			counts[m]++
		}
	}
	parts := make([][]int, len(pb.members))
	for mi := range parts {
		parts[mi] = make([]int, 0, counts[mi])
	}
	var withheld []int
	for g, m := range owner {
		if m >= 0 {
			parts[m] = append(parts[m], g)
		} else {
			withheld = append(withheld, g)
		}
	}
	plan := Plan{Members: make([]MemberAssignment, len(pb.members))}
	for mi := range pb.members {
		plan.Members[mi] = MemberAssignment{MemberID: pb.members[mi].id, Topics: pb.topicPartitions(parts[mi])}
	}
	plan.Withheld = pb.topicPartitions(withheld)
	return plan
}

// topicPartitions groups ascending global indices by topic.
func (pb *problem) topicPartitions(gs []int) []TopicPartitions {
	if len(gs) == 0 {
		return nil
	}
	ntopics := 0
	for i, t := 0, -1; i < len(gs); i++ {
		if t < 0 || gs[i] >= pb.base[t+1] {
			t = pb.topicOf(gs[i])
			ntopics++
		}
	}
	out := make([]TopicPartitions, 0, ntopics)
	// One backing array for all the partitions of the member.
	parts := make([]int32, len(gs))
	start, t := 0, -1
	for i, g := range gs {
		if t < 0 || g >= pb.base[t+1] {
			if t >= 0 {
				out = append(out, TopicPartitions{Topic: pb.topics[t].name, Partitions: parts[start:i:i]})
			}
			t, start = pb.topicOf(g), i
		}
		parts[i] = int32(g - pb.base[t])
	}
	out = append(out, TopicPartitions{Topic: pb.topics[t].name, Partitions: parts[start:]})
	return out
}

// kafkaOrder returns member indices in Kafka's MemberInfo order, which
// range and roundrobin deal by: static members first, by instance ID, then
// dynamic members by member ID (ties, impossible in a valid group, fall back
// to member ID).
func (pb *problem) kafkaOrder() []int {
	order := make([]int, len(pb.members))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ma, mb := &pb.members[a], &pb.members[b]
		switch {
		case ma.instance != "" && mb.instance != "":
			if c := strings.Compare(ma.instance, mb.instance); c != 0 {
				return c
			}
		case ma.instance != "":
			return -1
		case mb.instance != "":
			return 1
		}
		return cmp.Compare(a, b)
	})
	return order
}
