package rpc

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// AuthorizationHeader carries a bearer token as "Bearer <token>".
const AuthorizationHeader = "authorization"

// Waits of the admin calls that move leadership.
const (
	// leaderWait bounds the wait for a new leader after this node handed
	// leadership over as part of a call.
	leaderWait = 10 * time.Second
	// leaderPoll paces that wait.
	leaderPoll = 20 * time.Millisecond
)

// localClusterMethods are the ClusterService methods every node answers
// for itself; the Forwarder sends every other one to the leader.
var localClusterMethods = []string{
	cohortv1.ClusterService_NodeInfo_FullMethodName,
	cohortv1.ClusterService_Health_FullMethodName,
}

// ClusterService serves cohort.v1.ClusterService over a cluster.Cluster:
// the node-to-node calls (NodeInfo, RegisterNode), Health, the membership
// changes and snapshot streaming. The Forwarder brings every call but
// NodeInfo and Health to the leader; the Authorizer has checked the caller.
type ClusterService struct {
	cohortv1.UnimplementedClusterServiceServer
	cl  *cluster.Cluster
	fwd *Forwarder
}

// NewClusterService serves cl; fwd sends a call on to the new leader when
// serving it moved leadership away from this node.
func NewClusterService(cl *cluster.Cluster, fwd *Forwarder) *ClusterService {
	return &ClusterService{cl: cl, fwd: fwd}
}

// admin runs an admin call on the leader. When serving it handed
// leadership over (the call changes this node), the call goes on to the
// new leader, once.
func admin[Resp proto.Message](ctx context.Context, s *ClusterService, req proto.Message, serve func() (Resp, error)) (Resp, error) {
	var zero Resp
	resp, err := serve()
	if !errors.Is(err, cluster.ErrLeadershipMoved) {
		return resp, toStatus(err)
	}
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for s.cl.IsLeader() || s.cl.LeaderGRPCAddress() == "" {
		select {
		case <-wctx.Done():
			return zero, toStatus(errcode.Errorf(errcode.NotLeader, "%v; no new leader appeared in %s: retry", err, leaderWait))
		case <-time.After(leaderPoll):
		}
	}
	out, err := s.fwd.ForwardAgain(ctx, req)
	if err != nil {
		return zero, err
	}
	return out.(Resp), nil
}

// NodeInfo describes this node.
func (s *ClusterService) NodeInfo(context.Context, *cohortv1.NodeInfoRequest) (*cohortv1.NodeInfoResponse, error) {
	return nodeInfoProto(s.cl.LocalInfo()), nil
}

// Health answers from this node: healthy when raft runs and a leader is known.
func (s *ClusterService) Health(context.Context, *cohortv1.HealthRequest) (*cohortv1.HealthResponse, error) {
	h := s.cl.Health()
	return &cohortv1.HealthResponse{
		Healthy: h.Healthy, Reason: h.Reason, NodeId: h.NodeID, State: raftStateProto(h.State),
		LeaderId: h.LeaderID, LeaderGrpcAddress: h.LeaderGRPCAddress, Term: h.Term,
		CommitIndex: h.CommitIndex, AppliedIndex: h.AppliedIndex,
	}, nil
}

// RegisterNode records a node's addresses in the replicated registry.
func (s *ClusterService) RegisterNode(ctx context.Context, req *cohortv1.RegisterNodeRequest) (*cohortv1.RegisterNodeResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.RegisterNodeResponse, error) {
		idx, err := s.cl.Register(ctx, cluster.Registration{NodeID: req.GetNodeId(), GRPCAddress: req.GetGrpcAddress(), RaftAddress: req.GetRaftAddress(),
			MaxCommandVersion: req.GetMaxCommandVersion(), KafkaAddress: req.GetKafkaAddress()})
		return &cohortv1.RegisterNodeResponse{Index: idx}, err
	})
}

// Status is the leader's view of the cluster.
func (s *ClusterService) Status(ctx context.Context, req *cohortv1.StatusRequest) (*cohortv1.StatusResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.StatusResponse, error) {
		st, err := s.cl.Status(ctx)
		return statusProto(st), err
	})
}

func (s *ClusterService) AddNonvoter(ctx context.Context, req *cohortv1.AddNonvoterRequest) (*cohortv1.AddNonvoterResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.AddNonvoterResponse, error) {
		r, err := s.cl.AddNonvoter(ctx, req.GetNodeId(), req.GetRaftAddress(), req.GetGrpcAddress())
		return &cohortv1.AddNonvoterResponse{Changed: r.Changed, Message: r.Message, AutopilotEnabled: s.cl.AutopilotEnabled()}, err
	})
}

func (s *ClusterService) AddVoter(ctx context.Context, req *cohortv1.AddVoterRequest) (*cohortv1.AddVoterResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.AddVoterResponse, error) {
		r, err := s.cl.AddVoter(ctx, req.GetNodeId(), req.GetRaftAddress(), req.GetGrpcAddress())
		return &cohortv1.AddVoterResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) Promote(ctx context.Context, req *cohortv1.PromoteRequest) (*cohortv1.PromoteResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.PromoteResponse, error) {
		r, err := s.cl.Promote(ctx, req.GetNodeId())
		return &cohortv1.PromoteResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) Demote(ctx context.Context, req *cohortv1.DemoteRequest) (*cohortv1.DemoteResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.DemoteResponse, error) {
		r, err := s.cl.Demote(ctx, req.GetNodeId(), req.GetForce())
		return &cohortv1.DemoteResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) RemoveServer(ctx context.Context, req *cohortv1.RemoveServerRequest) (*cohortv1.RemoveServerResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.RemoveServerResponse, error) {
		r, err := s.cl.RemoveServer(ctx, req.GetNodeId(), req.GetForce())
		return &cohortv1.RemoveServerResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) TransferLeadership(ctx context.Context, req *cohortv1.TransferLeadershipRequest) (*cohortv1.TransferLeadershipResponse, error) {
	return admin(ctx, s, req, func() (*cohortv1.TransferLeadershipResponse, error) {
		r, leader, err := s.cl.TransferLeadership(ctx, req.GetNodeId())
		return &cohortv1.TransferLeadershipResponse{Changed: r.Changed, Message: r.Message, LeaderId: leader}, err
	})
}

// The wire forms of the cluster package's types, and back (PeerClient).

func nodeInfoProto(i cluster.NodeInfo) *cohortv1.NodeInfoResponse {
	return &cohortv1.NodeInfoResponse{
		NodeId: i.NodeID, RaftAddress: i.RaftAddress, GrpcAddress: i.GRPCAddress, HasState: i.HasState,
		State: raftStateProto(i.State), Term: i.Term,
		LeaderId: i.LeaderID, LeaderRaftAddress: i.LeaderRaftAddress, LeaderGrpcAddress: i.LeaderGRPCAddress,
		LastIndex: i.LastIndex, CommitIndex: i.CommitIndex, AppliedIndex: i.AppliedIndex,
		BootstrapExpect: int32(i.BootstrapExpect), LastContactMs: i.LastContactMs, AutopilotEnabled: i.AutopilotEnabled,
	}
}

func nodeInfoOf(r *cohortv1.NodeInfoResponse) cluster.NodeInfo {
	return cluster.NodeInfo{
		NodeID: r.GetNodeId(), RaftAddress: r.GetRaftAddress(), GRPCAddress: r.GetGrpcAddress(), HasState: r.GetHasState(),
		State: raftStateOf(r.GetState()), Term: r.GetTerm(),
		LeaderID: r.GetLeaderId(), LeaderRaftAddress: r.GetLeaderRaftAddress(), LeaderGRPCAddress: r.GetLeaderGrpcAddress(),
		LastIndex: r.GetLastIndex(), CommitIndex: r.GetCommitIndex(), AppliedIndex: r.GetAppliedIndex(),
		BootstrapExpect: int(r.GetBootstrapExpect()), LastContactMs: r.GetLastContactMs(), AutopilotEnabled: r.GetAutopilotEnabled(),
	}
}

func statusProto(st cluster.Status) *cohortv1.StatusResponse {
	a := st.Autopilot
	resp := &cohortv1.StatusResponse{
		LeaderId: st.LeaderID, LeaderRaftAddress: st.LeaderRaftAddress, LeaderGrpcAddress: st.LeaderGRPCAddress,
		Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, LastIndex: st.LastIndex,
		PromoteMaxLag: st.PromoteMaxLag,
		Autopilot: &cohortv1.AutopilotStatus{
			Enabled: a.Enabled, Healthy: a.Healthy, FailureTolerance: int32(a.FailureTolerance),
			CleanupDeadServers: a.CleanupDeadServers, DeadServerThresholdMs: a.DeadServerThreshold.Milliseconds(),
			ServerStabilizationTimeMs: a.ServerStabilizationTime.Milliseconds(), MinQuorum: uint32(a.MinQuorum),
			MaxTrailingLogs: a.MaxTrailingLogs,
		},
	}
	for _, s := range st.Servers {
		ss := &cohortv1.ServerStatus{
			NodeId: s.NodeID, RaftAddress: s.RaftAddress, GrpcAddress: s.GRPCAddress, Voter: s.Voter, Leader: s.Leader,
			LastContactMs: s.LastContactMs, LastIndex: s.LastIndex, Lag: s.Lag, Healthy: s.Healthy, Reason: s.Reason,
			AutopilotState: s.AutopilotState, StableSinceUnixMs: s.StableSinceUnixMs,
		}
		if s.StateKnown {
			ss.State = raftStateProto(s.State)
		}
		resp.Servers = append(resp.Servers, ss)
	}
	return resp
}

func statusOf(r *cohortv1.StatusResponse) cluster.Status {
	a := r.GetAutopilot()
	st := cluster.Status{
		LeaderID: r.GetLeaderId(), LeaderRaftAddress: r.GetLeaderRaftAddress(), LeaderGRPCAddress: r.GetLeaderGrpcAddress(),
		Term: r.GetTerm(), CommitIndex: r.GetCommitIndex(), AppliedIndex: r.GetAppliedIndex(), LastIndex: r.GetLastIndex(),
		PromoteMaxLag: r.GetPromoteMaxLag(),
		Autopilot: cluster.AutopilotStatus{
			Enabled: a.GetEnabled(), Healthy: a.GetHealthy(), FailureTolerance: int(a.GetFailureTolerance()),
			CleanupDeadServers: a.GetCleanupDeadServers(), DeadServerThreshold: time.Duration(a.GetDeadServerThresholdMs()) * time.Millisecond,
			ServerStabilizationTime: time.Duration(a.GetServerStabilizationTimeMs()) * time.Millisecond,
			MinQuorum:               uint(a.GetMinQuorum()), MaxTrailingLogs: a.GetMaxTrailingLogs(),
		},
	}
	for _, s := range r.GetServers() {
		st.Servers = append(st.Servers, cluster.ServerStatus{
			NodeID: s.GetNodeId(), RaftAddress: s.GetRaftAddress(), GRPCAddress: s.GetGrpcAddress(), Voter: s.GetVoter(), Leader: s.GetLeader(),
			State: raftStateOf(s.GetState()), StateKnown: s.GetState() != cohortv1.RaftState_RAFT_STATE_UNSPECIFIED,
			LastContactMs: s.GetLastContactMs(), LastIndex: s.GetLastIndex(), Lag: s.GetLag(), Healthy: s.GetHealthy(), Reason: s.GetReason(),
			AutopilotState: s.GetAutopilotState(), StableSinceUnixMs: s.GetStableSinceUnixMs(),
		})
	}
	return st
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

func raftStateOf(s cohortv1.RaftState) raft.RaftState {
	switch s {
	case cohortv1.RaftState_RAFT_STATE_CANDIDATE:
		return raft.Candidate
	case cohortv1.RaftState_RAFT_STATE_LEADER:
		return raft.Leader
	case cohortv1.RaftState_RAFT_STATE_SHUTDOWN:
		return raft.Shutdown
	default:
		return raft.Follower
	}
}
