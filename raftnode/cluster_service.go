package raftnode

import (
	"context"
	"crypto/subtle"
	"errors"
	"strconv"
	"strings"
	"time"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	// AuthorizationHeader carries the admin token as "Bearer <token>".
	AuthorizationHeader = "authorization"
	// adminHopsKey counts how often an admin call was forwarded, so that a
	// confused cluster cannot bounce it forever.
	adminHopsKey = "cohort-admin-hops"
	maxAdminHops = 3
	// leaderHeader names the leader's gRPC address on admin responses, as
	// the group API does.
	leaderHeader = "cohort-leader"
)

// ClusterService serves cohort.v1.ClusterService from a Node: the
// node-to-node calls (NodeInfo, RegisterNode), Health, and the admin
// operations. NodeInfo and Health answer locally; every other call is
// served by the leader, so a follower forwards it there (streams too).
// With an admin token configured, every call but NodeInfo and Health
// needs it.
type ClusterService struct {
	cohortv1.UnimplementedClusterServiceServer
	n *Node
}

// NewClusterService returns the service for n.
func NewClusterService(n *Node) *ClusterService { return &ClusterService{n: n} }

// authorize checks the admin token when one is configured.
func (s *ClusterService) authorize(ctx context.Context) error {
	want := s.n.cfg.AdminToken
	if want == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(AuthorizationHeader)
	if len(got) == 0 {
		return status.Error(codes.Unauthenticated, "this cluster requires an admin token: pass --admin-token (or COHORT_ADMIN_TOKEN)")
	}
	tok, ok := strings.CutPrefix(got[0], "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(want)) != 1 {
		return status.Error(codes.Unauthenticated, "admin token rejected")
	}
	return nil
}

// statusOf maps the node's errors to gRPC statuses.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		if st, _ := status.FromError(err); st.Code() != codes.Unknown {
			return err
		}
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrNotLeader):
		return status.Errorf(codes.Unavailable, "NOT_LEADER: %v", err)
	case errors.Is(err, ErrUnknownServer):
		code = codes.NotFound
	case errors.Is(err, ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, ErrLagging), errors.Is(err, ErrQuorumAtRisk), errors.Is(err, ErrLastVoter),
		errors.Is(err, ErrConflict), errors.Is(err, ErrAutopilotManaged):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrShutdown), errors.Is(err, ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

// clusterDialer is the part of GRPCPeerClient forwarding needs.
type clusterDialer interface {
	Cluster(addr string) (cohortv1.ClusterServiceClient, error)
}

// leaderClient returns a client for the leader and the outgoing context
// for a forwarded call, or an error when the call cannot be forwarded.
func (s *ClusterService) leaderClient(ctx context.Context) (cohortv1.ClusterServiceClient, context.Context, error) {
	in, _ := metadata.FromIncomingContext(ctx)
	hops := 0
	if h := in.Get(adminHopsKey); len(h) > 0 {
		hops, _ = strconv.Atoi(h[0])
	}
	if hops >= maxAdminHops {
		return nil, nil, status.Error(codes.Unavailable, "NOT_LEADER: the call was forwarded too often; leadership is moving, retry shortly")
	}
	addr := s.n.LeaderGRPCAddress()
	if addr == "" || addr == s.n.cfg.GRPCAdvertise {
		return nil, nil, status.Error(codes.Unavailable, "NOT_LEADER: no raft leader is known (election in progress or no quorum); retry shortly")
	}
	d, ok := s.n.peers.(clusterDialer)
	if !ok {
		return nil, nil, status.Error(codes.Unavailable, "NOT_LEADER: this node cannot forward admin calls")
	}
	cl, err := d.Cluster(addr)
	if err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "NOT_LEADER: %v", err)
	}
	out := metadata.Pairs(adminHopsKey, strconv.Itoa(hops+1))
	if a := in.Get(AuthorizationHeader); len(a) > 0 {
		out.Set(AuthorizationHeader, a[0])
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(leaderHeader, addr))
	return cl, metadata.NewOutgoingContext(ctx, out), nil
}

// forward sends a unary admin call to the leader.
func forward[Req, Resp any](ctx context.Context, s *ClusterService, req Req,
	call func(cohortv1.ClusterServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	cl, octx, err := s.leaderClient(ctx)
	if err != nil {
		var zero Resp
		return zero, err
	}
	return call(cl, octx, req)
}

// admin runs a unary admin call: authorize, then serve it here when this
// node leads, else forward it. When the node hands leadership over as
// part of the call (it was the target), the call goes to the new leader.
func admin[Req, Resp any](ctx context.Context, s *ClusterService, req Req,
	call func(cohortv1.ClusterServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	serve func() (Resp, error)) (Resp, error) {
	var zero Resp
	if err := s.authorize(ctx); err != nil {
		return zero, err
	}
	if !s.n.IsLeader() {
		return forward(ctx, s, req, call)
	}
	if addr := s.n.cfg.GRPCAdvertise; addr != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(leaderHeader, addr))
	}
	resp, err := serve()
	if errors.Is(err, ErrLeadershipMoved) {
		wctx, cancel := context.WithTimeout(ctx, leaderWait)
		defer cancel()
		for s.n.LeaderGRPCAddress() == "" || s.n.IsLeader() {
			select {
			case <-wctx.Done():
				return zero, status.Errorf(codes.Unavailable, "%v; no new leader appeared in %s: retry", err, leaderWait)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return forward(ctx, s, req, call)
	}
	return resp, statusOf(err)
}

// NodeInfo describes this node.
func (s *ClusterService) NodeInfo(context.Context, *cohortv1.NodeInfoRequest) (*cohortv1.NodeInfoResponse, error) {
	return s.n.nodeInfo(), nil
}

// Health answers from this node: healthy when raft runs and a leader is known.
func (s *ClusterService) Health(context.Context, *cohortv1.HealthRequest) (*cohortv1.HealthResponse, error) {
	n := s.n
	leaderID, _ := n.Leader()
	resp := &cohortv1.HealthResponse{
		Healthy: true, NodeId: n.id, State: raftStateProto(n.raft.State()),
		LeaderId: leaderID, LeaderGrpcAddress: n.LeaderGRPCAddress(), Term: n.raft.CurrentTerm(),
		CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.raft.AppliedIndex(),
	}
	switch {
	case n.raft.State() == raft.Shutdown:
		resp.Healthy, resp.Reason = false, "raft is shut down"
	case isClosed(n.removed):
		resp.Healthy, resp.Reason = false, "this node was removed from the cluster"
	case leaderID == "":
		resp.Healthy, resp.Reason = false, "no raft leader is known (election in progress, no quorum, or the node has not joined a cluster)"
	}
	return resp, nil
}

// RegisterNode records a node's addresses in the replicated registry. Only
// the leader accepts it; others answer FAILED_PRECONDITION naming the leader.
func (s *ClusterService) RegisterNode(ctx context.Context, req *cohortv1.RegisterNodeRequest) (*cohortv1.RegisterNodeResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
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
	if _, err := s.n.updateRaftAddress(ctx, req.GetNodeId(), req.GetRaftAddress()); err != nil {
		return nil, status.Errorf(codes.Unavailable, "register node %q: %v", req.GetNodeId(), err)
	}
	return &cohortv1.RegisterNodeResponse{Index: res.Index}, nil
}

// Status is the leader's view of the cluster.
func (s *ClusterService) Status(ctx context.Context, req *cohortv1.StatusRequest) (*cohortv1.StatusResponse, error) {
	return admin(ctx, s, req, cohortv1.ClusterServiceClient.Status, func() (*cohortv1.StatusResponse, error) {
		return s.n.ClusterStatus(ctx)
	})
}

func (s *ClusterService) AddNonvoter(ctx context.Context, req *cohortv1.AddNonvoterRequest) (*cohortv1.AddNonvoterResponse, error) {
	return admin(ctx, s, req, cohortv1.ClusterServiceClient.AddNonvoter, func() (*cohortv1.AddNonvoterResponse, error) {
		r, err := s.n.AddNonvoter(ctx, req.GetNodeId(), req.GetRaftAddress(), req.GetGrpcAddress())
		return &cohortv1.AddNonvoterResponse{Changed: r.Changed, Message: r.Message, AutopilotEnabled: s.n.cfg.Autopilot.Enabled}, err
	})
}

func (s *ClusterService) AddVoter(ctx context.Context, req *cohortv1.AddVoterRequest) (*cohortv1.AddVoterResponse, error) {
	return admin(ctx, s, req, cohortv1.ClusterServiceClient.AddVoter, func() (*cohortv1.AddVoterResponse, error) {
		r, err := s.n.AddVoter(ctx, req.GetNodeId(), req.GetRaftAddress(), req.GetGrpcAddress())
		return &cohortv1.AddVoterResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) Promote(ctx context.Context, req *cohortv1.PromoteRequest) (*cohortv1.PromoteResponse, error) {
	return admin(ctx, s, req, cohortv1.ClusterServiceClient.Promote, func() (*cohortv1.PromoteResponse, error) {
		r, err := s.n.Promote(ctx, req.GetNodeId())
		return &cohortv1.PromoteResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) Demote(ctx context.Context, req *cohortv1.DemoteRequest) (*cohortv1.DemoteResponse, error) {
	return admin(ctx, s, req, cohortv1.ClusterServiceClient.Demote, func() (*cohortv1.DemoteResponse, error) {
		r, err := s.n.Demote(ctx, req.GetNodeId(), req.GetForce())
		return &cohortv1.DemoteResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) RemoveServer(ctx context.Context, req *cohortv1.RemoveServerRequest) (*cohortv1.RemoveServerResponse, error) {
	return admin(ctx, s, req, cohortv1.ClusterServiceClient.RemoveServer, func() (*cohortv1.RemoveServerResponse, error) {
		r, err := s.n.RemoveServer(ctx, req.GetNodeId(), req.GetForce())
		return &cohortv1.RemoveServerResponse{Changed: r.Changed, Message: r.Message}, err
	})
}

func (s *ClusterService) TransferLeadership(ctx context.Context, req *cohortv1.TransferLeadershipRequest) (*cohortv1.TransferLeadershipResponse, error) {
	return admin(ctx, s, req, cohortv1.ClusterServiceClient.TransferLeadership, func() (*cohortv1.TransferLeadershipResponse, error) {
		r, leader, err := s.n.TransferLeadership(ctx, req.GetNodeId())
		return &cohortv1.TransferLeadershipResponse{Changed: r.Changed, Message: r.Message, LeaderId: leader}, err
	})
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
