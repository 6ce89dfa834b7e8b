// Package rpc is Cohort's gRPC surface: the GroupCoordinator and Topics
// services over the leader's engine, the ClusterService over the cluster
// package (admin token, membership changes, snapshot streaming), the one
// forwarding path from followers to the leader (forward.go), protocol
// errors as gRPC statuses with google.rpc.ErrorInfo in one mapping
// (errors.go), the client other nodes are reached with (PeerClient), and
// per-method metrics. It holds no protocol or cluster logic of its own:
// that is the coordinator's, the FSM's and the cluster package's.
package rpc

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/coordinator"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// GroupServer implements cohort.v1.GroupCoordinator over the engine.
type GroupServer struct {
	cohortv1.UnimplementedGroupCoordinatorServer
	e     *coordinator.Engine
	authz *Authorizer
}

// TopicsServer implements cohort.v1.Topics over the engine.
type TopicsServer struct {
	cohortv1.UnimplementedTopicsServer
	e *coordinator.Engine
}

func (s *GroupServer) JoinGroup(ctx context.Context, r *cohortv1.JoinGroupRequest) (*cohortv1.JoinGroupResponse, error) {
	resp, err := s.e.JoinGroup(ctx, r, ClientHost(ctx))
	return resp, toStatus(err)
}

func (s *GroupServer) SyncGroup(ctx context.Context, r *cohortv1.SyncGroupRequest) (*cohortv1.SyncGroupResponse, error) {
	resp, err := s.e.SyncGroup(ctx, r)
	return resp, toStatus(err)
}

func (s *GroupServer) Heartbeat(ctx context.Context, r *cohortv1.HeartbeatRequest) (*cohortv1.HeartbeatResponse, error) {
	if err := s.e.Heartbeat(ctx, r); err != nil {
		return nil, toStatus(err)
	}
	return &cohortv1.HeartbeatResponse{}, nil
}

func (s *GroupServer) WatchGroup(r *cohortv1.WatchGroupRequest, stream grpc.ServerStreamingServer[cohortv1.WatchGroupResponse]) error {
	return toStatus(s.e.WatchGroup(stream.Context(), r, stream.Send))
}

func (s *GroupServer) LeaveGroup(ctx context.Context, r *cohortv1.LeaveGroupRequest) (*cohortv1.LeaveGroupResponse, error) {
	resp, err := s.e.LeaveGroup(ctx, r)
	return resp, toStatus(err)
}

func (s *GroupServer) OffsetCommit(ctx context.Context, r *cohortv1.OffsetCommitRequest) (*cohortv1.OffsetCommitResponse, error) {
	resp, err := s.e.OffsetCommit(ctx, r)
	return resp, toStatus(err)
}

func (s *GroupServer) OffsetFetch(ctx context.Context, r *cohortv1.OffsetFetchRequest) (*cohortv1.OffsetFetchResponse, error) {
	resp, err := s.e.OffsetFetch(ctx, r)
	return resp, toStatus(err)
}

func (s *GroupServer) DescribeGroups(ctx context.Context, r *cohortv1.DescribeGroupsRequest) (*cohortv1.DescribeGroupsResponse, error) {
	resp, err := s.e.DescribeGroups(ctx, r)
	if err == nil && !s.authz.RevealsMemberIDs(ctx) {
		hideMemberIDs(resp)
	}
	return resp, toStatus(err)
}

func (s *GroupServer) ListGroups(ctx context.Context, r *cohortv1.ListGroupsRequest) (*cohortv1.ListGroupsResponse, error) {
	resp, err := s.e.ListGroups(ctx, r)
	return resp, toStatus(err)
}

func (s *GroupServer) DeleteGroups(ctx context.Context, r *cohortv1.DeleteGroupsRequest) (*cohortv1.DeleteGroupsResponse, error) {
	resp, err := s.e.DeleteGroups(ctx, r)
	return resp, toStatus(err)
}

func (s *GroupServer) DeleteOffsets(ctx context.Context, r *cohortv1.DeleteOffsetsRequest) (*cohortv1.DeleteOffsetsResponse, error) {
	resp, err := s.e.DeleteOffsets(ctx, r)
	return resp, toStatus(err)
}

func (s *TopicsServer) CreateTopic(ctx context.Context, r *cohortv1.CreateTopicRequest) (*cohortv1.CreateTopicResponse, error) {
	if err := s.e.CreateTopic(ctx, r.GetName(), r.GetPartitions()); err != nil {
		return nil, toStatus(err)
	}
	return &cohortv1.CreateTopicResponse{}, nil
}

func (s *TopicsServer) ListTopics(ctx context.Context, r *cohortv1.ListTopicsRequest) (*cohortv1.ListTopicsResponse, error) {
	resp, err := s.e.ListTopics(ctx, r)
	return resp, toStatus(err)
}

func (s *TopicsServer) DeleteTopic(ctx context.Context, r *cohortv1.DeleteTopicRequest) (*cohortv1.DeleteTopicResponse, error) {
	if err := s.e.DeleteTopic(ctx, r.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &cohortv1.DeleteTopicResponse{}, nil
}

func (s *TopicsServer) AddPartitions(ctx context.Context, r *cohortv1.AddPartitionsRequest) (*cohortv1.AddPartitionsResponse, error) {
	if err := s.e.AddPartitions(ctx, r.GetName(), r.GetPartitions()); err != nil {
		return nil, toStatus(err)
	}
	return &cohortv1.AddPartitionsResponse{}, nil
}

// HealthServices are the names the gRPC health service answers for: the
// node as a whole ("") and each API service.
var HealthServices = []string{"", cohortv1.ClusterService_ServiceDesc.ServiceName, cohortv1.GroupCoordinator_ServiceDesc.ServiceName, cohortv1.Topics_ServiceDesc.ServiceName}

// Services are the services whose calls followers forward to the leader
// (except localClusterMethods).
var Services = []string{
	cohortv1.GroupCoordinator_ServiceDesc.ServiceName,
	cohortv1.Topics_ServiceDesc.ServiceName,
	cohortv1.ClusterService_ServiceDesc.ServiceName,
}

// Server bundles what cohortd needs to serve the gRPC API.
type Server struct {
	Forwarder *Forwarder
	Authz     *Authorizer
	security  Security
	Metrics   *grpcprom.ServerMetrics
	// Health is the standard gRPC health service: SERVING for the node and
	// each Cohort service until Shutdown.
	Health  *health.Server
	engine  *coordinator.Engine
	cluster *ClusterService
}

// NewServer prepares the gRPC API of one node: the group API over the
// engine and the ClusterService over cl (which also tells who leads),
// authenticated and authorized by sec; followers reach the leader with
// sec's credentials.
func NewServer(e *coordinator.Engine, cl *cluster.Cluster, sec Security, log *slog.Logger) *Server {
	fwd := NewForwarder(cl, Services, localClusterMethods, log, sec.DialOptions()...)
	fwd.vouches = sec.actsAsNode()
	fwd.dropAuthorization = fwd.vouches && !sec.Permissive
	fwd.permissive = sec.Permissive
	return &Server{
		Forwarder: fwd,
		Authz:     NewAuthorizer(sec),
		security:  sec,
		Metrics: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.0005, 2, 18)),
		)),
		Health:  health.NewServer(),
		engine:  e,
		cluster: NewClusterService(cl, fwd),
	}
}

// ServerOptions are the options to create the grpc.Server with: the
// limits, TLS when configured, the tap that refuses a call without a
// credential before its message is read (Authorizer.Tap; counted in
// cohort_grpc_calls_refused_unauthenticated_total, as the interceptors
// never see it), and the interceptors: metrics first (so they see refused
// and forwarded calls too), authentication and
// authorization (a follower refuses before it forwards), the UTF-8 check
// of every request (before a follower forwards it), then forwarding.
func (s *Server) ServerOptions(limits Limits) []grpc.ServerOption {
	opts := append(limits.ServerOptions(), s.security.ServerOptions()...)
	if s.security.Enforced() {
		// Only where it can refuse: an open node's calls need no credential.
		opts = append(opts, grpc.InTapHandle(s.Authz.Tap))
	}
	return append(opts,
		grpc.ChainUnaryInterceptor(s.Metrics.UnaryServerInterceptor(), s.Authz.UnaryInterceptor, UTF8UnaryInterceptor, s.Forwarder.UnaryInterceptor),
		grpc.ChainStreamInterceptor(s.Metrics.StreamServerInterceptor(), s.Authz.StreamInterceptor, UTF8StreamInterceptor, s.Forwarder.StreamInterceptor),
	)
}

// Register adds every service of a node to gs: GroupCoordinator, Topics,
// ClusterService, gRPC health and reflection; and initialises per-method
// metrics.
func (s *Server) Register(gs *grpc.Server) {
	cohortv1.RegisterGroupCoordinatorServer(gs, &GroupServer{e: s.engine, authz: s.Authz})
	cohortv1.RegisterTopicsServer(gs, &TopicsServer{e: s.engine})
	cohortv1.RegisterClusterServiceServer(gs, s.cluster)
	healthpb.RegisterHealthServer(gs, s.Health)
	reflection.Register(gs)
	for _, svc := range HealthServices {
		s.Health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	s.Metrics.InitializeMetrics(gs)
}

// Close releases the connections used for forwarding.
func (s *Server) Close() { s.Forwarder.Close() }
