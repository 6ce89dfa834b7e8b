package kafka

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/errcode/wire"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// protocolPrefix marks a group joined through the Kafka listener: its
// protocol type inside Cohort is the Kafka client's with this prefix.
const protocolPrefix = "kafka."

// consumerType is the protocol type of Kafka's consumers, whose metadata
// and assignments are in Kafka's consumer protocol (decoded and encoded
// here); any other protocol type's are opaque bytes.
const consumerType = protocolPrefix + "consumer"

// kafkaType is a Cohort group's protocol type as a Kafka client sees it.
func kafkaType(cohortType string) string {
	if t, ok := strings.CutPrefix(cohortType, protocolPrefix); ok {
		return t
	}
	return "cohort." + cohortType // a gRPC group, shown for what it is
}

func optional(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptr(s string) *string { return &s }

// authorize asks the gRPC front's method table whether the connection's
// caller may make the call the Kafka request stands for.
func (c *call) authorize(method string, req any) error {
	return c.s.authz.Authorize(c.c.principal, method, req)
}

// rebalanceTimeout is a join's rebalance timeout: before v1 there is none
// and the session timeout stands in, as in Kafka.
func rebalanceTimeout(r *kmsg.JoinGroupRequest) int32 {
	if r.GetVersion() < 1 {
		return r.SessionTimeoutMillis
	}
	return r.RebalanceTimeoutMillis
}

// subscribedTopics are the topics a consumer's protocols subscribe to (the
// union over its protocols, sorted); an error names the protocol whose
// metadata is not Kafka's consumer protocol.
func subscribedTopics(protocols []kmsg.JoinGroupRequestProtocol) ([]string, error) {
	var topics []string
	for _, p := range protocols {
		var m kmsg.ConsumerMemberMetadata
		if err := m.ReadFrom(p.Metadata); err != nil {
			return nil, errcode.Errorf(errcode.InvalidArgument, "protocol %q: the metadata is not a consumer subscription: %v", p.Name, err)
		}
		topics = append(topics, m.Topics...)
	}
	slices.Sort(topics)
	return slices.Compact(topics), nil
}

func (c *call) joinGroup(ctx context.Context, r *kmsg.JoinGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation, resp.MemberID = -1, r.MemberID
	req := &cohortv1.JoinGroupRequest{
		GroupId: r.Group, MemberId: r.MemberID, InstanceId: optional(r.InstanceID),
		ProtocolType: protocolPrefix + r.ProtocolType, SessionTimeoutMs: r.SessionTimeoutMillis,
		RebalanceTimeoutMs: rebalanceTimeout(r), ClientId: c.h.clientID,
	}
	for _, p := range r.Protocols {
		req.Protocols = append(req.Protocols, &cohortv1.ProtocolMetadata{Name: p.Name, Metadata: p.Metadata})
	}
	if req.ProtocolType == consumerType {
		topics, err := subscribedTopics(r.Protocols)
		if err != nil {
			return c.joinFailed(resp, err)
		}
		req.Topics = topics
	}
	if r.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	if err := c.authorize(cohortv1.GroupCoordinator_JoinGroup_FullMethodName, req); err != nil {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	out, err := c.s.cfg.Engine.JoinGroup(ctx, req, c.c.host)
	var idRequired *coordinator.MemberIDRequiredError
	if errors.As(err, &idRequired) && r.GetVersion() < 4 {
		// Before v4 a client does not know MEMBER_ID_REQUIRED: the
		// listener takes the second round trip for it.
		req.MemberId = idRequired.MemberID
		out, err = c.s.cfg.Engine.JoinGroup(ctx, req, c.c.host)
	}
	if errors.As(err, &idRequired) {
		resp.MemberID = idRequired.MemberID
	}
	if err != nil {
		return c.joinFailed(resp, err)
	}
	resp.Generation, resp.LeaderID, resp.MemberID = out.GetGeneration(), out.GetLeaderId(), out.GetMemberId()
	resp.Protocol, resp.ProtocolType = ptr(out.GetProtocol()), ptr(r.ProtocolType)
	for _, m := range out.GetMembers() {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID, jm.ProtocolMetadata = m.GetMemberId(), m.GetMetadata()
		if m.GetInstanceId() != "" {
			jm.InstanceID = ptr(m.GetInstanceId())
		}
		resp.Members = append(resp.Members, jm)
	}
	return resp
}

// joinFailed fills a JoinGroup answer's error (JoinGroup has no message
// field, so the reason goes to the log).
func (c *call) joinFailed(resp *kmsg.JoinGroupResponse, err error) kmsg.Response {
	resp.ErrorCode = kafkaCode(err)
	if errcode.Of(err) == errcode.BudgetExceeded {
		resp.ErrorCode = kerr.GroupMaxSizeReached.Code
	}
	if errcode.Of(err) != errcode.MemberIDRequired && errcode.Of(err) != errcode.NotLeader {
		c.s.log.Debug("kafka JoinGroup refused", "client", c.h.clientID, "err", err)
	}
	return resp
}

// groupType is the Cohort protocol type of a group a request names: the
// group's own when it exists, else the one the Kafka request states.
func (c *call) groupType(group string, stated *string) string {
	if g, ok := c.s.cfg.FSM.Group(group); ok && g.ProtocolType != "" {
		return g.ProtocolType
	}
	if stated != nil {
		return protocolPrefix + *stated
	}
	return consumerType
}

func (c *call) syncGroup(ctx context.Context, r *kmsg.SyncGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrSyncGroupResponse()
	pt := c.groupType(r.Group, r.ProtocolType)
	if r.ProtocolType != nil && protocolPrefix+*r.ProtocolType != pt {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp
	}
	req := &cohortv1.SyncGroupRequest{GroupId: r.Group, Generation: r.Generation, MemberId: r.MemberID, InstanceId: optional(r.InstanceID)}
	for _, a := range r.GroupAssignment {
		asg, err := decodeAssignment(pt, a.MemberAssignment)
		if err != nil {
			c.s.log.Debug("kafka SyncGroup refused: an undecodable assignment", "group", r.Group, "member", a.MemberID, "err", err)
			resp.ErrorCode = kerr.InvalidRequest.Code
			return resp
		}
		req.Assignments = append(req.Assignments, &cohortv1.MemberAssignment{MemberId: a.MemberID, Assignment: asg})
	}
	if err := c.authorize(cohortv1.GroupCoordinator_SyncGroup_FullMethodName, req); err != nil {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	out, err := c.s.cfg.Engine.SyncGroup(ctx, req)
	if err != nil {
		resp.ErrorCode = kafkaCode(err)
		return resp
	}
	if r.Protocol != nil && *r.Protocol != out.GetProtocol() {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp
	}
	resp.ProtocolType, resp.Protocol = r.ProtocolType, ptr(out.GetProtocol())
	resp.MemberAssignment = encodeAssignment(pt, out.GetAssignment())
	return resp
}

// decodeAssignment is a Kafka member assignment as Cohort's: a consumer's
// is decoded (topics, partitions, user data), any other kind is carried
// whole as user data.
func decodeAssignment(protocolType string, b []byte) (*cohortv1.Assignment, error) {
	if protocolType != consumerType {
		return &cohortv1.Assignment{UserData: b}, nil
	}
	out := &cohortv1.Assignment{}
	if len(b) == 0 {
		return out, nil
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		return nil, err
	}
	for _, t := range a.Topics {
		out.Topics = append(out.Topics, &cohortv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
	}
	out.UserData = a.UserData
	return out, nil
}

// encodeAssignment is decodeAssignment's inverse. A consumer's assignment
// is written in version 0 of the consumer protocol, which every version's
// reader reads (versions 1 to 3 add nothing to an assignment).
func encodeAssignment(protocolType string, a *cohortv1.Assignment) []byte {
	if protocolType != consumerType {
		return a.GetUserData()
	}
	out := kmsg.NewConsumerMemberAssignment()
	for _, t := range a.GetTopics() {
		ct := kmsg.NewConsumerMemberAssignmentTopic()
		ct.Topic, ct.Partitions = t.GetTopic(), t.GetPartitions()
		out.Topics = append(out.Topics, ct)
	}
	out.UserData = a.GetUserData()
	return out.AppendTo(nil)
}

func (c *call) heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) kmsg.Response {
	resp := kmsg.NewPtrHeartbeatResponse()
	req := &cohortv1.HeartbeatRequest{GroupId: r.Group, Generation: r.Generation, MemberId: r.MemberID, InstanceId: optional(r.InstanceID)}
	if err := c.authorize(cohortv1.GroupCoordinator_Heartbeat_FullMethodName, req); err != nil {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	resp.ErrorCode = kafkaCode(c.s.cfg.Engine.Heartbeat(ctx, req))
	return resp
}

func (c *call) leaveGroup(ctx context.Context, r *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrLeaveGroupResponse()
	req := &cohortv1.LeaveGroupRequest{GroupId: r.Group}
	if r.GetVersion() < 3 {
		req.Members = []*cohortv1.LeaveMember{{MemberId: r.MemberID}}
	}
	for _, m := range r.Members {
		req.Members = append(req.Members, &cohortv1.LeaveMember{MemberId: m.MemberID, InstanceId: optional(m.InstanceID)})
	}
	if err := c.authorize(cohortv1.GroupCoordinator_LeaveGroup_FullMethodName, req); err != nil {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	out, err := c.s.cfg.Engine.LeaveGroup(ctx, req)
	if err != nil {
		resp.ErrorCode = kafkaCode(err)
		return resp
	}
	for _, m := range out.GetMembers() {
		code := itemCode(m.GetError())
		if r.GetVersion() < 3 {
			resp.ErrorCode = code
			continue
		}
		lm := kmsg.NewLeaveGroupResponseMember()
		lm.MemberID, lm.ErrorCode = m.GetMemberId(), code
		if m.GetInstanceId() != "" {
			lm.InstanceID = ptr(m.GetInstanceId())
		}
		resp.Members = append(resp.Members, lm)
	}
	return resp
}

// itemCode is a per-item error of an engine answer as a Kafka code.
func itemCode(e cohortv1.ErrorCode) int16 {
	code, ok := wire.FromEnum(e)
	if !ok {
		return kerr.UnknownServerError.Code
	}
	if code == errcode.None {
		return 0
	}
	return kafkaCodes[code].Code
}
