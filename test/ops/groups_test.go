package ops

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/internal/proc"
)

// TestProcess_Grow3To5AndShrink_GroupKeepsGenerationsAndCommits: two
// nodes join a three-node cluster with --join (entering as non-voters,
// promoted once caught up) and are removed again, while a consumer group
// rebalances (members join and leave) and commits throughout. The group's
// generations and assignments stay consistent and no acknowledged commit
// is lost.
func TestProcess_Grow3To5AndShrink_GroupKeepsGenerationsAndCommits(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "12")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	load := newGroupLoad(t, endpoints, "billing", "orders")
	load.add("m1", false)
	load.add("m2", false)
	gen0 := load.waitStable(endpoints, 12)

	join := strings.Join(endpoints, ",")
	c.start("n4", "--join", join)
	load.add("m3", false) // a rebalance while the cluster grows
	c.start("n5", "--join", join)
	c.waitVoters("n1", "n2", "n3", "n4", "n5")
	gen1 := load.waitStable(endpoints, 12)
	if gen1 <= gen0 {
		t.Fatalf("generation %d after m3 joined, was %d", gen1, gen0)
	}
	proc.WaitFor(t, 10*time.Second, "n4 and n5 each joined as a non-voter and were promoted", func() (bool, string) {
		logs := c.nodes["n4"].out.String() + c.nodes["n5"].out.String()
		return strings.Count(logs, "asked the cluster to add this node as a non-voter") == 2 &&
			strings.Count(logs, "joined the cluster as a voter") == 2, proc.Tail(logs, 30)
	})

	load.stop("m1") // another rebalance while it shrinks
	c.mustCtl("cluster", "remove", "n4")
	// n5 leaves by itself: `cohortd leave` asks the cluster to remove it.
	out, err := exec.Command(cohortdBin, "leave", "--data-dir", c.nodes["n5"].dir, "--grpc-addr", c.nodes["n5"].grpcAddr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "removed n5") {
		t.Fatalf("cohortd leave: %v\n%s", err, out)
	}
	c.waitExit("n4", 30*time.Second)
	c.waitExit("n5", 30*time.Second)
	c.waitVoters("n1", "n2", "n3")
	gen2 := load.waitStable(endpoints, 12)
	if gen2 <= gen1 {
		t.Fatalf("generation %d after m1 left, was %d", gen2, gen1)
	}
	for _, id := range []string{"n4", "n5"} {
		if !strings.Contains(c.nodes[id].out.String(), "removed from the cluster; shutting down") {
			t.Fatalf("%s did not stop itself on removal", id)
		}
	}
	load.pause()
	load.checkNoLoss(endpoints)
}

// TestProcess_RemoveLeader_LeadershipMovesFirstNoNewGeneration: removing
// the leader hands leadership over before the removal; the group's members
// keep their generation and IDs.
func TestProcess_RemoveLeader_LeadershipMovesFirstNoNewGeneration(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "6")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	load := newGroupLoad(t, endpoints, "billing", "orders")
	load.add("m1", false)
	load.add("m2", false)
	gen := load.waitStable(endpoints, 6)
	ids := load.memberIDs()

	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old := st.GetLeaderId()
	out := c.mustCtl("cluster", "remove", old)
	if !strings.Contains(out, "removed "+old) {
		t.Fatalf("remove %s: %q", old, out)
	}
	if !strings.Contains(c.nodes[old].out.String(), "leadership handed over before changing this node") {
		t.Fatalf("%s was removed without handing leadership over first", old)
	}
	c.waitExit(old, 30*time.Second)
	var rest []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != old {
			rest = append(rest, id)
		}
	}
	c.waitVoters(rest...)
	// Members heartbeat to the new leader for a while: same generation, same IDs.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if g := load.waitStable(c.grpcAddrs(rest...), 6); g != gen {
			t.Fatalf("generation %d after removing the leader, was %d", g, gen)
		}
		time.Sleep(200 * time.Millisecond) // time passes: the generation must hold for the whole window
	}
	if now := load.memberIDs(); !mapsEqual(now, ids) {
		t.Fatalf("member IDs changed: %v, were %v", now, ids)
	}
	load.pause()
	load.checkNoLoss(c.grpcAddrs(rest...))
}

// TestProcess_TransferLeadership_MembersKeepSessionsAndGeneration:
// leadership moves to the named node while members heartbeat; nobody is
// expired and no new generation starts.
func TestProcess_TransferLeadership_MembersKeepSessionsAndGeneration(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "6")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	load := newGroupLoad(t, endpoints, "billing", "orders")
	load.add("m1", false)
	load.add("m2", false)
	gen := load.waitStable(endpoints, 6)
	ids := load.memberIDs()

	for range 2 {
		st, err := c.status()
		if err != nil {
			t.Fatal(err)
		}
		target := "n1"
		if st.GetLeaderId() == "n1" {
			target = "n3"
		}
		out := c.mustCtl("cluster", "transfer-leader", target)
		if !strings.Contains(out, "to "+target) {
			t.Fatalf("transfer-leader %s: %q", target, out)
		}
		proc.WaitFor(t, 10*time.Second, "leader "+target, func() (bool, string) {
			st, err := c.status()
			if err != nil {
				return false, err.Error()
			}
			return st.GetLeaderId() == target, describe(st)
		})
		if out := c.mustCtl("cluster", "transfer-leader", target); !strings.Contains(out, "already the leader") {
			t.Fatalf("second transfer-leader %s: %q", target, out)
		}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if g := load.waitStable(endpoints, 6); g != gen {
				t.Fatalf("generation %d after the transfer, was %d", g, gen)
			}
			time.Sleep(200 * time.Millisecond) // time passes: the generation must hold for the whole window
		}
	}
	if now := load.memberIDs(); !mapsEqual(now, ids) {
		t.Fatalf("member IDs changed: %v, were %v", now, ids)
	}
	load.pause()
	load.checkNoLoss(endpoints)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
