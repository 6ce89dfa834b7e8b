package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/errcode"
)

// Header and metadata keys.
const (
	// LeaderHeader carries the leader's gRPC address on every response.
	LeaderHeader = "cohort-leader"
	// forwardedKey marks a request a follower forwarded, so that it is
	// never forwarded twice.
	forwardedKey = "cohort-forwarded"
	// clientHostKey carries the original client's address through a forward.
	clientHostKey = "cohort-client-host"
)

const (
	forwardPingInterval = 2 * time.Second
	forwardPingTimeout  = 2 * time.Second
)

// ServerKeepalive lets peers ping as often as the forwarder does; gRPC's
// default policy would answer such pings with GOAWAY.
func ServerKeepalive() grpc.ServerOption {
	return grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: forwardPingInterval / 2, PermitWithoutStream: true})
}

// Leadership is what forwarding needs to know about the Raft node.
type Leadership interface {
	IsLeader() bool
	LeaderGRPCAddress() string
}

// Forwarder sends requests that must be served by the leader there, and
// stamps every response with the leader's address.
type Forwarder struct {
	node     Leadership
	services []string // full service names whose methods are forwarded
	dialOpts []grpc.DialOption
	log      *slog.Logger

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewForwarder forwards the methods of the named services (e.g.
// "cohort.v1.GroupCoordinator").
func NewForwarder(node Leadership, services []string, log *slog.Logger, dialOpts ...grpc.DialOption) *Forwarder {
	if len(dialOpts) == 0 {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// Pings on the node-to-node connections: after a partition heals, a
	// connection whose peer vanished would otherwise hang forwarded calls
	// until TCP gives up (10–15 s seen by the chaos suite). Servers accept
	// pings this often (ServerKeepalive).
	dialOpts = append(dialOpts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: forwardPingInterval, Timeout: forwardPingTimeout, PermitWithoutStream: true,
	}))
	return &Forwarder{node: node, services: services, dialOpts: dialOpts, log: log, conns: map[string]*grpc.ClientConn{}}
}

// Close closes the connections to leaders.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, c := range f.conns {
		_ = c.Close()
		delete(f.conns, addr)
	}
}

func (f *Forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, f.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("dial leader %s: %w", addr, err)
	}
	f.conns[addr] = c
	return c, nil
}

func (f *Forwarder) forwards(fullMethod string) bool {
	for _, s := range f.services {
		if strings.HasPrefix(fullMethod, "/"+s+"/") {
			return true
		}
	}
	return false
}

// UnaryInterceptor serves a request here when this node leads (or the
// request accepts a stale read), and otherwise forwards it to the leader.
func (f *Forwarder) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !f.forwards(info.FullMethod) {
		return handler(ctx, req)
	}
	stale := coordinator.AllowsStaleRead(req)
	leader := f.node.LeaderGRPCAddress()
	if leader != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(LeaderHeader, leader))
	}
	if stale || f.node.IsLeader() {
		return handler(ctx, req)
	}
	in, _ := metadata.FromIncomingContext(ctx)
	if len(in.Get(forwardedKey)) > 0 {
		return nil, toStatus(errcode.Errorf(errcode.NotLeader, "a node forwarded this request here, but this node does not lead (leader now: %q)", leader))
	}
	if leader == "" {
		return nil, toStatus(errcode.Errorf(errcode.NotLeader, "no raft leader is known (election in progress or no quorum); retry shortly"))
	}
	out, err := newResponse(info.FullMethod)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	conn, err := f.conn(leader)
	if err != nil {
		return nil, toStatus(errcode.Errorf(errcode.NotLeader, "%v", err))
	}
	md := metadata.Pairs(forwardedKey, "1", clientHostKey, ClientHost(ctx))
	octx := metadata.NewOutgoingContext(ctx, md)
	if err := conn.Invoke(octx, info.FullMethod, req, out); err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && Reason(err) == "" {
			return nil, toStatus(errcode.Errorf(errcode.NotLeader, "forwarding to leader %s: %v", leader, st.Message()))
		}
		return nil, err
	}
	return out, nil
}

// ClientHost is the address of the client that sent the request, looking
// through a forward.
func ClientHost(ctx context.Context) string {
	if in, ok := metadata.FromIncomingContext(ctx); ok {
		if h := in.Get(clientHostKey); len(h) > 0 && len(in.Get(forwardedKey)) > 0 {
			return h[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// newResponse makes an empty response message for a full method name.
func newResponse(fullMethod string) (proto.Message, error) {
	parts := strings.Split(strings.TrimPrefix(fullMethod, "/"), "/")
	if len(parts) != 2 {
		return nil, fmt.Errorf("malformed method name %q", fullMethod)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(parts[0]))
	if err != nil {
		return nil, fmt.Errorf("service of %q: %w", fullMethod, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%q is not a service", parts[0])
	}
	md := sd.Methods().ByName(protoreflect.Name(parts[1]))
	if md == nil {
		return nil, fmt.Errorf("service %q has no method %q", parts[0], parts[1])
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, fmt.Errorf("response type of %q: %w", fullMethod, err)
	}
	return mt.New().Interface(), nil
}
