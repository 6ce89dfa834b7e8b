package fsm

import (
	"maps"
	"slices"
	"strings"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/offsets"
)

// Hard bounds the FSM enforces whatever the configured request limits are,
// so that no command can make the state unreasonable.
const (
	MaxTopicPartitions = 1 << 20
	MaxNameLength      = 1024
)

// apply applies one command. Every path that refuses a command returns
// before changing anything.
func (s *State) apply(cmd *fsmv1.Command) *ApplyResult {
	defer func() { s.epoch++ }() // freeze every group this command touched
	now := cmd.GetTimestampMs()
	switch c := cmd.GetKind().(type) {
	case *fsmv1.Command_JoinMember:
		return s.joinMember(now, c.JoinMember)
	case *fsmv1.Command_CompleteJoin:
		return s.completeJoinCmd(now, c.CompleteJoin)
	case *fsmv1.Command_SyncAssignment:
		return s.syncAssignment(now, c.SyncAssignment)
	case *fsmv1.Command_RemoveMembers:
		return s.removeMembers(now, c.RemoveMembers)
	case *fsmv1.Command_CommitOffsets:
		return s.commitOffsets(now, c.CommitOffsets)
	case *fsmv1.Command_DeleteGroups:
		return s.deleteGroups(c.DeleteGroups)
	case *fsmv1.Command_ExpireOffsets:
		return s.expireOffsets(now, c.ExpireOffsets)
	case *fsmv1.Command_CreateTopic:
		return s.createTopic(c.CreateTopic)
	case *fsmv1.Command_DeleteTopic:
		return s.deleteTopic(now, c.DeleteTopic)
	case *fsmv1.Command_AddPartitions:
		return s.addPartitions(now, c.AddPartitions)
	case *fsmv1.Command_RegisterNode:
		return s.registerNode(c.RegisterNode)
	case *fsmv1.Command_Batch:
		return s.batch(now, c.Batch)
	case nil:
		return fail(Errorf(CodeInvalidArgument, "command has no kind"))
	default:
		return fail(Errorf(CodeInvalidArgument, "unknown command kind %T", c))
	}
}

func fail(err *ProtocolError) *ApplyResult { return &ApplyResult{Err: err} }

// MaxBatch bounds the commands of one Batch entry.
const MaxBatch = 4096

// batch applies each command in order with the batch's timestamp. Each has
// its own result; one refused command does not stop the others, since they
// are independent requests that happen to share an entry.
func (s *State) batch(now int64, b *fsmv1.Batch) *ApplyResult {
	cmds := b.GetCommands()
	switch {
	case len(cmds) == 0:
		return fail(Errorf(CodeInvalidArgument, "batch is empty"))
	case len(cmds) > MaxBatch:
		return fail(Errorf(CodeInvalidArgument, "batch has %d commands, over the limit of %d", len(cmds), MaxBatch))
	}
	for i, c := range cmds {
		if _, nested := c.GetKind().(*fsmv1.Command_Batch); nested {
			return fail(Errorf(CodeInvalidArgument, "batch command %d is itself a batch", i))
		}
	}
	res := &ApplyResult{Batch: make([]*ApplyResult, len(cmds))}
	for i, c := range cmds {
		res.Batch[i] = s.apply(&fsmv1.Command{TimestampMs: now, Kind: c.GetKind()})
	}
	return res
}

func checkName(field, v string) *ProtocolError {
	switch {
	case v == "":
		return Errorf(CodeInvalidArgument, "%s is empty", field)
	case len(v) > MaxNameLength:
		return Errorf(CodeInvalidArgument, "%s is %d bytes, over the limit of %d", field, len(v), MaxNameLength)
	}
	return nil
}

// ---- membership ----

// memberFromSpec validates a member's self-description and converts it.
func memberFromSpec(spec *fsmv1.MemberSpec) (*Member, *ProtocolError) {
	if spec == nil {
		return nil, Errorf(CodeInvalidArgument, "member is missing")
	}
	if err := checkName("member_id", spec.GetMemberId()); err != nil {
		return nil, err
	}
	if len(spec.GetInstanceId()) > MaxNameLength {
		return nil, Errorf(CodeInvalidArgument, "instance_id is %d bytes, over the limit of %d", len(spec.GetInstanceId()), MaxNameLength)
	}
	if spec.GetSessionTimeoutMs() <= 0 {
		return nil, Errorf(CodeInvalidArgument, "session_timeout_ms %d must be positive", spec.GetSessionTimeoutMs())
	}
	if spec.GetRebalanceTimeoutMs() <= 0 {
		return nil, Errorf(CodeInvalidArgument, "rebalance_timeout_ms %d must be positive", spec.GetRebalanceTimeoutMs())
	}
	if len(spec.GetProtocols()) == 0 {
		return nil, Errorf(CodeInvalidArgument, "member %q names no protocols", spec.GetMemberId())
	}
	m := &Member{
		ID:                 spec.GetMemberId(),
		InstanceID:         spec.GetInstanceId(),
		ClientID:           spec.GetClientId(),
		ClientHost:         spec.GetClientHost(),
		SessionTimeoutMs:   spec.GetSessionTimeoutMs(),
		RebalanceTimeoutMs: spec.GetRebalanceTimeoutMs(),
	}
	for _, p := range spec.GetProtocols() {
		if err := checkName("protocol name", p.GetName()); err != nil {
			return nil, err
		}
		if m.Supports(p.GetName()) {
			return nil, Errorf(CodeInvalidArgument, "protocol %q listed twice", p.GetName())
		}
		m.Protocols = append(m.Protocols, Protocol{Name: p.GetName(), Metadata: slices.Clone(p.GetMetadata())})
	}
	for _, t := range spec.GetTopics() {
		if err := checkName("subscribed topic", t); err != nil {
			return nil, err
		}
	}
	m.Topics = slices.Compact(slices.Sorted(slices.Values(spec.GetTopics())))
	return m, nil
}

// sameProtocols reports whether two members state the same protocols and
// subscription (a rejoin that changes nothing needs no rebalance).
func sameProtocols(a, b *Member) bool {
	return slices.EqualFunc(a.Protocols, b.Protocols, func(x, y Protocol) bool {
		return x.Name == y.Name && string(x.Metadata) == string(y.Metadata)
	}) && slices.Equal(a.Topics, b.Topics)
}

func (s *State) joinMember(now int64, c *fsmv1.JoinMember) *ApplyResult {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	m, perr := memberFromSpec(c.GetMember())
	if perr == nil {
		perr = checkServerJoin(c.GetProtocolType(), m)
	}
	if perr != nil {
		return fail(perr)
	}
	if c.GetInitialRebalanceDelayMs() < 0 {
		return fail(Errorf(CodeInvalidArgument, "initial_rebalance_delay_ms %d is negative", c.GetInitialRebalanceDelayMs()))
	}
	g, exists := s.groups[c.GetGroupId()]
	if !exists {
		g = &Group{ID: c.GetGroupId(), State: Empty, epoch: s.epoch, StateChangedMs: now}
	}

	// Identify the caller: a known member, a static member's replacement, or new.
	old, known := g.Member(m.ID)
	var replaced *Member
	if byInst, ok := g.MemberByInstance(m.InstanceID); ok && byInst.ID != m.ID {
		if known || !c.GetNewMember() {
			return fail(Errorf(CodeFencedInstanceID, "instance %q belongs to member %q, not %q", m.InstanceID, byInst.ID, m.ID))
		}
		replaced = byInst
	}
	if known && old.InstanceID != m.InstanceID {
		return fail(Errorf(CodeFencedInstanceID, "member %q has instance_id %q, request says %q", m.ID, old.InstanceID, m.InstanceID))
	}
	if !known && replaced == nil && !c.GetNewMember() {
		return fail(Errorf(CodeUnknownMemberID, "member %q is not in group %q", m.ID, g.ID))
	}

	// Protocol compatibility with every other member.
	others := 0
	for _, o := range g.Members {
		if o.ID == m.ID || (replaced != nil && o.ID == replaced.ID) {
			continue
		}
		others++
	}
	if others > 0 {
		if g.ProtocolType != c.GetProtocolType() {
			return fail(Errorf(CodeInconsistentGroupProtocol, "group %q uses protocol type %q, member asks for %q", g.ID, g.ProtocolType, c.GetProtocolType()))
		}
		if len(commonProtocols(g, m, replaced)) == 0 {
			return fail(Errorf(CodeInconsistentGroupProtocol, "member %q shares no protocol with every member of group %q", m.ID, g.ID))
		}
	}

	// From here on the command is accepted: change a private copy.
	if exists {
		g, _ = s.mutableGroup(g.ID)
	} else {
		s.groups[g.ID] = g
	}
	if g.ProtocolType != c.GetProtocolType() && (g.State == Stable || g.State == CompletingRebalance) {
		// Only a sole member can switch the type, and the type decides who
		// assigns (a leader, or the FSM for "server"): rebalance.
		s.prepareRebalance(now, g)
	}
	g.ProtocolType = c.GetProtocolType()
	res := &ApplyResult{Group: g}

	switch {
	case replaced != nil:
		// KIP-345: the static member's new ID takes the old one's place.
		return s.replaceStatic(now, g, replaced, m, res)
	case known:
		changed := !sameProtocols(old, m)
		switch g.State {
		case CompletingRebalance:
			if !changed {
				return res // the member lost its join answer: answer this generation again
			}
			s.updateMember(g, old, m)
			s.prepareRebalance(now, g)
		case Stable:
			if !changed && g.LeaderID != m.ID {
				return res // a follower's rejoin with nothing new: no rebalance
			}
			s.updateMember(g, old, m)
			s.prepareRebalance(now, g)
		default: // PreparingRebalance
			s.updateMember(g, old, m)
		}
		s.markJoined(now, g, m.ID)
	default:
		s.addMember(g, m)
		switch g.State {
		case Empty:
			s.prepareRebalance(now, g)
			if d := int64(c.GetInitialRebalanceDelayMs()); d > 0 {
				g.InitialDelayUntilMs = min(now+d, now+g.RebalanceTimeoutMs())
			}
		case PreparingRebalance:
			if g.InitialDelayUntilMs > 0 {
				d := int64(c.GetInitialRebalanceDelayMs())
				g.InitialDelayUntilMs = min(max(g.InitialDelayUntilMs, now+d), g.RebalanceStartedMs+g.RebalanceTimeoutMs())
			}
		default:
			s.prepareRebalance(now, g)
		}
		s.markJoined(now, g, m.ID)
	}
	s.maybeCompleteJoin(now, g, res)
	return res
}

// commonProtocols lists, in m's order of preference, the protocols that m
// and every other member (ignoring replaced) support.
func commonProtocols(g *Group, m, replaced *Member) []string {
	var out []string
	for _, p := range m.Protocols {
		ok := true
		for _, o := range g.Members {
			if o.ID == m.ID || (replaced != nil && o.ID == replaced.ID) {
				continue
			}
			if !o.Supports(p.Name) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, p.Name)
		}
	}
	return out
}

func (s *State) addMember(g *Group, m *Member) {
	g.insertMember(m)
	s.members++
}

// updateMember takes the member's new self-description, keeping its
// round and assignment bookkeeping.
func (s *State) updateMember(g *Group, old, m *Member) {
	cur, _ := g.editMemberByID(old.ID)
	cur.ClientID, cur.ClientHost = m.ClientID, m.ClientHost
	cur.SessionTimeoutMs, cur.RebalanceTimeoutMs = m.SessionTimeoutMs, m.RebalanceTimeoutMs
	cur.Protocols, cur.Topics = m.Protocols, m.Topics
}

func (s *State) markJoined(now int64, g *Group, id string) {
	if m, _ := g.Member(id); m.Joined {
		return
	}
	m, _ := g.editMemberByID(id)
	g.NextJoinSeq++
	m.Joined, m.JoinSeq, m.JoinedAtMs = true, g.NextJoinSeq, now
}

// replaceStatic swaps a static member's old ID for its new one (KIP-345):
// in PreparingRebalance it joins the round; otherwise, with unchanged
// metadata, the generation goes on without a rebalance and the member keeps
// its assignment.
func (s *State) replaceStatic(now int64, g *Group, old, m *Member, res *ApplyResult) *ApplyResult {
	prev, _ := g.Member(old.ID)
	m.Assignment, m.Joined, m.JoinSeq, m.JoinedAtMs = prev.Assignment, prev.Joined, prev.JoinSeq, prev.JoinedAtMs
	g.removeMember(old.ID)
	g.insertMember(m)
	if g.LeaderID == old.ID {
		g.LeaderID = m.ID
	}
	if g.State != PreparingRebalance && !sameProtocols(prev, m) {
		// The restarted instance subscribes differently: its old assignment
		// no longer fits, so the group rebalances (as Kafka does).
		s.prepareRebalance(now, g)
	}
	if g.State == PreparingRebalance {
		s.markJoined(now, g, m.ID)
		s.maybeCompleteJoin(now, g, res)
	}
	return res
}

// prepareRebalance opens the join barrier: every member must rejoin.
func (s *State) prepareRebalance(now int64, g *Group) {
	if g.State != PreparingRebalance {
		g.State = PreparingRebalance
		g.StateChangedMs = now
	}
	g.RebalanceStartedMs = now
	g.InitialDelayUntilMs = 0
	g.NextJoinSeq = 0
	for i, m := range g.Members {
		if m.Joined || m.JoinSeq != 0 {
			m = g.editMember(i)
			m.Joined, m.JoinSeq = false, 0
		}
	}
}

// maybeCompleteJoin closes the barrier when every member has joined and no
// initial delay is pending.
func (s *State) maybeCompleteJoin(now int64, g *Group, res *ApplyResult) {
	if g.State != PreparingRebalance || !g.AllJoined() {
		return
	}
	if g.InitialDelayUntilMs > now {
		return
	}
	res.ServerAssignment = s.completeJoin(now, g)
	res.JoinCompleted = true
}

func (s *State) completeJoinCmd(now int64, c *fsmv1.CompleteJoin) *ApplyResult {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	g, ok := s.groups[c.GetGroupId()]
	if !ok {
		return fail(Errorf(CodeStaleCommand, "group %q does not exist", c.GetGroupId()))
	}
	if g.State != PreparingRebalance || g.Generation != c.GetGeneration() {
		return &ApplyResult{Group: g, Err: Errorf(CodeStaleCommand, "group %q is %s at generation %d, not rebalancing generation %d", g.ID, g.State, g.Generation, c.GetGeneration())}
	}
	if c.GetInitialDelay() && (g.InitialDelayUntilMs == 0 || g.InitialDelayUntilMs > now) {
		return &ApplyResult{Group: g, Err: Errorf(CodeStaleCommand, "group %q initial delay runs until %d, now is %d", g.ID, g.InitialDelayUntilMs, now)}
	}
	g, _ = s.mutableGroup(g.ID)
	sa := s.completeJoin(now, g)
	return &ApplyResult{Group: g, JoinCompleted: true, ServerAssignment: sa}
}

// completeJoin ends the join phase: members that did not rejoin are dropped
// (static members are kept), the generation is bumped, the protocol is voted
// and the leader chosen. A server-side group gets its plan computed here
// and goes straight to Stable (serverassign.go); its report is returned.
func (s *State) completeJoin(now int64, g *Group) *ServerAssignment {
	prev := previousAssignments(g)
	kept := g.Members[:0:0]
	for _, m := range g.Members {
		if m.Joined || m.InstanceID != "" {
			kept = append(kept, m)
		} else {
			s.members--
		}
	}
	g.Members = kept
	g.Generation++
	g.InitialDelayUntilMs = 0
	g.StateChangedMs = now
	for i := range g.Members {
		g.editMember(i).Assignment = Assignment{}
	}
	if len(g.Members) == 0 {
		g.State, g.LeaderID, g.Protocol = Empty, "", ""
		return nil
	}
	order := g.JoinOrder()
	g.Protocol = voteProtocol(order)
	if l, ok := g.Member(g.LeaderID); !ok || !l.Joined {
		g.LeaderID = order[0].ID
	}
	g.State = CompletingRebalance
	if prev != nil {
		return s.assignServerSide(now, g, prev)
	}
	return nil
}

// voteProtocol picks the protocol every member supports: each member votes
// for the first of those in its own preference order; most votes wins, ties
// go to the protocol voted for earliest in join order.
func voteProtocol(order []*Member) string {
	first := order[0]
	var candidates []string
	for _, p := range first.Protocols {
		if !slices.ContainsFunc(order, func(m *Member) bool { return !m.Supports(p.Name) }) {
			candidates = append(candidates, p.Name)
		}
	}
	if len(candidates) == 0 {
		// Unreachable while joins are checked for a common protocol; fall
		// back to the first member's preference rather than fail the apply.
		return first.Protocols[0].Name
	}
	votes := map[string]int{}
	var seen []string
	for _, m := range order {
		for _, p := range m.Protocols {
			if slices.Contains(candidates, p.Name) {
				if votes[p.Name] == 0 {
					seen = append(seen, p.Name)
				}
				votes[p.Name]++
				break
			}
		}
	}
	best := seen[0]
	for _, name := range seen[1:] {
		if votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

func (s *State) syncAssignment(now int64, c *fsmv1.SyncAssignment) *ApplyResult {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	g, ok := s.groups[c.GetGroupId()]
	if !ok {
		return fail(Errorf(CodeUnknownMemberID, "group %q does not exist, so member %q is unknown", c.GetGroupId(), c.GetMemberId()))
	}
	if _, ok := g.Member(c.GetMemberId()); !ok {
		return fail(Errorf(CodeUnknownMemberID, "member %q is not in group %q", c.GetMemberId(), g.ID))
	}
	if c.GetGeneration() != g.Generation {
		return fail(Errorf(CodeIllegalGeneration, "group %q is at generation %d, sync names %d", g.ID, g.Generation, c.GetGeneration()))
	}
	switch g.State {
	case PreparingRebalance:
		return fail(Errorf(CodeRebalanceInProgress, "group %q is rebalancing", g.ID))
	case Stable:
		return &ApplyResult{Group: g} // a retried sync: the plan is already in place
	}
	if g.LeaderID != c.GetMemberId() {
		return fail(Errorf(CodeInvalidAssignment, "member %q is not the leader of group %q (the leader is %q)", c.GetMemberId(), g.ID, g.LeaderID))
	}
	plan, perr := s.validatePlan(g, c.GetAssignments())
	if perr != nil {
		return fail(perr)
	}
	g, _ = s.mutableGroup(g.ID)
	for i, m := range g.Members {
		g.editMember(i).Assignment = plan[m.ID]
	}
	g.State = Stable
	g.StateChangedMs = now
	return &ApplyResult{Group: g}
}

// validatePlan checks a leader's plan and returns it in canonical form.
func (s *State) validatePlan(g *Group, plan []*fsmv1.MemberAssignment) (map[string]Assignment, *ProtocolError) {
	out := make(map[string]Assignment, len(plan))
	owners := map[string][]string{} // topic → partition → owning member
	for _, ma := range plan {
		m, ok := g.Member(ma.GetMemberId())
		if !ok {
			return nil, Errorf(CodeInvalidAssignment, "plan names member %q, which is not in generation %d of group %q", ma.GetMemberId(), g.Generation, g.ID)
		}
		if _, dup := out[m.ID]; dup {
			return nil, Errorf(CodeInvalidAssignment, "plan names member %q twice", m.ID)
		}
		a := Assignment{UserData: slices.Clone(ma.GetAssignment().GetUserData())}
		for _, t := range ma.GetAssignment().GetTopics() {
			topic := t.GetTopic()
			n, ok := s.topics[topic]
			if !ok {
				return nil, Errorf(CodeInvalidAssignment, "plan gives member %q topic %q, which does not exist", m.ID, topic)
			}
			if !m.Subscribes(topic) {
				return nil, Errorf(CodeInvalidAssignment, "plan gives member %q topic %q, to which it does not subscribe", m.ID, topic)
			}
			owner := owners[topic]
			if owner == nil {
				owner = make([]string, n)
				owners[topic] = owner
			}
			for _, p := range t.GetPartitions() {
				if p < 0 || p >= n {
					return nil, Errorf(CodeInvalidAssignment, "plan gives member %q partition %s/%d; topic %q has partitions 0..%d", m.ID, topic, p, topic, n-1)
				}
				if prev := owner[p]; prev != "" {
					return nil, Errorf(CodeInvalidAssignment, "plan gives partition %s/%d to both %q and %q", topic, p, prev, m.ID)
				}
				owner[p] = m.ID
			}
			a.Topics = append(a.Topics, TopicPartitions{Topic: topic, Partitions: slices.Clone(t.GetPartitions())})
		}
		out[m.ID] = canonical(a)
	}
	return out, nil
}

// canonical sorts an assignment's topics and partitions and merges topics
// named more than once.
func canonical(a Assignment) Assignment {
	slices.SortStableFunc(a.Topics, func(x, y TopicPartitions) int { return strings.Compare(x.Topic, y.Topic) })
	merged := a.Topics[:0]
	for _, tp := range a.Topics {
		if n := len(merged); n > 0 && merged[n-1].Topic == tp.Topic {
			merged[n-1].Partitions = append(merged[n-1].Partitions, tp.Partitions...)
			continue
		}
		merged = append(merged, tp)
	}
	for i := range merged {
		slices.Sort(merged[i].Partitions)
	}
	a.Topics = merged
	return a
}

func (s *State) removeMembers(now int64, c *fsmv1.RemoveMembers) *ApplyResult {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	if len(c.GetMembers()) == 0 {
		return fail(Errorf(CodeInvalidArgument, "remove names no members"))
	}
	g, exists := s.groups[c.GetGroupId()]
	res := &ApplyResult{Members: make([]MemberResult, len(c.GetMembers()))}
	var doomed []string
	for i, ref := range c.GetMembers() {
		r := MemberResult{MemberID: ref.GetMemberId(), InstanceID: ref.GetInstanceId()}
		r.Err = checkRemove(g, exists, ref)
		if r.Err == nil {
			id := ref.GetMemberId()
			if id == "" {
				m, _ := g.MemberByInstance(ref.GetInstanceId())
				id = m.ID
				r.MemberID = id
			}
			if !slices.Contains(doomed, id) {
				doomed = append(doomed, id)
			}
		}
		res.Members[i] = r
	}
	if len(doomed) == 0 {
		res.Group = g
		return res
	}
	g, _ = s.mutableGroup(g.ID)
	for _, id := range doomed {
		g.removeMember(id)
		s.members--
	}
	s.afterRemoval(now, g, res)
	res.Group = g
	return res
}

// checkRemove decides whether one member may be removed: an error value of
// type *ProtocolError, or nil.
func checkRemove(g *Group, exists bool, ref *fsmv1.MemberRef) error {
	if ref.GetMemberId() == "" && ref.GetInstanceId() == "" {
		return Errorf(CodeInvalidArgument, "member names neither member_id nor instance_id")
	}
	if !exists {
		return Errorf(CodeUnknownMemberID, "group does not exist")
	}
	if ref.GetMemberId() == "" {
		if _, ok := g.MemberByInstance(ref.GetInstanceId()); !ok {
			return Errorf(CodeUnknownMemberID, "no member has instance_id %q", ref.GetInstanceId())
		}
		return nil
	}
	m, ok := g.Member(ref.GetMemberId())
	if !ok {
		return Errorf(CodeUnknownMemberID, "member %q is not in group %q", ref.GetMemberId(), g.ID)
	}
	if ref.GetInstanceId() != "" && m.InstanceID != ref.GetInstanceId() {
		return Errorf(CodeFencedInstanceID, "member %q has instance_id %q, request says %q", m.ID, m.InstanceID, ref.GetInstanceId())
	}
	return nil
}

// afterRemoval moves the group on once members are gone.
func (s *State) afterRemoval(now int64, g *Group, res *ApplyResult) {
	if len(g.Members) == 0 {
		g.Generation++
		g.State, g.LeaderID, g.Protocol = Empty, "", ""
		g.InitialDelayUntilMs = 0
		g.StateChangedMs = now
		return
	}
	if _, ok := g.Member(g.LeaderID); !ok && g.State == PreparingRebalance {
		g.LeaderID = "" // a new leader is chosen when the barrier closes
	}
	switch g.State {
	case Stable, CompletingRebalance:
		s.prepareRebalance(now, g)
	case PreparingRebalance:
		s.maybeCompleteJoin(now, g, res)
	}
}

// ---- offsets ----

func (s *State) commitOffsets(now int64, c *fsmv1.CommitOffsets) *ApplyResult {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	if len(c.GetOffsets()) == 0 {
		return fail(Errorf(CodeInvalidArgument, "commit names no offsets"))
	}
	g, exists := s.groups[c.GetGroupId()]
	standalone := c.GetGeneration() == -1 && c.GetMemberId() == ""
	var member *Member
	switch {
	case standalone:
		if exists && len(g.Members) > 0 {
			return fail(Errorf(CodeIllegalGeneration, "group %q has members (%s, generation %d); a standalone commit needs an empty group", g.ID, g.State, g.Generation))
		}
	case c.GetMemberId() == "":
		return fail(Errorf(CodeUnknownMemberID, "commit at generation %d names no member", c.GetGeneration()))
	case !exists:
		return fail(Errorf(CodeUnknownMemberID, "group %q does not exist, so member %q is unknown", c.GetGroupId(), c.GetMemberId()))
	default:
		m, ok := g.Member(c.GetMemberId())
		if !ok {
			return fail(Errorf(CodeUnknownMemberID, "member %q is not in group %q", c.GetMemberId(), g.ID))
		}
		if c.GetInstanceId() != "" && m.InstanceID != c.GetInstanceId() {
			return fail(Errorf(CodeFencedInstanceID, "member %q has instance_id %q, commit says %q", m.ID, m.InstanceID, c.GetInstanceId()))
		}
		if c.GetGeneration() != g.Generation {
			return fail(Errorf(CodeIllegalGeneration, "group %q is at generation %d, commit names %d", g.ID, g.Generation, c.GetGeneration()))
		}
		if g.State == CompletingRebalance {
			return fail(Errorf(CodeRebalanceInProgress, "group %q is waiting for generation %d's assignment", g.ID, g.Generation))
		}
		member = m
	}

	res := &ApplyResult{Partitions: make([]PartitionResult, len(c.GetOffsets()))}
	accepted := 0
	for i, o := range c.GetOffsets() {
		r := PartitionResult{Topic: o.GetTopic(), Partition: o.GetPartition()}
		r.Err = s.checkCommit(member, o)
		if r.Err == nil {
			accepted++
		}
		res.Partitions[i] = r
	}
	if accepted == 0 {
		res.Group = g
		return res
	}
	if !exists {
		g = &Group{ID: c.GetGroupId(), State: Empty, epoch: s.epoch, StateChangedMs: now}
		s.groups[g.ID] = g
	}
	for i, o := range c.GetOffsets() {
		if res.Partitions[i].Err != nil {
			continue
		}
		s.offsets.Put(g.ID, offsets.Key{Topic: o.GetTopic(), Partition: o.GetPartition()}, offsets.Value{
			Offset:            o.GetOffset(),
			Metadata:          o.GetMetadata(),
			CommitTimestampMs: now,
			Generation:        c.GetGeneration(),
		})
	}
	res.Group = g
	return res
}

// checkCommit applies the per-partition rules: the partition exists, the
// offset is not negative, and a member owns the partition.
func (s *State) checkCommit(member *Member, o *fsmv1.OffsetCommit) error {
	n, ok := s.topics[o.GetTopic()]
	if !ok || o.GetPartition() < 0 || o.GetPartition() >= n {
		return Errorf(CodeUnknownTopicOrPartition, "partition %s/%d does not exist", o.GetTopic(), o.GetPartition())
	}
	if o.GetOffset() < 0 {
		return Errorf(CodeInvalidArgument, "offset %d for %s/%d is negative", o.GetOffset(), o.GetTopic(), o.GetPartition())
	}
	if member != nil && !member.Assignment.Owns(o.GetTopic(), o.GetPartition()) {
		return Errorf(CodeNotOwner, "member %q does not own %s/%d", member.ID, o.GetTopic(), o.GetPartition())
	}
	return nil
}

func (s *State) deleteGroups(c *fsmv1.DeleteGroups) *ApplyResult {
	if len(c.GetGroupIds()) == 0 {
		return fail(Errorf(CodeInvalidArgument, "delete names no groups"))
	}
	res := &ApplyResult{Groups: make([]GroupResult, len(c.GetGroupIds()))}
	for i, id := range c.GetGroupIds() {
		r := GroupResult{GroupID: id}
		g, ok := s.groups[id]
		switch {
		case !ok:
			r.Err = Errorf(CodeGroupIDNotFound, "group %q does not exist", id)
		case len(g.Members) > 0:
			r.Err = Errorf(CodeNonEmptyGroup, "group %q has %d members (%s)", id, len(g.Members), g.State)
		default:
			delete(s.groups, id)
			s.offsets.DeleteGroup(id)
		}
		res.Groups[i] = r
	}
	return res
}

func (s *State) expireOffsets(now int64, c *fsmv1.ExpireOffsets) *ApplyResult {
	if c.GetRetentionMs() <= 0 {
		return fail(Errorf(CodeInvalidArgument, "retention_ms %d must be positive", c.GetRetentionMs()))
	}
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		if len(g.Members) > 0 {
			continue
		}
		s.offsets.Expire(id, func(_ offsets.Key, v offsets.Value) bool {
			return offsets.Expired(v, g.StateChangedMs, now, c.GetRetentionMs())
		})
		if s.offsets.GroupLen(id) == 0 && now-g.StateChangedMs >= c.GetRetentionMs() {
			delete(s.groups, id)
		}
	}
	return &ApplyResult{}
}

// ---- topics and nodes ----

func (s *State) createTopic(c *fsmv1.CreateTopic) *ApplyResult {
	if err := checkName("topic name", c.GetName()); err != nil {
		return fail(err)
	}
	if c.GetPartitions() <= 0 || c.GetPartitions() > MaxTopicPartitions {
		return fail(Errorf(CodeInvalidPartitions, "topic %q: %d partitions is outside 1..%d", c.GetName(), c.GetPartitions(), MaxTopicPartitions))
	}
	if n, ok := s.topics[c.GetName()]; ok {
		if n == c.GetPartitions() {
			return &ApplyResult{} // a retried create
		}
		return fail(Errorf(CodeTopicAlreadyExists, "topic %q exists with %d partitions", c.GetName(), n))
	}
	s.topics[c.GetName()] = c.GetPartitions()
	return &ApplyResult{}
}

func (s *State) deleteTopic(now int64, c *fsmv1.DeleteTopic) *ApplyResult {
	if _, ok := s.topics[c.GetName()]; !ok {
		return fail(Errorf(CodeUnknownTopicOrPartition, "topic %q does not exist", c.GetName()))
	}
	delete(s.topics, c.GetName())
	s.offsets.DeleteTopic(c.GetName())
	s.rebalanceSubscribers(now, c.GetName())
	return &ApplyResult{}
}

func (s *State) addPartitions(now int64, c *fsmv1.AddPartitions) *ApplyResult {
	n, ok := s.topics[c.GetName()]
	if !ok {
		return fail(Errorf(CodeUnknownTopicOrPartition, "topic %q does not exist", c.GetName()))
	}
	switch {
	case c.GetPartitions() == n:
		return &ApplyResult{} // a retried add
	case c.GetPartitions() < n || c.GetPartitions() > MaxTopicPartitions:
		return fail(Errorf(CodeInvalidPartitions, "topic %q has %d partitions; the new count %d must be larger and at most %d", c.GetName(), n, c.GetPartitions(), MaxTopicPartitions))
	}
	s.topics[c.GetName()] = c.GetPartitions()
	s.rebalanceSubscribers(now, c.GetName())
	return &ApplyResult{}
}

// rebalanceSubscribers starts a rebalance in every settled group with a
// member subscribed to topic, whose partitions just changed.
func (s *State) rebalanceSubscribers(now int64, topic string) {
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		if g.State != Stable && g.State != CompletingRebalance {
			continue
		}
		if !slices.ContainsFunc(g.Members, func(m *Member) bool { return m.Subscribes(topic) }) {
			continue
		}
		g, _ = s.mutableGroup(id)
		s.prepareRebalance(now, g)
	}
}

func (s *State) registerNode(c *fsmv1.RegisterNode) *ApplyResult {
	if err := checkName("node_id", c.GetNodeId()); err != nil {
		return fail(err)
	}
	if err := checkName("grpc_address", c.GetGrpcAddress()); err != nil {
		return fail(err)
	}
	s.nodes[c.GetNodeId()] = Node{ID: c.GetNodeId(), GRPCAddress: c.GetGrpcAddress(), RaftAddress: c.GetRaftAddress()}
	return &ApplyResult{}
}
