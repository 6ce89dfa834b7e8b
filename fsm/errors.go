package fsm

import (
	"errors"
	"fmt"
)

// Code is a group-protocol error code. Its String form is the reason carried
// in a gRPC status's google.rpc.ErrorInfo.
type Code int32

// Protocol error codes. The names follow Kafka's where Kafka has one.
const (
	CodeNone Code = iota
	CodeInvalidArgument
	CodeUnknownMemberID
	CodeIllegalGeneration
	CodeRebalanceInProgress
	CodeNotOwner
	CodeInvalidAssignment
	CodeInconsistentGroupProtocol
	CodeFencedInstanceID
	CodeGroupIDNotFound
	CodeNonEmptyGroup
	CodeUnknownTopicOrPartition
	CodeTopicAlreadyExists
	CodeInvalidPartitions
	CodeCoordinatorNotAvailable
	CodeNotCoordinator
	CodeMemberIDRequired
	CodeGroupMaxSizeReached
	CodeInvalidSessionTimeout
	CodeNotLeader
	CodeStaleCommand
	codeCount
)

var codeNames = [...]string{
	CodeNone:                      "NONE",
	CodeInvalidArgument:           "INVALID_ARGUMENT",
	CodeUnknownMemberID:           "UNKNOWN_MEMBER_ID",
	CodeIllegalGeneration:         "ILLEGAL_GENERATION",
	CodeRebalanceInProgress:       "REBALANCE_IN_PROGRESS",
	CodeNotOwner:                  "NOT_OWNER",
	CodeInvalidAssignment:         "INVALID_ASSIGNMENT",
	CodeInconsistentGroupProtocol: "INCONSISTENT_GROUP_PROTOCOL",
	CodeFencedInstanceID:          "FENCED_INSTANCE_ID",
	CodeGroupIDNotFound:           "GROUP_ID_NOT_FOUND",
	CodeNonEmptyGroup:             "NON_EMPTY_GROUP",
	CodeUnknownTopicOrPartition:   "UNKNOWN_TOPIC_OR_PARTITION",
	CodeTopicAlreadyExists:        "TOPIC_ALREADY_EXISTS",
	CodeInvalidPartitions:         "INVALID_PARTITIONS",
	CodeCoordinatorNotAvailable:   "COORDINATOR_NOT_AVAILABLE",
	CodeNotCoordinator:            "NOT_COORDINATOR",
	CodeMemberIDRequired:          "MEMBER_ID_REQUIRED",
	CodeGroupMaxSizeReached:       "GROUP_MAX_SIZE_REACHED",
	CodeInvalidSessionTimeout:     "INVALID_SESSION_TIMEOUT",
	CodeNotLeader:                 "NOT_LEADER",
	CodeStaleCommand:              "STALE_COMMAND",
}

func (c Code) String() string {
	if c >= 0 && c < codeCount {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE_%d", int32(c))
}

// ProtocolError is a group-protocol error: a code a caller can switch on and
// a message that says what was wrong with which input.
type ProtocolError struct {
	Code Code
	Msg  string
}

func (e *ProtocolError) Error() string {
	if e.Msg == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Msg
}

// Is makes errors.Is(err, fsm.ErrIllegalGeneration) match any ProtocolError
// with the same code, whatever its message.
func (e *ProtocolError) Is(target error) bool {
	var t *ProtocolError
	return errors.As(target, &t) && t.Code == e.Code
}

// Errorf builds a ProtocolError with a formatted message.
func Errorf(code Code, format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the protocol code of err, CodeNone for nil, and
// CodeInvalidArgument for an error that is not a ProtocolError.
func CodeOf(err error) Code {
	if err == nil {
		return CodeNone
	}
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInvalidArgument
}

// Sentinels for errors.Is.
var (
	ErrInvalidArgument           = &ProtocolError{Code: CodeInvalidArgument}
	ErrUnknownMemberID           = &ProtocolError{Code: CodeUnknownMemberID}
	ErrIllegalGeneration         = &ProtocolError{Code: CodeIllegalGeneration}
	ErrRebalanceInProgress       = &ProtocolError{Code: CodeRebalanceInProgress}
	ErrNotOwner                  = &ProtocolError{Code: CodeNotOwner}
	ErrInvalidAssignment         = &ProtocolError{Code: CodeInvalidAssignment}
	ErrInconsistentGroupProtocol = &ProtocolError{Code: CodeInconsistentGroupProtocol}
	ErrFencedInstanceID          = &ProtocolError{Code: CodeFencedInstanceID}
	ErrGroupIDNotFound           = &ProtocolError{Code: CodeGroupIDNotFound}
	ErrNonEmptyGroup             = &ProtocolError{Code: CodeNonEmptyGroup}
	ErrUnknownTopicOrPartition   = &ProtocolError{Code: CodeUnknownTopicOrPartition}
	ErrTopicAlreadyExists        = &ProtocolError{Code: CodeTopicAlreadyExists}
	ErrInvalidPartitions         = &ProtocolError{Code: CodeInvalidPartitions}
	ErrCoordinatorNotAvailable   = &ProtocolError{Code: CodeCoordinatorNotAvailable}
	ErrStaleCommand              = &ProtocolError{Code: CodeStaleCommand}
)
