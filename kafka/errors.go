package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohortlabs/cohort/errcode"
)

// codeUnsupportedVersion is UNSUPPORTED_VERSION's Kafka code.
var codeUnsupportedVersion = kerr.UnsupportedVersion.Code

// kafkaCodes maps every errcode to the Kafka error a Kafka client acts on
// in the same way: its retriable flag is Kafka's (kerr), and where Cohort
// has a code Kafka lacks, the nearest Kafka error that makes the client do
// the right thing:
//   - NOT_LEADER, STALE_COMMAND: NOT_COORDINATOR (find the coordinator
//     again; the leader moved, or a timer's command was overtaken);
//   - NOT_OWNER (a commit for a partition the member is not assigned):
//     ILLEGAL_GENERATION, so the member rejoins and learns its assignment;
//   - INVALID_ASSIGNMENT (the leader's plan names what the group or
//     cluster lacks): INVALID_REQUEST, on the leader's SyncGroup;
//   - BUDGET_EXCEEDED: POLICY_VIOLATION, or GROUP_MAX_SIZE_REACHED on a
//     join (decided by the caller, kafkaJoinCode);
//   - the cluster administration codes cannot come back from a group or
//     topic request: UNKNOWN_SERVER_ERROR.
var kafkaCodes = map[errcode.Code]*kerr.Error{
	errcode.InvalidArgument:           kerr.InvalidRequest,
	errcode.UnknownMemberID:           kerr.UnknownMemberID,
	errcode.IllegalGeneration:         kerr.IllegalGeneration,
	errcode.RebalanceInProgress:       kerr.RebalanceInProgress,
	errcode.NotOwner:                  kerr.IllegalGeneration,
	errcode.InvalidAssignment:         kerr.InvalidRequest,
	errcode.InconsistentGroupProtocol: kerr.InconsistentGroupProtocol,
	errcode.FencedInstanceID:          kerr.FencedInstanceID,
	errcode.GroupIDNotFound:           kerr.GroupIDNotFound,
	errcode.NonEmptyGroup:             kerr.NonEmptyGroup,
	errcode.UnknownTopicOrPartition:   kerr.UnknownTopicOrPartition,
	errcode.TopicAlreadyExists:        kerr.TopicAlreadyExists,
	errcode.InvalidPartitions:         kerr.InvalidPartitions,
	errcode.CoordinatorNotAvailable:   kerr.CoordinatorNotAvailable,
	errcode.NotCoordinator:            kerr.NotCoordinator,
	errcode.MemberIDRequired:          kerr.MemberIDRequired,
	errcode.GroupMaxSizeReached:       kerr.GroupMaxSizeReached,
	errcode.InvalidSessionTimeout:     kerr.InvalidSessionTimeout,
	errcode.NotLeader:                 kerr.NotCoordinator,
	errcode.StaleCommand:              kerr.NotCoordinator,
	errcode.UnknownServer:             kerr.UnknownServerError,
	errcode.ServerLagging:             kerr.UnknownServerError,
	errcode.QuorumAtRisk:              kerr.UnknownServerError,
	errcode.LastVoter:                 kerr.UnknownServerError,
	errcode.ConfigurationConflict:     kerr.UnknownServerError,
	errcode.AutopilotManaged:          kerr.UnknownServerError,
	errcode.BudgetExceeded:            kerr.PolicyViolation,
	errcode.GroupSubscribedToTopic:    kerr.GroupSubscribedToTopic,
	errcode.FencedMemberEpoch:         kerr.FencedMemberEpoch,
	errcode.UnsupportedAssignor:       kerr.UnsupportedAssignor,
	errcode.StaleMemberEpoch:          kerr.StaleMemberEpoch,
	errcode.UnreleasedInstanceID:      kerr.UnreleasedInstanceID,
	errcode.InvalidRegularExpression:  kerr.InvalidRegularExpression,
}

// kafkaError is err as a Kafka error: nil for nil; a context's end is
// REQUEST_TIMED_OUT; an error without a protocol code is
// UNKNOWN_SERVER_ERROR.
func kafkaError(err error) *kerr.Error {
	if err == nil {
		return nil
	}
	if e, ok := kafkaCodes[errcode.Of(err)]; ok {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return kerr.RequestTimedOut
	}
	return kerr.UnknownServerError
}

// kafkaCode is err's Kafka error code (0 for nil).
func kafkaCode(err error) int16 {
	if e := kafkaError(err); e != nil {
		return e.Code
	}
	return 0
}

// errMessage is err's message for a response's error message field (nil
// for nil): Kafka clients show it beside the code.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	msg := err.Error()
	return &msg
}
