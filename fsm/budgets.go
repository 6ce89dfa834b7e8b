package fsm

import (
	"fmt"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// CommandVersion is the newest rule set this FSM applies (the command's
// version field; rules.go says how a cluster picks the rules it writes
// under). Version 0 is a command written before budgets: it is applied
// without them, so a log written by an older version replays to the same
// state. Version 1: the replicated budgets are enforced and creating a
// topic rebalances the groups subscribed to it. Version 2: a group whose
// leader left names no leader until its join completes; the leader of a
// server-side group rejoining a Stable group unchanged forces no
// rebalance; members remember their previous generation's assignment, and
// may commit those partitions while nobody owns them. Version 3: a static
// member replaced while its group completes a rebalance starts the round
// again. Version 4: the state estimate that the state-bytes budget counts
// is calibrated against the measured heap per member and per group
// (calibratedBytes). Version 5: a node's registration records its Kafka
// listener address (RegisterNode.kafka_address; ignored before);
// DeleteOffsets and ConsumerHeartbeat (KIP-848 consumer groups) exist; a
// static member's restart rebalances only when its protocol names or topics
// changed, not its metadata. Version 6: a consumer group member may
// subscribe by a topic regular expression (ConsumerHeartbeat.has_regex),
// and a static consumer group member's leave (epoch -2) keeps it, with its
// assignment, for its instance to rejoin (fsm/consumer.go). Version 7: a
// new consumer group epoch advances every member whose target is what it
// holds to that epoch in the same apply, and its heartbeats and commits
// may state any epoch it was advanced over (ConsumerMember.AdvancedFrom).
const CommandVersion = 7

// Budgets bound the replicated state. They are part of the state (set by a
// SetBudgets command, carried in snapshots), so every replica enforces the
// same ones whatever its flags say. A zero field is no budget. A budget
// refuses growth only: lowering one below what is used removes nothing, and
// commands that shrink the state are never refused by a budget.
type Budgets struct {
	// Topics in the cluster.
	Topics int64
	// PartitionsPerTopic bounds one topic.
	PartitionsPerTopic int64
	// Partitions bounds the sum over all topics.
	Partitions int64
	// Groups in the cluster.
	Groups int64
	// MembersPerGroup is Kafka's group.max.size: a new member of a full group
	// is refused with GROUP_MAX_SIZE_REACHED.
	MembersPerGroup int64
	// SubscribedPartitionsPerGroup bounds the partitions of the topics a
	// group's members subscribe to, together: the size of the group's plan,
	// and of the work server-side assignment does in one apply.
	SubscribedPartitionsPerGroup int64
	// MetadataBytesPerGroup bounds what a group's members say about
	// themselves (IDs, client ID and host, protocol names and metadata,
	// subscribed topic names), together: the size of the leader's JoinGroup
	// answer.
	MetadataBytesPerGroup int64
	// OffsetsPerGroup bounds a group's committed offsets.
	OffsetsPerGroup int64
	// StateBytes bounds the FSM's running estimate of the whole state's size
	// (StateBytes in Usage).
	StateBytes int64
	// Nodes bounds the node registry.
	Nodes int64
}

// DefaultBudgets are sized for a node with 1 GiB of memory for the state:
// the state estimate is held to 256 MiB, and the heap peaks at about four
// times it (a snapshot shares the state copy-on-write but groups changed
// while it is written are copied, and Go's collector lets the heap double).
// docs/security.md gives the arithmetic.
func DefaultBudgets() Budgets {
	return Budgets{
		Topics:                       10_000,
		PartitionsPerTopic:           16_384,
		Partitions:                   200_000,
		Groups:                       100_000,
		MembersPerGroup:              10_000,
		SubscribedPartitionsPerGroup: 32_768,
		MetadataBytesPerGroup:        8 << 20,
		OffsetsPerGroup:              100_000,
		StateBytes:                   256 << 20,
		Nodes:                        64,
	}
}

// budgetField names one budget for errors, flags and metrics.
type budgetField struct {
	Name  string
	Help  string
	Value func(*Budgets) *int64
}

// BudgetFields lists the budgets with their names (as in errors, flags and
// metric labels), in a fixed order.
func BudgetFields() []budgetField {
	return []budgetField{
		{"topics", "topics in the cluster", func(b *Budgets) *int64 { return &b.Topics }},
		{"partitions-per-topic", "partitions one topic may have", func(b *Budgets) *int64 { return &b.PartitionsPerTopic }},
		{"partitions", "partitions of all topics together", func(b *Budgets) *int64 { return &b.Partitions }},
		{"groups", "groups in the cluster", func(b *Budgets) *int64 { return &b.Groups }},
		{"members-per-group", "members a group may have (Kafka's group.max.size)", func(b *Budgets) *int64 { return &b.MembersPerGroup }},
		{"subscribed-partitions-per-group", "partitions of the topics a group's members subscribe to, together", func(b *Budgets) *int64 { return &b.SubscribedPartitionsPerGroup }},
		{"metadata-bytes-per-group", "bytes of what a group's members state about themselves (IDs, hosts, protocol metadata, topic names), together", func(b *Budgets) *int64 { return &b.MetadataBytesPerGroup }},
		{"offsets-per-group", "committed offsets a group may have", func(b *Budgets) *int64 { return &b.OffsetsPerGroup }},
		{"state-bytes", "estimated bytes of the whole replicated state", func(b *Budgets) *int64 { return &b.StateBytes }},
		{"nodes", "entries of the node registry", func(b *Budgets) *int64 { return &b.Nodes }},
	}
}

// Validate checks that every budget is positive: a node configures real
// budgets (zero, no budget, exists only for states written before them).
func (b Budgets) Validate() error {
	for _, f := range BudgetFields() {
		if v := *f.Value(&b); v <= 0 {
			return fmt.Errorf("budget %s is %d; it must be positive (start from DefaultBudgets)", f.Name, v)
		}
	}
	return nil
}

// Proto is the budgets' wire form, for a SetBudgets command.
func (b Budgets) Proto() *fsmv1.Budgets {
	return &fsmv1.Budgets{
		Topics: b.Topics, PartitionsPerTopic: b.PartitionsPerTopic, Partitions: b.Partitions,
		Groups: b.Groups, MembersPerGroup: b.MembersPerGroup, SubscribedPartitionsPerGroup: b.SubscribedPartitionsPerGroup,
		MetadataBytesPerGroup: b.MetadataBytesPerGroup, OffsetsPerGroup: b.OffsetsPerGroup,
		StateBytes: b.StateBytes, Nodes: b.Nodes,
	}
}

func budgetsFromProto(p *fsmv1.Budgets) Budgets {
	return Budgets{
		Topics: p.GetTopics(), PartitionsPerTopic: p.GetPartitionsPerTopic(), Partitions: p.GetPartitions(),
		Groups: p.GetGroups(), MembersPerGroup: p.GetMembersPerGroup(), SubscribedPartitionsPerGroup: p.GetSubscribedPartitionsPerGroup(),
		MetadataBytesPerGroup: p.GetMetadataBytesPerGroup(), OffsetsPerGroup: p.GetOffsetsPerGroup(),
		StateBytes: p.GetStateBytes(), Nodes: p.GetNodes(),
	}
}

// SetBudgetsCommand is the command that makes b the cluster's budgets. Its
// version is left 0, so that a leader's raftnode writes it under the rules
// every server applies: during a rolling upgrade a new leader takes office
// while older servers still follow, and an entry under rules they do not
// know halts them. Who applies it directly sets the version.
func SetBudgetsCommand(b Budgets) *fsmv1.Command {
	return &fsmv1.Command{Kind: &fsmv1.Command_SetBudgets{SetBudgets: &fsmv1.SetBudgets{Budgets: b.Proto()}}}
}

func (s *State) setBudgets(c *fsmv1.SetBudgets) *ApplyResult {
	b := budgetsFromProto(c.GetBudgets())
	for _, f := range BudgetFields() {
		if v := *f.Value(&b); v < 0 {
			return fail(errcode.Errorf(errcode.InvalidArgument, "budget %s is %d; it must not be negative", f.Name, v))
		}
	}
	s.budgets = b
	return &ApplyResult{}
}

// Usage is how much of each budget the state uses. The per-group figures
// are those of the largest group.
type Usage = Budgets

// usage measures the state against the budgets. It costs a pass over the
// groups (their sizes are cached), so it is for metrics, not for apply.
func (s *State) usage() Usage {
	u := Usage{
		Topics: int64(len(s.topics)), Partitions: s.partitions, Groups: int64(len(s.groups)),
		StateBytes: s.estimateUnder(s.rulesSeen), Nodes: int64(len(s.nodes)),
	}
	for _, n := range s.topics {
		u.PartitionsPerTopic = max(u.PartitionsPerTopic, int64(n))
	}
	for id, g := range s.groups {
		u.MembersPerGroup = max(u.MembersPerGroup, int64(g.Members.Len()))
		u.MetadataBytesPerGroup = max(u.MetadataBytesPerGroup, g.ix.size.metadata)
		u.SubscribedPartitionsPerGroup = max(u.SubscribedPartitionsPerGroup, g.ix.size.subscribed)
		u.OffsetsPerGroup = max(u.OffsetsPerGroup, int64(s.offsets.GroupLen(id)))
	}
	return u
}

// budgeted reports whether the command being applied is held to the
// budgets: it was written under rules that know them and budgets are set.
func (s *State) budgeted() bool { return s.rules >= 1 }

// overBudget is the refusal of a change that takes a budget's use from used
// to used+grow, or nil when it fits (or the budget is not set, or the
// command predates budgets).
func (s *State) overBudget(name string, limit, used, grow int64, what string) *errcode.ProtocolError {
	if !s.budgeted() || limit <= 0 || grow <= 0 || used+grow <= limit {
		return nil
	}
	return errcode.Errorf(errcode.BudgetExceeded, "budget %s: %s would be %d, over the budget of %d", name, what, used+grow, limit)
}

// Budgets returns the replicated budgets (zero fields: no budget).
func (f *FSM) Budgets() Budgets {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.budgets
}

// Usage returns how much of each budget the state uses, and the budgets.
func (f *FSM) Usage() (Usage, Budgets) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.usage(), f.state.budgets
}

// Admit is the leader's check before proposing: the FSM's own verdict on
// cmd (a JoinMember, CommitOffsets, CreateTopic or AddPartitions written
// under CommandVersion) against the current state and budgets, changing
// nothing. A result whose Err is set, or a commit whose every partition is
// refused, would be refused by the apply too, unless the state changes
// first: the leader answers it without writing it to the log. A nil result
// means cmd is of a kind with no pre-check.
func (f *FSM) Admit(cmd *fsmv1.Command) *ApplyResult {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := *f.state // the maps are shared and only read
	s.rules, s.touched = CommandVersion, nil
	switch c := cmd.GetKind().(type) {
	case *fsmv1.Command_JoinMember:
		_, err := s.admitJoin(cmd.GetTimestampMs(), c.JoinMember)
		return &ApplyResult{Err: errOrNil(err)}
	case *fsmv1.Command_CommitOffsets:
		res, _ := s.admitCommit(c.CommitOffsets)
		return res
	case *fsmv1.Command_CreateTopic:
		_, err := s.admitCreateTopic(c.CreateTopic)
		return &ApplyResult{Err: errOrNil(err)}
	case *fsmv1.Command_AddPartitions:
		_, err := s.admitAddPartitions(c.AddPartitions)
		return &ApplyResult{Err: errOrNil(err)}
	}
	return nil
}

// errOrNil keeps a nil *ProtocolError a nil error.
func errOrNil(err *errcode.ProtocolError) error {
	if err == nil {
		return nil
	}
	return err
}

// ---- Size estimates ----
//
// The state's size is estimated from what commands put in it: the bytes of
// every string and byte slice, plus a fixed overhead per map entry and
// struct that stands for Go's own bookkeeping. The estimate is kept
// incrementally (per group, by each member's contribution as members
// change (index.go), summed into the state's when a command that changed
// the group ends; by the offset table; per topic and node), so checking it
// costs nothing.
// BenchmarkStateHeap compares it with the live heap for the shapes that
// fill it (0.8 to 1.2 heap bytes per estimated byte). The estimate decides
// refusals in apply: changing a constant here changes replicated outcomes,
// so it goes with a new CommandVersion.

const (
	topicOverhead  = 64
	nodeOverhead   = 96
	groupOverhead  = 256
	memberOverhead = 192
	itemOverhead   = 16 // a protocol, a subscribed topic, a topic of an assignment
)

// groupSize is a group's size figures.
type groupSize struct {
	bytes      int64 // the group's share of StateBytes
	metadata   int64 // what MetadataBytesPerGroup counts
	subscribed int64 // what SubscribedPartitionsPerGroup counts
}

// memberMetadataBytes is what MetadataBytesPerGroup counts of one member.
func memberMetadataBytes(m *Member) int64 {
	n := int64(len(m.ID) + len(m.InstanceID) + len(m.ClientID) + len(m.ClientHost))
	for _, p := range m.Protocols {
		n += int64(len(p.Name) + len(p.Metadata))
	}
	for _, t := range m.Topics {
		n += int64(len(t))
	}
	return n
}

func assignmentBytes(a Assignment) int64 {
	n := int64(len(a.UserData))
	for _, tp := range a.Topics {
		n += int64(itemOverhead + len(tp.Topic) + 4*len(tp.Partitions))
	}
	return n
}

// memberBytes is one member's share of StateBytes.
func memberBytes(m *Member) int64 {
	return memberSpecBytes(m) + assignmentBytes(m.Assignment) + assignmentBytes(m.PreviousAssignment)
}

// memberSpecBytes is the part of memberBytes that is what the member
// states about itself.
func memberSpecBytes(m *Member) int64 {
	return memberOverhead + memberMetadataBytes(m) + int64(itemOverhead*(len(m.Protocols)+len(m.Topics)))
}

// A group's size (groupIndex.size) counts groupBytes, and memberBytes and
// memberMetadataBytes of every member; the chosen protocol and the
// leader's ID name strings counted with the members. Its subscribed
// partitions are those of the distinct topics its members subscribe to.

// subscribedPartitions is the partition count of the topics g's members
// subscribe to, with prev (a member of g, or nil) left out and m added:
// the group's figure, less the topics only prev subscribes to, plus those
// of m's that no other member does.
func (s *State) subscribedPartitions(g *Group, prev, m *Member) int64 {
	n := g.ix.size.subscribed
	if prev != nil {
		for _, t := range prev.Topics {
			if count(&g.ix.topics, t) == 1 {
				n -= int64(s.topics[t])
			}
		}
	}
	for _, t := range m.Topics {
		c := count(&g.ix.topics, t)
		if prev != nil && prev.Subscribes(t) {
			c--
		}
		if c == 0 {
			n += int64(s.topics[t])
		}
	}
	return n
}

// bytes is the state's size estimate, before calibration.
func (s *State) bytes() int64 {
	return s.topicBytes + s.nodeBytes + s.groupBytes + s.consumerBytes + s.offsets.Bytes()
}

// The calibration (rules 4). `cohort-bench state` measured one replica's
// live heap per item against the estimate above: an offset 164 B against
// 153 (close), a member 624–653 B against 420, a group with one member
// 1.2 KB against 751 and a group holding one offset 1.1 KB against 422.
// Under rules 4 the estimate counts memberCalibration more bytes per
// member and groupCalibration more per group, which brings each of those
// shapes to at least its heap, so a state-bytes budget bounds the heap it
// names. Only counts are added: they change by whole members and groups,
// never by a member's content, so the figure stays exact under any order
// of joins and leaves.
const (
	memberCalibration = 240
	groupCalibration  = 700
)

// estimate is the state-bytes figure of the command being applied: the
// estimate under its rules.
func (s *State) estimate() int64 { return s.estimateUnder(s.rules) }

// estimateUnder is the state-bytes figure under rules.
func (s *State) estimateUnder(rules uint32) int64 {
	n := s.bytes()
	if rules >= 4 {
		n += memberCalibration*int64(s.members) + groupCalibration*int64(len(s.groups)+len(s.consumerGroups))
	}
	return n
}

// calibration is what a command under the current rules adds to the
// estimate for the members and groups it creates.
func (s *State) calibration(members, groups int64) int64 {
	if s.rules < 4 {
		return 0
	}
	return memberCalibration*members + groupCalibration*groups
}

func groupBytes(id, protocolType string) int64 {
	return int64(groupOverhead + len(id) + len(protocolType))
}

func topicBytes(name string) int64 { return int64(topicOverhead + len(name)) }

func nodeBytes(n Node) int64 {
	return int64(nodeOverhead + len(n.ID) + len(n.GRPCAddress) + len(n.RaftAddress) + len(n.KafkaAddress))
}

// measureAll computes every size figure, and every group's derived
// figures, from scratch (after a restore: it changes the groups, so they
// must be the state's own).
func (s *State) measureAll() {
	s.partitions, s.topicBytes, s.nodeBytes, s.groupBytes, s.consumerBytes = 0, 0, 0, 0, 0
	for name, n := range s.topics {
		s.partitions += int64(n)
		s.topicBytes += topicBytes(name)
	}
	for _, n := range s.nodes {
		s.nodeBytes += nodeBytes(n)
	}
	for _, g := range s.groups {
		g.reindex(s.topics)
		g.counted = g.ix.size.bytes
		s.groupBytes += g.counted
	}
	for _, g := range s.consumerGroups {
		s.consumerBytes += consumerBytes(g)
	}
}

// touch records that the command being applied changed (or created) the
// group: its size is added into the state's when the command ends.
func (s *State) touch(g *Group) { s.touched = append(s.touched, g) }

// dropGroup removes a group, and its share of the size estimate.
func (s *State) dropGroup(id string) {
	if g, ok := s.groups[id]; ok {
		s.groupBytes -= g.counted
		delete(s.groups, id)
	}
}

// settleSizes adds the size changes of the groups the command changed into
// the state's, once, at its end.
func (s *State) settleSizes() {
	for _, g := range s.touched {
		if cur, ok := s.groups[g.ID]; !ok || cur != g {
			continue // removed, or replaced by a group settled on its own
		}
		s.groupBytes += g.ix.size.bytes - g.counted
		g.counted = g.ix.size.bytes
	}
	s.touched = s.touched[:0]
}

// ---- The checks, one per kind of growth ----

// checkTopicGrowth checks a topic going from old to n partitions (old 0: a
// new topic).
func (s *State) checkTopicGrowth(name string, old, n int32) *errcode.ProtocolError {
	b := &s.budgets
	if old == 0 {
		if err := s.overBudget("topics", b.Topics, int64(len(s.topics)), 1, "the topic count"); err != nil {
			return err
		}
		if err := s.overBudget("state-bytes", b.StateBytes, s.estimate(), topicBytes(name), "the state estimate"); err != nil {
			return err
		}
	}
	if err := s.overBudget("partitions-per-topic", b.PartitionsPerTopic, 0, int64(n), fmt.Sprintf("topic %q's partition count", name)); err != nil {
		return err
	}
	return s.overBudget("partitions", b.Partitions, s.partitions, int64(n-old), "the cluster's partition count")
}

// checkJoinGrowth checks m joining g (exists: g is in the state) in place
// of prev (its earlier self, or the static member it replaces; nil for a
// new member).
func (s *State) checkJoinGrowth(g *Group, exists bool, protocolType string, prev, m *Member) *errcode.ProtocolError {
	if !s.budgeted() {
		return nil
	}
	b := &s.budgets
	grow := memberBytes(m) + groupBytes(g.ID, protocolType) - groupBytes(g.ID, g.ProtocolType)
	if !exists {
		if err := s.overBudget("groups", b.Groups, int64(len(s.groups)), 1, "the group count"); err != nil {
			return err
		}
		grow = memberBytes(m) + groupBytes(g.ID, protocolType) + s.calibration(0, 1)
	}
	if prev == nil {
		grow += s.calibration(1, 0)
	}
	if prev == nil && b.MembersPerGroup > 0 && int64(g.Members.Len()) >= b.MembersPerGroup {
		return errcode.Errorf(errcode.GroupMaxSizeReached, "budget members-per-group: group %q has %d members, the budget is %d", g.ID, g.Members.Len(), b.MembersPerGroup)
	}
	meta := memberMetadataBytes(m)
	if prev != nil {
		// The member keeps its assignment.
		meta -= memberMetadataBytes(prev)
		grow += assignmentBytes(prev.Assignment) + assignmentBytes(prev.PreviousAssignment) - memberBytes(prev)
	}
	if err := s.overBudget("metadata-bytes-per-group", b.MetadataBytesPerGroup, g.ix.size.metadata, meta, fmt.Sprintf("group %q's member metadata bytes", g.ID)); err != nil {
		return err
	}
	if prev == nil || !subset(m.Topics, prev.Topics) {
		now := s.subscribedPartitions(g, prev, m)
		if err := s.overBudget("subscribed-partitions-per-group", b.SubscribedPartitionsPerGroup, 0, now, fmt.Sprintf("the partitions group %q subscribes to", g.ID)); err != nil {
			return err
		}
	}
	return s.overBudget("state-bytes", b.StateBytes, s.estimate(), grow, "the state estimate")
}

// subset reports whether every element of a (sorted) is in b (sorted).
func subset(a, b []string) bool {
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j == len(b) || b[j] != x {
			return false
		}
	}
	return true
}

// checkPlanGrowth checks g's plan replacing the members' assignments.
func (s *State) checkPlanGrowth(g *Group, plan map[string]Assignment) *errcode.ProtocolError {
	if !s.budgeted() {
		return nil
	}
	var grow int64
	for _, m := range g.Members.All() {
		grow += assignmentBytes(plan[m.ID]) - assignmentBytes(m.Assignment)
	}
	return s.overBudget("state-bytes", s.budgets.StateBytes, s.estimate(), grow, "the state estimate")
}

// checkCommitGrowth checks the accepted offsets of a commit (those whose
// result has no error) going into group (exists: the group is in the state).
func (s *State) checkCommitGrowth(group string, exists bool, c *fsmv1.CommitOffsets, res []PartitionResult) *errcode.ProtocolError {
	if !s.budgeted() {
		return nil
	}
	b := &s.budgets
	var grow, added int64
	if !exists {
		if err := s.overBudget("groups", b.Groups, int64(len(s.groups)), 1, "the group count"); err != nil {
			return err
		}
		grow += groupBytes(group, "") + s.calibration(0, 1)
	}
	for i, o := range c.GetOffsets() {
		if res[i].Err != nil {
			continue
		}
		if old, ok := s.offsets.Get(group, offsetKey(o)); ok {
			grow += int64(len(o.GetMetadata()) - len(old.Metadata))
			continue
		}
		added++
		grow += offsetBytes(o.GetTopic(), o.GetMetadata())
	}
	if err := s.overBudget("offsets-per-group", b.OffsetsPerGroup, int64(s.offsets.GroupLen(group)), added, fmt.Sprintf("group %q's offset count", group)); err != nil {
		return err
	}
	return s.overBudget("state-bytes", b.StateBytes, s.estimate(), grow, "the state estimate")
}

// checkNodeGrowth checks n entering the node registry.
func (s *State) checkNodeGrowth(n Node) *errcode.ProtocolError {
	grow := nodeBytes(n)
	if old, ok := s.nodes[n.ID]; ok {
		grow -= nodeBytes(old)
	} else if err := s.overBudget("nodes", s.budgets.Nodes, int64(len(s.nodes)), 1, "the node count"); err != nil {
		return err
	}
	return s.overBudget("state-bytes", s.budgets.StateBytes, s.estimate(), grow, "the state estimate")
}
