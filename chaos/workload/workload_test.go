package workload

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/rpc"
)

func protoErr(code codes.Code, reason string) error {
	st, err := status.New(code, reason+": scripted").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "cohort.v1"})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// notForwardedErr is a follower's NOT_LEADER for a call it could not hand
// to the leader.
func notForwardedErr() error {
	st, err := status.New(codes.Unavailable, "NOT_LEADER: forwarding: connection refused").WithDetails(
		&errdetails.ErrorInfo{Reason: "NOT_LEADER", Domain: "cohort.v1", Metadata: map[string]string{rpc.NotForwardedKey: "false"}})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// serve starts a gRPC server whose every method answers err, naming leader
// in the cohort-leader header when it is not empty, as Cohort's nodes do.
func serve(t *testing.T, leader string, err error) string {
	t.Helper()
	lis, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		if leader != "" {
			_ = stream.SetHeader(map[string][]string{client.LeaderHeader: {leader}})
		}
		if err == nil {
			if rerr := stream.RecvMsg(&emptypb.Empty{}); rerr != nil {
				return rerr
			}
			return stream.SendMsg(&emptypb.Empty{})
		}
		return err
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// invoke makes one call to addr and classifies it as the workloads do.
func invoke(t *testing.T, addr string) history.Outcome {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c call
	err = conn.Invoke(ctx, "/cohort.v1.GroupCoordinator/OffsetCommit", &emptypb.Empty{}, &emptypb.Empty{}, c.options()...)
	return classify(err, &c)
}

func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func TestClassify_WhatTheCallLearned(t *testing.T) {
	cases := []struct {
		name   string
		leader string
		err    error
		want   history.Outcome
	}{
		{"refusal", "n1:1", protoErr(codes.FailedPrecondition, "ILLEGAL_GENERATION"), history.Fail},
		{"coordinator not available", "n1:1", protoErr(codes.Unavailable, "COORDINATOR_NOT_AVAILABLE"), history.Fail},
		{"not leader from a node without a leader", "", protoErr(codes.Unavailable, "NOT_LEADER"), history.Fail},
		{"not leader from a node that knew one", "n1:1", protoErr(codes.Unavailable, "NOT_LEADER"), history.Info},
		{"not leader, not forwarded (no connection to the leader)", "n1:1", notForwardedErr(), history.Fail},
		{"deadline on the node", "n1:1", status.Error(codes.DeadlineExceeded, "slow"), history.Info},
		{"unavailable without a code", "n1:1", status.Error(codes.Unavailable, "transport is closing"), history.Info},
		{"ok", "n1:1", nil, history.OK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := invoke(t, serve(t, c.leader, c.err)); got != c.want {
				t.Errorf("outcome %v, want %v", got, c.want)
			}
		})
	}
}

// A refused connection never carried the request: grpc-go leaves the peer
// unset, and the write is a failure whatever the status says.
func TestClassify_NoConnectionIsAFailure(t *testing.T) {
	if got := invoke(t, deadAddr(t)); got != history.Fail {
		t.Fatalf("outcome %v, want fail", got)
	}
}
