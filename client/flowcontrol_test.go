package client

import (
	"context"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/h2proxy"
)

// A Conn's connections have static flow-control windows: receiving an
// answer does not make the client send a PING (gRPC's bandwidth-delay
// estimate sends one for each message on a quiet connection), so a call
// costs one write each way.
func TestConn_SendsNoFlowControlPings(t *testing.T) {
	const calls = 20
	node := newFakeCluster(t).node()
	proxy := h2proxy.New(t, node.addr)
	conn, err := Dial(ConnConfig{Endpoints: []string{proxy.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range calls {
		req := &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: -1,
			Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: int64(i)}}}
		if _, err := conn.Groups().OffsetCommit(ctx, req); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// The answers' DATA frames passed the proxy before the calls returned.
	if got := proxy.FromServer().Data; got < calls {
		t.Fatalf("the proxy saw %d DATA frames from the node for %d answers: the calls did not go through it", got, calls)
	}
	if got := proxy.FromClient().Pings; got != 0 {
		t.Errorf("the client sent %d PING frames over %d calls; want 0 (static windows, no bandwidth-delay estimate)", got, calls)
	}
}
