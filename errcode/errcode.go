// Package errcode is Cohort's one vocabulary of group-protocol errors: every
// code the coordinator can answer with, its name (the google.rpc.ErrorInfo
// reason and, prefixed, the cohort.v1 ErrorCode enum name), whether a caller
// may resend the same request, and what it means.
//
// The server (fsm, coordinator, rpc) builds its errors from these codes and
// the client decides its retries from them, so both sides read one table.
//
// What it must never do: import anything outside the standard library (the
// fsm, the client and the wire mapping all depend on it), or learn about
// transports: gRPC status codes, connection errors and the enum mapping
// (errcode/wire) live elsewhere.
package errcode

import (
	"errors"
	"fmt"
)

// Code is a group-protocol error code. Its String form is the name carried
// as the ErrorInfo reason of a refused request.
type Code int32

// Protocol error codes. The names follow Kafka's where Kafka has one; the
// numbers are Cohort's own (they happen to equal the cohort.v1 ErrorCode
// values, but the mapping is errcode/wire's table, never the number).
const (
	None                      Code = 0
	InvalidArgument           Code = 1
	UnknownMemberID           Code = 2
	IllegalGeneration         Code = 3
	RebalanceInProgress       Code = 4
	NotOwner                  Code = 5
	InvalidAssignment         Code = 6
	InconsistentGroupProtocol Code = 7
	FencedInstanceID          Code = 8
	GroupIDNotFound           Code = 9
	NonEmptyGroup             Code = 10
	UnknownTopicOrPartition   Code = 11
	TopicAlreadyExists        Code = 12
	InvalidPartitions         Code = 13
	CoordinatorNotAvailable   Code = 14
	NotCoordinator            Code = 15
	MemberIDRequired          Code = 16
	GroupMaxSizeReached       Code = 17
	InvalidSessionTimeout     Code = 18
	NotLeader                 Code = 19
	StaleCommand              Code = 20

	// Cluster administration (cohort.v1.ClusterService) refusals.
	UnknownServer         Code = 21
	ServerLagging         Code = 22
	QuorumAtRisk          Code = 23
	LastVoter             Code = 24
	ConfigurationConflict Code = 25
	AutopilotManaged      Code = 26

	// A replicated budget refused growth of the state.
	BudgetExceeded Code = 27

	// Offsets of a topic the group's members subscribe to cannot be
	// deleted.
	GroupSubscribedToTopic Code = 28

	// Consumer groups (Kafka's KIP-848 protocol).
	FencedMemberEpoch    Code = 29
	UnsupportedAssignor  Code = 30
	StaleMemberEpoch     Code = 31
	UnreleasedInstanceID Code = 32
	// A consumer group member's topic regular expression does not
	// compile.
	InvalidRegularExpression Code = 33
)

// Unknown is what Of says of a non-nil error that carries no protocol code
// (an I/O failure, a bug). It is not a protocol code: nothing sends it, it
// has no Error and no wire value, and it is not retriable.
const Unknown Code = -1

// Error is one protocol error code: its number, name, whether resending
// the same request may succeed, and what it means. The Err values below are
// the only Errors; they serve as sentinels for errors.Is, which matches a
// ProtocolError of the same code whatever its message.
type Error struct {
	// Code is the number callers switch on.
	Code Code
	// Name is the ErrorInfo reason on the wire, e.g. "UNKNOWN_MEMBER_ID".
	Name string
	// Retriable is Kafka's sense of the word: the same request, sent again
	// unchanged (possibly to another node), may succeed once the cluster
	// has moved on. Only the "no one can answer this right now" codes are:
	// NOT_LEADER, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR, all of them
	// a leadership change in progress that ends without the caller doing
	// anything. Everything else is an answer about the request or the
	// group's state that repeats until the caller changes something:
	// REBALANCE_IN_PROGRESS in particular is not retriable (as in Kafka,
	// where RebalanceInProgressException is not a RetriableException): a
	// heartbeat, sync or commit resent unchanged keeps getting it until the
	// member rejoins, so a transport that retried it would hide the
	// rebalance from the member. UNKNOWN_TOPIC_OR_PARTITION is retriable in
	// Kafka, whose brokers learn metadata late; Cohort's leader answers
	// from its replicated state, so the answer stands until someone creates
	// the topic.
	Retriable bool
	// Description says what the error means, in one sentence.
	Description string
}

func (e *Error) Error() string { return e.Name }

// ErrorCode returns e.Code, so an *Error is a Coder.
func (e *Error) ErrorCode() Code { return e.Code }

// The protocol errors, one per code. NONE has none: it means success.
var (
	ErrInvalidArgument           = &Error{InvalidArgument, "INVALID_ARGUMENT", false, "The request is malformed: a field is missing, empty, too long or out of range."}
	ErrUnknownMemberID           = &Error{UnknownMemberID, "UNKNOWN_MEMBER_ID", false, "The member ID is not in the group (expired, left or never joined): join as a new member."}
	ErrIllegalGeneration         = &Error{IllegalGeneration, "ILLEGAL_GENERATION", false, "The request names a generation other than the group's current one: rejoin."}
	ErrRebalanceInProgress       = &Error{RebalanceInProgress, "REBALANCE_IN_PROGRESS", false, "The group is rebalancing: the member must rejoin before this request can succeed."}
	ErrNotOwner                  = &Error{NotOwner, "NOT_OWNER", false, "The member commits offsets for a partition it is not assigned in this generation."}
	ErrInvalidAssignment         = &Error{InvalidAssignment, "INVALID_ASSIGNMENT", false, "The leader's assignment names members, topics or partitions the group or cluster does not have."}
	ErrInconsistentGroupProtocol = &Error{InconsistentGroupProtocol, "INCONSISTENT_GROUP_PROTOCOL", false, "The member's protocol type or assignors are incompatible with the group's."}
	ErrFencedInstanceID          = &Error{FencedInstanceID, "FENCED_INSTANCE_ID", false, "Another member with the same static instance ID took its place."}
	ErrGroupIDNotFound           = &Error{GroupIDNotFound, "GROUP_ID_NOT_FOUND", false, "The group does not exist."}
	ErrNonEmptyGroup             = &Error{NonEmptyGroup, "NON_EMPTY_GROUP", false, "The group still has members, so it cannot be deleted."}
	ErrUnknownTopicOrPartition   = &Error{UnknownTopicOrPartition, "UNKNOWN_TOPIC_OR_PARTITION", false, "The topic or partition does not exist."}
	ErrTopicAlreadyExists        = &Error{TopicAlreadyExists, "TOPIC_ALREADY_EXISTS", false, "A topic with this name already exists."}
	ErrInvalidPartitions         = &Error{InvalidPartitions, "INVALID_PARTITIONS", false, "The partition count is not positive, over the limit, or would shrink the topic."}
	ErrCoordinatorNotAvailable   = &Error{CoordinatorNotAvailable, "COORDINATOR_NOT_AVAILABLE", true, "The coordinator is not serving yet (starting, or catching up after an election): retry shortly."}
	ErrNotCoordinator            = &Error{NotCoordinator, "NOT_COORDINATOR", true, "This node does not coordinate the group: retry on the coordinator."}
	ErrMemberIDRequired          = &Error{MemberIDRequired, "MEMBER_ID_REQUIRED", false, "A new dynamic member must join again with the member ID carried in the error's metadata."}
	ErrGroupMaxSizeReached       = &Error{GroupMaxSizeReached, "GROUP_MAX_SIZE_REACHED", false, "The group already has its maximum number of members."}
	ErrInvalidSessionTimeout     = &Error{InvalidSessionTimeout, "INVALID_SESSION_TIMEOUT", false, "The session timeout is outside the coordinator's allowed range."}
	ErrNotLeader                 = &Error{NotLeader, "NOT_LEADER", true, "This node is not the Raft leader, or lost leadership before the request completed: retry on the leader."}
	ErrStaleCommand              = &Error{StaleCommand, "STALE_COMMAND", false, "A coordinator timer's command no longer matches the group's state (it was overtaken); nothing changed."}

	ErrUnknownServer         = &Error{UnknownServer, "UNKNOWN_SERVER", false, "The server ID is not in the Raft configuration."}
	ErrServerLagging         = &Error{ServerLagging, "SERVER_LAGGING", false, "The server's log is too far behind the leader's (or its position is unknown) to promote it: wait for it to catch up."}
	ErrQuorumAtRisk          = &Error{QuorumAtRisk, "QUORUM_AT_RISK", false, "The change would leave fewer (healthy) voters than a quorum needs; it needs force."}
	ErrLastVoter             = &Error{LastVoter, "LAST_VOTER", false, "The last voter can never be removed or demoted."}
	ErrConfigurationConflict = &Error{ConfigurationConflict, "CONFIGURATION_CONFLICT", false, "The request contradicts the Raft configuration (an ID at another address, an address of another ID, a non-voter as leader)."}
	ErrAutopilotManaged      = &Error{AutopilotManaged, "AUTOPILOT_MANAGED", false, "Autopilot manages suffrage and would undo the change: disable autopilot first."}

	ErrBudgetExceeded = &Error{BudgetExceeded, "BUDGET_EXCEEDED", false, "The change would take the cluster's state past a budget (topics, partitions, groups, members, metadata, offsets or state bytes); the message names it. Free room or raise the budget."}

	ErrGroupSubscribedToTopic = &Error{GroupSubscribedToTopic, "GROUP_SUBSCRIBED_TO_TOPIC", false, "Members of the group subscribe to the topic, so its committed offsets cannot be deleted."}

	ErrFencedMemberEpoch        = &Error{FencedMemberEpoch, "FENCED_MEMBER_EPOCH", false, "The consumer group member's epoch is not its current one: it must rejoin with epoch 0."}
	ErrUnsupportedAssignor      = &Error{UnsupportedAssignor, "UNSUPPORTED_ASSIGNOR", false, "The consumer group asks for a server-side assignor the coordinator does not run."}
	ErrStaleMemberEpoch         = &Error{StaleMemberEpoch, "STALE_MEMBER_EPOCH", false, "The commit names a member epoch other than the member's current one."}
	ErrUnreleasedInstanceID     = &Error{UnreleasedInstanceID, "UNRELEASED_INSTANCE_ID", false, "Another member of the consumer group still holds the static instance ID."}
	ErrInvalidRegularExpression = &Error{InvalidRegularExpression, "INVALID_REGULAR_EXPRESSION", false, "The consumer group member's topic regular expression is not valid RE2 syntax, or is too long."}
)

// errs is the table of codes, indexed by Code; None has no Error.
var errs = [...]*Error{
	None:                      nil,
	InvalidArgument:           ErrInvalidArgument,
	UnknownMemberID:           ErrUnknownMemberID,
	IllegalGeneration:         ErrIllegalGeneration,
	RebalanceInProgress:       ErrRebalanceInProgress,
	NotOwner:                  ErrNotOwner,
	InvalidAssignment:         ErrInvalidAssignment,
	InconsistentGroupProtocol: ErrInconsistentGroupProtocol,
	FencedInstanceID:          ErrFencedInstanceID,
	GroupIDNotFound:           ErrGroupIDNotFound,
	NonEmptyGroup:             ErrNonEmptyGroup,
	UnknownTopicOrPartition:   ErrUnknownTopicOrPartition,
	TopicAlreadyExists:        ErrTopicAlreadyExists,
	InvalidPartitions:         ErrInvalidPartitions,
	CoordinatorNotAvailable:   ErrCoordinatorNotAvailable,
	NotCoordinator:            ErrNotCoordinator,
	MemberIDRequired:          ErrMemberIDRequired,
	GroupMaxSizeReached:       ErrGroupMaxSizeReached,
	InvalidSessionTimeout:     ErrInvalidSessionTimeout,
	NotLeader:                 ErrNotLeader,
	StaleCommand:              ErrStaleCommand,
	UnknownServer:             ErrUnknownServer,
	ServerLagging:             ErrServerLagging,
	QuorumAtRisk:              ErrQuorumAtRisk,
	LastVoter:                 ErrLastVoter,
	ConfigurationConflict:     ErrConfigurationConflict,
	AutopilotManaged:          ErrAutopilotManaged,
	BudgetExceeded:            ErrBudgetExceeded,
	GroupSubscribedToTopic:    ErrGroupSubscribedToTopic,
	FencedMemberEpoch:         ErrFencedMemberEpoch,
	UnsupportedAssignor:       ErrUnsupportedAssignor,
	StaleMemberEpoch:          ErrStaleMemberEpoch,
	UnreleasedInstanceID:      ErrUnreleasedInstanceID,
	InvalidRegularExpression:  ErrInvalidRegularExpression,
}

// Codes returns every protocol code, NONE first, in numeric order.
func Codes() []Code {
	out := make([]Code, len(errs))
	for i := range errs {
		out[i] = Code(i)
	}
	return out
}

// Lookup returns the Error of code c; false for NONE, Unknown and numbers
// that are no code.
func Lookup(c Code) (*Error, bool) {
	if c <= None || int(c) >= len(errs) {
		return nil, false
	}
	return errs[c], true
}

// ByName returns the code named name ("NONE" included); false for a name
// that is no code, such as a reason from a newer server.
func ByName(name string) (Code, bool) {
	if name == "NONE" {
		return None, true
	}
	for _, e := range errs {
		if e != nil && e.Name == name {
			return e.Code, true
		}
	}
	return Unknown, false
}

// String returns the code's name: "NONE", "UNKNOWN", or "CODE_n" for a
// number that is no code.
func (c Code) String() string {
	switch c {
	case None:
		return "NONE"
	case Unknown:
		return "UNKNOWN"
	}
	if e, ok := Lookup(c); ok {
		return e.Name
	}
	return fmt.Sprintf("CODE_%d", int32(c))
}

// Retriable reports whether a request refused with c may succeed if sent
// again unchanged (see Error.Retriable); false for NONE and Unknown.
func (c Code) Retriable() bool {
	e, ok := Lookup(c)
	return ok && e.Retriable
}

// Coder is implemented by errors that carry a protocol code: *Error,
// *ProtocolError, and error types of other packages (the client's) that
// want Of and IsRetriable to see their code.
type Coder interface {
	ErrorCode() Code
}

// Of returns the protocol code err carries (the first Coder in its chain):
// None for nil, Unknown for an error that carries none.
func Of(err error) Code {
	if err == nil {
		return None
	}
	var c Coder
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return Unknown
}

// IsRetriable reports whether err carries a retriable protocol code.
func IsRetriable(err error) bool { return Of(err).Retriable() }

// ProtocolError is a protocol error with a message that says what was wrong
// with which input. errors.Is matches it against the sentinel of its code
// (and any other Coder of the same code), whatever the message.
type ProtocolError struct {
	Code Code
	Msg  string
}

// Errorf builds a ProtocolError with a formatted message.
func Errorf(code Code, format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

func (e *ProtocolError) Error() string {
	if e.Msg == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Msg
}

// ErrorCode returns e.Code, so a *ProtocolError is a Coder.
func (e *ProtocolError) ErrorCode() Code { return e.Code }

// Is makes errors.Is(err, errcode.ErrIllegalGeneration) true for any
// ProtocolError with that code.
func (e *ProtocolError) Is(target error) bool {
	t, ok := target.(Coder)
	return ok && t.ErrorCode() == e.Code
}
