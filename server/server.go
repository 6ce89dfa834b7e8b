// Package server assembles one Cohort node: the Raft node with its FSM, the
// cluster operations around it, the leader's group engine following
// leadership, and the gRPC server with the group, topics, cluster and
// health services. cmd/cohortd runs it; the
// in-process cluster tests start three of them on loopback. It owns the
// order of start and shutdown, nothing of the protocol.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/kafka"
	"github.com/cohortlabs/cohort/raftnode"
	"github.com/cohortlabs/cohort/rpc"
)

// Config configures a node: start each part from its DefaultConfig.
// Cluster.GRPCAdvertise empty means the listener's address; the loggers of
// the parts default to Logger.
type Config struct {
	Raft        raftnode.Config
	Cluster     cluster.Config
	Coordinator coordinator.Config
	// Security is how the node authenticates its callers and itself to
	// other nodes (TLS, tokens); the zero value is the open, plaintext mode
	// of a development cluster on loopback. Self defaults to
	// node/<Raft.NodeID>. The Raft transport's TLS is Raft.TLS.
	Security rpc.Security
	// GRPC are the gRPC server's limits (message sizes, streams,
	// keepalive): start from rpc.DefaultLimits.
	GRPC rpc.Limits
	// GRPCListener is where the gRPC API is served; the node closes it.
	GRPCListener net.Listener
	// KafkaListener, when set, is where the Kafka protocol is served
	// (package kafka); the node closes it. Cluster.KafkaAdvertise empty
	// means its address.
	KafkaListener net.Listener
	// Kafka tunes the Kafka listener; the engine, FSM, cluster, security
	// and logger are the node's.
	Kafka kafka.Config
	// MaxCommandRules is the newest command rules this node applies and
	// states in the node registry; 0 is fsm.CommandVersion. Lower, it
	// stands in for an older cohortd in tests of rolling upgrades.
	MaxCommandRules uint32
	Logger          *slog.Logger
}

// Server is one running node.
type Server struct {
	Node    *raftnode.Node
	Cluster *cluster.Cluster
	FSM     *fsm.FSM
	Engine  *coordinator.Engine
	API     *rpc.Server
	GRPC    *grpc.Server
	Health  *health.Server
	// Kafka is the Kafka listener; nil without Config.KafkaListener.
	Kafka *kafka.Server

	peers    *rpc.PeerClient
	log      *slog.Logger
	lis      *rpc.ConnLimiter
	cancel   context.CancelFunc
	done     sync.WaitGroup
	serveErr chan error
	stopOnce sync.Once
	stopErr  error
}

// Start opens the node's Raft state, starts the engine and serves gRPC.
func Start(cfg Config) (*Server, error) {
	if cfg.GRPCListener == nil {
		return nil, errors.New("server: GRPCListener is required")
	}
	if err := cfg.GRPC.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	// A page of a paged read must fit in an answer with room for its last
	// item (a page ends after the item that reaches the bound).
	if pb := cfg.Coordinator.Pages.MaxBytes; pb > cfg.GRPC.MaxSendBytes/2 {
		return nil, fmt.Errorf("server: max page bytes %d: must be at most half the gRPC max send bytes %d", pb, cfg.GRPC.MaxSendBytes)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Cluster.GRPCAdvertise == "" {
		cfg.Cluster.GRPCAdvertise = cfg.GRPCListener.Addr().String()
	}
	if cfg.KafkaListener != nil && cfg.Cluster.KafkaAdvertise == "" {
		cfg.Cluster.KafkaAdvertise = cfg.KafkaListener.Addr().String()
	}
	if cfg.Raft.Logger == nil {
		cfg.Raft.Logger = log
	}
	if cfg.Cluster.Logger == nil {
		cfg.Cluster.Logger = log
	}
	if cfg.Coordinator.Logger == nil {
		cfg.Coordinator.Logger = log
	}
	f := fsm.New()
	if cfg.MaxCommandRules != 0 {
		if err := f.LimitRules(cfg.MaxCommandRules); err != nil {
			return nil, err
		}
	}
	node, err := raftnode.New(cfg.Raft, f)
	if err != nil {
		return nil, err
	}
	if cfg.Security.Self.Anonymous() {
		cfg.Security.Self = auth.Principal{Role: auth.RoleNode, Name: node.ID()}
	}
	if t := cfg.Security.TLS; t != nil && t.Principal() != cfg.Security.Self {
		_ = node.Shutdown(context.Background())
		return nil, fmt.Errorf("server: the TLS certificate names %s, but this node is %s: issue it for URI SAN %s", t.Principal(), cfg.Security.Self, cfg.Security.Self.URI())
	}
	peers := rpc.NewPeerClient(cfg.Security)
	cl, err := cluster.New(cfg.Cluster, node, peers)
	if err != nil {
		_ = peers.Close()
		_ = node.Shutdown(context.Background())
		return nil, err
	}
	engine, err := coordinator.New(cfg.Coordinator, engineRaft{node}, f)
	if err != nil {
		cl.Close()
		_ = peers.Close()
		_ = node.Shutdown(context.Background())
		return nil, err
	}
	var ks *kafka.Server
	if cfg.KafkaListener != nil {
		kc := cfg.Kafka
		kc.Engine, kc.FSM, kc.Cluster, kc.Security, kc.Logger = engine, f, cl, cfg.Security, log
		if ks, err = kafka.New(kc); err != nil {
			cl.Close()
			_ = peers.Close()
			_ = node.Shutdown(context.Background())
			return nil, err
		}
	}
	api := rpc.NewServer(engine, cl, cfg.Security, log)
	gs := grpc.NewServer(api.ServerOptions(cfg.GRPC)...)
	api.Register(gs)

	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		Node: node, Cluster: cl, FSM: f, Engine: engine, API: api, GRPC: gs, Health: api.Health, Kafka: ks,
		peers: peers, log: log, lis: rpc.LimitConnections(cfg.GRPCListener, cfg.GRPC, log), cancel: cancel, serveErr: make(chan error, 1),
	}
	sub := node.SubscribeLeadership()
	leading := make(chan bool)
	s.done.Add(4)
	go func() {
		defer s.done.Done()
		forwardLeadership(ctx, sub, leading)
	}()
	go func() {
		defer s.done.Done()
		s.followReadiness(ctx)
	}()
	go func() {
		defer s.done.Done()
		defer sub.Close()
		engine.Run(ctx, leading)
	}()
	go func() {
		defer s.done.Done()
		if err := gs.Serve(s.lis); err != nil {
			s.serveErr <- fmt.Errorf("gRPC server on %s: %w", cfg.GRPCListener.Addr(), err)
		}
	}()
	if ks != nil {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			if err := ks.Serve(cfg.KafkaListener); err != nil {
				select {
				case s.serveErr <- err:
				default:
				}
			}
		}()
	}
	return s, nil
}

// readinessPoll is how often the gRPC health service is brought in line
// with the node's readiness.
const readinessPoll = time.Second

// followReadiness makes the standard gRPC health service (grpc.health.v1,
// what gRPC load balancers and probes ask) say what /readyz says: SERVING
// only while the node is ready (raftnode.Node.Ready: a leader known, no
// failing log or snapshot writes, not lagging).
func (s *Server) followReadiness(ctx context.Context) {
	t := time.NewTicker(readinessPoll)
	defer t.Stop()
	was := true
	for {
		ok, reason := s.Node.Ready()
		if ok != was {
			status := healthpb.HealthCheckResponse_NOT_SERVING
			if ok {
				status = healthpb.HealthCheckResponse_SERVING
			}
			for _, svc := range rpc.HealthServices {
				s.Health.SetServingStatus(svc, status)
			}
			s.log.Info("gRPC health follows readiness", "serving", ok, "reason", reason)
			was = ok
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Addr is the gRPC address the node serves on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Err reports a failure of the gRPC server after Start.
func (s *Server) Err() <-chan error { return s.serveErr }

// Collectors are the node's Prometheus metrics.
func (s *Server) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{s.Node.Collector(), s.API.Metrics, newGroupStateCollector(s.FSM)}
	cs = append(cs, s.API.Authz.Collector())
	cs = append(cs, s.lis.Collectors()...)
	if s.Kafka != nil {
		cs = append(cs, s.Kafka.Collectors()...)
	}
	return append(cs, s.Engine.Collectors()...)
}

// Shutdown stops the node: health turns NOT_SERVING, leadership is handed
// over (the engine answers parked calls NOT_LEADER as it steps down), Raft
// stops, then in-flight RPCs drain until ctx ends. Idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.Health.Shutdown()
		s.Cluster.Close()
		err := s.Node.Shutdown(ctx)
		s.cancel()
		s.closeKafka()
		stopGRPC(ctx, s.GRPC)
		s.done.Wait()
		s.API.Close()
		_ = s.peers.Close()
		s.stopErr = err
	})
	return s.stopErr
}

// Kill stops the node abruptly, as a crash would (no leadership transfer).
// Its data dir is left as a crash would leave it, for a restart.
func (s *Server) Kill() {
	s.stopOnce.Do(func() {
		s.GRPC.Stop()
		s.closeKafka()
		s.Cluster.Close()
		_ = s.Node.Kill()
		s.cancel()
		s.done.Wait()
		s.API.Close()
		_ = s.peers.Close()
	})
}

func (s *Server) closeKafka() {
	if s.Kafka != nil {
		_ = s.Kafka.Close()
	}
}

// engineRaft is the Raft node as the engine sees it: raftnode's Apply
// errors become what they mean for the command (coordinator.ErrNotProposed,
// coordinator.ErrOutcomeUnknown).
type engineRaft struct{ *raftnode.Node }

func (r engineRaft) Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	res, err := r.Node.Apply(ctx, cmd)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, raftnode.ErrNotLeader):
		return nil, fmt.Errorf("%w: %w", coordinator.ErrNotProposed, err)
	case errors.Is(err, raftnode.ErrLeadershipLost), errors.Is(err, raftnode.ErrShutdown):
		return nil, fmt.Errorf("%w: %w", coordinator.ErrOutcomeUnknown, err)
	}
	return nil, err
}

// forwardLeadership passes the node's leadership transitions to the
// engine, in order, until the subscription or ctx ends; then it closes
// leading.
func forwardLeadership(ctx context.Context, sub *raftnode.LeadershipSubscription, leading chan<- bool) {
	defer close(leading)
	for ev := range sub.C() {
		select {
		case leading <- ev.IsLeader:
		case <-ctx.Done():
			return
		}
	}
}

// stopGRPC drains in-flight RPCs until ctx ends, then cuts them off.
func stopGRPC(ctx context.Context, s *grpc.Server) {
	done := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.Stop()
		<-done
	}
}
