package rpc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// fixedLeadership is a node that leads or not, and knows a leader address.
type fixedLeadership struct {
	leading bool
	leader  string
	fault   error
}

func (l fixedLeadership) IsLeader() bool            { return l.leading }
func (l fixedLeadership) LeaderGRPCAddress() string { return l.leader }
func (l fixedLeadership) Fault() error              { return l.fault }

func TestForwarder_Unary_RoutesByLeadership(t *testing.T) {
	served := errors.New("served here")
	handler := func(context.Context, any) (any, error) { return nil, served }
	call := func(l Leadership, method string, ctx context.Context) error {
		f := NewForwarder(l, Services, localClusterMethods, slog.New(slog.DiscardHandler))
		defer f.Close()
		_, err := f.UnaryInterceptor(ctx, &cohortv1.StatusRequest{}, &grpc.UnaryServerInfo{FullMethod: method}, handler)
		return err
	}
	bg := context.Background()
	method := cohortv1.ClusterService_Status_FullMethodName
	if err := call(fixedLeadership{leading: true}, method, bg); err != served {
		t.Errorf("on the leader: %v, want it served here", err)
	}
	if err := call(fixedLeadership{}, cohortv1.ClusterService_NodeInfo_FullMethodName, bg); err != served {
		t.Errorf("NodeInfo on a follower: %v, want it served here", err)
	}
	if err := call(fixedLeadership{}, "/grpc.health.v1.Health/Check", bg); err != served {
		t.Errorf("a service that is not forwarded: %v, want it served here", err)
	}
	for name, c := range map[string]struct {
		l   Leadership
		ctx context.Context
	}{
		"no leader known":        {fixedLeadership{}, bg},
		"already forwarded once": {fixedLeadership{leader: "127.0.0.1:1"}, metadata.NewIncomingContext(bg, metadata.Pairs(forwardedKey, "1"))},
		"leader unreachable":     {fixedLeadership{leader: "127.0.0.1:1"}, bg},
	} {
		err := call(c.l, method, c.ctx)
		if status.Code(err) != codes.Unavailable || Reason(err) != "NOT_LEADER" {
			t.Errorf("%s: %v (reason %q), want Unavailable NOT_LEADER", name, err, Reason(err))
		}
	}
}

// leaderStub answers the snapshot streams as a leader would, and reports
// what reached it.
type leaderStub struct {
	cohortv1.UnimplementedClusterServiceServer
	gotAuth []string
}

func (s *leaderStub) SnapshotSave(_ *cohortv1.SnapshotSaveRequest, stream grpc.ServerStreamingServer[cohortv1.SnapshotSaveResponse]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	s.gotAuth = md.Get(AuthorizationHeader)
	for _, chunk := range []string{"a", "bb", "ccc"} {
		if err := stream.Send(&cohortv1.SnapshotSaveResponse{Part: &cohortv1.SnapshotSaveResponse_Data{Data: []byte(chunk)}}); err != nil {
			return err
		}
	}
	return nil
}

func (s *leaderStub) SnapshotRestore(stream grpc.ClientStreamingServer[cohortv1.SnapshotRestoreRequest, cohortv1.SnapshotRestoreResponse]) error {
	var n uint64
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&cohortv1.SnapshotRestoreResponse{Index: n})
		}
		if err != nil {
			return err
		}
		n += uint64(len(m.GetData()))
	}
}

func serve(t *testing.T, opts []grpc.ServerOption, svc cohortv1.ClusterServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	cohortv1.RegisterClusterServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// A follower relays both streaming directions to the leader, with the
// caller's authorization.
func TestForwarder_Streams_RelayedToTheLeader(t *testing.T) {
	leader := &leaderStub{}
	leaderAddr := serve(t, nil, leader)
	fwd := NewForwarder(fixedLeadership{leader: leaderAddr}, Services, localClusterMethods, slog.New(slog.DiscardHandler))
	defer fwd.Close()
	// The follower's own service would refuse everything: only the relay answers.
	followerAddr := serve(t, []grpc.ServerOption{grpc.StreamInterceptor(fwd.StreamInterceptor)}, cohortv1.UnimplementedClusterServiceServer{})

	conn, err := grpc.NewClient(followerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := cohortv1.NewClusterServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), AuthorizationHeader, "Bearer t0k")

	save, err := cl.SnapshotSave(ctx, &cohortv1.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for {
		m, err := save.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("save stream: %v", err)
		}
		got += string(m.GetData())
	}
	if got != "abbccc" {
		t.Errorf("relayed save stream %q, want abbccc", got)
	}
	if len(leader.gotAuth) != 1 || leader.gotAuth[0] != "Bearer t0k" {
		t.Errorf("the leader saw authorization %q", leader.gotAuth)
	}

	restore, err := cl.SnapshotRestore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []string{"xyz", "12345"} {
		if err := restore.Send(&cohortv1.SnapshotRestoreRequest{Part: &cohortv1.SnapshotRestoreRequest_Data{Data: []byte(chunk)}}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	resp, err := restore.CloseAndRecv()
	if err != nil || resp.GetIndex() != 8 {
		t.Fatalf("relayed restore: %v, %v; want the leader to count 8 bytes", resp, err)
	}
}

// A forwarded client address is taken only when it is one a node could
// have sent; otherwise the caller's own address is used, so metadata cannot
// put an oversized host into a member's replicated record.
func TestClientHost_ForwardedAddressIsBounded(t *testing.T) {
	caller := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 4242}
	for _, tc := range []struct {
		forwarded string
		want      string
	}{
		{"192.0.2.7:5555", "192.0.2.7:5555"},
		{"[2001:db8::1]:5555", "[2001:db8::1]:5555"},
		{strings.Repeat("h", 3<<20) + ":1", caller.String()},
		{"not-an-address", caller.String()},
	} {
		md := metadata.Pairs(forwardedKey, "1", clientHostKey, tc.forwarded)
		ctx := peer.NewContext(metadata.NewIncomingContext(context.Background(), md), &peer.Peer{Addr: caller})
		if got := ClientHost(ctx); got != tc.want {
			t.Errorf("forwarded %.40q: client host %.40q, want %q", tc.forwarded, got, tc.want)
		}
	}
}

func TestForwarder_StaleRead_ServedHereOnlyWhenFit(t *testing.T) {
	served := errors.New("served here")
	handler := func(context.Context, any) (any, error) { return nil, served }
	method := cohortv1.GroupCoordinator_ListGroups_FullMethodName
	stale := &cohortv1.ListGroupsRequest{AllowStale: true}
	call := func(l Leadership) error {
		f := NewForwarder(l, Services, localClusterMethods, slog.New(slog.DiscardHandler))
		defer f.Close()
		_, err := f.UnaryInterceptor(context.Background(), stale, &grpc.UnaryServerInfo{FullMethod: method}, handler)
		return err
	}
	if err := call(fixedLeadership{leader: "127.0.0.1:1"}); err != served {
		t.Errorf("stale read on a fit follower: %v, want it served here", err)
	}
	diskFull := errors.New("raft log store writes are failing: no space left on device")
	// Sent to the (unreachable) leader instead of answered here.
	err := call(fixedLeadership{leader: "127.0.0.1:1", fault: diskFull})
	if err == served || Reason(err) != "NOT_LEADER" || !strings.Contains(err.Error(), "forwarding to leader 127.0.0.1:1") {
		t.Errorf("stale read on a faulty follower: %v, want it forwarded to the leader", err)
	}
	err = call(fixedLeadership{fault: diskFull})
	if status.Code(err) != codes.Unavailable || Reason(err) != "NOT_LEADER" || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("stale read on a faulty follower without a leader: %v, want Unavailable NOT_LEADER naming the fault", err)
	}
	if err := call(fixedLeadership{leading: true, fault: diskFull}); err != served {
		t.Errorf("read on the leader: %v, want it served here", err)
	}
}

// bigStatusLeader answers Status with more than gRPC's default 4 MiB.
type bigStatusLeader struct {
	cohortv1.UnimplementedClusterServiceServer
}

const bigAnswerBytes = 6 << 20

func (bigStatusLeader) Status(context.Context, *cohortv1.StatusRequest) (*cohortv1.StatusResponse, error) {
	return &cohortv1.StatusResponse{LeaderId: strings.Repeat("x", bigAnswerBytes)}, nil
}

// A follower relays a leader's answer larger than gRPC's default receive
// limit: the forwarding path receives what a node may send.
func TestForwarder_Unary_RelaysAnswerOver4MiB(t *testing.T) {
	leaderAddr := serve(t, DefaultLimits().ServerOptions(), bigStatusLeader{})
	fwd := NewForwarder(fixedLeadership{leader: leaderAddr}, Services, localClusterMethods, slog.New(slog.DiscardHandler))
	defer fwd.Close()
	opts := append(DefaultLimits().ServerOptions(), grpc.UnaryInterceptor(fwd.UnaryInterceptor))
	followerAddr := serve(t, opts, cohortv1.UnimplementedClusterServiceServer{})

	conn, err := grpc.NewClient(followerAddr, append(clientOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := cohortv1.NewClusterServiceClient(conn).Status(context.Background(), &cohortv1.StatusRequest{})
	if err != nil {
		t.Fatalf("Status through the follower: %v", err)
	}
	if len(resp.GetLeaderId()) != bigAnswerBytes {
		t.Fatalf("relayed answer has %d bytes, want %d", len(resp.GetLeaderId()), bigAnswerBytes)
	}
}

func TestLimits_Validate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(l *Limits)
		wantErr string
	}{
		{"defaults", func(*Limits) {}, ""},
		{"recv below 1 MiB", func(l *Limits) { l.MaxRecvBytes = 1000 }, "grpc max recv bytes 1000: must be between 1 MiB"},
		{"send above what clients take", func(l *Limits) { l.MaxSendBytes = 2 << 30 }, "grpc max send bytes 2147483648"},
		{"no streams", func(l *Limits) { l.MaxConcurrentStreams = 0 }, "grpc max concurrent streams 0"},
		{"min time above the peers' pings", func(l *Limits) { l.KeepaliveMinTime = time.Minute }, "grpc keepalive min time 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := DefaultLimits()
			tt.mod(&l)
			err := l.Validate()
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate: %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// unavailableLeader receives the call, then answers Unavailable without a
// protocol reason, as a leader's transport failing mid-call looks.
type unavailableLeader struct {
	cohortv1.UnimplementedClusterServiceServer
}

func (unavailableLeader) Status(context.Context, *cohortv1.StatusRequest) (*cohortv1.StatusResponse, error) {
	return nil, status.Error(codes.Unavailable, "connection lost mid-call")
}

// A NOT_LEADER for a call that never left this node (no connection to the
// leader) says so in its ErrorInfo, so a caller knows the call did not
// happen; one the leader may have received does not.
func TestForwarder_NotForwardedMarksOnlyCallsThatNeverLeft(t *testing.T) {
	call := func(leader string) error {
		f := NewForwarder(fixedLeadership{leader: leader}, Services, localClusterMethods, slog.New(slog.DiscardHandler))
		defer f.Close()
		_, err := f.UnaryInterceptor(context.Background(), &cohortv1.StatusRequest{},
			&grpc.UnaryServerInfo{FullMethod: cohortv1.ClusterService_Status_FullMethodName},
			func(context.Context, any) (any, error) { return nil, errors.New("served here") })
		return err
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	if err := call(deadAddr); Reason(err) != "NOT_LEADER" || !NotForwarded(err) {
		t.Errorf("leader refusing connections: %v, want NOT_LEADER marked not forwarded", err)
	}
	if err := call(serve(t, nil, unavailableLeader{})); Reason(err) != "NOT_LEADER" || NotForwarded(err) {
		t.Errorf("leader failing after it got the call: %v, want NOT_LEADER not marked", err)
	}
}
