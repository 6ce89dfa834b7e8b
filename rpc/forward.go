package rpc

import (
	"context"
	"errors"
	"fmt"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"io"
	"log/slog"
	"net"
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

	"github.com/cohortlabs/cohort/auth"
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

// Leadership is what forwarding needs to know about the Raft node.
type Leadership interface {
	IsLeader() bool
	LeaderGRPCAddress() string
	// Fault is why this node is unfit to serve (raftnode.Node.Fault), or
	// nil: a faulty node serves no stale read itself.
	Fault() error
}

// Forwarder brings every call that the leader must serve to the leader:
// the group API, topics, and cluster administration (snapshot streams
// included). It is the one forwarding path of the node: a follower relays
// the call to the leader's gRPC address from the node registry, marked as
// forwarded (so that it is never forwarded twice) and with the caller's
// address and authorization header; the leader's answer, status and
// ErrorInfo included, goes back unchanged. Every response is stamped with
// the leader's address (LeaderHeader).
type Forwarder struct {
	node     Leadership
	services []string        // full service names whose methods are forwarded
	local    map[string]bool // full method names every node serves itself
	dialOpts []grpc.DialOption
	log      *slog.Logger
	// vouches: this node authenticates to the leader as a node, so it
	// names the caller it authenticated (principalKey) instead of passing
	// the caller's authorization header on.
	vouches bool
	// dropAuthorization: the caller's authorization header stays here (a
	// node that vouches, unless in permissive mode, where the leader may
	// not have moved to TLS yet).
	dropAuthorization bool
	// permissive: this node serves plaintext callers as before
	// (Security.Permissive) and says so of those it forwards.
	permissive bool

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewForwarder forwards the methods of the named services (e.g.
// "cohort.v1.GroupCoordinator") except the local ones (full method names,
// e.g. "/cohort.v1.ClusterService/NodeInfo").
func NewForwarder(node Leadership, services, local []string, log *slog.Logger, dialOpts ...grpc.DialOption) *Forwarder {
	if len(dialOpts) == 0 {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// Pings on the node-to-node connections: after a partition heals, a
	// connection whose peer vanished would otherwise hang forwarded calls
	// until TCP gives up (10–15 s seen by the chaos suite). Servers accept
	// pings this often (Limits.KeepaliveMinTime). The leader's answers
	// are relayed whole, so they are received up to what a node may send.
	dialOpts = append(dialOpts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: forwardPingInterval, Timeout: forwardPingTimeout, PermitWithoutStream: true,
	}))
	dialOpts = append(dialOpts, clientOptions()...)
	f := &Forwarder{node: node, services: services, local: map[string]bool{}, dialOpts: dialOpts, log: log, conns: map[string]*grpc.ClientConn{}}
	for _, m := range local {
		f.local[m] = true
	}
	return f
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
	if f.local[fullMethod] {
		return false
	}
	for _, s := range f.services {
		if strings.HasPrefix(fullMethod, "/"+s+"/") {
			return true
		}
	}
	return false
}

// route decides where a call is served: here (this node leads, or the
// request accepts a stale read and this node is fit to serve), or at the
// returned leader address. A stale read on a faulty node (a failing disk,
// far behind, cut off from the leader) goes to the leader like any other
// call, so that it does not answer from state it cannot keep up to date.
// It refuses with NOT_LEADER when no leader is known or the call was
// already forwarded once.
func (f *Forwarder) route(ctx context.Context, req any) (leader string, here bool, err error) {
	leader = f.node.LeaderGRPCAddress()
	if leader != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(LeaderHeader, leader))
	}
	if f.node.IsLeader() {
		return leader, true, nil
	}
	var fault error
	if req != nil && coordinator.AllowsStaleRead(req) {
		if fault = f.node.Fault(); fault == nil {
			return leader, true, nil
		}
	}
	if fault != nil && (forwarded(ctx) || leader == "") {
		return "", false, toStatus(errcode.Errorf(errcode.NotLeader, "this node does not serve stale reads while it is unfit (%v), and cannot reach a leader (leader now: %q); retry another node", fault, leader))
	}
	if forwarded(ctx) {
		return "", false, toStatus(errcode.Errorf(errcode.NotLeader, "a node forwarded this request here, but this node does not lead (leader now: %q)", leader))
	}
	if leader == "" {
		return "", false, toStatus(errcode.Errorf(errcode.NotLeader, "no raft leader is known (election in progress or no quorum); retry shortly"))
	}
	return leader, false, nil
}

func forwarded(ctx context.Context) bool {
	in, _ := metadata.FromIncomingContext(ctx)
	return len(in.Get(forwardedKey)) > 0
}

// outgoing is the context of a call relayed to the leader: marked as
// forwarded, with the original client's address, and the caller this
// node authenticated (or, when this node is not a node to the leader, the
// caller's own authorization header).
func (f *Forwarder) outgoing(ctx context.Context) context.Context {
	md := metadata.Pairs(forwardedKey, "1", clientHostKey, ClientHost(ctx))
	if p := auth.FromContext(ctx); f.vouches && !p.Anonymous() {
		md.Set(principalKey, p.String())
	}
	if a := metadataValue(ctx, AuthorizationHeader); !f.dropAuthorization && a != "" {
		md.Set(AuthorizationHeader, a)
	}
	if f.permissive && f.vouches && (overPlaintext(ctx) && metadataValue(ctx, AuthorizationHeader) == "" || forwardedPlaintextCaller(ctx)) {
		// Served as before here; over TLS the leader would otherwise
		// judge this node's own certificate.
		md.Set(plaintextCallerKey, "1")
	}
	return metadata.NewOutgoingContext(ctx, md)
}

func metadataValue(ctx context.Context, key string) string {
	in, _ := metadata.FromIncomingContext(ctx)
	if v := in.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// NotForwardedKey is the ErrorInfo metadata key set to "false" on a
// NOT_LEADER answer for a call this node never handed to the leader (no
// connection to it: the call got no transport stream), so the call
// certainly did not happen. Without it, a NOT_LEADER from a follower that
// knew a leader may come after the leader applied the call.
const NotForwardedKey = "forwarded"

// NotForwarded reports whether err is a follower's NOT_LEADER marked with
// NotForwardedKey: the call certainly did not happen.
func NotForwarded(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()[NotForwardedKey] == "false"
		}
	}
	return false
}

// notForwardedError is a NOT_LEADER for a call that never left this node.
type notForwardedError struct{ *errcode.ProtocolError }

func (e *notForwardedError) Unwrap() error { return e.ProtocolError }

// leaderUnreachable turns a transport failure on the way to the leader
// (Unavailable without a protocol reason) into NOT_LEADER, which clients
// resend, marked not forwarded when the call got no stream to the leader
// (sent: the peer the call reached, nil when none); the leader's own
// refusals pass unchanged.
func leaderUnreachable(leader string, err error, sent *peer.Peer) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && Reason(err) == "" {
		refusal := errcode.Errorf(errcode.NotLeader, "forwarding to leader %s: %v", leader, st.Message())
		if sent != nil && sent.Addr == nil {
			return toStatus(&notForwardedError{refusal})
		}
		return toStatus(refusal)
	}
	return err
}

// invoke relays a unary call to the leader and returns its answer.
func (f *Forwarder) invoke(ctx context.Context, leader, fullMethod string, req any) (proto.Message, error) {
	out, err := newMessage(fullMethod, false)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	conn, err := f.conn(leader)
	if err != nil {
		return nil, toStatus(&notForwardedError{errcode.Errorf(errcode.NotLeader, "%v", err)})
	}
	var sent peer.Peer
	if err := conn.Invoke(f.outgoing(ctx), fullMethod, req, out, grpc.Peer(&sent)); err != nil {
		return nil, leaderUnreachable(leader, err, &sent)
	}
	return out, nil
}

// UnaryInterceptor serves a request here when this node leads (or the
// request accepts a stale read), and otherwise forwards it to the leader.
func (f *Forwarder) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !f.forwards(info.FullMethod) {
		return handler(ctx, req)
	}
	leader, here, err := f.route(ctx, req)
	switch {
	case err != nil:
		return nil, err
	case here:
		return handler(ctx, req)
	}
	return f.invoke(ctx, leader, info.FullMethod, req)
}

// ForwardAgain sends the unary call being served (ctx is its server
// context) on to the current leader: for a call whose handler moved
// leadership away from this node before it could finish (removing or
// demoting the leader itself). It is the one second hop a call can take.
func (f *Forwarder) ForwardAgain(ctx context.Context, req any) (proto.Message, error) {
	method, ok := grpc.Method(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "ForwardAgain outside a gRPC call")
	}
	leader := f.node.LeaderGRPCAddress()
	if leader == "" || f.node.IsLeader() {
		return nil, toStatus(errcode.Errorf(errcode.NotLeader, "leadership is moving (leader now: %q); retry shortly", leader))
	}
	return f.invoke(ctx, leader, method, req)
}

// StreamInterceptor is UnaryInterceptor for streaming calls (snapshot save
// and restore): on a follower it opens the same stream to the leader and
// relays messages both ways until the leader ends it.
func (f *Forwarder) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !f.forwards(info.FullMethod) {
		return handler(srv, ss)
	}
	leader, here, err := f.route(ss.Context(), nil)
	switch {
	case err != nil:
		return err
	case here:
		return handler(srv, ss)
	}
	conn, err := f.conn(leader)
	if err != nil {
		return toStatus(&notForwardedError{errcode.Errorf(errcode.NotLeader, "%v", err)})
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: info.FullMethod, ServerStreams: info.IsServerStream, ClientStreams: info.IsClientStream}
	var sent peer.Peer
	up, err := conn.NewStream(f.outgoing(ctx), desc, info.FullMethod, grpc.Peer(&sent))
	if err != nil {
		return leaderUnreachable(leader, err, &sent)
	}
	// Caller to leader. A send that fails ends this direction; the
	// leader's status comes from RecvMsg below.
	go func() {
		for {
			m, err := newMessage(info.FullMethod, true)
			if err != nil {
				cancel()
				return
			}
			if err := ss.RecvMsg(m); err != nil {
				if errors.Is(err, io.EOF) {
					_ = up.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := up.SendMsg(m); err != nil {
				return
			}
		}
	}()
	// Leader to caller.
	for {
		m, err := newMessage(info.FullMethod, false)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := up.RecvMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return leaderUnreachable(leader, err, nil)
		}
		if err := ss.SendMsg(m); err != nil {
			return err
		}
	}
}

// ClientHost is the address of the client that sent the request, looking
// through a forward.
func ClientHost(ctx context.Context) string {
	if in, ok := metadata.FromIncomingContext(ctx); ok {
		if h := in.Get(clientHostKey); len(h) > 0 && len(in.Get(forwardedKey)) > 0 && plausibleHostPort(h[0]) {
			return h[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// maxClientHostBytes bounds a forwarded client address: a host name of
// 253 bytes, a colon and a port.
const maxClientHostBytes = 253 + 1 + 5

// plausibleHostPort reports whether a forwarded client address is one a
// node could have sent: short, host:port. Anything else is ignored (the
// caller's own address is used), so metadata cannot put megabytes into a
// member's replicated record.
func plausibleHostPort(s string) bool {
	if len(s) > maxClientHostBytes {
		return false
	}
	_, port, err := net.SplitHostPort(s)
	return err == nil && port != ""
}

// newMessage makes an empty request (or response) message of a full
// method name.
func newMessage(fullMethod string, request bool) (proto.Message, error) {
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
	name := md.Output().FullName()
	if request {
		name = md.Input().FullName()
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("message type of %q: %w", fullMethod, err)
	}
	return mt.New().Interface(), nil
}
