package client

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/errcode/wire"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Error is a protocol error from the coordinator: a whole request refused
// (from the google.rpc.ErrorInfo reason of the gRPC status) or one item of a
// request (from a per-item ErrorCode). Compare with errors.Is against the
// sentinels below (errcode's), which match on Code alone, or switch on
// errcode.Of(err).
type Error struct {
	// Code is the protocol error, e.g. errcode.UnknownMemberID.
	Code errcode.Code
	// GRPCCode is the gRPC status code the error came with (codes.OK for a
	// per-item error).
	GRPCCode codes.Code
	// Message is the server's human-readable explanation.
	Message string
	// Metadata is the ErrorInfo metadata (MEMBER_ID_REQUIRED carries
	// "member_id").
	Metadata map[string]string
}

func (e *Error) Error() string {
	// The server's messages usually start with the name already.
	name := e.Code.String()
	msg := strings.TrimPrefix(strings.TrimPrefix(e.Message, name), ": ")
	if msg == "" {
		return "cohort: " + name
	}
	return "cohort: " + name + ": " + msg
}

// ErrorCode returns e.Code: errcode.Of and errcode.IsRetriable see it.
func (e *Error) ErrorCode() errcode.Code { return e.Code }

// Is reports whether target carries the same protocol code: one of the
// sentinels below, another *Error, or a server-side errcode.ProtocolError.
func (e *Error) Is(target error) bool {
	t, ok := target.(errcode.Coder)
	return ok && t.ErrorCode() == e.Code
}

// GRPCStatus lets status.FromError and status.Code see through an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.GRPCCode == codes.OK {
		return status.New(codes.Unknown, e.Error())
	}
	return status.New(e.GRPCCode, e.Message)
}

// Protocol errors a caller can test with errors.Is: errcode's sentinels,
// named here so a consumer needs only this package.
var (
	ErrMemberIDRequired          = errcode.ErrMemberIDRequired
	ErrUnknownMemberID           = errcode.ErrUnknownMemberID
	ErrIllegalGeneration         = errcode.ErrIllegalGeneration
	ErrRebalanceInProgress       = errcode.ErrRebalanceInProgress
	ErrFencedInstanceID          = errcode.ErrFencedInstanceID
	ErrInconsistentGroupProtocol = errcode.ErrInconsistentGroupProtocol
	ErrInvalidSessionTimeout     = errcode.ErrInvalidSessionTimeout
	ErrGroupMaxSizeReached       = errcode.ErrGroupMaxSizeReached
	ErrInvalidAssignment         = errcode.ErrInvalidAssignment
	ErrNotLeader                 = errcode.ErrNotLeader
	ErrCoordinatorNotAvailable   = errcode.ErrCoordinatorNotAvailable
	ErrNotCoordinator            = errcode.ErrNotCoordinator
	ErrInvalidArgument           = errcode.ErrInvalidArgument
	ErrNotOwner                  = errcode.ErrNotOwner
	ErrUnknownTopicOrPartition   = errcode.ErrUnknownTopicOrPartition
	ErrTopicAlreadyExists        = errcode.ErrTopicAlreadyExists
	ErrGroupIDNotFound           = errcode.ErrGroupIDNotFound
	ErrNonEmptyGroup             = errcode.ErrNonEmptyGroup
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

// ErrorCode returns the protocol code err carries: from an *Error of this
// package, any errcode.Coder, or the ErrorInfo of a raw gRPC status (calls
// made with the generated clients directly). It is errcode.None for nil and
// errcode.Unknown for an error without a code this client knows.
func ErrorCode(err error) errcode.Code { return errcode.Of(fromStatus(err)) }

// Reason returns the protocol error name carried by err ("" if none): the
// name of its ErrorCode, or the raw ErrorInfo reason when this client does
// not know the code.
func Reason(err error) string {
	if c := ErrorCode(err); c != errcode.None && c != errcode.Unknown {
		return c.String()
	}
	return errorInfoReason(err)
}

// errorInfoReason is the ErrorInfo reason of a gRPC status error, "" when
// it has none.
func errorInfoReason(err error) string {
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

// fromStatus turns a gRPC error into an *Error when it carries an ErrorInfo
// with a reason this client knows (or is InvalidArgument); any other error
// is returned unchanged.
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
			if c, ok := errcode.ByName(info.GetReason()); ok {
				return &Error{Code: c, GRPCCode: st.Code(), Message: st.Message(), Metadata: info.GetMetadata()}
			}
			return err
		}
	}
	if st.Code() == codes.InvalidArgument {
		return &Error{Code: errcode.InvalidArgument, GRPCCode: st.Code(), Message: st.Message()}
	}
	return err
}

// fromCode turns a per-item ErrorCode into an *Error (nil for NONE).
func fromCode(c cohortv1.ErrorCode, msg string) error {
	code, ok := wire.FromEnum(c)
	switch {
	case !ok:
		return fmt.Errorf("cohort: error code %d (unknown to this client): %s", int32(c), msg)
	case code == errcode.None:
		return nil
	}
	return &Error{Code: code, Message: msg}
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
