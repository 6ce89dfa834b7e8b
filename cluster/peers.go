package cluster

import (
	"context"

	"github.com/hashicorp/raft"
)

// Peers reaches other nodes' cluster operations by their gRPC address. The
// rpc package implements it over gRPC (rpc.PeerClient); calls other than
// NodeInfo may be forwarded to the leader by the node that receives them.
// Refusals come back as errcode errors (UNKNOWN_SERVER and so on), so that
// callers can tell them from transport failures.
type Peers interface {
	// NodeInfo asks the node at addr to describe itself.
	NodeInfo(ctx context.Context, addr string) (NodeInfo, error)
	// RegisterNode asks the leader (through addr) to record reg in the node
	// registry and to follow a changed Raft address.
	RegisterNode(ctx context.Context, addr string, reg Registration) error
	// AddNonvoter asks the leader (through addr) to add reg as a non-voter.
	AddNonvoter(ctx context.Context, addr string, reg Registration) (AddAnswer, error)
	// Promote asks the leader (through addr) to promote a non-voter.
	Promote(ctx context.Context, addr, id string) (message string, err error)
	// Status asks the leader (through addr) for the cluster status.
	Status(ctx context.Context, addr string) (Status, error)
}

// NodeInfo is what a node says of itself.
type NodeInfo struct {
	NodeID      string
	RaftAddress string
	GRPCAddress string
	// HasState: the node belongs to a cluster (it has Raft state or a
	// configuration).
	HasState          bool
	State             raft.RaftState
	Term              uint64
	LeaderID          string
	LeaderRaftAddress string
	LeaderGRPCAddress string
	LastIndex         uint64
	CommitIndex       uint64
	AppliedIndex      uint64
	// BootstrapExpect is the node's --bootstrap-expect (0 when unset).
	BootstrapExpect int
	// LastContactMs is how long ago it heard from the leader: 0 on the
	// leader, -1 if never.
	LastContactMs    int64
	AutopilotEnabled bool
}

// Registration is a node registry entry: a server ID with its addresses.
type Registration struct {
	NodeID      string
	GRPCAddress string
	RaftAddress string
	// MaxCommandVersion is the newest command rules the node applies (0:
	// not stated, the registry keeps what it has).
	MaxCommandVersion uint32
	// KafkaAddress is the node's Kafka listener address as clients reach
	// it; empty: no Kafka listener. The registry records it under command
	// rules 5 and later only.
	KafkaAddress string
}

// AddAnswer is the leader's answer to AddNonvoter.
type AddAnswer struct {
	Changed bool
	Message string
	// AutopilotEnabled: the leader's autopilot promotes the new non-voter.
	AutopilotEnabled bool
}

// ChangeResult says what a membership operation did.
type ChangeResult struct {
	// Changed is false when the cluster already was as asked.
	Changed bool
	// Message says what happened, for the operator.
	Message string
}
