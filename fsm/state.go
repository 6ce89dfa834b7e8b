package fsm

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/cohortlabs/cohort/offsets"
)

// GroupState is a consumer group's state, as in Kafka's classic coordinator.
type GroupState int32

// Group states. Dead is never stored: a deleted or unknown group is Dead.
const (
	Empty GroupState = iota + 1
	PreparingRebalance
	CompletingRebalance
	Stable
	Dead
)

func (s GroupState) String() string {
	switch s {
	case Empty:
		return "Empty"
	case PreparingRebalance:
		return "PreparingRebalance"
	case CompletingRebalance:
		return "CompletingRebalance"
	case Stable:
		return "Stable"
	case Dead:
		return "Dead"
	}
	return "Unknown"
}

// Protocol is one assignment protocol a member supports.
type Protocol struct {
	Name     string
	Metadata []byte
}

// TopicPartitions is a set of partitions of one topic, sorted.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// Assignment is what one member owns in one generation: topics sorted by
// name, partitions sorted.
type Assignment struct {
	Topics   []TopicPartitions
	UserData []byte
}

// Owns reports whether the assignment holds topic/partition.
func (a Assignment) Owns(topic string, partition int32) bool {
	i, ok := slices.BinarySearchFunc(a.Topics, topic, func(tp TopicPartitions, t string) int {
		return strings.Compare(tp.Topic, t)
	})
	if !ok {
		return false
	}
	_, ok = slices.BinarySearch(a.Topics[i].Partitions, partition)
	return ok
}

// Len is the number of partitions in the assignment.
func (a Assignment) Len() int {
	n := 0
	for _, tp := range a.Topics {
		n += len(tp.Partitions)
	}
	return n
}

// Member is one member of a group.
type Member struct {
	ID                 string
	InstanceID         string
	ClientID           string
	ClientHost         string
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32
	Protocols          []Protocol
	// Topics the member subscribes to, sorted and unique.
	Topics []string
	// Joined reports that the member has joined the current rebalance round.
	Joined bool
	// JoinSeq orders the members that joined the current round (1 = first).
	JoinSeq    int64
	JoinedAtMs int64
	Assignment Assignment
	// PreviousAssignment is what the member was assigned in the generation
	// before the current one (command rules 2; empty before): it may still
	// commit those of its partitions that nobody owns now, as a
	// cooperative member does when it gives them up (checkCommit).
	PreviousAssignment Assignment

	// epoch is the group epoch that may change this member in place; a
	// member from an older epoch is shared with frozen groups and is copied
	// first (Group.editMember).
	epoch uint64
}

// Subscribes reports whether the member subscribes to topic.
func (m *Member) Subscribes(topic string) bool {
	_, ok := slices.BinarySearch(m.Topics, topic)
	return ok
}

// Supports reports whether the member supports the named protocol.
func (m *Member) Supports(name string) bool {
	return slices.ContainsFunc(m.Protocols, func(p Protocol) bool { return p.Name == name })
}

// ProtocolMetadata returns the member's metadata for the named protocol.
func (m *Member) ProtocolMetadata(name string) []byte {
	for _, p := range m.Protocols {
		if p.Name == name {
			return p.Metadata
		}
	}
	return nil
}

// Group is one consumer group. Values handed out by the FSM are frozen: the
// FSM copies a group before changing it, so a *Group may be read without a
// lock and kept, but never modified.
type Group struct {
	ID           string
	ProtocolType string
	// Protocol is the assignor chosen for the current generation.
	Protocol   string
	Generation int32
	LeaderID   string
	State      GroupState
	// Members sorted by member ID.
	Members MemberList
	// RebalanceStartedMs is the leader timestamp at which the current
	// rebalance began (PreparingRebalance).
	RebalanceStartedMs int64
	// InitialDelayUntilMs is when the initial rebalance delay of a group that
	// left Empty ends; 0 when none is pending.
	InitialDelayUntilMs int64
	// StateChangedMs is when the group last changed state (offset retention
	// counts from the moment it became Empty).
	StateChangedMs int64
	NextJoinSeq    int64

	epoch uint64
	// ix holds the figures derived from the members (index.go).
	ix groupIndex
	// counted is the group's size as State.groupBytes counts it: ix's
	// figure when the last command that changed the group ended.
	counted int64
}

// Member returns the member with the given ID.
func (g *Group) Member(id string) (*Member, bool) {
	return g.Members.Get(id)
}

// MemberByInstance returns the member with the given static instance ID.
func (g *Group) MemberByInstance(instanceID string) (*Member, bool) {
	if instanceID == "" {
		return nil, false
	}
	id, ok := g.ix.instances.get(instanceID)
	if !ok {
		return nil, false
	}
	return g.Member(id)
}

// RebalanceTimeoutMs is the largest rebalance timeout of the members: how long
// the join barrier waits.
func (g *Group) RebalanceTimeoutMs() int64 {
	last, _ := g.ix.timeouts.last()
	return int64(last.key)
}

// AllJoined reports whether every member has joined the current round.
func (g *Group) AllJoined() bool {
	return g.ix.joined == g.Members.Len()
}

// Joined is how many members have joined the current round.
func (g *Group) Joined() int { return g.ix.joined }

// JoinOrder returns the members in the order they joined the current round;
// members that did not join come last, by member ID.
func (g *Group) JoinOrder() []*Member {
	out := g.Members.Slice()
	slices.SortStableFunc(out, func(a, b *Member) int {
		switch {
		case a.Joined && !b.Joined:
			return -1
		case !a.Joined && b.Joined:
			return 1
		case a.Joined && b.Joined:
			return cmp.Compare(a.JoinSeq, b.JoinSeq)
		}
		return 0
	})
	return out
}

// clone copies the group for changing. Members are shared: the copy
// replaces a member with its own copy only when it changes one (editMember),
// so a join into a 1,000-member group copies one member, not 1,000, and
// the list of members shares its chunks (MemberList).
func (g *Group) clone(epoch uint64) *Group {
	c := *g
	c.epoch = epoch
	c.Members = g.Members.clone()
	return &c
}

// editMember returns the member at p ready to be changed in place.
func (g *Group) editMember(p memberPos) *Member {
	return editMember(&g.Members, p, g.epoch)
}

// editMemberByID returns the member with the given ID ready to be changed.
func (g *Group) editMemberByID(id string) (*Member, bool) {
	p, ok := g.Members.find(id)
	if !ok {
		return nil, false
	}
	return g.editMember(p), true
}

// insertMember adds m, a new member (topics: the state's partition count
// per topic).
func (g *Group) insertMember(topics map[string]int32, m *Member) {
	g.Members.insert(m, g.epoch)
	g.countMember(topics, m, 1)
}

// removeMembers removes the members with the given IDs; IDs of no member
// are ignored.
func (g *Group) removeMembers(topics map[string]int32, ids ...string) {
	at := make([]memberPos, 0, len(ids))
	for _, id := range ids {
		if p, ok := g.Members.find(id); ok && !slices.Contains(at, p) {
			at = append(at, p)
		}
	}
	if len(at) == 0 {
		return
	}
	for _, m := range g.Members.remove(at, g.epoch) {
		g.countMember(topics, m, -1)
	}
}

// Node is one entry of the node registry: a Raft server and the gRPC address
// followers forward requests to.
type Node struct {
	ID          string
	GRPCAddress string
	RaftAddress string
	// MaxCommandVersion is the newest command rules the node's binary
	// applies, as it last said (0: never said, a binary older than the
	// field, which applies version 1).
	MaxCommandVersion uint32
	// KafkaAddress is the node's Kafka listener address as clients reach
	// it; empty: no Kafka listener, or registered under rules before 5.
	KafkaAddress string
}

// State is the whole replicated state. It is changed only through apply.
type State struct {
	topics map[string]int32
	groups map[string]*Group
	// consumerGroups are the KIP-848 groups (consumer.go), frozen values.
	consumerGroups map[string]*ConsumerGroup
	offsets        *offsets.Table
	nodes          map[string]Node
	// epoch is bumped after every apply and every clone: a group whose epoch
	// differs is frozen and is copied before it is changed.
	epoch   uint64
	members int

	// budgets are the replicated budgets; rules is the version of the
	// command being applied (budgets hold from version 1 on).
	budgets Budgets
	rules   uint32
	// rulesSeen is the newest rules any command applied into this state
	// was written under (carried in snapshots: rules.go).
	rulesSeen uint32
	// The size estimate's parts (see budgets.go), and the partitions of
	// all topics.
	partitions, topicBytes, nodeBytes, groupBytes, consumerBytes int64
	// touched are the groups the command being applied changed.
	touched []*Group
}

// NewState returns an empty state.
func NewState() *State {
	return &State{
		topics:         map[string]int32{},
		groups:         map[string]*Group{},
		consumerGroups: map[string]*ConsumerGroup{},
		offsets:        offsets.New(),
		nodes:          map[string]Node{},
		epoch:          1,
	}
}

func (s *State) clone() *State {
	s.epoch++
	return &State{
		topics:         maps.Clone(s.topics),
		groups:         maps.Clone(s.groups),
		consumerGroups: maps.Clone(s.consumerGroups),
		offsets:        s.offsets.Clone(),
		nodes:          maps.Clone(s.nodes),
		epoch:          s.epoch + 1<<63,
		members:        s.members,
		budgets:        s.budgets,
		// The rules being applied are per command; those seen go with
		// the state.
		rulesSeen: s.rulesSeen,

		partitions: s.partitions, topicBytes: s.topicBytes, nodeBytes: s.nodeBytes, groupBytes: s.groupBytes, consumerBytes: s.consumerBytes,
	}
}

// mutableGroup returns the group with the given ID ready to be changed.
func (s *State) mutableGroup(id string) (*Group, bool) {
	g, ok := s.groups[id]
	if !ok {
		return nil, false
	}
	if g.epoch != s.epoch {
		g = g.clone(s.epoch)
		s.groups[id] = g
	}
	// Whoever asks for a writable group may change its size, whether or
	// not it had to be copied (a restored state's groups are writable at
	// once): its size is settled when the command ends.
	s.touch(g)
	return g, true
}

func (s *State) stats() Stats {
	return Stats{
		Topics:  len(s.topics),
		Groups:  len(s.groups),
		Members: s.members,
		Offsets: s.offsets.Len(),
		Nodes:   len(s.nodes),
	}
}

func (s *State) sortedNodes() []Node {
	out := make([]Node, 0, len(s.nodes))
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		out = append(out, s.nodes[id])
	}
	return out
}

// Partitions returns topic's partition count.
func (s *State) Partitions(topic string) (int32, bool) {
	n, ok := s.topics[topic]
	return n, ok
}

// Topics returns every topic with its partition count, sorted by name.
func (s *State) Topics() []TopicPartitionCount {
	out := make([]TopicPartitionCount, 0, len(s.topics))
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		out = append(out, TopicPartitionCount{Name: name, Partitions: s.topics[name]})
	}
	return out
}

// TopicPartitionCount is a topic and its number of partitions.
type TopicPartitionCount struct {
	Name       string
	Partitions int32
}

// Group returns the frozen group with the given ID.
func (s *State) Group(id string) (*Group, bool) {
	g, ok := s.groups[id]
	return g, ok
}

// Groups returns every group sorted by ID.
func (s *State) Groups() []*Group {
	out := make([]*Group, 0, len(s.groups))
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		out = append(out, s.groups[id])
	}
	return out
}

// Offsets returns the committed offsets of a group sorted by topic and partition.
func (s *State) Offsets(group string) []offsets.Entry {
	return s.offsets.Group(group)
}

// Offset returns one committed offset.
func (s *State) Offset(group, topic string, partition int32) (offsets.Value, bool) {
	return s.offsets.Get(group, offsets.Key{Topic: topic, Partition: partition})
}
