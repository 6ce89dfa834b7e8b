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
//   - Hostile and Kafka, beside them, with verdicts of their own: requests
//     the limits and authorization must refuse, and kgo consumers through
//     the nodes' Kafka listeners.
//
// Every caller shows the credential of its role (Credentials): members and
// readers a client's, topic creation, the registers' standalone commits
// and the final describe of the members an admin's.
//
// What it must never do: call an outcome known when it is not. A timeout, a
// lost connection mid-call or a NOT_LEADER after proposing are "info": the
// operation may or may not have happened.
package workload

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/rpc"
)

// Topics the workloads create.
const (
	OffsetsTopic = "chaos-offsets"
	GroupsTopic  = "chaos-groups"
)

// Credentials of the workloads' callers. The zero value is plaintext
// without a credential (a cluster run with --tls=false).
type Credentials struct {
	// Client is a consumer's: group members, offset reads, the hostile
	// probes that a consumer may send.
	Client client.Credentials
	// Admin is an operator's: topic creation, commits outside a membership
	// (the registers' writes), DescribeGroups with member IDs.
	Admin client.Credentials
}

// call is what one gRPC call learns besides its error; pass options() to
// the call.
type call struct {
	peer            peer.Peer
	header, trailer metadata.MD
}

func (c *call) options() []grpc.CallOption {
	return []grpc.CallOption{grpc.Peer(&c.peer), grpc.Header(&c.header), grpc.Trailer(&c.trailer)}
}

// reachedNode reports whether the call got a transport stream to a node:
// grpc-go fills in the peer only then. Without one (connection refused, no
// connection yet, the deadline passed while connecting) the request never
// left this process.
func (c *call) reachedNode() bool { return c.peer.Addr != nil }

// leaderKnown reports whether the answering node named a leader: it sets
// the cohort-leader header on every group call when it knows one, before it
// serves or forwards the call (a trailers-only error answer carries it as a
// trailer).
func (c *call) leaderKnown() bool {
	for _, md := range []metadata.MD{c.header, c.trailer} {
		if v := md.Get(client.LeaderHeader); len(v) > 0 && v[0] != "" {
			return true
		}
	}
	return false
}

// classify turns a write's error into an outcome. A protocol refusal is a
// failure, except NOT_LEADER, the one code a node may answer after
// proposing. A request that certainly never reached a leader is a failure
// too: it never reached any node, or the node answering NOT_LEADER knew no
// leader, so it neither served nor forwarded it. Anything else (a deadline,
// NOT_LEADER from a node that knew a leader, a connection lost mid-call) is
// unknown.
func classify(err error, c *call) history.Outcome {
	if err == nil {
		return history.OK
	}
	if !c.reachedNode() {
		return history.Fail
	}
	switch client.ErrorCode(err) {
	case errcode.Unknown:
		return history.Info
	case errcode.NotLeader:
		if !c.leaderKnown() || rpc.NotForwarded(err) {
			return history.Fail
		}
		return history.Info
	}
	return history.Fail
}

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
