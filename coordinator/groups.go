package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/errcode/wire"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// MemberIDRequiredError is MEMBER_ID_REQUIRED with the ID the member must
// join again with (KIP-394).
type MemberIDRequiredError struct {
	*errcode.ProtocolError
	MemberID string
}

func (e *MemberIDRequiredError) Unwrap() error { return e.ProtocolError }

// JoinGroup joins or rejoins a member and waits at the join barrier.
func (e *Engine) JoinGroup(ctx context.Context, r *cohortv1.JoinGroupRequest, clientHost string) (*cohortv1.JoinGroupResponse, error) {
	start := e.cfg.Now()
	if err := e.cfg.Limits.validateJoin(r); err != nil {
		return nil, err
	}
	session := time.Duration(r.GetSessionTimeoutMs()) * time.Millisecond
	if session < e.cfg.MinSessionTimeout || session > e.cfg.MaxSessionTimeout {
		return nil, errcode.Errorf(errcode.InvalidSessionTimeout, "session_timeout_ms %d is outside the configured [%d, %d]",
			r.GetSessionTimeoutMs(), e.cfg.MinSessionTimeout.Milliseconds(), e.cfg.MaxSessionTimeout.Milliseconds())
	}
	if r.GetProtocolType() == fsm.ServerProtocolType {
		names := make([]string, len(r.GetProtocols()))
		for i, p := range r.GetProtocols() {
			names[i] = p.GetName()
		}
		if err := fsm.CheckServerProtocols(r.GetMemberId(), names); err != nil {
			return nil, err
		}
	}
	if err := e.awaitServing(ctx); err != nil {
		return nil, err
	}
	g, exists := e.fsm.Group(r.GetGroupId())
	memberID, newMember := r.GetMemberId(), false
	known := false
	if exists {
		_, known = g.Member(memberID)
		if g.Members.Len() > 0 && g.ProtocolType != r.GetProtocolType() && !(known && g.Members.Len() == 1) {
			return nil, errcode.Errorf(errcode.InconsistentGroupProtocol, "group %q uses protocol type %q, the request says %q", g.ID, g.ProtocolType, r.GetProtocolType())
		}
	}
	if exists && memberID != "" && r.GetInstanceId() != "" {
		// KIP-345: an older incarnation of a static member that a newer
		// one replaced is fenced; told UNKNOWN_MEMBER_ID it would join
		// again with its instance ID alone and fence the newer one.
		if owner, ok := g.MemberByInstance(r.GetInstanceId()); ok && owner.ID != memberID {
			return nil, errcode.Errorf(errcode.FencedInstanceID, "instance %q of group %q belongs to member %q, not %q: a newer instance replaced this one", r.GetInstanceId(), g.ID, owner.ID, memberID)
		}
	}
	switch {
	case memberID == "" && r.GetInstanceId() != "":
		// A static member needs no extra round trip: it gets a new ID and
		// takes its old slot (KIP-345).
		memberID, newMember = newMemberID(r.GetClientId(), e.cfg.Limits.MaxMemberIDBytes), true
	case memberID == "":
		if err := e.checkRoomFor(r.GetGroupId(), g); err != nil {
			return nil, err
		}
		memberID = newMemberID(r.GetClientId(), e.cfg.Limits.MaxMemberIDBytes)
		e.mu.Lock()
		e.pending[memberKey{r.GetGroupId(), memberID}] = e.cfg.Now().Add(session)
		e.pendingPerGroup[r.GetGroupId()]++
		e.mu.Unlock()
		return nil, &MemberIDRequiredError{
			ProtocolError: errcode.Errorf(errcode.MemberIDRequired, "join again with member_id %q", memberID),
			MemberID:      memberID,
		}
	case !known:
		e.mu.Lock()
		k := memberKey{r.GetGroupId(), memberID}
		_, newMember = e.pending[k]
		e.mu.Unlock()
		if !newMember {
			return nil, errcode.Errorf(errcode.UnknownMemberID, "member %q is not in group %q (nor a pending ID this leader handed out): join again without a member_id", memberID, r.GetGroupId())
		}
	}

	spec := &fsmv1.MemberSpec{
		MemberId: memberID, InstanceId: r.GetInstanceId(), ClientId: r.GetClientId(), ClientHost: clientHost,
		SessionTimeoutMs: r.GetSessionTimeoutMs(), RebalanceTimeoutMs: r.GetRebalanceTimeoutMs(), Topics: r.GetTopics(),
	}
	for _, p := range r.GetProtocols() {
		spec.Protocols = append(spec.Protocols, &fsmv1.Protocol{Name: p.GetName(), Metadata: p.GetMetadata()})
	}
	res, err := e.proposeAdmitted(ctx, &fsmv1.Command{Kind: &fsmv1.Command_JoinMember{JoinMember: &fsmv1.JoinMember{
		GroupId: r.GetGroupId(), ProtocolType: r.GetProtocolType(), Member: spec, NewMember: newMember,
		InitialRebalanceDelayMs: int32(e.cfg.InitialRebalanceDelay.Milliseconds()),
	}}})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	g = res.Group // its pending ID, if it had one, is forgotten (observe)
	if g.State == fsm.PreparingRebalance {
		if g, err = e.park(ctx, waitJoin, g.ID, memberID, r.GetInstanceId(), g.Generation); err != nil {
			return nil, err
		}
	} else {
		e.mu.Lock()
		e.touchSessionLocked(g.ID, memberID, e.cfg.Now())
		e.mu.Unlock()
	}
	e.m.joinLatency.Observe(e.cfg.Now().Sub(start).Seconds())
	return e.joinAnswer(g, memberID), nil
}

// logServerAssignment records how the FSM computed a server-side plan when
// the command completed a join phase: one line per rebalance, a warning when
// the FSM had to fall back (undecodable metadata, a failing assignor).
func (e *Engine) logServerAssignment(res *fsm.ApplyResult) {
	sa := res.ServerAssignment
	if sa == nil || res.Group == nil {
		return
	}
	if len(sa.Notes) > 0 {
		e.log.Warn("server-side assignment fell back", "group", res.Group.ID, "generation", res.Group.Generation,
			"protocol", res.Group.Protocol, "assignor", sa.Assignor, "notes", sa.Notes)
		return
	}
	e.log.Info("server-side assignment", "group", res.Group.ID, "generation", res.Group.Generation, "assignor", sa.Assignor,
		"members", res.Group.Members.Len(), "record_claims", sa.RecordClaims, "metadata_claims", sa.MetadataClaims)
}

// leaderJoinAnswer is the group leader's join answer for one generation.
type leaderJoinAnswer struct {
	generation int32
	leader     string
	resp       *cohortv1.JoinGroupResponse
}

// joinAnswer is a member's answer for the group's current generation.
// Only a client-side group's leader gets the members and topics (in a
// server-side group the FSM has already assigned); that answer, O(members)
// to build, is built once per generation and shared by the leader's
// retries (answers are never changed once built).
func (e *Engine) joinAnswer(g *fsm.Group, memberID string) *cohortv1.JoinGroupResponse {
	if memberID != g.LeaderID || g.ProtocolType == fsm.ServerProtocolType {
		return &cohortv1.JoinGroupResponse{Generation: g.Generation, Protocol: g.Protocol, LeaderId: g.LeaderID, MemberId: memberID}
	}
	e.mu.Lock()
	cached, ok := e.leaderAnswers[g.ID]
	e.mu.Unlock()
	if ok && cached.generation == g.Generation && cached.leader == memberID {
		return cached.resp
	}
	resp := leaderJoinResponse(g, e.fsm)
	e.mu.Lock()
	if e.serving {
		e.leaderAnswers[g.ID] = leaderJoinAnswer{g.Generation, memberID, resp}
	}
	e.mu.Unlock()
	return resp
}

// leaderJoinResponse is the group leader's answer: every member with its
// metadata for the chosen protocol, and the subscribed topics' sizes.
func leaderJoinResponse(g *fsm.Group, f *fsm.FSM) *cohortv1.JoinGroupResponse {
	resp := &cohortv1.JoinGroupResponse{
		Generation: g.Generation, Protocol: g.Protocol, LeaderId: g.LeaderID, MemberId: g.LeaderID,
	}
	var topics []string
	for _, m := range g.Members.All() {
		resp.Members = append(resp.Members, &cohortv1.JoinGroupMember{
			MemberId: m.ID, InstanceId: m.InstanceID, Metadata: m.ProtocolMetadata(g.Protocol), Topics: m.Topics,
		})
		topics = append(topics, m.Topics...)
	}
	slices.Sort(topics)
	f.Read(func(s *fsm.State) {
		for _, t := range slices.Compact(topics) {
			if n, ok := s.Partitions(t); ok {
				resp.Topics = append(resp.Topics, &cohortv1.TopicPartitionCount{Topic: t, Partitions: n})
			}
		}
	})
	return resp
}

// SyncGroup commits the group leader's plan or waits for it, and answers the
// caller's assignment.
func (e *Engine) SyncGroup(ctx context.Context, r *cohortv1.SyncGroupRequest) (*cohortv1.SyncGroupResponse, error) {
	if err := e.cfg.Limits.validateSync(r, e.cfg.Budgets.MembersPerGroup); err != nil {
		return nil, err
	}
	if err := e.awaitServing(ctx); err != nil {
		return nil, err
	}
	g, err := e.checkMember(r.GetGroupId(), r.GetMemberId(), r.GetInstanceId(), r.GetGeneration())
	if err != nil {
		return nil, err
	}
	switch {
	case g.State == fsm.PreparingRebalance:
		return nil, errcode.Errorf(errcode.RebalanceInProgress, "group %q is rebalancing: join again", g.ID)
	case g.State == fsm.Stable:
		// A retry: the plan is already committed.
	case r.GetMemberId() == g.LeaderID:
		cmd := &fsmv1.SyncAssignment{GroupId: g.ID, Generation: r.GetGeneration(), MemberId: r.GetMemberId()}
		for _, a := range r.GetAssignments() {
			cmd.Assignments = append(cmd.Assignments, &fsmv1.MemberAssignment{MemberId: a.GetMemberId(), Assignment: assignmentToFSM(a.GetAssignment())})
		}
		done, err := e.startPlan(g.ID, r.GetGeneration())
		if err != nil {
			return nil, err
		}
		res, err := e.propose(ctx, &fsmv1.Command{Kind: &fsmv1.Command_SyncAssignment{SyncAssignment: cmd}})
		done()
		if err != nil {
			return nil, err
		}
		if res.Err != nil {
			if errcode.Of(res.Err) == errcode.InvalidAssignment {
				e.noteRefusedPlan(g.ID, r.GetGeneration(), r.GetMemberId(), res.Err)
			}
			return nil, res.Err
		}
		g = res.Group
	default:
		if g, err = e.park(ctx, waitSync, g.ID, r.GetMemberId(), r.GetInstanceId(), r.GetGeneration()); err != nil {
			return nil, err
		}
	}
	m, ok := g.Member(r.GetMemberId())
	if !ok {
		return nil, errcode.Errorf(errcode.UnknownMemberID, "member %q is not in group %q", r.GetMemberId(), g.ID)
	}
	e.mu.Lock()
	e.touchSessionLocked(g.ID, m.ID, e.cfg.Now())
	e.mu.Unlock()
	return &cohortv1.SyncGroupResponse{Assignment: assignmentToAPI(m.Assignment), Protocol: g.Protocol}, nil
}

// startPlan registers a leader's plan about to be proposed for group's
// generation, unless the members that did not sync are being removed (the
// rebalance timed out): then the leader must join again.
func (e *Engine) startPlan(group string, generation int32) (done func(), err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.syncs[group]
	if t == nil || t.generation != generation {
		return func() {}, nil
	}
	if t.firing {
		return nil, errcode.Errorf(errcode.RebalanceInProgress, "group %q: generation %d's rebalance timeout passed before a valid plan arrived; its members that did not sync are being removed: join again", group, generation)
	}
	t.plans++
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		t.plans--
	}, nil
}

// checkMember applies the common fencing of member RPCs against the FSM's
// view: the group exists, the member is in it with the right instance, and
// the generation is current.
func (e *Engine) checkMember(groupID, memberID, instanceID string, generation int32) (*fsm.Group, error) {
	g, ok := e.fsm.Group(groupID)
	if !ok {
		return nil, errcode.Errorf(errcode.UnknownMemberID, "group %q does not exist, so member %q is unknown", groupID, memberID)
	}
	if instanceID != "" {
		if owner, ok := g.MemberByInstance(instanceID); ok && owner.ID != memberID {
			return nil, errcode.Errorf(errcode.FencedInstanceID, "instance %q belongs to member %q, not %q", instanceID, owner.ID, memberID)
		}
	}
	m, ok := g.Member(memberID)
	if !ok {
		return nil, errcode.Errorf(errcode.UnknownMemberID, "member %q is not in group %q", memberID, groupID)
	}
	if instanceID != "" && m.InstanceID != instanceID {
		return nil, errcode.Errorf(errcode.FencedInstanceID, "member %q has instance_id %q, the request says %q", memberID, m.InstanceID, instanceID)
	}
	if generation != g.Generation {
		return nil, errcode.Errorf(errcode.IllegalGeneration, "group %q is at generation %d, the request names %d", groupID, g.Generation, generation)
	}
	return g, nil
}

// Heartbeat refreshes a member's session. It never writes to the log.
func (e *Engine) Heartbeat(ctx context.Context, r *cohortv1.HeartbeatRequest) error {
	if err := e.cfg.Limits.validateMemberRef(r.GetGroupId(), r.GetMemberId(), r.GetInstanceId()); err != nil {
		return err
	}
	if err := e.awaitServing(ctx); err != nil {
		return err
	}
	e.m.heartbeats.Inc()
	g, err := e.checkMember(r.GetGroupId(), r.GetMemberId(), r.GetInstanceId(), r.GetGeneration())
	if err != nil {
		return err
	}
	if g.State != fsm.CompletingRebalance {
		// Not refreshed while completing: a leader that never syncs lets
		// its group expire.
		e.refresh(g, r.GetMemberId())
	}
	return rebalanceNeeded(g)
}

// standing is what a Heartbeat from a member of generation would be
// answered with the group as g (nil: the member is current). Heartbeat and
// WatchGroup share it, so a watching member hears exactly what its next
// heartbeat would.
func (e *Engine) standing(group, member, instance string, generation int32) error {
	g, err := e.checkMember(group, member, instance, generation)
	if err != nil {
		return err
	}
	return rebalanceNeeded(g)
}

// rebalanceNeeded is REBALANCE_IN_PROGRESS while g is rebalancing.
func rebalanceNeeded(g *fsm.Group) error {
	switch g.State {
	case fsm.CompletingRebalance:
		return errcode.Errorf(errcode.RebalanceInProgress, "group %q is waiting for generation %d's assignment: sync", g.ID, g.Generation)
	case fsm.PreparingRebalance:
		return errcode.Errorf(errcode.RebalanceInProgress, "group %q is rebalancing: join again", g.ID)
	}
	return nil
}

func (e *Engine) refresh(g *fsm.Group, member string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.serving {
		e.touchSessionLocked(g.ID, member, e.cfg.Now())
	}
}

// LeaveGroup removes members; each is answered on its own.
func (e *Engine) LeaveGroup(ctx context.Context, r *cohortv1.LeaveGroupRequest) (*cohortv1.LeaveGroupResponse, error) {
	if err := e.cfg.Limits.checkGroupID(r.GetGroupId()); err != nil {
		return nil, err
	}
	if len(r.GetMembers()) == 0 {
		return nil, invalid("members is empty")
	}
	if n, limit := len(r.GetMembers()), e.cfg.Budgets.MembersPerGroup; int64(n) > limit {
		return nil, invalid("members names %d members; a group holds at most %d (the members-per-group budget)", n, limit)
	}
	cmd := &fsmv1.RemoveMembers{GroupId: r.GetGroupId(), Reason: fsmv1.RemoveReason_REMOVE_REASON_LEAVE}
	for i, m := range r.GetMembers() {
		if err := e.cfg.Limits.validateMemberRef(r.GetGroupId(), m.GetMemberId(), m.GetInstanceId()); err != nil {
			return nil, err
		}
		if m.GetMemberId() == "" && m.GetInstanceId() == "" {
			return nil, invalid("members[%d] names neither member_id nor instance_id", i)
		}
		cmd.Members = append(cmd.Members, &fsmv1.MemberRef{MemberId: m.GetMemberId(), InstanceId: m.GetInstanceId()})
	}
	if err := e.awaitServing(ctx); err != nil {
		return nil, err
	}
	res, err := e.propose(ctx, &fsmv1.Command{Kind: &fsmv1.Command_RemoveMembers{RemoveMembers: cmd}})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := &cohortv1.LeaveGroupResponse{}
	for _, m := range res.Members {
		code, msg := itemError(m.Err)
		resp.Members = append(resp.Members, &cohortv1.LeaveMemberResult{MemberId: m.MemberID, InstanceId: m.InstanceID, Error: code, ErrorMessage: msg})
	}
	return resp, nil
}

// OffsetCommit commits offsets through Raft, fenced by the FSM.
func (e *Engine) OffsetCommit(ctx context.Context, r *cohortv1.OffsetCommitRequest) (*cohortv1.OffsetCommitResponse, error) {
	start := time.Now()
	if err := e.cfg.Limits.validateCommit(r); err != nil {
		return nil, err
	}
	if err := e.awaitServing(ctx); err != nil {
		return nil, err
	}
	cmd := &fsmv1.CommitOffsets{GroupId: r.GetGroupId(), Generation: r.GetGeneration(), MemberId: r.GetMemberId(), InstanceId: r.GetInstanceId()}
	for _, o := range r.GetOffsets() {
		cmd.Offsets = append(cmd.Offsets, &fsmv1.OffsetCommit{Topic: o.GetTopic(), Partition: o.GetPartition(), Offset: o.GetOffset(), Metadata: o.GetMetadata()})
	}
	res, err := e.commitAdmitted(ctx, cmd, start)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if errcode.Of(res.Err) != errcode.InvalidArgument {
			e.m.fencedCommits.WithLabelValues(errcode.Of(res.Err).String()).Inc()
		}
		return nil, res.Err
	}
	resp := &cohortv1.OffsetCommitResponse{}
	for _, p := range res.Partitions {
		code, msg := itemError(p.Err)
		if p.Err != nil {
			e.m.fencedCommits.WithLabelValues(errcode.Of(p.Err).String()).Inc()
		}
		resp.Partitions = append(resp.Partitions, &cohortv1.OffsetCommitPartitionResult{Topic: p.Topic, Partition: p.Partition, Error: code, ErrorMessage: msg})
	}
	if r.GetMemberId() != "" && res.Group != nil {
		e.refresh(res.Group, r.GetMemberId()) // a committing member is alive
	}
	e.m.commitStages.WithLabelValues(stageEngine).Observe(time.Since(start).Seconds())
	return resp, nil
}

// commitAdmitted asks the FSM first (fsm.Admit) and proposes only the
// offsets it would accept: a commit refused as a whole, and every refused
// partition, is answered without reaching the log. The result has one
// partition outcome per offset of cmd, in order.
func (e *Engine) commitAdmitted(ctx context.Context, cmd *fsmv1.CommitOffsets, start time.Time) (*fsm.ApplyResult, error) {
	full := &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: cmd}}
	pre := e.fsm.Admit(full)
	e.m.commitStages.WithLabelValues(stageAdmit).Observe(time.Since(start).Seconds())
	if pre.Err != nil {
		e.m.refusedBeforeLog.Inc()
		return pre, nil
	}
	kept := &fsmv1.CommitOffsets{GroupId: cmd.GetGroupId(), Generation: cmd.GetGeneration(), MemberId: cmd.GetMemberId(), InstanceId: cmd.GetInstanceId()}
	var at []int // index in cmd of each offset kept
	for i, p := range pre.Partitions {
		if p.Err == nil {
			kept.Offsets = append(kept.Offsets, cmd.GetOffsets()[i])
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		e.m.refusedBeforeLog.Inc()
		return pre, nil
	}
	if len(at) == len(cmd.GetOffsets()) {
		return e.commits.submit(ctx, full)
	}
	res, err := e.commits.submit(ctx, &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: kept}})
	if err != nil || res.Err != nil {
		return res, err
	}
	merged := *res
	merged.Partitions = slices.Clone(pre.Partitions)
	for j, i := range at {
		merged.Partitions[i] = res.Partitions[j]
	}
	return &merged, nil
}

// DeleteGroups deletes empty groups with their offsets.
func (e *Engine) DeleteGroups(ctx context.Context, r *cohortv1.DeleteGroupsRequest) (*cohortv1.DeleteGroupsResponse, error) {
	if len(r.GetGroupIds()) == 0 {
		return nil, invalid("group_ids is empty")
	}
	if n, limit := len(r.GetGroupIds()), e.cfg.Budgets.Groups; int64(n) > limit {
		return nil, invalid("group_ids names %d groups; the cluster holds at most %d (the groups budget)", n, limit)
	}
	for _, id := range r.GetGroupIds() {
		if err := e.cfg.Limits.checkGroupID(id); err != nil {
			return nil, err
		}
	}
	if err := e.awaitServing(ctx); err != nil {
		return nil, err
	}
	res, err := e.propose(ctx, &fsmv1.Command{Kind: &fsmv1.Command_DeleteGroups{DeleteGroups: &fsmv1.DeleteGroups{GroupIds: r.GetGroupIds()}}})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := &cohortv1.DeleteGroupsResponse{}
	for _, g := range res.Groups {
		code, msg := itemError(g.Err)
		resp.Groups = append(resp.Groups, &cohortv1.DeleteGroupResult{GroupId: g.GroupID, Error: code, ErrorMessage: msg})
	}
	return resp, nil
}

// DeleteOffsets deletes committed offsets of a group, partition by
// partition (Kafka's OffsetDelete).
func (e *Engine) DeleteOffsets(ctx context.Context, r *cohortv1.DeleteOffsetsRequest) (*cohortv1.DeleteOffsetsResponse, error) {
	if err := e.cfg.Limits.checkGroupID(r.GetGroupId()); err != nil {
		return nil, err
	}
	asked, err := e.cfg.Limits.partitionsAsked(r.GetPartitions())
	if err != nil {
		return nil, err
	}
	cmd := &fsmv1.DeleteOffsets{GroupId: r.GetGroupId()}
	for _, k := range asked {
		cmd.Partitions = append(cmd.Partitions, &fsmv1.PartitionKey{Topic: k.topic, Partition: k.partition})
	}
	if len(cmd.Partitions) == 0 {
		return nil, invalid("partitions names no partition")
	}
	if len(cmd.Partitions) > fsm.MaxDeleteOffsets {
		return nil, invalid("partitions names %d partitions, over the limit of %d", len(cmd.Partitions), fsm.MaxDeleteOffsets)
	}
	if err := e.awaitServing(ctx); err != nil {
		return nil, err
	}
	res, err := e.propose(ctx, &fsmv1.Command{Kind: &fsmv1.Command_DeleteOffsets{DeleteOffsets: cmd}})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := &cohortv1.DeleteOffsetsResponse{}
	for _, p := range res.Partitions {
		code, msg := itemError(p.Err)
		resp.Partitions = append(resp.Partitions, &cohortv1.DeleteOffsetsPartitionResult{Topic: p.Topic, Partition: p.Partition, Error: code, ErrorMessage: msg})
	}
	return resp, nil
}

// CreateTopic, DeleteTopic and AddPartitions change topic metadata.
func (e *Engine) CreateTopic(ctx context.Context, name string, partitions int32) error {
	if err := e.cfg.Limits.validateTopic(name, partitions, true); err != nil {
		return err
	}
	return e.proposeSimple(ctx, &fsmv1.Command{Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: name, Partitions: partitions}}})
}

func (e *Engine) DeleteTopic(ctx context.Context, name string) error {
	if err := e.cfg.Limits.validateTopic(name, 0, false); err != nil {
		return err
	}
	return e.proposeSimple(ctx, &fsmv1.Command{Kind: &fsmv1.Command_DeleteTopic{DeleteTopic: &fsmv1.DeleteTopic{Name: name}}})
}

func (e *Engine) AddPartitions(ctx context.Context, name string, partitions int32) error {
	if err := e.cfg.Limits.validateTopic(name, partitions, true); err != nil {
		return err
	}
	return e.proposeSimple(ctx, &fsmv1.Command{Kind: &fsmv1.Command_AddPartitions{AddPartitions: &fsmv1.AddPartitions{Name: name, Partitions: partitions}}})
}

func (e *Engine) proposeSimple(ctx context.Context, cmd *fsmv1.Command) error {
	if err := e.awaitServing(ctx); err != nil {
		return err
	}
	res, err := e.proposeAdmitted(ctx, cmd)
	if err != nil {
		return err
	}
	return res.Err
}

// itemError converts a per-item outcome to its wire form. An error without
// a protocol code (none is expected from the FSM) goes out as
// INVALID_ARGUMENT, with its message.
func itemError(err error) (cohortv1.ErrorCode, string) {
	if err == nil {
		return cohortv1.ErrorCode_ERROR_CODE_NONE, ""
	}
	code, ok := wire.ToEnum(errcode.Of(err))
	if !ok {
		code = cohortv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT
	}
	return code, err.Error()
}

func assignmentToFSM(a *cohortv1.Assignment) *fsmv1.Assignment {
	out := &fsmv1.Assignment{UserData: a.GetUserData()}
	for _, tp := range a.GetTopics() {
		out.Topics = append(out.Topics, &fsmv1.TopicPartitions{Topic: tp.GetTopic(), Partitions: tp.GetPartitions()})
	}
	return out
}

func assignmentToAPI(a fsm.Assignment) *cohortv1.Assignment {
	out := &cohortv1.Assignment{UserData: a.UserData}
	for _, tp := range a.Topics {
		out.Topics = append(out.Topics, &cohortv1.TopicPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
	}
	return out
}

// newMemberID makes a member ID the way Kafka does: client ID and a random
// suffix, the client ID cut (at a character boundary) so that the ID fits
// in limit bytes: a member must be able to join again with the ID it was
// given, and IDs over the limit are refused.
func newMemberID(clientID string, limit int) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	suffix := "-" + hex.EncodeToString(b[:])
	if clientID == "" {
		clientID = "member"
	}
	room := max(limit-len(suffix), 0)
	for len(clientID) > room {
		_, size := utf8.DecodeLastRuneInString(clientID)
		clientID = clientID[:len(clientID)-size]
	}
	return clientID + suffix
}
