package ops

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/internal/proc"
)

// TestProcess_LoseQuorumAndRecover_SurvivorCarriesOn: two of three nodes
// are lost for good; the cluster has no leader. `cohortd recover` makes the
// stopped survivor the only voter; it starts with every entry it had, and
// fresh nodes join it back to three.
func TestProcess_LoseQuorumAndRecover_SurvivorCarriesOn(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	createTopics(t, c.grpcAddrs("n1", "n2", "n3"), "t", 5)
	c.kill("n2")
	c.kill("n3")
	proc.WaitFor(t, 10*time.Second, "the survivor to report no leader", func() (bool, string) {
		r := runCtl(t, c.nodes["n1"].grpcAddr, "cluster", "health")
		return r.code != 0 && strings.Contains(r.stdout+r.stderr, "no raft leader"), r.String()
	})

	c.signal("n1", 15) // SIGTERM: stop it cleanly
	c.waitExit("n1", 20*time.Second)
	n1 := c.nodes["n1"]
	out, err := exec.Command(cohortdBin, "recover", "--data-dir", n1.dir, "--raft-addr", n1.raft).CombinedOutput()
	if err != nil {
		t.Fatalf("cohortd recover: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "is now the only voter") {
		t.Fatalf("cohortd recover: %s", out)
	}
	c.start("n1", n1.args[len(n1.args)-4:]...) // same --bootstrap-expect/--join: it has state and does not bootstrap
	c.waitVoters("n1")
	if n, err := countTopics(n1.grpcAddr); err != nil || n != 5 {
		t.Fatalf("survivor has %d topics (err %v), want 5", n, err)
	}

	for _, id := range []string{"n2", "n3"} {
		if err := os.RemoveAll(c.nodes[id].dir); err != nil {
			t.Fatal(err)
		}
		c.mustCtl("cluster", "remove", id) // already gone from the configuration: a no-op
		c.start(id, "--join", n1.grpcAddr)
	}
	c.waitVoters("n1", "n2", "n3")
	c.mustCtl("topics", "create", "after-recovery", "--partitions", "1")
}
