package fsm

import (
	"slices"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// memberFromSpec validates a member's self-description and converts it.
func memberFromSpec(spec *fsmv1.MemberSpec) (*Member, *errcode.ProtocolError) {
	if spec == nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "member is missing")
	}
	if err := checkName("member_id", spec.GetMemberId()); err != nil {
		return nil, err
	}
	if len(spec.GetInstanceId()) > MaxNameLength {
		return nil, errcode.Errorf(errcode.InvalidArgument, "instance_id is %d bytes, over the limit of %d", len(spec.GetInstanceId()), MaxNameLength)
	}
	if spec.GetSessionTimeoutMs() <= 0 {
		return nil, errcode.Errorf(errcode.InvalidArgument, "session_timeout_ms %d must be positive", spec.GetSessionTimeoutMs())
	}
	if spec.GetRebalanceTimeoutMs() <= 0 {
		return nil, errcode.Errorf(errcode.InvalidArgument, "rebalance_timeout_ms %d must be positive", spec.GetRebalanceTimeoutMs())
	}
	if len(spec.GetProtocols()) == 0 {
		return nil, errcode.Errorf(errcode.InvalidArgument, "member %q names no protocols", spec.GetMemberId())
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
			return nil, errcode.Errorf(errcode.InvalidArgument, "protocol %q listed twice", p.GetName())
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

// sameSubscription reports whether a and b name the same protocols, in
// the same order, and the same topics, whatever their metadata.
func sameSubscription(a, b *Member) bool {
	return slices.EqualFunc(a.Protocols, b.Protocols, func(x, y Protocol) bool { return x.Name == y.Name }) && slices.Equal(a.Topics, b.Topics)
}

// joinAdmission is what joinMember decides before it changes anything.
type joinAdmission struct {
	g      *Group // the group; a new one (not in the state) when !exists
	exists bool
	m      *Member // the member as the command describes it
	// old is m's earlier self when known; replaced is the static member m
	// takes the place of.
	old, replaced *Member
	known         bool
}

// admitJoin validates a JoinMember against the state and the budgets,
// changing nothing: joinMember's first half, and the leader's pre-check.
func (s *State) admitJoin(now int64, c *fsmv1.JoinMember) (joinAdmission, *errcode.ProtocolError) {
	var a joinAdmission
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return a, err
	}
	m, perr := memberFromSpec(c.GetMember())
	if perr == nil {
		perr = checkServerJoin(c.GetProtocolType(), m)
	}
	if perr != nil {
		return a, perr
	}
	if c.GetInitialRebalanceDelayMs() < 0 {
		return a, errcode.Errorf(errcode.InvalidArgument, "initial_rebalance_delay_ms %d is negative", c.GetInitialRebalanceDelayMs())
	}
	if _, ok := s.consumerGroups[c.GetGroupId()]; ok {
		return a, errcode.Errorf(errcode.InconsistentGroupProtocol, "group %q is a consumer group (Kafka's ConsumerGroupHeartbeat), not a classic group", c.GetGroupId())
	}
	g, exists := s.groups[c.GetGroupId()]
	if !exists {
		g = newGroup(c.GetGroupId(), s.epoch, now)
	}
	a = joinAdmission{g: g, exists: exists, m: m}
	a.old, a.known, a.replaced, perr = identifyCaller(g, m, c.GetNewMember())
	if perr == nil {
		perr = checkCompatible(g, m, a.replaced, c.GetProtocolType())
	}
	if perr == nil {
		prev := a.old
		if a.replaced != nil {
			prev = a.replaced
		}
		perr = s.checkJoinGrowth(g, exists, c.GetProtocolType(), prev, m)
	}
	return a, perr
}

func (s *State) joinMember(now int64, c *fsmv1.JoinMember) *ApplyResult {
	a, perr := s.admitJoin(now, c)
	if perr != nil {
		return fail(perr)
	}
	g, exists, m, old, known, replaced := a.g, a.exists, a.m, a.old, a.known, a.replaced

	// From here on the command is accepted: change a private copy.
	if exists {
		g, _ = s.mutableGroup(g.ID)
	} else {
		s.groups[g.ID] = g
		s.touch(g)
	}
	if g.ProtocolType != c.GetProtocolType() && (g.State == Stable || g.State == CompletingRebalance) {
		// Only a sole member can switch the type, and the type decides who
		// assigns (a leader, or the FSM for "server"): rebalance.
		s.prepareRebalance(now, g)
	}
	g.setProtocolType(c.GetProtocolType())
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
			if !changed && (g.LeaderID != m.ID || s.rules >= 2 && g.ProtocolType == ServerProtocolType) {
				// A follower's rejoin with nothing new: no rebalance. Nor
				// (rules 2) the leader's of a server-side group, whose
				// leader computes nothing: it lost its answer.
				return res
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

// identifyCaller tells who is joining g: a known member (old, known), a
// static member's replacement (replaced: the member that held m's instance
// ID under another member ID), or, when newMember is set, a new member.
func identifyCaller(g *Group, m *Member, newMember bool) (old *Member, known bool, replaced *Member, perr *errcode.ProtocolError) {
	old, known = g.Member(m.ID)
	if byInst, ok := g.MemberByInstance(m.InstanceID); ok && byInst.ID != m.ID {
		if known || !newMember {
			return nil, false, nil, errcode.Errorf(errcode.FencedInstanceID, "instance %q belongs to member %q, not %q", m.InstanceID, byInst.ID, m.ID)
		}
		replaced = byInst
	}
	if known && old.InstanceID != m.InstanceID {
		return nil, false, nil, errcode.Errorf(errcode.FencedInstanceID, "member %q has instance_id %q, request says %q", m.ID, old.InstanceID, m.InstanceID)
	}
	if !known && replaced == nil && !newMember {
		return nil, false, nil, errcode.Errorf(errcode.UnknownMemberID, "member %q is not in group %q", m.ID, g.ID)
	}
	return old, known, replaced, nil
}

// checkCompatible checks that m can share g with every other member
// (ignoring m itself and replaced): the same protocol type and at least one
// protocol they all support. A member alone in its group may change both.
func checkCompatible(g *Group, m, replaced *Member, protocolType string) *errcode.ProtocolError {
	if others, _ := otherMembers(g, m, replaced); others == 0 {
		return nil
	}
	if g.ProtocolType != protocolType {
		return errcode.Errorf(errcode.InconsistentGroupProtocol, "group %q uses protocol type %q, member asks for %q", g.ID, g.ProtocolType, protocolType)
	}
	if len(commonProtocols(g, m, replaced)) == 0 {
		return errcode.Errorf(errcode.InconsistentGroupProtocol, "member %q shares no protocol with every member of group %q", m.ID, g.ID)
	}
	return nil
}

// commonProtocols lists, in m's order of preference, the protocols that m
// and every other member (ignoring replaced) support: those whose support
// count, less m's earlier self and replaced, is the number of the others.
func commonProtocols(g *Group, m, replaced *Member) []string {
	others, skip := otherMembers(g, m, replaced)
	var out []string
	for _, p := range m.Protocols {
		n := count(&g.ix.protocols, p.Name)
		for _, o := range skip {
			if o.Supports(p.Name) {
				n--
			}
		}
		if n == others {
			out = append(out, p.Name)
		}
	}
	return out
}

// otherMembers counts g's members other than m and replaced (by ID), and
// returns those two as g holds them, when it does.
func otherMembers(g *Group, m, replaced *Member) (others int, skip []*Member) {
	others = g.Members.Len()
	if self, ok := g.Member(m.ID); ok {
		others--
		skip = append(skip, self)
	}
	if replaced != nil && replaced.ID != m.ID {
		if r, ok := g.Member(replaced.ID); ok {
			others--
			skip = append(skip, r)
		}
	}
	return others, skip
}

func (s *State) addMember(g *Group, m *Member) {
	g.insertMember(s.topics, m)
	s.members++
}

// updateMember takes the member's new self-description, keeping its
// round and assignment bookkeeping (and its instance ID, which a member
// never changes).
func (s *State) updateMember(g *Group, old, m *Member) {
	cur, _ := g.editMemberByID(old.ID)
	// A rejoin that names the same protocols, topics and timeout changes
	// no count, only (with new metadata or client fields) the sizes.
	counts := cur.RebalanceTimeoutMs != m.RebalanceTimeoutMs || !slices.Equal(cur.Topics, m.Topics) ||
		!slices.EqualFunc(cur.Protocols, m.Protocols, func(x, y Protocol) bool { return x.Name == y.Name })
	if counts {
		g.countSpec(s.topics, cur, -1)
	} else {
		g.countSpecBytes(cur, -1)
	}
	cur.ClientID, cur.ClientHost = m.ClientID, m.ClientHost
	cur.SessionTimeoutMs, cur.RebalanceTimeoutMs = m.SessionTimeoutMs, m.RebalanceTimeoutMs
	cur.Protocols, cur.Topics = m.Protocols, m.Topics
	if counts {
		g.countSpec(s.topics, cur, 1)
	} else {
		g.countSpecBytes(cur, 1)
	}
}

func (s *State) markJoined(now int64, g *Group, id string) {
	if m, _ := g.Member(id); m.Joined {
		return
	}
	m, _ := g.editMemberByID(id)
	g.NextJoinSeq++
	m.Joined, m.JoinSeq, m.JoinedAtMs = true, g.NextJoinSeq, now
	g.ix.joined++
}

// replaceStatic swaps a static member's old ID for its new one (KIP-345):
// in PreparingRebalance it joins the round; otherwise, with unchanged
// metadata, the generation goes on without a rebalance and the member keeps
// its assignment.
func (s *State) replaceStatic(now int64, g *Group, old, m *Member, res *ApplyResult) *ApplyResult {
	prev, _ := g.Member(old.ID)
	m.Assignment, m.Joined, m.JoinSeq, m.JoinedAtMs = prev.Assignment, prev.Joined, prev.JoinSeq, prev.JoinedAtMs
	m.PreviousAssignment = prev.PreviousAssignment
	g.removeMembers(s.topics, old.ID)
	g.insertMember(s.topics, m)
	if g.LeaderID == old.ID {
		g.LeaderID = m.ID
	}
	resubscribed := !sameProtocols(prev, m)
	if s.rules >= 5 {
		// (rules 5) Only what it subscribes to counts: the protocol names
		// and the topics. A restarted Kafka consumer's metadata differs
		// from its earlier self's in what it owned and its generation
		// (KIP-792) even when its subscription is the same, and Kafka
		// keeps the group Stable then.
		resubscribed = !sameSubscription(prev, m)
	}
	switch {
	case g.State != PreparingRebalance && resubscribed:
		// The restarted instance subscribes differently: its old assignment
		// no longer fits, so the group rebalances (as Kafka does).
		s.prepareRebalance(now, g)
	case s.rules >= 3 && g.State == CompletingRebalance:
		// (rules 3) The leader may already be computing a plan for the old
		// member ID, which SyncGroup would refuse, leaving the group
		// waiting for its rebalance timeout: start the round again (as
		// Kafka does).
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
	for p, m := range g.Members.positions() {
		if m.Joined || m.JoinSeq != 0 {
			m = g.editMember(p)
			m.Joined, m.JoinSeq = false, 0
		}
	}
	g.ix.joined = 0
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
		return fail(errcode.Errorf(errcode.StaleCommand, "group %q does not exist", c.GetGroupId()))
	}
	if g.State != PreparingRebalance || g.Generation != c.GetGeneration() {
		return &ApplyResult{Group: g, Err: errcode.Errorf(errcode.StaleCommand, "group %q is %s at generation %d, not rebalancing generation %d", g.ID, g.State, g.Generation, c.GetGeneration())}
	}
	if c.GetInitialDelay() && (g.InitialDelayUntilMs == 0 || g.InitialDelayUntilMs > now) {
		return &ApplyResult{Group: g, Err: errcode.Errorf(errcode.StaleCommand, "group %q initial delay runs until %d, now is %d", g.ID, g.InitialDelayUntilMs, now)}
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
	dropped := g.Members.removeFunc(func(m *Member) bool { return !m.Joined && m.InstanceID == "" }, g.epoch)
	for _, m := range dropped {
		g.countMember(s.topics, m, -1)
		s.members--
	}
	g.Generation++
	g.InitialDelayUntilMs = 0
	g.StateChangedMs = now
	for p := range g.Members.positions() {
		m := g.editMember(p)
		g.countAssignments(m, -1)
		if s.rules >= 2 {
			m.PreviousAssignment = m.Assignment
		}
		m.Assignment = Assignment{}
		g.countAssignments(m, 1)
	}
	if g.Members.Len() == 0 {
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

func (s *State) removeMembers(now int64, c *fsmv1.RemoveMembers) *ApplyResult {
	if err := checkName("group_id", c.GetGroupId()); err != nil {
		return fail(err)
	}
	if len(c.GetMembers()) == 0 {
		return fail(errcode.Errorf(errcode.InvalidArgument, "remove names no members"))
	}
	g, exists := s.groups[c.GetGroupId()]
	res := &ApplyResult{Members: make([]MemberResult, len(c.GetMembers()))}
	doomed := map[string]bool{}
	var ids []string // doomed, in the command's order
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
			if !doomed[id] {
				doomed[id] = true
				ids = append(ids, id)
			}
		}
		res.Members[i] = r
	}
	if len(doomed) == 0 {
		res.Group = g
		return res
	}
	g, _ = s.mutableGroup(g.ID)
	g.removeMembers(s.topics, ids...)
	s.members -= len(ids)
	s.afterRemoval(now, g, res)
	res.Group = g
	return res
}

// checkRemove decides whether one member may be removed: an error value of
// type *errcode.ProtocolError, or nil.
func checkRemove(g *Group, exists bool, ref *fsmv1.MemberRef) error {
	if ref.GetMemberId() == "" && ref.GetInstanceId() == "" {
		return errcode.Errorf(errcode.InvalidArgument, "member names neither member_id nor instance_id")
	}
	if !exists {
		return errcode.Errorf(errcode.UnknownMemberID, "group does not exist")
	}
	if ref.GetMemberId() == "" {
		if _, ok := g.MemberByInstance(ref.GetInstanceId()); !ok {
			return errcode.Errorf(errcode.UnknownMemberID, "no member has instance_id %q", ref.GetInstanceId())
		}
		return nil
	}
	m, ok := g.Member(ref.GetMemberId())
	if !ok {
		return errcode.Errorf(errcode.UnknownMemberID, "member %q is not in group %q", ref.GetMemberId(), g.ID)
	}
	if ref.GetInstanceId() != "" && m.InstanceID != ref.GetInstanceId() {
		return errcode.Errorf(errcode.FencedInstanceID, "member %q has instance_id %q, request says %q", m.ID, m.InstanceID, ref.GetInstanceId())
	}
	return nil
}

// afterRemoval moves the group on once members are gone.
func (s *State) afterRemoval(now int64, g *Group, res *ApplyResult) {
	if g.Members.Len() == 0 {
		g.Generation++
		g.State, g.LeaderID, g.Protocol = Empty, "", ""
		g.InitialDelayUntilMs = 0
		g.StateChangedMs = now
		return
	}
	if _, ok := g.Member(g.LeaderID); !ok && (g.State == PreparingRebalance || s.rules >= 2) {
		// A new leader is chosen when the barrier closes; until then the
		// group names none (rules 2: whatever its state, rather than the
		// member that left).
		g.LeaderID = ""
	}
	switch g.State {
	case Stable, CompletingRebalance:
		s.prepareRebalance(now, g)
	case PreparingRebalance:
		s.maybeCompleteJoin(now, g, res)
	}
}
