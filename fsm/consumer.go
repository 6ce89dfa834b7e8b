package fsm

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/cohortlabs/cohort/assign"
	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// Consumer groups: Kafka's KIP-848 protocol (command rules 5).
//
// A consumer group has no join barrier. Each member heartbeats on its own
// (ConsumerHeartbeat), and the coordinator assigns:
//
//   - The group epoch rises with every change of membership, subscription
//     or assignor. The same apply computes every member's target assignment
//     for the new epoch with the group's server-side assignor ("uniform",
//     Cohort's sticky; or "range"), fed what each member holds, so that
//     little moves.
//   - A member moves to the target on its own heartbeats (reconcile). One
//     that holds partitions its target does not include is first told to
//     revoke them, keeping its epoch; once a heartbeat says it no longer
//     owns them, it moves to the target epoch. A partition another member
//     still holds or is revoking is withheld ("unreleased") and handed out
//     by a later heartbeat, once released: no partition is ever held by two
//     members.
//   - Commits are fenced by the member epoch (STALE_MEMBER_EPOCH).
//
// Consumer groups live beside the classic groups, in their own map, with
// one ID space: a classic group and a consumer group never share an ID. A
// static member's leave (epoch -2) removes it as a leave does under rules
// 5. Under rules 6 (Kafka's rule) it keeps the member, at epoch -2, with
// what it holds and its target: a member joining with the same instance ID
// takes its place, its assignment and its epoch, and the group does not
// rebalance (unless the subscription changed). The leader removes a
// departed static member whose session runs out, as any other.
//
// Under rules 7 a new group epoch moves every member whose target is what
// it already holds, with nothing to revoke, to that epoch in the same
// apply (advance): its next heartbeat learns the epoch without an entry of
// its own. Only the members whose partitions change write entries, so a
// join into a group of 1,000 costs a handful of entries instead of one per
// member. The member's client still states the epoch it was last told:
// any epoch from AdvancedFrom to the member's is accepted, from a
// heartbeat and from a commit, since the member has held the same
// partitions throughout.
//
// A member subscribes to topics by name, and under rules 6 also by a
// regular expression (RE2 syntax, matched against whole topic names, as
// Kafka's RE2/J): its subscription is the union. The expression is
// resolved against the topic registry in the apply that computes targets,
// once per distinct expression; a topic created or deleted that it
// matches moves the group epoch as a named one does.
//
// Groups and members are frozen once stored: every change builds a new
// group value, so snapshots share them safely.

// ConsumerGroupType is how the gRPC API's ListGroups and DescribeGroups
// name a consumer group's protocol type: it is no classic protocol type,
// so no classic member can join one.
const ConsumerGroupType = "kafka.kip848"

// Server-side assignors of consumer groups, by Kafka's names.
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

// ConsumerAssignors are the server-side assignors a consumer group may
// name, sorted; the first is the default.
func ConsumerAssignors() []string { return []string{AssignorUniform, AssignorRange} }

// consumerAssignor maps a Kafka assignor name to package assign's.
func consumerAssignor(name string) string {
	if name == AssignorUniform {
		return assign.NameSticky
	}
	return assign.NameRange
}

// Consumer group states, as Kafka's ConsumerGroupDescribe names them.
const (
	ConsumerEmpty       = "Empty"
	ConsumerReconciling = "Reconciling"
	ConsumerStable      = "Stable"
)

// ConsumerGroup is a KIP-848 consumer group. Frozen: never change one.
type ConsumerGroup struct {
	ID string
	// Epoch is the group epoch; AssignmentEpoch the epoch of the members'
	// targets (always Epoch: targets are computed in the same apply).
	Epoch, AssignmentEpoch int32
	// Assignor is the server-side assignor in use.
	Assignor       string
	Members        ConsumerMembers // sorted by ID
	StateChangedMs int64
	// bytes is consumerBytes' figure, kept as members change one at a
	// time (0: not yet measured).
	bytes int64
}

// ConsumerMember is one member of a consumer group. Frozen.
type ConsumerMember struct {
	ID, InstanceID, RackID, ClientID, ClientHost string
	RebalanceTimeoutMs                           int32
	// Topics the member subscribes to by name, sorted and unique.
	Topics []string
	// Regex is the member's topic regular expression ("": none); re is
	// it compiled to match whole names.
	Regex string
	re    *regexp.Regexp
	// Assignor the member asked for ("" for the group's).
	Assignor string
	// Epoch is the member epoch; PreviousEpoch the one before, still
	// accepted from a heartbeat whose answer was lost. A static member
	// that left (rules 6) is at DepartedEpoch, and PreviousEpoch is the
	// epoch its successor takes.
	Epoch, PreviousEpoch int32
	// AdvancedFrom is the epoch the member was at when a new group epoch
	// first advanced it without its heartbeat (rules 7; 0: not advanced
	// since its last applied heartbeat). Its client may state any epoch
	// from AdvancedFrom to Epoch: it has held the same partitions since.
	AdvancedFrom int32
	// Assigned are the partitions the member may consume; Revoking those it
	// was told to give up and has not yet confirmed; Target its share of
	// the group's target assignment.
	Assigned, Revoking, Target Assignment
}

// State is the group's state: Empty, Reconciling (a member is not yet at
// its target) or Stable.
func (g *ConsumerGroup) State() string {
	if g.Members.Len() == 0 {
		return ConsumerEmpty
	}
	for _, m := range g.Members.All() {
		if !m.reconciled(g.AssignmentEpoch) {
			return ConsumerReconciling
		}
	}
	return ConsumerStable
}

// DepartedEpoch is the epoch of a static member that left with epoch -2
// and whose instance may come back (Kafka's LEAVE_GROUP_STATIC_MEMBER_EPOCH).
const DepartedEpoch = -2

// Departed reports whether m is a static member that left and may be
// replaced by a member with its instance ID.
func (m *ConsumerMember) Departed() bool { return m.Epoch == DepartedEpoch }

// subscribes reports whether m subscribes to topic, by name or by its
// regular expression.
func (m *ConsumerMember) subscribes(topic string) bool {
	if _, ok := slices.BinarySearch(m.Topics, topic); ok {
		return true
	}
	return m.re != nil && m.re.MatchString(topic)
}

// MaxTopicRegexBytes bounds a member's topic regular expression, and
// maxTopicRegexInsts its compiled program. Matching one topic name costs
// at most the name's length times the program's size (Go's regexp runs in
// linear time), on every replica.
const (
	MaxTopicRegexBytes = 1024
	maxTopicRegexInsts = 2000
)

// CompileTopicRegex compiles a member's topic regular expression to match
// whole topic names; nil for "". The error is INVALID_REGULAR_EXPRESSION.
func CompileTopicRegex(p string) (*regexp.Regexp, *errcode.ProtocolError) {
	if p == "" {
		return nil, nil
	}
	if len(p) > MaxTopicRegexBytes {
		return nil, errcode.Errorf(errcode.InvalidRegularExpression, "subscribed_topic_regex of %d bytes, over the limit of %d", len(p), MaxTopicRegexBytes)
	}
	// Parsed alone first, so that the anchors below cannot change what an
	// unbalanced expression means.
	parsed, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidRegularExpression, "subscribed_topic_regex %q: %v", p, err)
	}
	if prog, err := syntax.Compile(parsed.Simplify()); err != nil || len(prog.Inst) > maxTopicRegexInsts {
		return nil, errcode.Errorf(errcode.InvalidRegularExpression, "subscribed_topic_regex %q compiles to over %d instructions", p, maxTopicRegexInsts)
	}
	re, err := regexp.Compile(`^(?:` + p + `)$`)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidRegularExpression, "subscribed_topic_regex %q: %v", p, err)
	}
	return re, nil
}

// accepts reports whether a heartbeat of m may state epoch e: m's epoch,
// the one before it (an answer lost), or one it was advanced from.
func (m *ConsumerMember) accepts(e int32) bool {
	return e == m.Epoch || e == m.PreviousEpoch || m.advancedOver(e)
}

// advancedOver reports whether e is an epoch m was advanced over (rules
// 7): from AdvancedFrom up to, not including, its epoch.
func (m *ConsumerMember) advancedOver(e int32) bool {
	return m.AdvancedFrom > 0 && m.AdvancedFrom <= e && e < m.Epoch
}

func (m *ConsumerMember) reconciled(target int32) bool {
	return m.Epoch == target && m.Revoking.Len() == 0 && assignmentsEqual(m.Assigned, m.Target)
}

// Member returns the member with the given ID.
func (g *ConsumerGroup) Member(id string) (*ConsumerMember, bool) {
	return g.Members.Get(id)
}

// hasMember reports whether a member of g satisfies f.
func (g *ConsumerGroup) hasMember(f func(*ConsumerMember) bool) bool {
	for _, m := range g.Members.All() {
		if f(m) {
			return true
		}
	}
	return false
}

// ConsumerResult is what a ConsumerHeartbeat answers its member.
type ConsumerResult struct {
	MemberID string
	// Epoch is the member's epoch after the heartbeat (-1 after a leave).
	Epoch int32
	// Assigned is what the member may consume now.
	Assigned Assignment
	Group    *ConsumerGroup
}

// ConsumerGroup returns the consumer group with the given ID.
func (s *State) ConsumerGroup(id string) (*ConsumerGroup, bool) {
	g, ok := s.consumerGroups[id]
	return g, ok
}

// ConsumerGroups returns every consumer group sorted by ID.
func (s *State) ConsumerGroups() []*ConsumerGroup {
	out := make([]*ConsumerGroup, 0, len(s.consumerGroups))
	for _, id := range slices.Sorted(maps.Keys(s.consumerGroups)) {
		out = append(out, s.consumerGroups[id])
	}
	return out
}

// consumerBytes is a consumer group's share of the state estimate: its
// strings and partitions, calibrated as a classic group's members are.
func consumerBytes(g *ConsumerGroup) int64 {
	n := groupBytes(g.ID, g.Assignor)
	for _, m := range g.Members.All() {
		n += consumerMemberBytes(m)
	}
	return n
}

func consumerMemberBytes(m *ConsumerMember) int64 {
	n := int64(memberOverhead + len(m.ID) + len(m.InstanceID) + len(m.RackID) + len(m.ClientID) + len(m.ClientHost) + len(m.Assignor) + len(m.Regex))
	for _, t := range m.Topics {
		n += int64(len(t))
	}
	return n + assignmentBytes(m.Assigned) + assignmentBytes(m.Revoking) + assignmentBytes(m.Target)
}

// putConsumerGroup stores g (nil: removes the group id), keeping the size
// estimate and the member count.
func (s *State) putConsumerGroup(id string, g *ConsumerGroup) {
	if old, ok := s.consumerGroups[id]; ok {
		s.consumerBytes -= old.bytes
		s.members -= old.Members.Len()
		delete(s.consumerGroups, id)
	}
	if g != nil {
		if g.bytes == 0 {
			g.bytes = consumerBytes(g)
		}
		s.consumerGroups[id] = g
		s.consumerBytes += g.bytes
		s.members += g.Members.Len()
	}
}

// consumerHeartbeat applies one heartbeat (see the file comment).
func (s *State) consumerHeartbeat(now int64, c *fsmv1.ConsumerHeartbeat) *ApplyResult {
	if s.rules < 5 {
		return fail(errcode.Errorf(errcode.InvalidArgument, "consumer groups need command rules 5; this entry was written under rules %d (a server of the cluster runs an older cohortd)", s.rules))
	}
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	if err := checkName("member_id", c.GetMemberId()); err != nil {
		return fail(err)
	}
	id := c.GetGroupId()
	if _, classic := s.groups[id]; classic {
		return fail(errcode.Errorf(errcode.InconsistentGroupProtocol, "group %q is a classic group (JoinGroup), not a consumer group", id))
	}
	if c.GetHasRegex() && s.rules < 6 {
		return fail(errcode.Errorf(errcode.InvalidArgument, "subscriptions by regular expression need command rules 6; this entry was written under rules %d (a server of the cluster runs an older cohortd)", s.rules))
	}
	g := s.consumerGroups[id]
	switch e := c.GetMemberEpoch(); {
	case e == -1 || e == -2:
		return s.consumerLeave(now, g, c)
	case e == 0:
		return s.consumerJoin(now, g, c)
	case e > 0:
		return s.consumerBeat(now, g, c)
	default:
		return fail(errcode.Errorf(errcode.InvalidArgument, "member_epoch %d: want 0 (join), -1 or -2 (leave) or the member's epoch", e))
	}
}

func (s *State) consumerLeave(now int64, g *ConsumerGroup, c *fsmv1.ConsumerHeartbeat) *ApplyResult {
	if g == nil {
		return fail(errcode.Errorf(errcode.UnknownMemberID, "consumer group %q does not exist, so member %q is unknown", c.GetGroupId(), c.GetMemberId()))
	}
	m, ok := g.Member(c.GetMemberId())
	if !ok {
		return fail(errcode.Errorf(errcode.UnknownMemberID, "member %q is not in consumer group %q", c.GetMemberId(), g.ID))
	}
	if c.GetMemberEpoch() == DepartedEpoch && m.InstanceID != "" && s.rules >= 6 {
		// A static member's leave: it stays, holding what it held, for
		// its instance to come back (or its session to run out).
		if m.Departed() {
			return &ApplyResult{Consumer: &ConsumerResult{MemberID: m.ID, Epoch: DepartedEpoch, Group: g}}
		}
		d := *m
		d.PreviousEpoch, d.Epoch, d.AdvancedFrom = m.Epoch, DepartedEpoch, 0
		return s.storeMember(g, &d, &ConsumerResult{MemberID: m.ID, Epoch: DepartedEpoch})
	}
	members := slices.DeleteFunc(g.Members.Slice(), func(m *ConsumerMember) bool { return m.ID == c.GetMemberId() })
	ng := s.rebalanced(now, g, members, g.Assignor)
	s.putConsumerGroup(g.ID, ng)
	return &ApplyResult{Consumer: &ConsumerResult{MemberID: c.GetMemberId(), Epoch: -1, Group: ng}}
}

func (s *State) consumerJoin(now int64, g *ConsumerGroup, c *fsmv1.ConsumerHeartbeat) *ApplyResult {
	switch {
	case !c.GetHasTopics() && !c.GetHasRegex():
		return fail(errcode.Errorf(errcode.InvalidArgument, "member %q joins without its subscribed topics or topic regular expression", c.GetMemberId()))
	case c.GetRebalanceTimeoutMs() <= 0:
		return fail(errcode.Errorf(errcode.InvalidArgument, "member %q joins with rebalance_timeout_ms %d: a join states a positive one", c.GetMemberId(), c.GetRebalanceTimeoutMs()))
	case len(c.GetSubscribedTopics()) > MaxNameLength:
		return fail(errcode.Errorf(errcode.InvalidArgument, "member %q subscribes to %d topics, over the limit of %d", c.GetMemberId(), len(c.GetSubscribedTopics()), MaxNameLength))
	}
	if err := checkConsumerStrings(c); err != nil {
		return fail(err)
	}
	re, err := CompileTopicRegex(c.GetSubscribedTopicRegex())
	if err != nil {
		return fail(err)
	}
	assignor := c.GetServerAssignor()
	if assignor != "" && !slices.Contains(ConsumerAssignors(), assignor) {
		return fail(errcode.Errorf(errcode.UnsupportedAssignor, "server assignor %q: this coordinator runs %s", assignor, strings.Join(ConsumerAssignors(), ", ")))
	}
	var members []*ConsumerMember
	exists := g != nil
	if exists {
		// A member joining again with its ID (after being fenced) starts
		// over: what it held is released.
		members = slices.DeleteFunc(g.Members.Slice(), func(m *ConsumerMember) bool { return m.ID == c.GetMemberId() })
		if inst := c.GetInstanceId(); inst != "" {
			for _, m := range members {
				switch {
				case m.InstanceID != inst:
				case m.Departed():
					return s.consumerRejoin(now, g, members, m, c, re)
				default:
					return fail(errcode.Errorf(errcode.UnreleasedInstanceID, "instance %q of consumer group %q is member %q's, which has not left", inst, g.ID, m.ID))
				}
			}
		}
	}
	b := &s.budgets
	if !exists {
		if err := s.overBudget("groups", b.Groups, int64(len(s.groups)+len(s.consumerGroups)), 1, "the group count"); err != nil {
			return fail(err)
		}
	}
	if err := s.overBudget("members-per-group", b.MembersPerGroup, int64(len(members)), 1, fmt.Sprintf("consumer group %q's member count", c.GetGroupId())); err != nil {
		return fail(err)
	}
	m := &ConsumerMember{
		ID: c.GetMemberId(), InstanceID: c.GetInstanceId(), RackID: c.GetRackId(), ClientID: c.GetClientId(), ClientHost: c.GetClientHost(),
		RebalanceTimeoutMs: c.GetRebalanceTimeoutMs(), Topics: sortedUnique(c.GetSubscribedTopics()), Assignor: assignor,
		Regex: c.GetSubscribedTopicRegex(), re: re,
	}
	grow := int64(memberOverhead+len(m.ID)+len(m.InstanceID)+len(m.RackID)+len(m.ClientID)+len(m.ClientHost)+len(m.Regex)) + s.calibration(1, 0)
	if !exists {
		grow += groupBytes(c.GetGroupId(), "") + s.calibration(0, 1)
	}
	if err := s.overBudget("state-bytes", b.StateBytes, s.estimate(), grow, "the state estimate"); err != nil {
		return fail(err)
	}
	if !exists {
		g = &ConsumerGroup{ID: c.GetGroupId(), Assignor: AssignorUniform, StateChangedMs: now}
	}
	groupAssignor := g.Assignor
	if assignor != "" {
		groupAssignor = assignor // the newest member's choice, as Kafka's most-voted rule would pick with one voter
	}
	members = insertSorted(members, m)
	ng := s.rebalanced(now, g, members, groupAssignor)
	return s.reconcileAndStore(ng, m.ID, nil, 0)
}

// consumerRejoin replaces departed, a static member that left (rules 6),
// with the member joining under its instance ID (Kafka's static
// membership): the newcomer takes its assignment, its target and the epoch
// it had. The group rebalances only when the subscription or the assignor
// the join states differs from the departed member's.
func (s *State) consumerRejoin(now int64, g *ConsumerGroup, others []*ConsumerMember, departed *ConsumerMember, c *fsmv1.ConsumerHeartbeat, re *regexp.Regexp) *ApplyResult {
	m := *departed
	m.ID, m.ClientID, m.ClientHost, m.RebalanceTimeoutMs = c.GetMemberId(), c.GetClientId(), c.GetClientHost(), c.GetRebalanceTimeoutMs()
	m.Epoch, m.PreviousEpoch = departed.PreviousEpoch, 0
	if r := c.GetRackId(); r != "" {
		m.RackID = r
	}
	m.Topics, m.Regex, m.re, m.Assignor = sortedUnique(c.GetSubscribedTopics()), c.GetSubscribedTopicRegex(), re, c.GetServerAssignor()
	changed := !slices.Equal(m.Topics, departed.Topics) || m.Regex != departed.Regex || m.Assignor != departed.Assignor
	members := listOf(insertSorted(slices.DeleteFunc(others, func(o *ConsumerMember) bool { return o == departed }), &m))
	return s.reconcileAndStore(s.withMember(now, g, members, departed, &m, changed), m.ID, nil, 0)
}

// withMember is g whose members are now members, where m took old's
// place: at the same epoch with its size kept, or, when the group's inputs
// changed (subscription or assignor), rebalanced at a new epoch.
func (s *State) withMember(now int64, g *ConsumerGroup, members ConsumerMembers, old, m *ConsumerMember, changed bool) *ConsumerGroup {
	if changed {
		assignor := g.Assignor
		if m.Assignor != "" {
			assignor = m.Assignor
		}
		return s.rebalanced(now, g, members.Slice(), assignor)
	}
	ng := &ConsumerGroup{ID: g.ID, Epoch: g.Epoch, AssignmentEpoch: g.AssignmentEpoch, Assignor: g.Assignor, Members: members, StateChangedMs: g.StateChangedMs}
	if g.bytes != 0 {
		ng.bytes = g.bytes - consumerMemberBytes(old) + consumerMemberBytes(m)
	}
	return ng
}

func (s *State) consumerBeat(now int64, g *ConsumerGroup, c *fsmv1.ConsumerHeartbeat) *ApplyResult {
	if g == nil {
		return fail(errcode.Errorf(errcode.UnknownMemberID, "consumer group %q does not exist, so member %q is unknown", c.GetGroupId(), c.GetMemberId()))
	}
	old, ok := g.Member(c.GetMemberId())
	if !ok {
		return fail(errcode.Errorf(errcode.UnknownMemberID, "member %q is not in consumer group %q", c.GetMemberId(), g.ID))
	}
	if old.Departed() {
		return fail(errcode.Errorf(errcode.FencedMemberEpoch, "member %q of consumer group %q left as a static member: its instance rejoins with epoch 0", old.ID, g.ID))
	}
	if e := c.GetMemberEpoch(); !old.accepts(e) {
		return fail(errcode.Errorf(errcode.FencedMemberEpoch, "member %q of consumer group %q is at epoch %d, the heartbeat says %d", old.ID, g.ID, old.Epoch, e))
	}
	if err := checkConsumerStrings(c); err != nil {
		return fail(err)
	}
	m := *old
	changed := false // the group's inputs: subscription or assignor
	if c.GetHasTopics() {
		if topics := sortedUnique(c.GetSubscribedTopics()); !slices.Equal(topics, m.Topics) {
			m.Topics, changed = topics, true
		}
	}
	if c.GetHasRegex() && c.GetSubscribedTopicRegex() != m.Regex {
		re, err := CompileTopicRegex(c.GetSubscribedTopicRegex())
		if err != nil {
			return fail(err)
		}
		m.Regex, m.re, changed = c.GetSubscribedTopicRegex(), re, true
	}
	if a := c.GetServerAssignor(); a != "" && a != m.Assignor {
		if !slices.Contains(ConsumerAssignors(), a) {
			return fail(errcode.Errorf(errcode.UnsupportedAssignor, "server assignor %q: this coordinator runs %s", a, strings.Join(ConsumerAssignors(), ", ")))
		}
		m.Assignor, changed = a, true
	}
	if t := c.GetRebalanceTimeoutMs(); t > 0 {
		m.RebalanceTimeoutMs = t
	}
	if r := c.GetRackId(); r != "" {
		m.RackID = r
	}
	members := g.Members.replaced(&m)
	var owned *Assignment
	if c.GetHasOwned() {
		a := assignmentFromProto(&fsmv1.Assignment{Topics: c.GetOwned()})
		owned = &a
	}
	return s.reconcileAndStore(s.withMember(now, g, members, old, &m, changed), m.ID, owned, c.GetMemberEpoch())
}

// checkConsumerStrings bounds the strings a heartbeat may store.
func checkConsumerStrings(c *fsmv1.ConsumerHeartbeat) *errcode.ProtocolError {
	for _, f := range []struct{ name, v string }{
		{"instance_id", c.GetInstanceId()}, {"rack_id", c.GetRackId()}, {"client_id", c.GetClientId()},
		{"client_host", c.GetClientHost()}, {"server_assignor", c.GetServerAssignor()},
	} {
		if len(f.v) > MaxNameLength {
			return errcode.Errorf(errcode.InvalidArgument, "%s of %d bytes, over the limit of %d", f.name, len(f.v), MaxNameLength)
		}
	}
	for _, t := range c.GetSubscribedTopics() {
		if err := checkName("subscribed_topics[]", t); err != nil {
			return err
		}
	}
	return nil
}

// rebalanced is g with members and a new group epoch, every member's
// target computed anew by assignor. Under rules 7 a member whose target is
// what it holds moves to the new epoch (advance, see the file comment).
func (s *State) rebalanced(now int64, g *ConsumerGroup, members []*ConsumerMember, assignor string) *ConsumerGroup {
	ng := &ConsumerGroup{ID: g.ID, Epoch: g.Epoch + 1, Assignor: assignor, StateChangedMs: now}
	ng.AssignmentEpoch = ng.Epoch
	in := make([]assign.Member, len(members))
	topics := map[string]int32{}
	var registry []string            // the topics' names, sorted: read once, if a member has a regex
	var resolved map[string][]string // regex -> the topics it matches, once per expression
	for i, m := range members {
		subscribed := m.Topics
		if m.re != nil {
			if resolved == nil {
				registry, resolved = slices.Sorted(maps.Keys(s.topics)), map[string][]string{}
			}
			matched, ok := resolved[m.Regex]
			if !ok {
				for _, t := range registry {
					if m.re.MatchString(t) {
						matched = append(matched, t)
					}
				}
				resolved[m.Regex] = matched
			}
			subscribed = sortedUnique(append(slices.Clone(m.Topics), matched...))
		}
		am := assign.Member{ID: m.ID, InstanceID: m.InstanceID, Topics: subscribed, Generation: assign.NoGeneration}
		held := m.Assigned
		if m.Revoking.Len() > 0 {
			held = union(m.Assigned, m.Revoking)
		}
		for _, tp := range held.Topics {
			am.Owned = append(am.Owned, assign.TopicPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
		}
		if len(am.Owned) > 0 {
			am.Generation = g.Epoch
		}
		in[i] = am
		for _, t := range subscribed {
			if n, ok := s.topics[t]; ok {
				topics[t] = n
			}
		}
	}
	var plan assign.Plan
	if a, err := assign.Lookup(consumerAssignor(assignor)); err == nil {
		if plan, err = a.Assign(in, topics); err != nil {
			plan = assign.Plan{} // assign fails only on input the FSM never builds; then nobody gets anything
		}
	}
	for i, m := range members {
		nm := *m
		nm.Target = Assignment{}
		if tps, ok := plan.Assignment(m.ID); ok {
			for _, tp := range tps {
				nm.Target.Topics = append(nm.Target.Topics, TopicPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
			}
		}
		if s.rules >= 7 && nm.Epoch > 0 && nm.Revoking.Len() == 0 && assignmentsEqual(nm.Assigned, nm.Target) {
			if nm.AdvancedFrom == 0 {
				nm.AdvancedFrom = nm.Epoch
			}
			nm.Epoch = ng.Epoch
		}
		members[i] = &nm
	}
	ng.Members = listOf(members)
	return ng
}

// reconcileAndStore moves member id of g toward its target (owned: what
// its heartbeat says it holds; nil: not stated; told: the epoch the
// heartbeat states, 0 for a join), stores the group and answers the
// member.
func (s *State) reconcileAndStore(g *ConsumerGroup, id string, owned *Assignment, told int32) *ApplyResult {
	cur, _ := g.Members.Get(id)
	m := *cur
	if m.AdvancedFrom != 0 {
		// The answer tells the member its epoch: from now on it states
		// that one, or (the answer lost) the one it stated.
		if told > 0 && told != m.Epoch {
			m.PreviousEpoch = told
		}
		m.AdvancedFrom = 0
	}
	if m.Revoking.Len() > 0 && owned != nil && intersection(*owned, m.Revoking).Len() == 0 {
		m.Revoking = Assignment{} // the member confirmed the revocation
	}
	if m.Revoking.Len() == 0 && m.Epoch != g.AssignmentEpoch {
		if give := minus(m.Assigned, m.Target); give.Len() > 0 {
			m.Revoking, m.Assigned = give, minus(m.Assigned, give)
		} else {
			m.PreviousEpoch, m.Epoch = m.Epoch, g.AssignmentEpoch
		}
	}
	if want := minus(m.Target, m.Assigned); m.Epoch == g.AssignmentEpoch && want.Len() > 0 {
		// Partitions of its target that nobody else holds any more: one
		// pass over the others' holdings, O(the group's partitions).
		free := partitionSet(want)
		for _, o := range g.Members.All() {
			if len(free) == 0 {
				break
			}
			if o.ID == m.ID {
				continue
			}
			for _, a := range []Assignment{o.Assigned, o.Revoking} {
				for _, tp := range a.Topics {
					for _, p := range tp.Partitions {
						delete(free, partitionKey{tp.Topic, p})
					}
				}
			}
		}
		m.Assigned = union(m.Assigned, fromSet(free))
	}
	return s.storeMember(g, &m, &ConsumerResult{MemberID: m.ID, Epoch: m.Epoch, Assigned: m.Assigned})
}

// storeMember stores g with m in place of its member of the same ID and
// answers r, which it completes with the stored group.
func (s *State) storeMember(g *ConsumerGroup, m *ConsumerMember, r *ConsumerResult) *ApplyResult {
	old, _ := g.Members.Get(m.ID)
	ng := *g
	ng.Members = g.Members.replaced(m)
	if g.bytes != 0 {
		ng.bytes = g.bytes - consumerMemberBytes(old) + consumerMemberBytes(m)
	}
	s.putConsumerGroup(g.ID, &ng)
	r.Group = &ng
	return &ApplyResult{Consumer: r}
}

// ---- partition sets ----

func insertSorted(members []*ConsumerMember, m *ConsumerMember) []*ConsumerMember {
	i, _ := slices.BinarySearchFunc(members, m.ID, func(x *ConsumerMember, id string) int { return strings.Compare(x.ID, id) })
	return slices.Insert(members, i, m)
}

func sortedUnique(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func partitionSet(a Assignment) map[partitionKey]bool {
	out := map[partitionKey]bool{}
	for _, tp := range a.Topics {
		for _, p := range tp.Partitions {
			out[partitionKey{tp.Topic, p}] = true
		}
	}
	return out
}

// fromSet is the set as an Assignment: topics and partitions sorted.
func fromSet(set map[partitionKey]bool) Assignment {
	keys := slices.SortedFunc(maps.Keys(set), func(a, b partitionKey) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	var out Assignment
	for _, k := range keys {
		if n := len(out.Topics); n == 0 || out.Topics[n-1].Topic != k.topic {
			out.Topics = append(out.Topics, TopicPartitions{Topic: k.topic})
		}
		last := &out.Topics[len(out.Topics)-1]
		last.Partitions = append(last.Partitions, k.partition)
	}
	return out
}

func union(a, b Assignment) Assignment {
	set := partitionSet(a)
	maps.Copy(set, partitionSet(b))
	return fromSet(set)
}

func minus(a, b Assignment) Assignment {
	set := partitionSet(a)
	for k := range partitionSet(b) {
		delete(set, k)
	}
	return fromSet(set)
}

func intersection(a, b Assignment) Assignment {
	bs := partitionSet(b)
	set := map[partitionKey]bool{}
	for k := range partitionSet(a) {
		if bs[k] {
			set[k] = true
		}
	}
	return fromSet(set)
}

func assignmentsEqual(a, b Assignment) bool {
	if slices.EqualFunc(a.Topics, b.Topics, func(x, y TopicPartitions) bool {
		return x.Topic == y.Topic && slices.Equal(x.Partitions, y.Partitions)
	}) {
		return true // the same lists: the common case, without building sets
	}
	return maps.Equal(partitionSet(a), partitionSet(b))
}

// QuietHeartbeat answers a heartbeat that would change nothing without
// applying it: the member is at its target (epoch, nothing to revoke,
// nothing withheld) and the heartbeat states no change. false: it must be
// applied (proposed) to be answered.
func (g *ConsumerGroup) QuietHeartbeat(c *fsmv1.ConsumerHeartbeat) (*ConsumerResult, bool) {
	m, ok := g.Member(c.GetMemberId())
	if !ok || c.GetMemberEpoch() != m.Epoch && !m.advancedOver(c.GetMemberEpoch()) || !m.reconciled(g.AssignmentEpoch) {
		return nil, false
	}
	if c.GetHasTopics() && !slices.Equal(sortedUnique(c.GetSubscribedTopics()), m.Topics) {
		return nil, false
	}
	if c.GetHasRegex() && c.GetSubscribedTopicRegex() != m.Regex {
		return nil, false
	}
	if a := c.GetServerAssignor(); a != "" && a != m.Assignor {
		return nil, false
	}
	if c.GetHasOwned() && !assignmentsEqual(assignmentFromProto(&fsmv1.Assignment{Topics: c.GetOwned()}), m.Assigned) {
		return nil, false
	}
	if r := c.GetRackId(); r != "" && r != m.RackID {
		return nil, false
	}
	if t := c.GetRebalanceTimeoutMs(); t > 0 && t != m.RebalanceTimeoutMs {
		return nil, false
	}
	return &ConsumerResult{MemberID: m.ID, Epoch: m.Epoch, Assigned: m.Assigned, Group: g}, true
}
