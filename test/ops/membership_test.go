package ops

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/internal/proc"
)

// TestProcess_PromoteLaggingNode_RefusedWithLag: a non-voter that is
// behind the leader by more than --promote-max-lag is not promoted, and
// the refusal says how far behind it is; once it has caught up, the same
// command promotes it.
func TestProcess_PromoteLaggingNode_RefusedWithLag(t *testing.T) {
	c := newCluster(t, "--promote-max-lag", "5")
	c.form(3)
	c.start("n4", "--join", strings.Join(c.grpcAddrs("n1", "n2", "n3"), ","), "--join-as-nonvoter")
	proc.WaitFor(t, 30*time.Second, "n4 a healthy non-voter", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		s := server(st, "n4")
		return s != nil && !s.GetVoter() && s.GetHealthy(), describe(st)
	})

	// Freeze n4 and move the log on by more than the limit.
	c.signal("n4", syscall.SIGSTOP)
	frozen := true
	t.Cleanup(func() {
		if frozen {
			_ = c.nodes["n4"].proc.Resume()
		}
	})
	endpoints := strings.Join(c.grpcAddrs("n1", "n2", "n3"), ",")
	for i := range 20 {
		if r := runCtl(t, endpoints, "topics", "create", fmt.Sprintf("t%d", i), "--partitions", "1"); r.code != 0 {
			t.Fatalf("create topic: %s", r)
		}
	}
	r := runCtl(t, endpoints, "cluster", "promote", "n4")
	if r.code == 0 {
		t.Fatalf("promote of a lagging node succeeded: %s", r)
	}
	m := regexp.MustCompile(`(\d+) entries behind the leader`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("refusal does not say how far behind n4 is: %s", r)
	}
	if lag, _ := strconv.Atoi(m[1]); lag < 20 {
		t.Fatalf("refusal says n4 is %d entries behind, want at least 20: %s", lag, r)
	}
	if !strings.Contains(r.stderr, "FailedPrecondition") {
		t.Fatalf("refusal is not FailedPrecondition: %s", r)
	}
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if s := server(st, "n4"); s == nil || s.GetVoter() {
		t.Fatalf("n4 changed after a refused promote: %s", describe(st))
	}

	// Caught up again, it is promoted; promoting again is a no-op.
	c.signal("n4", syscall.SIGCONT)
	frozen = false
	proc.WaitFor(t, 30*time.Second, "promote n4 accepted", func() (bool, string) {
		r := c.ctl("cluster", "promote", "n4")
		return r.code == 0, r.String()
	})
	c.waitVoters("n1", "n2", "n3", "n4")
	if out := c.mustCtl("cluster", "promote", "n4"); !strings.Contains(out, "already a voter") {
		t.Fatalf("second promote: %q, want 'already a voter'", out)
	}
}

// TestProcess_BadRequests_ClearErrorsNothingChanges: an unknown server ID
// and a removal that would leave no healthy quorum are refused with clear
// errors, and the configuration stays as it was.
func TestProcess_BadRequests_ClearErrorsNothingChanges(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	for _, args := range [][]string{
		{"cluster", "promote", "n9"},
		{"cluster", "demote", "n9"},
		{"cluster", "remove", "n9"},
		{"cluster", "transfer-leader", "n9"},
	} {
		r := c.ctl(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "NotFound") || !strings.Contains(r.stderr, `"n9" is not in the raft configuration`) {
			t.Fatalf("cohortctl %v: want NotFound naming n9, got %s", args, r)
		}
	}

	// n3 dies: removing n2 would leave n1 and the dead n3, one healthy voter of two.
	c.kill("n3")
	var r ctlResult
	proc.WaitFor(t, 20*time.Second, "removal of n2 refused for lack of a healthy quorum", func() (bool, string) {
		r = c.ctl("cluster", "remove", "n2")
		return r.code != 0 && strings.Contains(r.stderr, "only 1 are healthy"), r.String()
	})
	if !strings.Contains(r.stderr, "FailedPrecondition") || !strings.Contains(r.stderr, "force") {
		t.Fatalf("refusal should be FailedPrecondition and mention force: %s", r)
	}
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetServers()) != 3 {
		t.Fatalf("configuration changed after refused removal: %s", describe(st))
	}

	// Removing the dead node itself is safe, and idempotent.
	if out := c.mustCtl("cluster", "remove", "n3"); !strings.Contains(out, "removed n3") {
		t.Fatalf("remove n3: %q", out)
	}
	if out := c.mustCtl("cluster", "remove", "n3"); !strings.Contains(out, "already removed") {
		t.Fatalf("second remove n3: %q", out)
	}
	c.waitVoters("n1", "n2")
	// With two voters, removing one leaves fewer than a quorum of two.
	r = c.ctl("cluster", "remove", "n2")
	if r.code == 0 || !strings.Contains(r.stderr, "fewer than the quorum") {
		t.Fatalf("removal from a two-voter cluster: want a quorum refusal, got %s", r)
	}
	// Health of a live node is fine, of the dead one not.
	if r := runCtl(t, c.nodes["n1"].grpcAddr, "cluster", "health"); r.code != 0 {
		t.Fatalf("health of n1: %s", r)
	}
	if r := runCtl(t, c.nodes["n3"].grpcAddr, "cluster", "health"); r.code == 0 {
		t.Fatalf("health of the dead n3 succeeded: %s", r)
	}
}

// TestProcess_AdminToken_RequiredForAdminRPCs: with --admin-token, admin
// calls without the token are refused (Unauthenticated), health needs none,
// nodes use it among themselves (formation, registration, joining), and
// cohortctl passes it from COHORT_ADMIN_TOKEN. Authorization covers the
// group and topics APIs too: creating a topic needs it.
func TestProcess_AdminToken_RequiredForAdminRPCs(t *testing.T) {
	c := newCluster(t, "--admin-token", "s3cret-admin-token-0123")
	c.token = "s3cret-admin-token-0123"
	c.form(3)
	endpoints := "COHORT_ENDPOINTS=" + strings.Join(c.live(), ",")
	for _, args := range [][]string{{"cluster", "status"}, {"cluster", "remove", "n3"}, {"snapshot", "save", t.TempDir() + "/x.snap"}} {
		for _, env := range [][]string{{endpoints}, {endpoints, "COHORT_ADMIN_TOKEN=wrong"}} {
			r := runCtlEnv(t, env, args...)
			if r.code == 0 || !strings.Contains(r.stderr, "Unauthenticated") {
				t.Fatalf("cohortctl %v with %v: want Unauthenticated, got %s", args, env, r)
			}
		}
	}
	if r := runCtlEnv(t, []string{endpoints}, "cluster", "health"); r.code != 0 {
		t.Fatalf("health without a token: %s", r)
	}
	if r := runCtlEnv(t, []string{endpoints}, "topics", "create", "orders", "--partitions", "2"); r.code == 0 || !strings.Contains(r.stderr, "Unauthenticated") {
		t.Fatalf("topics create without a token: want Unauthenticated, got %s", r)
	}
	if out := c.mustCtl("topics", "create", "orders", "--partitions", "2"); !strings.Contains(out, "orders") {
		t.Fatalf("topics create with the token: %q", out)
	}
	c.start("n4", "--join", strings.Join(c.grpcAddrs("n1", "n2", "n3"), ","))
	c.waitVoters("n1", "n2", "n3", "n4")
	if out := c.mustCtl("cluster", "remove", "n4"); !strings.Contains(out, "removed n4") {
		t.Fatalf("remove with the token: %q", out)
	}
	c.waitExit("n4", 30*time.Second)
}
