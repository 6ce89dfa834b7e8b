package rpc

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/h2proxy"
)

// smallStatusLeader answers Status as a leader would, briefly.
type smallStatusLeader struct {
	cohortv1.UnimplementedClusterServiceServer
}

func (smallStatusLeader) Status(context.Context, *cohortv1.StatusRequest) (*cohortv1.StatusResponse, error) {
	return &cohortv1.StatusResponse{LeaderId: "n1"}, nil
}

// A follower's connection to the leader has static flow-control windows:
// a forwarded call's answer does not make the follower send a PING.
func TestForwarder_SendsNoFlowControlPings(t *testing.T) {
	const calls = 20
	proxy := h2proxy.New(t, serve(t, nil, smallStatusLeader{}))
	fwd := NewForwarder(fixedLeadership{leader: proxy.Addr}, Services, localClusterMethods, slog.New(slog.DiscardHandler))
	defer fwd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info := &grpc.UnaryServerInfo{FullMethod: cohortv1.ClusterService_Status_FullMethodName}
	notHere := func(context.Context, any) (any, error) {
		t.Error("a follower served Status itself")
		return nil, nil
	}
	for i := range calls {
		if _, err := fwd.UnaryInterceptor(ctx, &cohortv1.StatusRequest{}, info, notHere); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := proxy.FromServer().Data; got < calls {
		t.Fatalf("the proxy saw %d DATA frames from the leader for %d answers: the calls did not go through it", got, calls)
	}
	if got := proxy.FromClient().Pings; got != 0 {
		t.Errorf("the follower sent the leader %d PING frames over %d forwarded calls; want 0 (static windows, no bandwidth-delay estimate)", got, calls)
	}
}
