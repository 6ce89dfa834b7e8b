// Package workload drives a Cohort cluster through its real gRPC API and the
// Go client library while faults happen, recording every operation (its
// invocation, completion and outcome) in the run's history:
//
//   - Offsets: registers, one per (group, topic, partition), written by
//     standalone commits and read by OffsetFetch, each client bound to one
//     node as in Jepsen.
//   - Groups: member clients of several groups with churn (joins, graceful
//     leaves, crashes without leaving, static members restarting), every
//     JoinGroup, SyncGroup, heartbeat and commit recorded.
//
// What it must never do: call an outcome known when it is not. A timeout, a
// lost connection mid-call or a NOT_LEADER after proposing are "info": the
// operation may or may not have happened.
package workload

import (
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/client"
)

// Topics the workloads create.
const (
	OffsetsTopic = "chaos-offsets"
	GroupsTopic  = "chaos-groups"
)

// refusals are protocol answers that say the request did not happen.
var refusals = []string{
	"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE_ID",
	"MEMBER_ID_REQUIRED", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_SESSION_TIMEOUT", "GROUP_MAX_SIZE_REACHED",
	"INVALID_ASSIGNMENT", "NOT_OWNER", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_ARGUMENT", "GROUP_ID_NOT_FOUND",
	"NON_EMPTY_GROUP", "COORDINATOR_NOT_AVAILABLE",
}

// classify turns a write's error into an outcome: a protocol refusal is a
// failure; so is a request that certainly never reached a leader (the node
// knew no leader, or could not be connected to at all). Anything else —
// deadline, NOT_LEADER after proposing, a connection lost mid-call — is
// unknown.
func classify(err error) history.Outcome {
	if err == nil {
		return history.OK
	}
	r := reason(err)
	for _, x := range refusals {
		if r == x {
			return history.Fail
		}
	}
	msg := err.Error()
	if r == "NOT_LEADER" && (strings.Contains(msg, "no raft leader is known") || strings.Contains(msg, "this node is not the raft leader")) {
		return history.Fail
	}
	if st, ok := status.FromError(errors.Unwrap(err)); ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection refused") {
		return history.Fail
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection refused") {
		return history.Fail
	}
	return history.Info
}

// reason is the protocol error name of a client library error or of a raw
// gRPC status with a google.rpc.ErrorInfo.
func reason(err error) string { return client.Reason(err) }

func errString(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
