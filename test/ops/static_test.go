package ops

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/internal/proc"
)

// TestProcess_StaticMemberDuplicate_NewestIncarnationWins: two processes
// run with the same static instance ID, the second started while the
// first waits at the join barrier (the group's initial rebalance delay).
// The newer one takes the slot and keeps it; the older one is fenced
// (FENCED_INSTANCE_ID) and stops, instead of rejoining with its instance
// ID and taking the slot back, which had the two fence each other in
// turn (KIP-345; issue 13, finding 1).
func TestProcess_StaticMemberDuplicate_NewestIncarnationWins(t *testing.T) {
	const delay = 6 * time.Second
	c := newCluster(t, "--initial-rebalance-delay", delay.String())
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "4")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	start := func() (*client.Member, chan error) {
		m, err := client.NewMember(client.Config{
			Endpoints: endpoints, GroupID: "billing", Topics: []string{"orders"}, InstanceID: "worker-1",
			SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(context.Background()) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = m.Close(ctx)
		})
		return m, done
	}
	older, olderDone := start()
	proc.WaitFor(t, 20*time.Second, "the older incarnation waits at the initial delay", func() (bool, string) {
		d, err := describeGroup(endpoints, "billing", client.Credentials{})
		if err != nil {
			return false, err.Error()
		}
		return d.GetState() == "PreparingRebalance" && len(d.GetMembers()) == 1, d.String()
	})
	newer, newerDone := start()

	// The older one is fenced at once, at the barrier, not after the join
	// completes (the initial delay) and a heartbeat finds it replaced, by
	// which time the two had already taken the slot from each other.
	select {
	case err := <-olderDone:
		if !errors.Is(err, client.ErrFencedInstanceID) {
			t.Fatalf("the older incarnation stopped with %v, want ErrFencedInstanceID", err)
		}
	case <-time.After(delay / 2):
		t.Fatalf("the older incarnation still runs %s after a newer one took its instance (member %q): it was not fenced at the barrier", delay/2, older.MemberID())
	}
	proc.WaitFor(t, 30*time.Second, "the newer incarnation holds every partition", func() (bool, string) {
		return len(newer.Assignment()) == 4, fmt.Sprint(newer.Assignment())
	})
	// It keeps them: the group is Stable with the newer incarnation as its
	// only member, over several heartbeats.
	time.Sleep(time.Second) // time passes: several heartbeats of the newer incarnation
	select {
	case err := <-newerDone:
		t.Fatalf("the newer incarnation stopped: %v", err)
	default:
	}
	d, err := describeGroup(endpoints, "billing", client.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetState() != "Stable" || len(d.GetMembers()) != 1 || d.GetMembers()[0].GetMemberId() != newer.MemberID() {
		t.Fatalf("group %s with members %v, want Stable with only the newer incarnation %s", d.GetState(), d.GetMembers(), newer.MemberID())
	}
}
