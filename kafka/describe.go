package kafka

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func (c *call) describeGroups(ctx context.Context, r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	req := &cohortv1.DescribeGroupsRequest{GroupIds: r.Groups, PageSize: largestPage}
	fail := func(code int16, err error) kmsg.Response {
		for _, id := range r.Groups {
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.Group, g.ErrorCode, g.ErrorMessage = id, code, errMessage(err)
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	if err := c.authorize(cohortv1.GroupCoordinator_DescribeGroups_FullMethodName, req); err != nil {
		return fail(kerr.GroupAuthorizationFailed.Code, err)
	}
	reveal := c.s.authz.RevealsMemberIDsTo(c.c.principal)
	for {
		out, err := c.s.cfg.Engine.DescribeGroups(ctx, req)
		if err != nil {
			resp.Groups = nil
			return fail(kafkaCode(err), err)
		}
		for _, d := range out.GetGroups() {
			if d.GetProtocolType() == fsm.ConsumerGroupType {
				g := kmsg.NewDescribeGroupsResponseGroup()
				g.Group, g.ErrorCode, g.ErrorMessage = d.GetGroupId(), kerr.GroupIDNotFound.Code, ptr("group "+d.GetGroupId()+" is a consumer group (KIP-848): ConsumerGroupDescribe describes it")
				resp.Groups = append(resp.Groups, g)
				continue
			}
			if d.GetState() == fsm.Dead.String() && r.GetVersion() >= 6 {
				// KIP-1043: from v6 a group that does not exist is an
				// error, not a Dead group with no members.
				g := kmsg.NewDescribeGroupsResponseGroup()
				g.Group, g.State, g.ErrorCode, g.ErrorMessage = d.GetGroupId(), d.GetState(), kerr.GroupIDNotFound.Code, ptr("group "+d.GetGroupId()+" not found")
				resp.Groups = append(resp.Groups, g)
				continue
			}
			resp.Groups = append(resp.Groups, describedGroup(d, reveal))
		}
		if out.GetNextPageToken() == "" {
			return resp
		}
		req.PageToken = out.GetNextPageToken()
	}
}

// describedGroup is a group's description in Kafka's form. A consumer's
// metadata is its subscription, re-encoded from the topics Cohort keeps;
// its assignment is encoded as SyncGroup hands it out. Member IDs are
// blank for a caller that is not an admin (on a node that authorizes), as
// on the gRPC front: a member ID is a membership's only credential.
func describedGroup(d *cohortv1.GroupDescription, reveal bool) kmsg.DescribeGroupsResponseGroup {
	g := kmsg.NewDescribeGroupsResponseGroup()
	g.Group, g.State, g.Protocol = d.GetGroupId(), d.GetState(), d.GetProtocol()
	if d.GetProtocolType() != "" {
		g.ProtocolType = kafkaType(d.GetProtocolType())
	}
	for _, m := range d.GetMembers() {
		gm := kmsg.NewDescribeGroupsResponseGroupMember()
		gm.ClientID, gm.ClientHost = m.GetClientId(), m.GetClientHost()
		if reveal {
			gm.MemberID = m.GetMemberId()
		}
		if m.GetInstanceId() != "" {
			gm.InstanceID = ptr(m.GetInstanceId())
		}
		if d.GetProtocolType() == consumerType {
			meta := kmsg.NewConsumerMemberMetadata()
			meta.Topics = m.GetTopics()
			gm.ProtocolMetadata = meta.AppendTo(nil)
		}
		gm.MemberAssignment = encodeAssignment(d.GetProtocolType(), m.GetAssignment())
		g.Members = append(g.Members, gm)
	}
	return g
}

// statesFilter is a ListGroups states filter as Kafka reads one: each
// name once, whatever its case, and a state no Cohort group is ever in
// (Dead, Assigning, NotReady, or a name Kafka does not know) matching no
// group rather than refused. none is true when the filter names states
// and none of them can match. The result has at most the engine's five
// states, whatever the request's length.
func statesFilter(filter []string) (states []string, none bool) {
	for _, name := range filter {
		for _, st := range coordinator.GroupStates {
			if strings.EqualFold(name, st) && !slices.Contains(states, st) {
				states = append(states, st)
			}
		}
	}
	return states, len(filter) > 0 && len(states) == 0
}

// Kafka's group types (ListGroups v5): a group joined with JoinGroup is
// classic (every gRPC group too), one joined with ConsumerGroupHeartbeat
// is consumer.
const (
	classicGroupType  = "classic"
	consumerGroupType = "consumer"
)

// consumerMemberType is ConsumerGroupDescribe v1's member type of a member
// that joined with ConsumerGroupHeartbeat (KIP-1099: 0 is classic).
const consumerMemberType = 1

// typesFilter is a ListGroups types filter (v5) as Kafka reads one: case
// does not matter, and a type Cohort has no group of (share, streams, a
// name Kafka does not know) matches no group rather than failing the
// request. No filter lists both types.
func typesFilter(filter []string) (classic, consumer bool) {
	if len(filter) == 0 {
		return true, true
	}
	for _, name := range filter {
		classic = classic || strings.EqualFold(name, classicGroupType)
		consumer = consumer || strings.EqualFold(name, consumerGroupType)
	}
	return classic, consumer
}

// listGroups lists the groups this node coordinates: every group on the
// leader, none on a follower, so that a client asking every broker (as
// Kafka's admin clients do) gets each group once.
func (c *call) listGroups(ctx context.Context, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrListGroupsResponse()
	states, none := statesFilter(r.StatesFilter)
	classic, consumer := typesFilter(r.TypesFilter)
	req := &cohortv1.ListGroupsRequest{States: states}
	if err := c.authorize(cohortv1.GroupCoordinator_ListGroups_FullMethodName, req); err != nil {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	if none || !classic && !consumer {
		return resp
	}
	for classic {
		out, err := c.s.cfg.Engine.ListGroups(ctx, req)
		if errcode.Of(err) == errcode.NotLeader {
			return kmsg.NewPtrListGroupsResponse()
		}
		if err != nil {
			resp.ErrorCode = kafkaCode(err)
			return resp
		}
		for _, l := range out.GetGroups() {
			if l.GetProtocolType() == fsm.ConsumerGroupType {
				continue // listed below, as Kafka lists consumer groups
			}
			lg := kmsg.NewListGroupsResponseGroup()
			lg.Group, lg.GroupState, lg.GroupType = l.GetGroupId(), l.GetState(), classicGroupType
			if l.GetProtocolType() != "" {
				lg.ProtocolType = kafkaType(l.GetProtocolType())
			}
			resp.Groups = append(resp.Groups, lg)
		}
		if out.GetNextPageToken() == "" {
			break
		}
		req.PageToken = out.GetNextPageToken()
	}
	if !consumer {
		return resp
	}
	consumers, err := c.s.cfg.Engine.ConsumerGroups(ctx, nil)
	if err != nil {
		return kmsg.NewPtrListGroupsResponse() // leadership moved since: as a follower lists
	}
	for _, g := range consumers {
		state := consumerState(g)
		if len(states) > 0 && !slices.Contains(states, state) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.GroupState, lg.GroupType, lg.ProtocolType = g.ID, state, consumerGroupType, "consumer"
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}

func (c *call) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	req := &cohortv1.DeleteGroupsRequest{GroupIds: r.Groups}
	out, err := (*cohortv1.DeleteGroupsResponse)(nil), c.authorize(cohortv1.GroupCoordinator_DeleteGroups_FullMethodName, req)
	code := kerr.GroupAuthorizationFailed.Code
	if err == nil {
		out, err = c.s.cfg.Engine.DeleteGroups(ctx, req)
		code = kafkaCode(err)
	}
	if err != nil {
		for _, id := range r.Groups {
			g := kmsg.NewDeleteGroupsResponseGroup()
			g.Group, g.ErrorCode, g.ErrorMessage = id, code, errMessage(err)
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	for _, d := range out.GetGroups() {
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group, g.ErrorCode = d.GetGroupId(), itemCode(d.GetError())
		if d.GetErrorMessage() != "" {
			g.ErrorMessage = ptr(d.GetErrorMessage())
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}
