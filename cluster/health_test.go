package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/faultstore"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/raftnode"
)

func TestMultiNode_FollowerDiskFails_UnhealthyWithReasonAndStaleReadsGoToLeader(t *testing.T) {
	stores := make([]*faultstore.FullDisk, 3)
	c := testcluster.Start(t, 3, testcluster.Options{
		Coordinator: testcluster.DefaultCoordinator(),
		Raft: func(i int, rc *raftnode.Config) {
			rc.WrapLogStore = func(s raft.LogStore) raft.LogStore {
				stores[i] = &faultstore.FullDisk{LogStore: s}
				return stores[i]
			}
		},
	})
	leader := c.WaitServing()
	fi := follower(c, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	health := func() (*cohortv1.HealthResponse, string) {
		h, err := cohortv1.NewClusterServiceClient(c.Conn(fi)).Health(ctx, &cohortv1.HealthRequest{})
		if err != nil {
			t.Fatalf("Health on %s: %v", c.Nodes[fi].ID, err)
		}
		return h, fmt.Sprintf("healthy %t, reason %q", h.GetHealthy(), h.GetReason())
	}
	waitFor(t, 20*time.Second, "the follower to be healthy", func() (bool, string) {
		h, s := health()
		return h.GetHealthy(), s
	})

	stores[fi].Failing.Store(true)
	if _, err := c.Topics(leader).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "after-failure", Partitions: 1}); err != nil {
		t.Fatalf("create a topic while a follower's disk fails: %v", err)
	}
	waitFor(t, 20*time.Second, "Health to name the follower's failing disk", func() (bool, string) {
		h, s := health()
		return !h.GetHealthy() && strings.Contains(h.GetReason(), "no space left on device"), s
	})
	// The standard gRPC health service says the same.
	grpcHealth := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := healthpb.NewHealthClient(c.Conn(fi)).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("grpc.health.v1 Check on %s: %v", c.Nodes[fi].ID, err)
		}
		return r.GetStatus()
	}
	waitFor(t, 10*time.Second, "grpc.health.v1 to say NOT_SERVING", func() (bool, string) {
		st := grpcHealth()
		return st == healthpb.HealthCheckResponse_NOT_SERVING, st.String()
	})
	// The follower could not store the topic; a stale read through it is
	// answered by the leader, which has it.
	resp, err := c.Topics(fi).ListTopics(ctx, &cohortv1.ListTopicsRequest{AllowStale: true})
	if err != nil {
		t.Fatalf("stale read on the faulty follower: %v", err)
	}
	var names []string
	for _, tp := range resp.GetTopics() {
		names = append(names, tp.GetTopic())
	}
	if !strings.Contains(strings.Join(names, ","), "after-failure") {
		t.Fatalf("stale read on the faulty follower listed %v: served from its own state, not the leader's", names)
	}

	stores[fi].Failing.Store(false)
	waitFor(t, 60*time.Second, "the follower to be healthy again", func() (bool, string) {
		h, s := health()
		return h.GetHealthy(), s
	})
	waitFor(t, 10*time.Second, "grpc.health.v1 to say SERVING again", func() (bool, string) {
		st := grpcHealth()
		return st == healthpb.HealthCheckResponse_SERVING, st.String()
	})
}
