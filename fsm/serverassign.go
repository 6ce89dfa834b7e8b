package fsm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cohortlabs/cohort/assign"
	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// Server-side assignment (PROTOCOL.md ★): a group whose protocol type is
// ServerProtocolType names assignors as its protocols, and the FSM computes
// the plan itself in the apply that closes the join barrier. package assign
// is pure and deterministic (same input in any order → byte-identical
// plan), so every replica stores the same plan, and the group goes straight
// from PreparingRebalance to Stable: SyncGroup only hands out shares.
//
// Previous ownership, for the sticky assignors, comes first from the FSM's
// own record: what each member was given in the generation being closed.
// That record was committed through Raft and validated, so it cannot be
// stale or forged by a zombie, and clients need not encode anything. A
// member's metadata (an assign.Subscription, optional) only fills the gaps:
// its owned partitions are used for partitions no member holds in the
// record (a group restarting after everyone left, a member that rejoined
// with a new ID), with the highest claimed generation winning and ties
// cancelling, as assign resolves claims. Metadata that does not decode
// gives no claims; the member's subscription is always the topics of its
// JoinGroup request.
//
// Eager assignors only: cooperative-sticky is refused at join (see
// docs/protocol.md), since its second round is only safe when the old owner
// proves, in its own metadata, that it stopped a withheld partition.
//
// Nothing here may fail the apply: an assignor error, or a plan that does
// not validate, falls back to range, and failing that to an empty plan; the
// fallback is reported in ApplyResult.ServerAssignment for the engine to log.

// ServerProtocolType is the protocol type of a group whose assignment the
// coordinator computes.
const ServerProtocolType = "server"

// fallbackAssignor is used when the chosen assignor fails: it cannot fail
// on input the FSM accepts, and it reads no previous ownership.
const fallbackAssignor = assign.NameRange

// ServerAssignors returns the assignor names a server-side group may use,
// sorted.
func ServerAssignors() []string {
	return slices.DeleteFunc(assign.Names(), func(n string) bool { return n == assign.NameCooperativeSticky })
}

// CheckServerProtocols reports whether every protocol a member of a
// server-side group names is an assignor the FSM can run:
// INCONSISTENT_GROUP_PROTOCOL otherwise.
func CheckServerProtocols(memberID string, names []string) *errcode.ProtocolError {
	for _, name := range names {
		if name == assign.NameCooperativeSticky {
			return errcode.Errorf(errcode.InconsistentGroupProtocol,
				"member %q: protocol type %q supports eager assignors only (%s), not %q: use protocol type \"consumer\" for cooperative rebalancing",
				memberID, ServerProtocolType, strings.Join(ServerAssignors(), ", "), name)
		}
		if !slices.Contains(ServerAssignors(), name) {
			return errcode.Errorf(errcode.InconsistentGroupProtocol, "member %q: protocol type %q needs assignors the coordinator implements (%s), not %q",
				memberID, ServerProtocolType, strings.Join(ServerAssignors(), ", "), name)
		}
	}
	return nil
}

// checkServerJoin is joinMember's hook: the protocols of a server-side
// member must be assignors the FSM runs.
func checkServerJoin(protocolType string, m *Member) *errcode.ProtocolError {
	if protocolType != ServerProtocolType {
		return nil
	}
	names := make([]string, len(m.Protocols))
	for i, p := range m.Protocols {
		names[i] = p.Name
	}
	return CheckServerProtocols(m.ID, names)
}

// ServerAssignment reports how the FSM computed a server-side plan.
type ServerAssignment struct {
	// Assignor is the assignor whose plan was stored (the group's protocol,
	// or the fallback).
	Assignor string
	// Claims counts the partitions fed to the assignor as previously owned:
	// from the FSM's record, and from members' metadata.
	RecordClaims, MetadataClaims int
	// Notes say, in a fixed order, what did not go as planned: metadata
	// that did not decode, an assignor error, a fallback. Empty normally.
	Notes []string
}

// previousAssignments captures what each member of a server-side group
// holds in the generation being closed, before completeJoin clears it.
func previousAssignments(g *Group) map[string]Assignment {
	if g.ProtocolType != ServerProtocolType {
		return nil
	}
	out := make(map[string]Assignment, g.Members.Len())
	for _, m := range g.Members.All() {
		if len(m.Assignment.Topics) > 0 {
			out[m.ID] = m.Assignment
		}
	}
	return out
}

type partitionKey struct {
	topic     string
	partition int32
}

// assignServerSide computes and stores the plan of a server-side group
// whose join phase just completed (state CompletingRebalance, members
// final), and moves it to Stable. prev is previousAssignments' answer.
func (s *State) assignServerSide(now int64, g *Group, prev map[string]Assignment) *ServerAssignment {
	rep := &ServerAssignment{Assignor: g.Protocol}
	members := s.serverClaims(g, prev, rep)
	topics := map[string]int32{}
	for _, m := range g.Members.All() {
		for _, t := range m.Topics {
			if n, ok := s.topics[t]; ok {
				topics[t] = n
			}
		}
	}
	plan, perr := s.serverPlan(g, g.Protocol, members, topics)
	if perr != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("assignor %q failed (%v); falling back to %q", g.Protocol, perr, fallbackAssignor))
		rep.Assignor = fallbackAssignor
		if plan, perr = s.serverPlan(g, fallbackAssignor, members, topics); perr != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("fallback %q failed too (%v); every member gets an empty assignment", fallbackAssignor, perr))
			rep.Assignor = ""
			plan = nil
		}
	}
	for p, m := range g.Members.positions() {
		g.setAssignment(p, plan[m.ID])
	}
	g.State = Stable
	g.StateChangedMs = now
	return rep
}

// serverClaims builds the assignor's input: every member with its
// subscription and its previous ownership (see the file comment).
func (s *State) serverClaims(g *Group, prev map[string]Assignment, rep *ServerAssignment) []assign.Member {
	held := map[partitionKey]bool{}
	for _, m := range g.Members.All() {
		for _, tp := range prev[m.ID].Topics {
			for _, p := range tp.Partitions {
				held[partitionKey{tp.Topic, p}] = true
			}
		}
	}
	// Metadata claims on partitions the record leaves free: the highest
	// generation wins, ties cancel.
	type claim struct {
		member string
		gen    int32
		tied   bool
	}
	claims := map[partitionKey]*claim{}
	subs := make([]assign.Subscription, g.Members.Len())
	for i, m := range g.Members.All() {
		md := m.ProtocolMetadata(g.Protocol)
		if len(md) == 0 {
			continue
		}
		sub, err := assign.DecodeSubscription(md)
		if err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("member %q: metadata does not decode, no previous ownership taken from it: %v", m.ID, err))
			continue
		}
		subs[i] = sub
		for _, tp := range sub.Owned {
			for _, p := range tp.Partitions {
				k := partitionKey{tp.Topic, p}
				if held[k] {
					continue
				}
				switch c := claims[k]; {
				case c == nil:
					claims[k] = &claim{member: m.ID, gen: sub.Generation}
				case sub.Generation > c.gen:
					*c = claim{member: m.ID, gen: sub.Generation}
				case sub.Generation == c.gen:
					c.tied = true
				}
			}
		}
	}
	out := make([]assign.Member, g.Members.Len())
	for i, m := range g.Members.All() {
		am := assign.Member{ID: m.ID, InstanceID: m.InstanceID, Topics: m.Topics, Generation: assign.NoGeneration}
		owned := slices.Clone(prev[m.ID].Topics)
		rep.RecordClaims += prev[m.ID].Len()
		for _, tp := range subs[i].Owned {
			var ps []int32
			for _, p := range tp.Partitions {
				if c := claims[partitionKey{tp.Topic, p}]; c != nil && !c.tied && c.member == m.ID {
					ps = append(ps, p)
				}
			}
			if len(ps) > 0 {
				owned = append(owned, TopicPartitions{Topic: tp.Topic, Partitions: ps})
				rep.MetadataClaims += len(ps)
			}
		}
		if len(owned) > 0 {
			// Conflicts are resolved above, so one generation for all
			// claims: the one being closed.
			am.Generation = g.Generation - 1
			for _, tp := range owned {
				am.Owned = append(am.Owned, assign.TopicPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
			}
		}
		out[i] = am
	}
	return out
}

// serverPlan runs one assignor and validates its plan as a leader's plan
// would be validated, returning it in canonical form.
func (s *State) serverPlan(g *Group, name string, members []assign.Member, topics map[string]int32) (map[string]Assignment, error) {
	if name == assign.NameCooperativeSticky {
		return nil, fmt.Errorf("%q is not allowed in server-side groups", name)
	}
	a, err := assign.Lookup(name)
	if err != nil {
		return nil, err
	}
	plan, err := a.Assign(members, topics)
	if err != nil {
		return nil, err
	}
	if plan.NeedsFollowUp() {
		return nil, fmt.Errorf("assignor %q withheld partitions, which server-side groups cannot hand out later", name)
	}
	cmd := make([]*fsmv1.MemberAssignment, 0, len(plan.Members))
	for _, ma := range plan.Members {
		if len(ma.Topics) == 0 {
			continue
		}
		a := &fsmv1.Assignment{Topics: make([]*fsmv1.TopicPartitions, len(ma.Topics))}
		for i, tp := range ma.Topics {
			a.Topics[i] = &fsmv1.TopicPartitions{Topic: tp.Topic, Partitions: tp.Partitions}
		}
		cmd = append(cmd, &fsmv1.MemberAssignment{MemberId: ma.MemberID, Assignment: a})
	}
	out, perr := s.validatePlan(g, cmd)
	if perr != nil {
		return nil, perr
	}
	return out, nil
}
