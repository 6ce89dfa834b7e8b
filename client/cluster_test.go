package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// TestRealCluster_MembersShareOneGenerationAndCommit runs members against
// an in-process three-node cluster (real Raft, real gRPC): one generation,
// commits, fencing, a leave, and a kill -9 of the leader node that no member
// notices as a new generation.
func TestRealCluster_MembersShareOneGenerationAndCommit(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	endpoints := c.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := Dial(ConnConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	suffix := time.Now().UnixNano()
	topic, group := fmt.Sprintf("client-test-%d", suffix), fmt.Sprintf("client-test-%d", suffix)
	if _, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: topic, Partitions: 6}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}

	var members []*Member
	for i := range 3 {
		cfg := Config{
			Endpoints: endpoints, GroupID: group, ClientID: fmt.Sprintf("c%d", i), Topics: []string{topic},
			SessionTimeout: 6 * time.Second, HeartbeatInterval: 200 * time.Millisecond, RebalanceTimeout: 10 * time.Second,
		}
		m, _ := startMember(t, cfg)
		members = append(members, m)
	}
	settled := func(ms []*Member) bool {
		gen := ms[0].Generation()
		seen := map[TopicPartition]bool{}
		for _, m := range ms {
			if m.Generation() != gen || m.Generation() == NoGeneration {
				return false
			}
			for _, tp := range m.Assignment() {
				if seen[tp] {
					return false
				}
				seen[tp] = true
			}
		}
		return len(seen) == 6
	}
	waitFor(t, "three members in one generation holding every partition", func() bool { return settled(members) })
	gen := members[0].Generation()

	var want []string
	for _, m := range members {
		var offs []PartitionOffset
		for _, tp := range m.Assignment() {
			offs = append(offs, PartitionOffset{TopicPartition: tp, Offset: int64(100 + tp.Partition)})
			want = append(want, fmt.Sprintf("%s=%d", tp, 100+tp.Partition))
		}
		if err := m.Commit(ctx, offs); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	// A partition the member does not own is refused per partition.
	foreign := members[1].Assignment()[0]
	if err := members[0].Commit(ctx, []PartitionOffset{{TopicPartition: foreign, Offset: 1}}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("commit of a foreign partition: want NOT_OWNER, got %v", err)
	}
	fetched, err := conn.Groups().OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: group})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range fetched.GetPartitions() {
		got = append(got, fmt.Sprintf("%s=%d", TopicPartition{p.GetTopic(), p.GetPartition()}, p.GetOffset()))
	}
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("offsets: got %v, want %v", got, want)
	}

	// One leaves: the other two take over in a newer generation.
	closeCtx, closeCancel := context.WithTimeout(ctx, 10*time.Second)
	defer closeCancel()
	if err := members[2].Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two members in a new generation", func() bool { return settled(members[:2]) && members[0].Generation() > gen })
	if conn.Leader() == "" {
		t.Fatal("no cohort-leader header seen")
	}

	// kill -9 of the leader node: the members keep generation and
	// assignment, and commit again on the new leader.
	gen = members[0].Generation()
	before := [][]TopicPartition{members[0].Assignment(), members[1].Assignment()}
	c.Kill(c.Leader())
	c.WaitServing()
	for i, m := range members[:2] {
		offs := []PartitionOffset{{TopicPartition: m.Assignment()[0], Offset: 777}}
		if err := m.Commit(ctx, offs); err != nil {
			t.Fatalf("member %d commit after failover: %v", i, err)
		}
		if m.Generation() != gen || !slices.Equal(m.Assignment(), before[i]) {
			t.Fatalf("member %d after failover: generation %d assignment %v, had %d %v", i, m.Generation(), m.Assignment(), gen, before[i])
		}
	}
}
