package workload

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// Against a real cluster with the hostile run's budgets, every hostile
// probe is refused with the promised code and none is accepted.
func TestHostile_EveryProbeRefusedAsPromised(t *testing.T) {
	cfg := testcluster.DefaultCoordinator()
	cfg.Budgets.Topics, cfg.Budgets.MembersPerGroup = 24, 16
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := createTopic(ctx, c.Addrs(), GroupsTopic, 6); err != nil {
		t.Fatal(err)
	}
	// Every probe, once to each node (Run picks them at random), judged as
	// Run judges them.
	w := &Hostile{Endpoints: c.Addrs(), Log: slog.New(slog.DiscardHandler)}
	w.sent, w.refused = map[string]int{}, map[string]int{}
	asked := 0
	for i := range c.Nodes {
		cc, err := grpc.NewClient(c.Addr(i), dialOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		h := &hostileConn{conn: cc, flood: &asked, groups: cohortv1.NewGroupCoordinatorClient(cc), topics: cohortv1.NewTopicsClient(cc)}
		for _, p := range hostileProbes() {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			w.judge(p, p.send(pctx, h, nil))
			pcancel()
		}
	}
	summary, violations := w.Verdict()
	t.Log(summary)
	if len(violations) > 0 {
		t.Fatalf("broken promises:\n%s", strings.Join(violations, "\n"))
	}
	for _, p := range hostileProbes() {
		if p.accept {
			continue // a flood: below its budget it is accepted
		}
		if w.refused[p.name] == 0 {
			t.Errorf("probe %q was never refused (sent %d)", p.name, w.sent[p.name])
		}
	}
}

// The topic flood reaches the topics budget and is refused there.
func TestHostile_TopicFloodStopsAtTheBudget(t *testing.T) {
	cfg := testcluster.DefaultCoordinator()
	cfg.Budgets.Topics = 24
	c := testcluster.Start(t, 1, testcluster.Options{Coordinator: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &Hostile{Endpoints: c.Addrs(), Log: slog.New(slog.DiscardHandler)}
	w.sent, w.refused = map[string]int{}, map[string]int{}
	cc, err := grpc.NewClient(c.Addr(0), dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	asked := 0
	h := &hostileConn{conn: cc, flood: &asked, topics: cohortv1.NewTopicsClient(cc)}
	var flood probe
	for _, p := range hostileProbes() {
		if p.name == "topic flood" {
			flood = p
		}
	}
	for range hostileTopics {
		w.judge(flood, flood.send(ctx, h, nil))
	}
	if _, v := w.Verdict(); len(v) > 0 || w.refused[flood.name] != hostileTopics-24 {
		t.Fatalf("%d of %d flood topics refused (want %d), violations %v", w.refused[flood.name], hostileTopics, hostileTopics-24, v)
	}
}
