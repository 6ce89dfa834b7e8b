package client

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Error is a protocol error from the coordinator: a whole request refused
// (from the google.rpc.ErrorInfo reason of the gRPC status) or one item of a
// request (from a per-item ErrorCode). Compare with errors.Is against the
// sentinels below, which match on Reason alone.
type Error struct {
	// Reason is the protocol error name, e.g. "UNKNOWN_MEMBER_ID".
	Reason string
	// Code is the gRPC status code the error came with (codes.OK for a
	// per-item error).
	Code codes.Code
	// Message is the server's human-readable explanation.
	Message string
	// Metadata is the ErrorInfo metadata (MEMBER_ID_REQUIRED carries
	// "member_id").
	Metadata map[string]string
}

func (e *Error) Error() string {
	// The server's messages usually start with the reason already.
	msg := strings.TrimPrefix(strings.TrimPrefix(e.Message, e.Reason), ": ")
	if msg == "" {
		return "cohort: " + e.Reason
	}
	return "cohort: " + e.Reason + ": " + msg
}

// Is reports whether target is an *Error with the same Reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// GRPCStatus lets status.FromError and status.Code see through an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.Code == codes.OK {
		return status.New(codes.Unknown, e.Error())
	}
	return status.New(e.Code, e.Message)
}

// Protocol errors a caller can test with errors.Is.
var (
	ErrMemberIDRequired          = &Error{Reason: "MEMBER_ID_REQUIRED"}
	ErrUnknownMemberID           = &Error{Reason: "UNKNOWN_MEMBER_ID"}
	ErrIllegalGeneration         = &Error{Reason: "ILLEGAL_GENERATION"}
	ErrRebalanceInProgress       = &Error{Reason: "REBALANCE_IN_PROGRESS"}
	ErrFencedInstanceID          = &Error{Reason: "FENCED_INSTANCE_ID"}
	ErrInconsistentGroupProtocol = &Error{Reason: "INCONSISTENT_GROUP_PROTOCOL"}
	ErrInvalidSessionTimeout     = &Error{Reason: "INVALID_SESSION_TIMEOUT"}
	ErrGroupMaxSizeReached       = &Error{Reason: "GROUP_MAX_SIZE_REACHED"}
	ErrInvalidAssignment         = &Error{Reason: "INVALID_ASSIGNMENT"}
	ErrNotLeader                 = &Error{Reason: "NOT_LEADER"}
	ErrCoordinatorNotAvailable   = &Error{Reason: "COORDINATOR_NOT_AVAILABLE"}
	ErrNotCoordinator            = &Error{Reason: "NOT_COORDINATOR"}
	ErrInvalidArgument           = &Error{Reason: "INVALID_ARGUMENT"}
	ErrNotOwner                  = &Error{Reason: "NOT_OWNER"}
	ErrUnknownTopicOrPartition   = &Error{Reason: "UNKNOWN_TOPIC_OR_PARTITION"}
	ErrGroupIDNotFound           = &Error{Reason: "GROUP_ID_NOT_FOUND"}
	ErrNonEmptyGroup             = &Error{Reason: "NON_EMPTY_GROUP"}
)

// Errors of the client itself.
var (
	// ErrClosed is returned by a Member or Conn used after Close.
	ErrClosed = errors.New("cohort: client closed")
	// ErrNotJoined is returned by Commit before the member has a generation.
	ErrNotJoined = errors.New("cohort: member has not joined the group yet")
	// ErrAlreadyRunning is returned by a second call of Member.Run.
	ErrAlreadyRunning = errors.New("cohort: member already running")
)

// Reason returns the protocol error name carried by err ("" if none):
// from an *Error of this package, or from the google.rpc.ErrorInfo of a raw
// gRPC status (calls made with the generated clients directly).
func Reason(err error) string {
	var e *Error
	if errors.As(fromStatus(err), &e) {
		return e.Reason
	}
	return ""
}

// fromStatus turns a gRPC error into an *Error when it carries an ErrorInfo
// (or is InvalidArgument); any other error is returned unchanged.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "" {
			return &Error{Reason: info.GetReason(), Code: st.Code(), Message: st.Message(), Metadata: info.GetMetadata()}
		}
	}
	if st.Code() == codes.InvalidArgument {
		return &Error{Reason: ErrInvalidArgument.Reason, Code: st.Code(), Message: st.Message()}
	}
	return err
}

// fromCode turns a per-item ErrorCode into an *Error (nil for NONE).
func fromCode(c cohortv1.ErrorCode, msg string) error {
	if c == cohortv1.ErrorCode_ERROR_CODE_NONE {
		return nil
	}
	return &Error{Reason: strings.TrimPrefix(c.String(), "ERROR_CODE_"), Message: msg}
}

// CommitError reports the partitions of a commit the coordinator refused;
// the others were stored. errors.Is(err, ErrNotOwner) is true when any
// partition was refused for that reason.
type CommitError struct {
	Group      string
	Generation int32
	Partitions map[TopicPartition]error
}

func (e *CommitError) Error() string {
	tps := make([]TopicPartition, 0, len(e.Partitions))
	for tp := range e.Partitions {
		tps = append(tps, tp)
	}
	sortTopicPartitions(tps)
	var b strings.Builder
	fmt.Fprintf(&b, "cohort: commit to group %q generation %d refused for %d partition(s):", e.Group, e.Generation, len(tps))
	for i, tp := range tps {
		if i == 5 {
			fmt.Fprintf(&b, " …")
			break
		}
		fmt.Fprintf(&b, " %s: %s;", tp, Reason(e.Partitions[tp]))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap exposes every partition's error to errors.Is and errors.As.
func (e *CommitError) Unwrap() []error {
	errs := make([]error, 0, len(e.Partitions))
	for _, err := range e.Partitions {
		errs = append(errs, err)
	}
	return errs
}

func sortTopicPartitions(tps []TopicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}
