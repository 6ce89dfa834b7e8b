package raftnode

import (
	"context"
	"errors"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClusterService serves the node-to-node part of cohort.v1.ClusterService
// (NodeInfo, RegisterNode) from a Node. The admin operations of the same
// service are served by the rpc package once it exists; it can embed this.
type ClusterService struct {
	cohortv1.UnimplementedClusterServiceServer
	n *Node
}

// NewClusterService returns the service for n.
func NewClusterService(n *Node) *ClusterService { return &ClusterService{n: n} }

// NodeInfo describes this node.
func (s *ClusterService) NodeInfo(context.Context, *cohortv1.NodeInfoRequest) (*cohortv1.NodeInfoResponse, error) {
	n := s.n
	leaderID, leaderAddr := n.Leader()
	return &cohortv1.NodeInfoResponse{
		NodeId:            n.id,
		RaftAddress:       n.cfg.RaftAdvertise,
		GrpcAddress:       n.cfg.GRPCAdvertise,
		HasState:          n.hadState || n.hasConfiguration(),
		State:             raftStateProto(n.raft.State()),
		Term:              n.raft.CurrentTerm(),
		LeaderId:          leaderID,
		LeaderRaftAddress: leaderAddr,
		LeaderGrpcAddress: n.LeaderGRPCAddress(),
		LastIndex:         n.raft.LastIndex(),
		CommitIndex:       n.raft.CommitIndex(),
		AppliedIndex:      n.raft.AppliedIndex(),
		BootstrapExpect:   int32(n.cfg.BootstrapExpect),
	}, nil
}

// RegisterNode records a node's addresses in the replicated registry. Only
// the leader accepts it; others answer FAILED_PRECONDITION naming the leader.
func (s *ClusterService) RegisterNode(ctx context.Context, req *cohortv1.RegisterNodeRequest) (*cohortv1.RegisterNodeResponse, error) {
	switch {
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	case req.GetGrpcAddress() == "":
		return nil, status.Error(codes.InvalidArgument, "grpc_address is required")
	case req.GetRaftAddress() == "":
		return nil, status.Error(codes.InvalidArgument, "raft_address is required")
	}
	res, err := s.n.Apply(ctx, &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
		NodeId: req.GetNodeId(), GrpcAddress: req.GetGrpcAddress(), RaftAddress: req.GetRaftAddress(),
	}}})
	switch {
	case errors.Is(err, ErrNotLeader):
		id, _ := s.n.Leader()
		return nil, status.Errorf(codes.FailedPrecondition, "NOT_LEADER: node %s is not the leader; leader is %q at %q", s.n.id, id, s.n.LeaderGRPCAddress())
	case errors.Is(err, ErrShutdown):
		return nil, status.Error(codes.Unavailable, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	case res.Err != nil:
		return nil, status.Errorf(codes.InvalidArgument, "register node %q: %v", req.GetNodeId(), res.Err)
	}
	return &cohortv1.RegisterNodeResponse{Index: res.Index}, nil
}

func raftStateProto(s raft.RaftState) cohortv1.RaftState {
	switch s {
	case raft.Follower:
		return cohortv1.RaftState_RAFT_STATE_FOLLOWER
	case raft.Candidate:
		return cohortv1.RaftState_RAFT_STATE_CANDIDATE
	case raft.Leader:
		return cohortv1.RaftState_RAFT_STATE_LEADER
	case raft.Shutdown:
		return cohortv1.RaftState_RAFT_STATE_SHUTDOWN
	default:
		return cohortv1.RaftState_RAFT_STATE_UNSPECIFIED
	}
}
