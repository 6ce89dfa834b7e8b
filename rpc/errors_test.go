package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/raftnode"
)

func TestToStatus_ProtocolErrorsCarryReasonAndCode(t *testing.T) {
	cases := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{errcode.Errorf(errcode.IllegalGeneration, "gen 3, request 2"), codes.FailedPrecondition, "ILLEGAL_GENERATION"},
		{errcode.Errorf(errcode.InvalidArgument, "group_id is empty"), codes.InvalidArgument, "INVALID_ARGUMENT"},
		{errcode.Errorf(errcode.NotLeader, "no leader"), codes.Unavailable, "NOT_LEADER"},
		{errcode.Errorf(errcode.TopicAlreadyExists, "t"), codes.AlreadyExists, "TOPIC_ALREADY_EXISTS"},
		{errcode.Errorf(errcode.GroupMaxSizeReached, "full"), codes.ResourceExhausted, "GROUP_MAX_SIZE_REACHED"},
		{fmt.Errorf("wrapped: %w", errcode.Errorf(errcode.NotOwner, "x")), codes.FailedPrecondition, "NOT_OWNER"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, ""},
		{errors.New("disk on fire"), codes.Internal, ""},
	}
	for _, c := range cases {
		err := toStatus(c.err)
		if status.Code(err) != c.code || Reason(err) != c.reason {
			t.Errorf("toStatus(%v) = %v (%s, reason %q), want %s %q", c.err, err, status.Code(err), Reason(err), c.code, c.reason)
		}
	}
	if toStatus(nil) != nil {
		t.Fatal("toStatus(nil) is not nil")
	}
}

func TestToStatus_MemberIDRequiredCarriesTheID(t *testing.T) {
	err := toStatus(&coordinator.MemberIDRequiredError{ProtocolError: errcode.Errorf(errcode.MemberIDRequired, "join again"), MemberID: "c-123"})
	st, _ := status.FromError(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		info, _ = d.(*errdetails.ErrorInfo)
	}
	if info == nil || info.GetReason() != "MEMBER_ID_REQUIRED" || info.GetMetadata()["member_id"] != "c-123" || info.GetDomain() != ErrorDomain {
		t.Fatalf("MEMBER_ID_REQUIRED details: %+v", info)
	}
}

func TestNewMessage_FindsTheMethodsTypes(t *testing.T) {
	m, err := newMessage("/cohort.v1.GroupCoordinator/JoinGroup", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*cohortv1.JoinGroupResponse); !ok {
		t.Fatalf("JoinGroup response type %T", m)
	}
	m, err = newMessage("/cohort.v1.ClusterService/SnapshotRestore", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*cohortv1.SnapshotRestoreRequest); !ok {
		t.Fatalf("SnapshotRestore request type %T", m)
	}
	for _, bad := range []string{"/cohort.v1.GroupCoordinator/Nope", "/nope.Service/X", "garbage"} {
		if _, err := newMessage(bad, false); err == nil {
			t.Errorf("newMessage(%q) gave no error", bad)
		}
	}
}

// The Raft layer's and the cluster package's own errors go out as the
// protocol errors they stand for: a lost leader is NOT_LEADER
// (Unavailable) wherever it happens.
func TestToStatus_RaftAndClusterErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		code codes.Code
		want errcode.Code
	}{
		{fmt.Errorf("remove server: %w (leader %q)", raftnode.ErrNotLeader, "n2"), codes.Unavailable, errcode.NotLeader},
		{fmt.Errorf("promote: %w", raftnode.ErrLeadershipLost), codes.Unavailable, errcode.NotLeader},
		{fmt.Errorf("x: %w", cluster.ErrLeadershipMoved), codes.Unavailable, errcode.NotLeader},
		{raftnode.ErrShutdown, codes.Unavailable, errcode.CoordinatorNotAvailable},
		{fmt.Errorf("%w: bad crc", raftnode.ErrInvalidSnapshot), codes.InvalidArgument, errcode.InvalidArgument},
		{errcode.Errorf(errcode.UnknownServer, "%q is not in the raft configuration", "n9"), codes.NotFound, errcode.UnknownServer},
		{errcode.Errorf(errcode.QuorumAtRisk, "2 of 3"), codes.FailedPrecondition, errcode.QuorumAtRisk},
		{errors.New("disk on fire"), codes.Internal, errcode.Unknown},
	} {
		err := toStatus(c.err)
		if status.Code(err) != c.code {
			t.Errorf("toStatus(%v): code %s, want %s", c.err, status.Code(err), c.code)
		}
		if c.want != errcode.Unknown && Reason(err) != c.want.String() {
			t.Errorf("toStatus(%v): reason %q, want %s", c.err, Reason(err), c.want)
		}
	}
}

// A refusal that crossed the wire is an errcode error again on the
// calling node, with the server's message.
func TestFromStatus_RoundTrip(t *testing.T) {
	sent := errcode.Errorf(errcode.UnknownServer, "%q is not in the raft configuration", "n9")
	got := fromStatus(toStatus(sent))
	if !errors.Is(got, errcode.ErrUnknownServer) || got.Error() != sent.Error() {
		t.Fatalf("fromStatus(toStatus(%v)) = %v", sent, got)
	}
	plain := status.Error(codes.Unavailable, "connection refused")
	if fromStatus(plain) != plain {
		t.Fatalf("a status without a reason changed: %v", fromStatus(plain))
	}
}

// The gRPC code of every protocol error is part of the wire contract.
func TestGRPCCode_EveryProtocolCode(t *testing.T) {
	want := map[errcode.Code]codes.Code{
		errcode.InvalidArgument:           codes.InvalidArgument,
		errcode.UnknownMemberID:           codes.FailedPrecondition,
		errcode.IllegalGeneration:         codes.FailedPrecondition,
		errcode.RebalanceInProgress:       codes.FailedPrecondition,
		errcode.NotOwner:                  codes.FailedPrecondition,
		errcode.InvalidAssignment:         codes.InvalidArgument,
		errcode.InconsistentGroupProtocol: codes.FailedPrecondition,
		errcode.FencedInstanceID:          codes.FailedPrecondition,
		errcode.GroupIDNotFound:           codes.NotFound,
		errcode.NonEmptyGroup:             codes.FailedPrecondition,
		errcode.UnknownTopicOrPartition:   codes.NotFound,
		errcode.TopicAlreadyExists:        codes.AlreadyExists,
		errcode.InvalidPartitions:         codes.InvalidArgument,
		errcode.CoordinatorNotAvailable:   codes.Unavailable,
		errcode.NotCoordinator:            codes.Unavailable,
		errcode.MemberIDRequired:          codes.FailedPrecondition,
		errcode.GroupMaxSizeReached:       codes.ResourceExhausted,
		errcode.InvalidSessionTimeout:     codes.InvalidArgument,
		errcode.NotLeader:                 codes.Unavailable,
		errcode.StaleCommand:              codes.Aborted,
		errcode.UnknownServer:             codes.NotFound,
		errcode.ServerLagging:             codes.FailedPrecondition,
		errcode.QuorumAtRisk:              codes.FailedPrecondition,
		errcode.LastVoter:                 codes.FailedPrecondition,
		errcode.ConfigurationConflict:     codes.FailedPrecondition,
		errcode.AutopilotManaged:          codes.FailedPrecondition,
		errcode.BudgetExceeded:            codes.ResourceExhausted,
		errcode.GroupSubscribedToTopic:    codes.FailedPrecondition,
		errcode.FencedMemberEpoch:         codes.FailedPrecondition,
		errcode.UnsupportedAssignor:       codes.InvalidArgument,
		errcode.StaleMemberEpoch:          codes.FailedPrecondition,
		errcode.UnreleasedInstanceID:      codes.FailedPrecondition,
		errcode.InvalidRegularExpression:  codes.InvalidArgument,
	}
	for _, c := range errcode.Codes()[1:] {
		w, ok := want[c]
		if !ok {
			t.Errorf("code %s: no gRPC code pinned in this test", c)
			continue
		}
		err := toStatus(errcode.Errorf(c, "m"))
		if status.Code(err) != w || Reason(err) != c.String() {
			t.Errorf("%s goes out as %s reason %q, want %s", c, status.Code(err), Reason(err), w)
		}
		if st, _ := status.FromError(err); st.Message() != c.String()+": m" {
			t.Errorf("%s message %q", c, st.Message())
		}
	}
}

// A bare sentinel or another package's coded error goes out like a
// detailed one, its message prefixed with the name as the server's are.
func TestToStatus_CodedErrorsThatAreNotProtocolErrors(t *testing.T) {
	for _, c := range []struct {
		err error
		msg string
	}{
		{errcode.ErrNotLeader, "NOT_LEADER"},
		{fmt.Errorf("apply: %w", errcode.ErrNotLeader), "NOT_LEADER: apply: NOT_LEADER"},
		{fmt.Errorf("wrapped: %w", errcode.Errorf(errcode.NotOwner, "x")), "NOT_OWNER: x"},
	} {
		err := toStatus(c.err)
		st, _ := status.FromError(err)
		if st.Message() != c.msg || Reason(err) != errcode.Of(c.err).String() {
			t.Errorf("toStatus(%v) = %q reason %q", c.err, st.Message(), Reason(err))
		}
	}
}
