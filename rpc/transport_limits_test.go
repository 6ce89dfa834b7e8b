package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/auth"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// serveAPI serves a node's gRPC API (no engine, no cluster: the calls the
// tests make are decided before either is reached) on a loopback listener
// wrapped as cohortd wraps it, and returns its address.
func serveAPI(t *testing.T, sec Security, limits Limits) (string, *Server, *ConnLimiter) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := NewServer(nil, nil, sec, slog.New(slog.DiscardHandler))
	gs := grpc.NewServer(api.ServerOptions(limits)...)
	api.Register(gs)
	cl := LimitConnections(lis, limits, slog.New(slog.DiscardHandler))
	go func() { _ = gs.Serve(cl) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), api, cl
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// On a node that enforces authorization, a call without a credential (or
// with a token nobody issued) is refused with Unauthenticated as soon as
// its headers arrive: the caller gets the refusal without sending its
// request, so the node never holds the request's bytes. A caller with a
// credential is judged after its message, as before (here: a client
// calling an admin's method is PermissionDenied), and public methods stay
// open to anyone.
func TestTap_CallsWithoutCredentialRefusedBeforeTheirMessage(t *testing.T) {
	const clientToken = "client-token-0123456789"
	tokens, err := auth.NewTokens("", map[string]auth.Principal{clientToken: {Role: auth.RoleClient, Name: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	addr, api, _ := serveAPI(t, Security{Tokens: tokens, Self: auth.Principal{Role: auth.RoleNode, Name: "n1"}}, DefaultLimits())
	cc := dial(t, addr)

	// The request is never sent: the stream is opened (headers only) and
	// the answer awaited. Before the tap, the node waited for the message.
	awaitWithoutSending := func(ctx context.Context, method string) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
		if err != nil {
			return err
		}
		return s.RecvMsg(new(cohortv1.JoinGroupResponse))
	}
	for _, tc := range []struct {
		name, token, want string
	}{
		{"no credential", "", "needs a credential"},
		{"a token nobody issued", "not-a-token-0123456789", "bearer token not recognized"},
	} {
		ctx := context.Background()
		if tc.token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationHeader, "Bearer "+tc.token)
		}
		for _, method := range []string{cohortv1.GroupCoordinator_JoinGroup_FullMethodName, cohortv1.ClusterService_SnapshotRestore_FullMethodName} {
			err := awaitWithoutSending(ctx, method)
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s, %s with no message sent: %v, want Unauthenticated (%q) before the message", tc.name, method, err, tc.want)
			}
		}
	}
	if got := testutil.ToFloat64(api.Authz.Collector()); got != 4 {
		t.Errorf("cohort_grpc_calls_refused_unauthenticated_total = %v, want 4", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	asClient := metadata.AppendToOutgoingContext(ctx, AuthorizationHeader, "Bearer "+clientToken)
	_, err = cohortv1.NewGroupCoordinatorClient(cc).DeleteGroups(asClient, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"g"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a client's DeleteGroups: %v, want PermissionDenied after its message", err)
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("anonymous health check: %v, want served", err)
	}
	if got := testutil.ToFloat64(api.Authz.Collector()); got != 4 {
		t.Errorf("cohort_grpc_calls_refused_unauthenticated_total = %v after calls with credentials, want still 4", got)
	}
}

// ClosedBy reports whether the server closed c (EOF or reset) within
// wait; false when c is still open. What the server sends first (its
// HTTP/2 settings) is read and dropped. Exported for the package's
// external tests.
func ClosedBy(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false
		}
		if err != nil {
			return true
		}
	}
}

// At most MaxConnections are open on the gRPC port: one more is closed as
// soon as it is accepted, counted, and the connections already open keep
// being served. A closed connection gives its slot back.
func TestConnLimiter_ClosesConnectionsOverTheBound(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxConnections = 2
	addr, _, cl := serveAPI(t, Security{}, limits)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := []*grpc.ClientConn{dial(t, addr), dial(t, addr)}
	for i, cc := range held {
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("connection %d of 2: %v", i+1, err)
		}
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if !ClosedBy(over, 5*time.Second) {
		t.Fatal("a third connection with a bound of 2 was kept open")
	}
	if cl.Refused() != 1 || cl.Open() != 2 {
		t.Errorf("refused %d, open %d; want 1 and 2", cl.Refused(), cl.Open())
	}
	for i, cc := range held {
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("connection %d after the refusal: %v", i+1, err)
		}
	}
	_ = held[0].Close()
	proc.WaitFor(t, 10*time.Second, "the closed connection's slot to be given back", func() (bool, string) {
		return cl.Open() == 1, fmt.Sprintf("open %d", cl.Open())
	})
	if _, err := healthpb.NewHealthClient(dial(t, addr)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("a new connection once a slot is free: %v", err)
	}
}

// A connection that does not finish its handshake (TLS, and the HTTP/2
// preface) within HandshakeTimeout is closed, giving its slot back; gRPC's
// own default would hold it for two minutes.
func TestHandshakeTimeout_ClosesSilentConnections(t *testing.T) {
	limits := DefaultLimits()
	limits.HandshakeTimeout = 200 * time.Millisecond
	addr, _, cl := serveAPI(t, Security{}, limits)
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !ClosedBy(silent, 5*time.Second) {
		t.Fatal("a connection that sent nothing was still open 5 s after a 200 ms handshake timeout")
	}
	proc.WaitFor(t, 10*time.Second, "the silent connection's slot to be given back", func() (bool, string) {
		return cl.Open() == 0, "still open"
	})
}

// A connection with no call in flight for MaxConnectionIdle is sent GOAWAY
// and closed; the client's next call opens a new one.
func TestMaxConnectionIdle_ClosesIdleConnections(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxConnectionIdle = 300 * time.Millisecond
	addr, _, cl := serveAPI(t, Security{}, limits)
	cc := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	for s := cc.GetState(); s == connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatal("the idle connection was still open after 30 s")
		}
	}
	proc.WaitFor(t, 10*time.Second, "the idle connection's slot to be given back", func() (bool, string) {
		return cl.Open() == 0, "still open"
	})
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("the next call after the idle close: %v", err)
	}
}
