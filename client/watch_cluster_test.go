package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// TestRealCluster_Watch_MembersHearOfRebalanceBeforeAnyHeartbeat: members
// whose heartbeats are 50 s apart settle, then a new member joins. Its
// join holds the group's barrier until every member has rejoined, which
// the settled members learn of only from their watch (their next
// heartbeat is most of a minute away): all three settle in a new
// generation within waitFor's 10 s. The watches stay open across
// generations, so a fourth member's join reaches all three the same way,
// and the round after it is the only one: a member acting on a stale
// message from its watch would start another.
func TestRealCluster_Watch_MembersHearOfRebalanceBeforeAnyHeartbeat(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := dialCluster(t, c.Addrs())
	if _, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 6}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	cfg := func(i int) Config {
		return Config{
			Endpoints: c.Addrs(), GroupID: "g", ClientID: fmt.Sprintf("c%d", i), Topics: []string{"t"},
			SessionTimeout: 60 * time.Second, HeartbeatInterval: 50 * time.Second, RebalanceTimeout: 60 * time.Second,
		}
	}
	var members []*Member
	for i := range 2 {
		m, _ := startMember(t, cfg(i))
		members = append(members, m)
	}
	settledAt := func(ms []*Member, gen int32) bool {
		seen := map[TopicPartition]bool{}
		for _, m := range ms {
			if m.Generation() != gen {
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
	waitFor(t, "two members settled in one generation", func() bool {
		return members[0].Generation() != NoGeneration && settledAt(members, members[0].Generation())
	})
	gen := members[0].Generation()

	m, _ := startMember(t, cfg(2))
	members = append(members, m)
	waitFor(t, fmt.Sprintf("three members settled in generation %d, the one after %d", gen+1, gen), func() bool {
		return settledAt(members, gen+1)
	})

	m, _ = startMember(t, cfg(3))
	members = append(members, m)
	waitFor(t, fmt.Sprintf("four members settled in generation %d", gen+2), func() bool {
		return settledAt(members, gen+2)
	})
	time.Sleep(time.Second) // time passes: a rebalance nobody asked for would start within it
	for i, m := range members {
		if g := m.Generation(); g != gen+2 {
			t.Fatalf("member %d at generation %d a second after the group settled in %d: a rebalance nobody asked for", i, g, gen+2)
		}
	}
}
