package rpc

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/cohortlabs/cohort/auth"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// principalKey carries, on a forwarded call, the principal of the caller
// the forwarding node authenticated ("role/name"). The leader believes it
// only from a node.
const principalKey = "cohort-principal"

// trustedKeys are the metadata keys only a node may set: the leader acts
// on them on the original caller's behalf.
var trustedKeys = []string{forwardedKey, clientHostKey, principalKey, plaintextCallerKey}

// plaintextCallerKey: a node in permissive mode forwards the call of a
// caller it served as before (plaintext, no credentials); a leader in
// permissive mode serves it as before too, and one that left permissive
// mode judges it as the vouching node's own call.
const plaintextCallerKey = "cohort-plaintext-caller"

// Security is how a node authenticates its callers and itself. The zero
// value is the open mode of a development node on loopback: plaintext,
// every caller may do everything. With TLS or tokens configured,
// authorization is enforced on every call: a caller is its client
// certificate's principal, else its bearer token's, else anonymous.
type Security struct {
	// TLS, when set, serves gRPC over TLS with the node's certificate and
	// is what this node presents to other nodes. Client certificates are
	// required unless Tokens are set too (then either credential works).
	TLS *auth.Credentials
	// Tokens are the bearer tokens accepted (and, without TLS, the source
	// of this node's own token: the one naming node/<id>, else the admin
	// token given with --admin-token).
	Tokens *auth.Tokens
	// Self is this node's principal, node/<raft server ID>.
	Self auth.Principal
	// Permissive (with TLS) also serves and dials plaintext, for the
	// rolling restart that moves a cluster to TLS (permissive.go).
	Permissive bool
}

// Enforced reports whether calls are authorized: any credential is
// configured. Fixed at start, so a token file emptied by mistake does not
// open the node.
func (s Security) Enforced() bool { return s.TLS != nil || s.Tokens != nil }

// ServerOptions are the gRPC server's transport credentials.
func (s Security) ServerOptions() []grpc.ServerOption {
	if s.TLS == nil {
		return nil
	}
	// Permissive: a plaintext caller has no certificate, so none is
	// required of TLS callers either during the migration.
	creds := credentials.NewTLS(s.TLS.ServerTLS(s.Tokens == nil && !s.Permissive, nil))
	if s.Permissive {
		creds = permissiveCreds{creds}
	}
	return []grpc.ServerOption{grpc.Creds(creds)}
}

// legacyAdmin is the principal --admin-token names.
var legacyAdmin = auth.Principal{Role: auth.RoleAdmin, Name: "admin"}

// ownToken is the bearer token this node sends to other nodes: none with
// TLS (the certificate says who it is), else its node token, else the
// admin token.
func (s Security) ownToken() string {
	if (s.TLS != nil && !s.Permissive) || s.Tokens == nil {
		return ""
	}
	if tok := s.Tokens.TokenFor(s.Self); tok != "" {
		return tok
	}
	return s.Tokens.TokenFor(legacyAdmin)
}

// actsAsNode reports whether other nodes see this node as a node: it has
// a certificate, or a token naming node/<id>. Only then may it vouch for
// the callers whose calls it forwards; otherwise a forwarded call carries
// the caller's own authorization header on.
func (s Security) actsAsNode() bool {
	if s.TLS != nil {
		return true
	}
	return s.Tokens != nil && s.Tokens.TokenFor(s.Self) != ""
}

// DialOptions are the options of this node's connections to other nodes:
// TLS verifying that the peer is a node, and this node's bearer token
// when it has no certificate.
func (s Security) DialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if s.TLS != nil {
		creds = credentials.NewTLS(s.TLS.ClientTLS(auth.RequireRole(auth.RoleNode)))
		if s.Permissive {
			creds = permissiveCreds{creds}
		}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if s.Tokens != nil && (s.TLS == nil || s.Permissive) {
		opts = append(opts, grpc.WithPerRPCCredentials(nodeToken{s}))
	}
	return opts
}

// nodeToken sends the node's current token (the file may have rotated).
type nodeToken struct{ s Security }

func (t nodeToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if tok := t.s.ownToken(); tok != "" {
		return map[string]string{AuthorizationHeader: "Bearer " + tok}, nil
	}
	return nil, nil
}

func (nodeToken) RequireTransportSecurity() bool { return false }

// Authorizer authenticates every call and checks it against the method
// table (authorizationRules): the first interceptor after metrics, so a
// follower refuses before it forwards and the leader checks again.
type Authorizer struct {
	sec Security
	// tapRefused counts the calls Tap refused.
	tapRefused prometheus.Counter
}

// NewAuthorizer authorizes by sec.
func NewAuthorizer(sec Security) *Authorizer {
	return &Authorizer{sec: sec, tapRefused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cohort_grpc_calls_refused_unauthenticated_total",
		Help: "gRPC calls without a credential refused as their headers arrived, before their message was read.",
	})}
}

// Collector counts the calls refused before their message was read.
func (a *Authorizer) Collector() prometheus.Collector { return a.tapRefused }

// UnaryInterceptor authenticates and authorizes a unary call.
func (a *Authorizer) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.check(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor authenticates and authorizes a streaming call (the
// snapshot calls, an admin's, and WatchGroup, a client's: the request is
// not needed to decide).
func (a *Authorizer) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.check(ss.Context(), info.FullMethod, nil)
	if err != nil {
		return err
	}
	return handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// Tap refuses a call without a credential as soon as its headers arrive,
// before its request message is read (grpc.InTapHandle): an anonymous
// caller of a node that enforces authorization gets Unauthenticated at
// once and cannot make the node hold the megabytes of a request it will
// refuse anyway. Public methods and, in permissive mode, plaintext callers
// without credentials pass, as in check; everything else check decides
// after the message, as before.
func (a *Authorizer) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !a.sec.Enforced() || public(info.FullMethodName) {
		return ctx, nil
	}
	if a.sec.Permissive && overPlaintext(ctx) && metadataValue(ctx, AuthorizationHeader) == "" {
		return ctx, nil
	}
	p, err := a.direct(ctx)
	if err != nil {
		a.tapRefused.Inc()
		return ctx, err
	}
	if p.Anonymous() {
		a.tapRefused.Inc()
		return ctx, needsCredential(info.FullMethodName)
	}
	// Kept for the interceptor (direct), so a call's credential is read
	// once: the tap's context is the call's.
	return context.WithValue(ctx, tappedKey{}, p), nil
}

// tappedKey holds, in a call's context, the principal Tap found.
type tappedKey struct{}

func (a *Authorizer) check(ctx context.Context, method string, req any) (context.Context, error) {
	if !a.sec.Enforced() {
		return ctx, nil
	}
	if a.sec.Permissive && overPlaintext(ctx) && metadataValue(ctx, AuthorizationHeader) == "" {
		return ctx, nil // a caller not yet moved to TLS, served as before
	}
	ctx, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if a.sec.Permissive && forwardedPlaintextCaller(ctx) {
		return ctx, nil // such a caller, forwarded by a node
	}
	return ctx, authorize(auth.FromContext(ctx), method, req)
}

// Authorize decides a call that reached this node through another front
// (the Kafka listener) by the same method table as the gRPC calls: may p
// call method with req? Nil on a node that does not enforce
// authorization; otherwise the refusal is a gRPC status, Unauthenticated
// or PermissionDenied, naming the method.
func (a *Authorizer) Authorize(p auth.Principal, method string, req any) error {
	if !a.sec.Enforced() {
		return nil
	}
	return authorize(p, method, req)
}

// RevealsMemberIDsTo is RevealsMemberIDs for a caller of another front.
func (a *Authorizer) RevealsMemberIDsTo(p auth.Principal) bool {
	return !a.sec.Enforced() || p.Role == auth.RoleAdmin
}

// forwardedPlaintextCaller: a node (authenticate keeps the trusted keys
// only on a node's call) forwards a plaintext caller it served as before.
func forwardedPlaintextCaller(ctx context.Context) bool {
	return auth.FromContext(ctx).Role == auth.RoleNode && metadataValue(ctx, plaintextCallerKey) != ""
}

// RevealsMemberIDs reports whether the caller may see other members' IDs
// (a member ID is the only credential of a group membership). A nil
// Authorizer is the open mode.
func (a *Authorizer) RevealsMemberIDs(ctx context.Context) bool {
	if a == nil || !a.sec.Enforced() || auth.FromContext(ctx).Role == auth.RoleAdmin {
		return true
	}
	return a.sec.Permissive && (overPlaintext(ctx) && metadataValue(ctx, AuthorizationHeader) == "" || forwardedPlaintextCaller(ctx))
}

// authenticate finds the caller: a forwarded caller vouched for by a node,
// else the client certificate's principal, else the bearer token's. The
// metadata only nodes may set is dropped from anyone else's call.
func (a *Authorizer) authenticate(ctx context.Context) (context.Context, error) {
	direct, err := a.direct(ctx)
	if err != nil {
		return nil, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if direct.Role == auth.RoleNode {
		if v := md.Get(principalKey); len(v) > 0 {
			p, err := auth.ParsePrincipal(v[0])
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "%s: the forwarded principal: %v", principalKey, err)
			}
			return auth.NewContext(ctx, p), nil
		}
		return auth.NewContext(ctx, direct), nil
	}
	untrusted := false
	for _, k := range trustedKeys {
		untrusted = untrusted || len(md.Get(k)) > 0
	}
	if untrusted {
		md = md.Copy()
		for _, k := range trustedKeys {
			md.Delete(k)
		}
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	return auth.NewContext(ctx, direct), nil
}

// direct is the principal of the connection's client certificate, else of
// the call's bearer token; anonymous without either. A token that is not
// known is refused rather than treated as anonymous, so that a typo is
// reported as such.
func (a *Authorizer) direct(ctx context.Context) (auth.Principal, error) {
	if p, ok := ctx.Value(tappedKey{}).(auth.Principal); ok {
		return p, nil
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
			p, err := auth.FromCertificate(ti.State.VerifiedChains[0][0])
			if err != nil {
				return auth.Principal{}, status.Errorf(codes.Unauthenticated, "client certificate: %v", err)
			}
			return p, nil
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	h := md.Get(AuthorizationHeader)
	if len(h) == 0 || a.sec.Tokens == nil {
		return auth.Principal{}, nil
	}
	tok, err := auth.ParseBearer(h[0])
	if err != nil {
		return auth.Principal{}, status.Errorf(codes.Unauthenticated, "authorization header: %v", err)
	}
	p, ok := a.sec.Tokens.Lookup(tok)
	if !ok {
		return auth.Principal{}, status.Error(codes.Unauthenticated, "bearer token not recognized (not in --token-file, not the --admin-token)")
	}
	return p, nil
}

// rule decides whether p may make a call with req (nil for streams).
type rule func(p auth.Principal, req any) error

// public reports whether anyone may call method (its rule is nil).
func public(method string) bool {
	r, ok := authorizationRules[method]
	return ok && r == nil
}

func needsCredential(method string) error {
	return status.Errorf(codes.Unauthenticated, "%s needs a credential: a client certificate (--tls-cert/--tls-key) or a bearer token", method)
}

// authorize applies method's rule; a method without one needs admin.
func authorize(p auth.Principal, method string, req any) error {
	r, ok := authorizationRules[method]
	if !ok {
		r = admins
	}
	if r == nil { // public
		return nil
	}
	if p.Anonymous() {
		return needsCredential(method)
	}
	if err := r(p, req); err != nil {
		return status.Errorf(codes.PermissionDenied, "%s may not call %s: %v", p, method, err)
	}
	return nil
}

func roles(rs ...auth.Role) rule {
	return func(p auth.Principal, _ any) error {
		for _, r := range rs {
			if p.Role == r {
				return nil
			}
		}
		return fmt.Errorf("needs role %v", rs)
	}
}

var (
	admins  = roles(auth.RoleAdmin)
	clients = roles(auth.RoleClient, auth.RoleAdmin)
)

// adminOrNodeItself lets an admin act on any node, and a node on itself
// only (it registers, joins, promotes or removes itself).
func adminOrNodeItself(nodeID func(req any) string) rule {
	return func(p auth.Principal, req any) error {
		switch p.Role {
		case auth.RoleAdmin:
			return nil
		case auth.RoleNode:
			if id := nodeID(req); id != p.Name {
				return fmt.Errorf("a node may act on itself only, not on node %q", id)
			}
			return nil
		}
		return fmt.Errorf("needs role admin, or node for itself")
	}
}

type nodeIDRequest interface{ GetNodeId() string }

func requestNodeID(req any) string {
	if r, ok := req.(nodeIDRequest); ok {
		return r.GetNodeId()
	}
	return ""
}

// commits: members commit as clients; a commit outside any membership (an
// empty member ID: resetting a group's offsets) is an admin's.
func commits(p auth.Principal, req any) error {
	if err := clients(p, req); err != nil {
		return err
	}
	if r, ok := req.(*cohortv1.OffsetCommitRequest); ok && r.GetMemberId() == "" && p.Role != auth.RoleAdmin {
		return fmt.Errorf("a commit without a member ID (an offset reset) needs role admin")
	}
	return nil
}

// authorizationRules is who may call what. nil: public (a node describing
// itself, health). A method missing here needs admin.
var authorizationRules = map[string]rule{
	cohortv1.ClusterService_NodeInfo_FullMethodName:           nil,
	cohortv1.ClusterService_Health_FullMethodName:             nil,
	healthpb.Health_Check_FullMethodName:                      nil,
	healthpb.Health_Watch_FullMethodName:                      nil,
	healthpb.Health_List_FullMethodName:                       nil,
	cohortv1.ClusterService_RegisterNode_FullMethodName:       adminOrNodeItself(requestNodeID),
	cohortv1.ClusterService_AddNonvoter_FullMethodName:        adminOrNodeItself(requestNodeID),
	cohortv1.ClusterService_Promote_FullMethodName:            adminOrNodeItself(requestNodeID),
	cohortv1.ClusterService_RemoveServer_FullMethodName:       adminOrNodeItself(requestNodeID),
	cohortv1.ClusterService_Status_FullMethodName:             roles(auth.RoleAdmin, auth.RoleNode),
	cohortv1.ClusterService_AddVoter_FullMethodName:           admins,
	cohortv1.ClusterService_Demote_FullMethodName:             admins,
	cohortv1.ClusterService_TransferLeadership_FullMethodName: admins,
	cohortv1.ClusterService_SnapshotSave_FullMethodName:       admins,
	cohortv1.ClusterService_SnapshotRestore_FullMethodName:    admins,
	cohortv1.GroupCoordinator_JoinGroup_FullMethodName:        clients,
	cohortv1.GroupCoordinator_SyncGroup_FullMethodName:        clients,
	cohortv1.GroupCoordinator_Heartbeat_FullMethodName:        clients,
	cohortv1.GroupCoordinator_WatchGroup_FullMethodName:       clients,
	cohortv1.GroupCoordinator_LeaveGroup_FullMethodName:       clients,
	cohortv1.GroupCoordinator_OffsetCommit_FullMethodName:     commits,
	cohortv1.GroupCoordinator_OffsetFetch_FullMethodName:      clients,
	cohortv1.GroupCoordinator_DescribeGroups_FullMethodName:   clients,
	cohortv1.GroupCoordinator_ListGroups_FullMethodName:       clients,
	cohortv1.GroupCoordinator_DeleteGroups_FullMethodName:     admins,
	cohortv1.GroupCoordinator_DeleteOffsets_FullMethodName:    admins,
	cohortv1.Topics_ListTopics_FullMethodName:                 clients,
	cohortv1.Topics_CreateTopic_FullMethodName:                admins,
	cohortv1.Topics_DeleteTopic_FullMethodName:                admins,
	cohortv1.Topics_AddPartitions_FullMethodName:              admins,
}

// hideMemberIDs blanks the member IDs (of members and of each group's
// leader) in a DescribeGroups answer for a caller that is not an admin:
// whoever knows a member ID can leave or commit as that member.
func hideMemberIDs(resp *cohortv1.DescribeGroupsResponse) {
	for _, g := range resp.GetGroups() {
		g.LeaderId = ""
		for _, m := range g.GetMembers() {
			m.MemberId = ""
		}
	}
}
