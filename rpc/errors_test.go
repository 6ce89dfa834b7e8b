package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func TestToStatus_ProtocolErrorsCarryReasonAndCode(t *testing.T) {
	cases := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fsm.Errorf(fsm.CodeIllegalGeneration, "gen 3, request 2"), codes.FailedPrecondition, "ILLEGAL_GENERATION"},
		{fsm.Errorf(fsm.CodeInvalidArgument, "group_id is empty"), codes.InvalidArgument, "INVALID_ARGUMENT"},
		{fsm.Errorf(fsm.CodeNotLeader, "no leader"), codes.Unavailable, "NOT_LEADER"},
		{fsm.Errorf(fsm.CodeTopicAlreadyExists, "t"), codes.AlreadyExists, "TOPIC_ALREADY_EXISTS"},
		{fsm.Errorf(fsm.CodeGroupMaxSizeReached, "full"), codes.ResourceExhausted, "GROUP_MAX_SIZE_REACHED"},
		{fmt.Errorf("wrapped: %w", fsm.Errorf(fsm.CodeNotOwner, "x")), codes.FailedPrecondition, "NOT_OWNER"},
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
	err := toStatus(&coordinator.MemberIDRequiredError{ProtocolError: fsm.Errorf(fsm.CodeMemberIDRequired, "join again"), MemberID: "c-123"})
	st, _ := status.FromError(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		info, _ = d.(*errdetails.ErrorInfo)
	}
	if info == nil || info.GetReason() != "MEMBER_ID_REQUIRED" || info.GetMetadata()["member_id"] != "c-123" || info.GetDomain() != ErrorDomain {
		t.Fatalf("MEMBER_ID_REQUIRED details: %+v", info)
	}
}

func TestNewResponse_FindsTheMethodsOutputType(t *testing.T) {
	m, err := newResponse("/cohort.v1.GroupCoordinator/JoinGroup")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*cohortv1.JoinGroupResponse); !ok {
		t.Fatalf("JoinGroup response type %T", m)
	}
	for _, bad := range []string{"/cohort.v1.GroupCoordinator/Nope", "/nope.Service/X", "garbage"} {
		if _, err := newResponse(bad); err == nil {
			t.Errorf("newResponse(%q) gave no error", bad)
		}
	}
}

func TestErrorCodeEnum_MatchesEveryProtocolCodeName(t *testing.T) {
	for c := fsm.CodeNone; c.String() != fmt.Sprintf("CODE_%d", int32(c)); c++ {
		if got := coordinator.ErrorCode(c); got.String() != "ERROR_CODE_"+c.String() {
			t.Errorf("code %s maps to %s", c, got)
		}
	}
}
