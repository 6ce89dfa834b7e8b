package rpc

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// groupNode answers the group API with its own name, so a caller can tell
// which node served a call, and records the metadata of each call it got.
type groupNode struct {
	cohortv1.UnimplementedGroupCoordinatorServer
	name string

	mu    sync.Mutex
	calls []metadata.MD
}

func (n *groupNode) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, md)
}

func (n *groupNode) received() []metadata.MD {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]metadata.MD(nil), n.calls...)
}

func (n *groupNode) ListGroups(ctx context.Context, _ *cohortv1.ListGroupsRequest) (*cohortv1.ListGroupsResponse, error) {
	n.record(ctx)
	return &cohortv1.ListGroupsResponse{Groups: []*cohortv1.ListedGroup{{GroupId: n.name}}}, nil
}

func (n *groupNode) DescribeGroups(ctx context.Context, _ *cohortv1.DescribeGroupsRequest) (*cohortv1.DescribeGroupsResponse, error) {
	n.record(ctx)
	return &cohortv1.DescribeGroupsResponse{Groups: []*cohortv1.GroupDescription{{GroupId: n.name}}}, nil
}

func (n *groupNode) OffsetFetch(ctx context.Context, _ *cohortv1.OffsetFetchRequest) (*cohortv1.OffsetFetchResponse, error) {
	n.record(ctx)
	return &cohortv1.OffsetFetchResponse{Partitions: []*cohortv1.OffsetFetchPartition{{Topic: n.name}}}, nil
}

// Heartbeat refuses as a leader in a rebalance does: the refusal must reach
// the caller unchanged through a forward.
func (n *groupNode) Heartbeat(ctx context.Context, _ *cohortv1.HeartbeatRequest) (*cohortv1.HeartbeatResponse, error) {
	n.record(ctx)
	return nil, toStatus(errcode.Errorf(errcode.RebalanceInProgress, "%s is rebalancing", n.name))
}

// serveGroups serves node's group API on lis behind the interceptors given.
func serveGroups(t *testing.T, lis net.Listener, node *groupNode, unary ...grpc.UnaryServerInterceptor) string {
	t.Helper()
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...))
	cohortv1.RegisterGroupCoordinatorServer(gs, node)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func groupClient(t *testing.T, addr string) cohortv1.GroupCoordinatorClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return cohortv1.NewGroupCoordinatorClient(conn)
}

// forwardingPair is a leader (a plain group service) and a node that
// forwards to it through a Forwarder whose leadership the test sets.
type forwardingPair struct {
	leader, node         *groupNode
	leaderAddr, nodeAddr string
	fwd                  *Forwarder
	client               cohortv1.GroupCoordinatorClient
}

// newForwardingPair starts both. The node leads when leading (then it
// names itself as leader), else it follows the pair's leader; setup, when
// set, adjusts the forwarder before anything is served; before, when set,
// runs ahead of the forwarder (as authentication does in a real node).
func newForwardingPair(t *testing.T, leading bool, setup func(*Forwarder), before grpc.UnaryServerInterceptor) *forwardingPair {
	t.Helper()
	p := &forwardingPair{leader: &groupNode{name: "leader"}, node: &groupNode{name: "node"}}
	p.leaderAddr = serveGroups(t, listen(t), p.leader)
	nodeLis := listen(t)
	p.nodeAddr = nodeLis.Addr().String()
	view := fixedLeadership{leader: p.leaderAddr}
	if leading {
		view = fixedLeadership{leading: true, leader: p.nodeAddr}
	}
	p.fwd = NewForwarder(view, Services, localClusterMethods, slog.New(slog.DiscardHandler))
	t.Cleanup(p.fwd.Close)
	if setup != nil {
		setup(p.fwd)
	}
	chain := []grpc.UnaryServerInterceptor{p.fwd.UnaryInterceptor}
	if before != nil {
		chain = append([]grpc.UnaryServerInterceptor{before}, chain...)
	}
	serveGroups(t, nodeLis, p.node, chain...)
	p.client = groupClient(t, p.nodeAddr)
	return p
}

// listGroups calls ListGroups on the node and returns which node served it
// and the cohort-leader header of the answer.
func (p *forwardingPair) listGroups(ctx context.Context, t *testing.T, req *cohortv1.ListGroupsRequest) (servedBy, leaderHeader string) {
	t.Helper()
	var hdr metadata.MD
	resp, err := p.client.ListGroups(ctx, req, grpc.Header(&hdr))
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if len(resp.GetGroups()) != 1 {
		t.Fatalf("ListGroups answered %v, want one group naming the node that served it", resp)
	}
	if v := hdr.Get(LeaderHeader); len(v) == 1 {
		leaderHeader = v[0]
	}
	return resp.GetGroups()[0].GetGroupId(), leaderHeader
}

// The leader serves a call itself and names itself in cohort-leader.
func TestForwarder_OnTheLeader_ServesHereAndNamesItself(t *testing.T) {
	p := newForwardingPair(t, true, nil, nil)
	served, hdr := p.listGroups(context.Background(), t, &cohortv1.ListGroupsRequest{})
	if served != "node" || len(p.leader.received()) != 0 {
		t.Errorf("served by %q (other node got %d calls), want the leader to serve it itself", served, len(p.leader.received()))
	}
	if hdr != p.nodeAddr {
		t.Errorf("cohort-leader %q, want the leader's own address %q", hdr, p.nodeAddr)
	}
}

// A follower sends the call to the leader, once, marked as forwarded and
// with the caller's address; the answer and the cohort-leader header name
// the leader; the follower's own handler never runs.
func TestForwarder_OnAFollower_ForwardsToTheLeaderMarked(t *testing.T) {
	p := newForwardingPair(t, false, nil, nil)
	ctx := context.Background()
	for _, req := range []*cohortv1.ListGroupsRequest{{}, {States: []string{"Stable"}}} {
		served, hdr := p.listGroups(ctx, t, req)
		if served != "leader" {
			t.Fatalf("ListGroups(%v) served by %q, want the leader", req, served)
		}
		if hdr != p.leaderAddr {
			t.Errorf("cohort-leader %q, want %q", hdr, p.leaderAddr)
		}
	}
	if n := len(p.node.received()); n != 0 {
		t.Errorf("the follower's own handler ran %d times", n)
	}
	got := p.leader.received()
	if len(got) != 2 {
		t.Fatalf("the leader got %d calls, want 2 (each forwarded once)", len(got))
	}
	for _, md := range got {
		if v := md.Get(forwardedKey); len(v) != 1 || v[0] != "1" {
			t.Errorf("forwarded marker %q, want one %q", v, "1")
		}
		// The follower saw the client on loopback; the leader must be told
		// that address, not the follower's own.
		host := md.Get(clientHostKey)
		if len(host) != 1 || !strings.HasPrefix(host[0], "127.0.0.1:") {
			t.Errorf("client host %q, want the caller's loopback address", host)
		}
	}

	// A refusal from the leader reaches the caller unchanged: code, reason
	// and message.
	_, err := p.client.Heartbeat(ctx, &cohortv1.HeartbeatRequest{GroupId: "g"})
	if status.Code(err) != status.Code(toStatus(errcode.Errorf(errcode.RebalanceInProgress, ""))) || Reason(err) != "REBALANCE_IN_PROGRESS" || !strings.Contains(err.Error(), "leader is rebalancing") {
		t.Errorf("the leader's refusal through the follower: %v (reason %q), want it unchanged", err, Reason(err))
	}
}

// A call that was already forwarded once and reaches a node that does not
// lead (leadership moved while it travelled) is refused with NOT_LEADER
// naming the leader this node knows: it is never forwarded a second time,
// which between two nodes that each think the other leads would loop.
func TestForwarder_ForwardedCallOnANonLeader_RefusedNamingTheLeader_NeverForwardedAgain(t *testing.T) {
	p := newForwardingPair(t, false, nil, nil)
	// What a forwarding node sends: the marker and the client's address.
	ctx := metadata.AppendToOutgoingContext(context.Background(), forwardedKey, "1", clientHostKey, "192.0.2.1:5000")
	var hdr metadata.MD
	_, err := p.client.ListGroups(ctx, &cohortv1.ListGroupsRequest{}, grpc.Header(&hdr))
	if status.Code(err) != codes.Unavailable || Reason(err) != "NOT_LEADER" {
		t.Fatalf("forwarded call on a non-leader: %v (reason %q), want Unavailable NOT_LEADER", err, Reason(err))
	}
	if !strings.Contains(err.Error(), p.leaderAddr) {
		t.Errorf("the refusal %q does not name the leader %s", err, p.leaderAddr)
	}
	if v := hdr.Get(LeaderHeader); len(v) != 1 || v[0] != p.leaderAddr {
		t.Errorf("cohort-leader %q, want %q", v, p.leaderAddr)
	}
	if n := len(p.leader.received()); n != 0 {
		t.Errorf("the leader got %d calls: a forwarded call was forwarded again", n)
	}
	if n := len(p.node.received()); n != 0 {
		t.Errorf("the non-leader served a forwarded call itself (%d calls)", n)
	}
}

// A read that allows a stale answer is served by the follower from its own
// state; the same read without allow_stale goes to the leader. Every read
// with the field is tried, so a request type the forwarder forgets is seen.
func TestForwarder_AllowStaleReads_ServedByTheFollower(t *testing.T) {
	p := newForwardingPair(t, false, nil, nil)
	ctx := context.Background()
	reads := []struct {
		name string
		call func(stale bool) (string, error)
	}{
		{"ListGroups", func(stale bool) (string, error) {
			r, err := p.client.ListGroups(ctx, &cohortv1.ListGroupsRequest{AllowStale: stale})
			return r.GetGroups()[0].GetGroupId(), err
		}},
		{"DescribeGroups", func(stale bool) (string, error) {
			r, err := p.client.DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}, AllowStale: stale})
			return r.GetGroups()[0].GetGroupId(), err
		}},
		{"OffsetFetch", func(stale bool) (string, error) {
			r, err := p.client.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g", AllowStale: stale})
			return r.GetPartitions()[0].GetTopic(), err
		}},
	}
	for _, r := range reads {
		for _, tc := range []struct {
			stale bool
			want  string
		}{{true, "node"}, {false, "leader"}} {
			got, err := r.call(tc.stale)
			if err != nil {
				t.Fatalf("%s allow_stale=%v: %v", r.name, tc.stale, err)
			}
			if got != tc.want {
				t.Errorf("%s allow_stale=%v served by %q, want %q", r.name, tc.stale, got, tc.want)
			}
		}
	}
}

// The caller's identity reaches the leader as the node's mode says: a node
// that authenticates to the leader as a node vouches for the caller it
// authenticated (cohort-principal) and keeps the caller's token; one in
// permissive mode passes the token on too (the leader may not have moved
// to TLS yet); a node that is no node to the leader passes only the token.
// Nobody vouches for an anonymous caller.
func TestForwarder_CallerIdentity_VouchedOrPassedOn(t *testing.T) {
	app := auth.Principal{Role: auth.RoleClient, Name: "app"}
	for _, tc := range []struct {
		name                     string
		vouches, dropAuth        bool
		caller                   auth.Principal
		wantPrincipal, wantToken string
	}{
		{"vouching node", true, true, app, "client/app", ""},
		{"vouching node, permissive", true, false, app, "client/app", "Bearer app-token"},
		{"vouching node, anonymous caller", true, true, auth.Principal{}, "", ""},
		{"node that is no node to the leader", false, false, app, "", "Bearer app-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Stands for authentication, which runs ahead of forwarding.
			authn := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(auth.NewContext(ctx, tc.caller), req)
			}
			p := newForwardingPair(t, false, func(f *Forwarder) { f.vouches, f.dropAuthorization = tc.vouches, tc.dropAuth }, authn)
			ctx := metadata.AppendToOutgoingContext(context.Background(), AuthorizationHeader, "Bearer app-token")
			if served, _ := p.listGroups(ctx, t, &cohortv1.ListGroupsRequest{}); served != "leader" {
				t.Fatalf("served by %q, want the leader", served)
			}
			md := p.leader.received()[0]
			if got := strings.Join(md.Get(principalKey), ","); got != tc.wantPrincipal {
				t.Errorf("principal at the leader %q, want %q", got, tc.wantPrincipal)
			}
			if got := strings.Join(md.Get(AuthorizationHeader), ","); got != tc.wantToken {
				t.Errorf("authorization at the leader %q, want %q", got, tc.wantToken)
			}
		})
	}
}
