package ops

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
)

// staleOffsets reads a group's committed offsets from one node's own
// replica (a stale read: not forwarded), keeping those that are set.
func staleOffsets(addr, group string) (map[int32]int64, error) {
	conn, err := grpc.NewClient(addr, client.Credentials{}.DialOptions()...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	fetched, err := client.FetchOffsets(ctx, cohortv1.NewGroupCoordinatorClient(conn), &cohortv1.OffsetFetchRequest{GroupId: group, AllowStale: true})
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, p := range fetched {
		if p.GetOffset() >= 0 {
			out[p.GetPartition()] = p.GetOffset()
		}
	}
	return out, nil
}

// TestProcess_RetentionSweepAfterFailover_NewLeaderExpiresEmptyGroupsOnly:
// a group goes empty, its offsets' retention (2 s) passes while the leader
// that saw it go empty leads, and that leader is killed before it sweeps
// (its check interval is an hour: its one sweep ran a second after it
// gained leadership, before the group existed). The new leader sweeps on
// gaining leadership: the empty group's offsets are gone on every
// surviving replica, and a group with a live member keeps its offsets and
// its member.
func TestProcess_RetentionSweepAfterFailover_NewLeaderExpiresEmptyGroupsOnly(t *testing.T) {
	const retention = 2 * time.Second
	c := newCluster(t, "--offsets-retention", retention.String(), "--offsets-retention-check-interval", "1h")
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "2")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	idle := newGroupLoad(t, endpoints, "idle", "orders")
	busy := newGroupLoad(t, endpoints, "busy", "orders")
	idle.add("gone", false)
	busy.add("stays", false)
	idle.waitStable(endpoints, 2)
	busy.waitStable(endpoints, 2)
	for _, g := range []*groupLoad{idle, busy} {
		proc.WaitFor(t, 10*time.Second, "commits of "+g.group+" on both partitions", func() (bool, string) {
			got, err := fetchOffsets(endpoints, g.group, client.Credentials{})
			return err == nil && len(got) == 2 && got[0] > 0 && got[1] > 0, fmt.Sprint(got, err)
		})
	}

	idle.stop("gone") // leaves: the group is empty from this entry on
	var emptySeen time.Time
	proc.WaitFor(t, 10*time.Second, "idle empty", func() (bool, string) {
		d, err := describeGroup(endpoints, "idle", client.Credentials{})
		if err != nil {
			return false, err.Error()
		}
		emptySeen = time.Now()
		return d.GetState() == "Empty", d.GetState()
	})
	// The offsets must be past their retention (from the entry that
	// emptied the group, before emptySeen) while the old leader still
	// leads, so that only a sweep is missing.
	time.Sleep(time.Until(emptySeen.Add(retention + 500*time.Millisecond))) // time passes: past the offsets' retention
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old := st.GetLeaderId()
	if got, err := fetchOffsets(endpoints, "idle", client.Credentials{}); err != nil || len(got) != 2 {
		t.Fatalf("idle's offsets on %s before the failover: %v %v, want both still there (the old leader sweeps an hour apart)", old, got, err)
	}
	c.kill(old)
	var rest []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != old {
			rest = append(rest, id)
		}
	}
	survivors := c.grpcAddrs(rest...)

	var newLeader string
	proc.WaitFor(t, 15*time.Second, "a new leader's sweep removes idle's offsets on every survivor", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		newLeader = st.GetLeaderId()
		var left []string
		for _, addr := range survivors {
			got, err := staleOffsets(addr, "idle")
			if err != nil || len(got) > 0 {
				left = append(left, fmt.Sprintf("%s: %v %v", addr, got, err))
			}
		}
		return len(left) == 0, fmt.Sprintf("leader %s; offsets left: %s", newLeader, strings.Join(left, "; "))
	})
	if newLeader == old || newLeader == "" {
		t.Fatalf("leader %q after killing %s", newLeader, old)
	}
	if logs := c.nodes[newLeader].out.String(); !strings.Contains(logs, `msg="offsets expired"`) {
		t.Fatalf("%s's log does not show its sweep:\n%s", newLeader, proc.Tail(logs, 30))
	}
	d, err := describeGroup(survivors, "idle", client.Credentials{})
	if err != nil || d.GetState() != "Dead" {
		t.Fatalf("idle after the sweep: %v %v, want Dead (removed with its offsets)", d, err)
	}

	// The group with a member keeps everything, on every replica.
	busy.waitStable(survivors, 2)
	busy.pause()
	busy.checkNoLoss(survivors)
	for _, addr := range survivors {
		proc.WaitFor(t, 10*time.Second, "busy's offsets on "+addr, func() (bool, string) {
			got, err := staleOffsets(addr, "busy")
			return err == nil && len(got) == 2, fmt.Sprint(got, err)
		})
	}
}
