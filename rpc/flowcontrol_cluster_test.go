package rpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cohortlabs/cohort/internal/h2proxy"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// A node's gRPC port has static flow-control windows: receiving a request
// does not make it send a PING (gRPC's bandwidth-delay estimate sends one
// for each message on a quiet connection), so a member's call costs the
// node one write, its answer.
func TestNode_SendsNoFlowControlPings(t *testing.T) {
	const calls = 20
	c := testcluster.Start(t, 1, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	proxy := h2proxy.New(t, c.Addr(0))
	// A plain gRPC client: what the node does, not what Cohort's clients do.
	cc, err := grpc.NewClient(proxy.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	health := healthpb.NewHealthClient(cc)
	for i := range calls {
		if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := proxy.FromClient().Data; got < calls {
		t.Fatalf("the proxy saw %d DATA frames from the client for %d calls: the calls did not go through it", got, calls)
	}
	if got := proxy.FromServer().Pings; got != 0 {
		t.Errorf("the node sent %d PING frames over %d calls; want 0 (static windows, no bandwidth-delay estimate)", got, calls)
	}
}
