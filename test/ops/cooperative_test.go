package ops

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// waitCurrentRules waits until the leader st names writes under this
// binary's command rules: a new cluster writes under rules 1 until every
// node has registered (fsm/rules.go), and a test of a newer rule must not
// race that.
func (c *cluster) waitCurrentRules(st *cohortv1.StatusResponse) {
	c.t.Helper()
	leaderHTTP := c.nodes[st.GetLeaderId()].http
	proc.WaitFor(c.t, 30*time.Second, "the leader to write under this binary's command rules", func() (bool, string) {
		v, err := metricLine(leaderHTTP, `cohort_command_rules{kind="writes",`)
		return err == nil && strings.HasSuffix(v, fmt.Sprint(fsm.CommandVersion)), fmt.Sprint(v, err)
	})
}

// metricLine returns the value text of the first /metrics line of a node
// that starts with prefix.
func metricLine(httpAddr, prefix string) (string, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %s on %s: %v", prefix, httpAddr, sc.Err())
}

// TestProcess_CooperativeCommitInOnRevoked: real cohortd processes, two
// cooperative-sticky members; the first, when the second joins, commits in
// OnRevoked the partitions it gives up (after the sync that took them
// away), in a callback slower than its session timeout. The commit is
// accepted, the offsets are there, and the first member kept its ID
// (issue 13, finding 6; before, the commit was NOT_OWNER).
func TestProcess_CooperativeCommitInOnRevoked(t *testing.T) {
	c := newCluster(t, "--min-session-timeout", "500ms")
	c.waitCurrentRules(c.waitVotersAfterForm(3))
	c.mustCtl("topics", "create", "orders", "--partitions", "4")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	const session = time.Second
	var (
		mu      sync.Mutex
		revoked []client.TopicPartition
		errs    []error
		first   *client.Member
	)
	member := func(name string, onRevoked func(context.Context, []client.TopicPartition)) *client.Member {
		return runMember(t, client.Config{
			Endpoints: endpoints, GroupID: "billing", Topics: []string{"orders"}, ClientID: name,
			Protocols:      []string{"cooperative-sticky"},
			SessionTimeout: session, RebalanceTimeout: 30 * time.Second, HeartbeatInterval: session / 5,
			OnRevoked: onRevoked,
		})
	}
	first = member("first", func(ctx context.Context, r []client.TopicPartition) {
		time.Sleep(3 * session) // time passes: an OnRevoked slower than three sessions
		var offs []client.PartitionOffset
		for _, tp := range r {
			offs = append(offs, client.PartitionOffset{TopicPartition: tp, Offset: 500 + int64(tp.Partition)})
		}
		err := first.Commit(ctx, offs)
		mu.Lock()
		defer mu.Unlock()
		revoked, errs = append(revoked, r...), append(errs, err)
	})
	proc.WaitFor(t, 30*time.Second, "the first member holding every partition", func() (bool, string) {
		return len(first.Assignment()) == 4, fmt.Sprint(first.Assignment())
	})
	id := first.MemberID()
	second := member("second", nil)
	proc.WaitFor(t, 60*time.Second, "two members holding two partitions each", func() (bool, string) {
		return len(first.Assignment()) == 2 && len(second.Assignment()) == 2 && first.Generation() == second.Generation(),
			fmt.Sprint(first.Assignment(), second.Assignment())
	})
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || errs[0] != nil {
		t.Fatalf("commits in OnRevoked: %v (gave up %v); want one, accepted", errs, revoked)
	}
	if got := first.MemberID(); got != id {
		t.Fatalf("the first member is now %s, was %s: the slow callback cost it its session", got, id)
	}
	offs, err := fetchOffsets(endpoints, "billing", client.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range revoked {
		if offs[tp.Partition] != 500+int64(tp.Partition) {
			t.Fatalf("offsets %v: partition %d, committed in OnRevoked, is missing", offs, tp.Partition)
		}
	}
	if !slices.Equal(second.Assignment(), revoked) {
		t.Fatalf("the second member holds %v, the first gave up %v", second.Assignment(), revoked)
	}
}
