package rpc_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/rpc"
)

// A node bounds the connections to its gRPC port (--grpc-max-conns):
// connections that do nothing fill it, the next is closed at once and
// counted in cohort_grpc_connections_refused_total, and the connection
// already open keeps being served.
func TestNode_GRPCConnectionsBounded(t *testing.T) {
	const max = 4
	c := testcluster.Start(t, 1, testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), GRPC: func(l *rpc.Limits) { l.MaxConnections = max }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	health := healthpb.NewHealthClient(c.Conn(0))
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	defer func() {
		for _, nc := range held {
			_ = nc.Close()
		}
	}()
	// With the client's connection open, max more cannot all fit.
	for range max {
		nc, err := net.Dial("tcp", c.Addr(0))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, nc)
	}
	testcluster.WaitFor(t, 10*time.Second, "a connection over --grpc-max-conns refused", func() (bool, string) {
		n := counter(t, c.Nodes[0].Collectors(), "cohort_grpc_connections_refused_total")
		return n >= 1, fmt.Sprintf("refused %v", n)
	})
	if !rpc.ClosedBy(held[len(held)-1], 5*time.Second) {
		t.Errorf("the last of %d silent connections beside a client's is still open with --grpc-max-conns %d", max, max)
	}
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("the client's connection after the refusal: %v", err)
	}
}

// counter is the value of the named metric among cs.
func counter(t *testing.T, cs []prometheus.Collector, name string) float64 {
	t.Helper()
	for _, col := range cs {
		if testutil.CollectAndCount(col, name) == 1 {
			return testutil.ToFloat64(col)
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
