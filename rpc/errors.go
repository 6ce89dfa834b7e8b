package rpc

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/raftnode"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of Cohort's errors.
const ErrorDomain = "cohort.v1"

// grpcCode is the gRPC status code each protocol error travels with.
func grpcCode(c errcode.Code) codes.Code {
	switch c {
	case errcode.InvalidArgument, errcode.InvalidAssignment, errcode.InvalidSessionTimeout, errcode.InvalidPartitions, errcode.UnsupportedAssignor, errcode.InvalidRegularExpression:
		return codes.InvalidArgument
	case errcode.GroupIDNotFound, errcode.UnknownTopicOrPartition, errcode.UnknownServer:
		return codes.NotFound
	case errcode.TopicAlreadyExists:
		return codes.AlreadyExists
	case errcode.GroupMaxSizeReached, errcode.BudgetExceeded:
		return codes.ResourceExhausted
	case errcode.NotLeader, errcode.CoordinatorNotAvailable, errcode.NotCoordinator:
		// A leadership change in transit: clients resend elsewhere.
		return codes.Unavailable
	case errcode.StaleCommand:
		return codes.Aborted
	}
	// UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
	// FENCED_INSTANCE_ID, MEMBER_ID_REQUIRED, NOT_OWNER, NON_EMPTY_GROUP,
	// GROUP_SUBSCRIBED_TO_TOPIC, INCONSISTENT_GROUP_PROTOCOL, the consumer
	// groups' FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH and
	// UNRELEASED_INSTANCE_ID, and the admin refusals SERVER_LAGGING,
	// QUORUM_AT_RISK, LAST_VOTER, CONFIGURATION_CONFLICT,
	// AUTOPILOT_MANAGED: the request was fine, the group's or the
	// cluster's state says no.
	return codes.FailedPrecondition
}

// protocolCode returns the protocol code err goes out with, errcode.Unknown
// when it has none (it then goes out as Internal). Errors of other packages
// that stand for a protocol code are translated here, so that every
// refusal, whoever made it, reaches clients as one errcode: a Raft layer's
// lost leader, for one, must go out as errcode.NotLeader (Unavailable with
// reason NOT_LEADER), which clients resend on the leader.
func protocolCode(err error) errcode.Code {
	if c := errcode.Of(err); c != errcode.Unknown {
		return c
	}
	switch {
	case errors.Is(err, raftnode.ErrNotLeader), errors.Is(err, raftnode.ErrLeadershipLost),
		errors.Is(err, cluster.ErrLeadershipMoved):
		return errcode.NotLeader
	case errors.Is(err, raftnode.ErrShutdown):
		return errcode.CoordinatorNotAvailable
	case errors.Is(err, raftnode.ErrInvalidSnapshot):
		return errcode.InvalidArgument
	}
	return errcode.Unknown
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
	code := protocolCode(err)
	if _, ok := errcode.Lookup(code); !ok {
		return status.Error(codes.Internal, err.Error())
	}
	// The message is the refusal itself ("NAME: what was wrong"), without
	// the wrapping callers added on the way out.
	var msg string
	var pe *errcode.ProtocolError
	switch {
	case errors.As(err, &pe):
		msg = pe.Error()
	case err.Error() == code.String():
		msg = err.Error()
	default:
		msg = code.String() + ": " + err.Error()
	}
	info := &errdetails.ErrorInfo{Reason: code.String(), Domain: ErrorDomain}
	var mid *coordinator.MemberIDRequiredError
	if errors.As(err, &mid) {
		info.Metadata = map[string]string{"member_id": mid.MemberID}
	}
	var nf *notForwardedError
	if errors.As(err, &nf) {
		info.Metadata = map[string]string{NotForwardedKey: "false"}
	}
	st, derr := status.New(grpcCode(code), msg).WithDetails(info)
	if derr != nil {
		return status.Error(grpcCode(code), msg)
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

// fromStatus turns a gRPC error whose ErrorInfo reason names a protocol
// code back into an errcode error, so that callers of another node (the
// cluster package, through PeerClient) can test it with errors.Is; any
// other error is returned unchanged.
func fromStatus(err error) error {
	c, ok := errcode.ByName(Reason(err))
	if !ok || c == errcode.None {
		return err
	}
	st, _ := status.FromError(err)
	return errcode.Errorf(c, "%s", strings.TrimPrefix(st.Message(), c.String()+": "))
}
