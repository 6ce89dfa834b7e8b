// Package wire maps errcode's protocol codes to the cohort.v1 ErrorCode enum
// of the API (per-item errors in LeaveGroup and OffsetCommit responses) and
// back. It holds the one table both the server (rpc, coordinator) and the
// client read, so neither spells an enum name from a code name.
//
// Adding a code to errcode without a row here fails this package's tests.
package wire

import (
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// table is the mapping, one row per code.
var table = [...]struct {
	code errcode.Code
	enum cohortv1.ErrorCode
}{
	{errcode.None, cohortv1.ErrorCode_ERROR_CODE_NONE},
	{errcode.InvalidArgument, cohortv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
	{errcode.UnknownMemberID, cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_MEMBER_ID},
	{errcode.IllegalGeneration, cohortv1.ErrorCode_ERROR_CODE_ILLEGAL_GENERATION},
	{errcode.RebalanceInProgress, cohortv1.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS},
	{errcode.NotOwner, cohortv1.ErrorCode_ERROR_CODE_NOT_OWNER},
	{errcode.InvalidAssignment, cohortv1.ErrorCode_ERROR_CODE_INVALID_ASSIGNMENT},
	{errcode.InconsistentGroupProtocol, cohortv1.ErrorCode_ERROR_CODE_INCONSISTENT_GROUP_PROTOCOL},
	{errcode.FencedInstanceID, cohortv1.ErrorCode_ERROR_CODE_FENCED_INSTANCE_ID},
	{errcode.GroupIDNotFound, cohortv1.ErrorCode_ERROR_CODE_GROUP_ID_NOT_FOUND},
	{errcode.NonEmptyGroup, cohortv1.ErrorCode_ERROR_CODE_NON_EMPTY_GROUP},
	{errcode.UnknownTopicOrPartition, cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION},
	{errcode.TopicAlreadyExists, cohortv1.ErrorCode_ERROR_CODE_TOPIC_ALREADY_EXISTS},
	{errcode.InvalidPartitions, cohortv1.ErrorCode_ERROR_CODE_INVALID_PARTITIONS},
	{errcode.CoordinatorNotAvailable, cohortv1.ErrorCode_ERROR_CODE_COORDINATOR_NOT_AVAILABLE},
	{errcode.NotCoordinator, cohortv1.ErrorCode_ERROR_CODE_NOT_COORDINATOR},
	{errcode.MemberIDRequired, cohortv1.ErrorCode_ERROR_CODE_MEMBER_ID_REQUIRED},
	{errcode.GroupMaxSizeReached, cohortv1.ErrorCode_ERROR_CODE_GROUP_MAX_SIZE_REACHED},
	{errcode.InvalidSessionTimeout, cohortv1.ErrorCode_ERROR_CODE_INVALID_SESSION_TIMEOUT},
	{errcode.NotLeader, cohortv1.ErrorCode_ERROR_CODE_NOT_LEADER},
	{errcode.StaleCommand, cohortv1.ErrorCode_ERROR_CODE_STALE_COMMAND},
	{errcode.UnknownServer, cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_SERVER},
	{errcode.ServerLagging, cohortv1.ErrorCode_ERROR_CODE_SERVER_LAGGING},
	{errcode.QuorumAtRisk, cohortv1.ErrorCode_ERROR_CODE_QUORUM_AT_RISK},
	{errcode.LastVoter, cohortv1.ErrorCode_ERROR_CODE_LAST_VOTER},
	{errcode.ConfigurationConflict, cohortv1.ErrorCode_ERROR_CODE_CONFIGURATION_CONFLICT},
	{errcode.AutopilotManaged, cohortv1.ErrorCode_ERROR_CODE_AUTOPILOT_MANAGED},
	{errcode.BudgetExceeded, cohortv1.ErrorCode_ERROR_CODE_BUDGET_EXCEEDED},
	{errcode.GroupSubscribedToTopic, cohortv1.ErrorCode_ERROR_CODE_GROUP_SUBSCRIBED_TO_TOPIC},
	{errcode.FencedMemberEpoch, cohortv1.ErrorCode_ERROR_CODE_FENCED_MEMBER_EPOCH},
	{errcode.UnsupportedAssignor, cohortv1.ErrorCode_ERROR_CODE_UNSUPPORTED_ASSIGNOR},
	{errcode.StaleMemberEpoch, cohortv1.ErrorCode_ERROR_CODE_STALE_MEMBER_EPOCH},
	{errcode.UnreleasedInstanceID, cohortv1.ErrorCode_ERROR_CODE_UNRELEASED_INSTANCE_ID},
	{errcode.InvalidRegularExpression, cohortv1.ErrorCode_ERROR_CODE_INVALID_REGULAR_EXPRESSION},
}

// ToEnum returns the API enum value of c; false for Unknown and numbers
// that are no code.
func ToEnum(c errcode.Code) (cohortv1.ErrorCode, bool) {
	for _, r := range table {
		if r.code == c {
			return r.enum, true
		}
	}
	return cohortv1.ErrorCode_ERROR_CODE_NONE, false
}

// FromEnum returns the protocol code of an API enum value; errcode.Unknown
// and false for a value this build does not know (a newer server's).
func FromEnum(e cohortv1.ErrorCode) (errcode.Code, bool) {
	for _, r := range table {
		if r.enum == e {
			return r.code, true
		}
	}
	return errcode.Unknown, false
}
