package rpc

import (
	"context"
	"errors"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/fsm"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of Cohort's errors.
const ErrorDomain = "cohort.v1"

// grpcCode is the gRPC status code each protocol error travels with.
func grpcCode(c fsm.Code) codes.Code {
	switch c {
	case fsm.CodeInvalidArgument, fsm.CodeInvalidAssignment, fsm.CodeInvalidSessionTimeout, fsm.CodeInvalidPartitions:
		return codes.InvalidArgument
	case fsm.CodeGroupIDNotFound, fsm.CodeUnknownTopicOrPartition:
		return codes.NotFound
	case fsm.CodeTopicAlreadyExists:
		return codes.AlreadyExists
	case fsm.CodeGroupMaxSizeReached:
		return codes.ResourceExhausted
	case fsm.CodeNotLeader, fsm.CodeCoordinatorNotAvailable, fsm.CodeNotCoordinator:
		return codes.Unavailable
	case fsm.CodeStaleCommand:
		return codes.Aborted
	}
	// UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
	// FENCED_INSTANCE_ID, MEMBER_ID_REQUIRED, NOT_OWNER, NON_EMPTY_GROUP,
	// INCONSISTENT_GROUP_PROTOCOL: the request was fine, the group's state
	// says no.
	return codes.FailedPrecondition
}

// toStatus converts an engine error to a gRPC status error whose ErrorInfo
// reason is the protocol error name.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (e.g. from the leader we forwarded to)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	var pe *fsm.ProtocolError
	if !errors.As(err, &pe) {
		return status.Error(codes.Internal, err.Error())
	}
	info := &errdetails.ErrorInfo{Reason: pe.Code.String(), Domain: ErrorDomain}
	var mid *coordinator.MemberIDRequiredError
	if errors.As(err, &mid) {
		info.Metadata = map[string]string{"member_id": mid.MemberID}
	}
	st, derr := status.New(grpcCode(pe.Code), pe.Error()).WithDetails(info)
	if derr != nil {
		return status.Error(grpcCode(pe.Code), pe.Error())
	}
	return st.Err()
}

// Reason returns the ErrorInfo reason of a gRPC error ("" when it has none).
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
