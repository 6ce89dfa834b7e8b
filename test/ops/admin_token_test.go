package ops

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
)

// membershipState is what a refused cluster change must not move: the
// leader, every server with its suffrage, and the topics (a restore would
// replace them).
func (c *cluster) membershipState() string {
	c.t.Helper()
	st, err := c.status()
	if err != nil {
		c.t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "leader %s;", st.GetLeaderId())
	for _, s := range st.GetServers() {
		fmt.Fprintf(&b, " %s voter=%t;", s.GetNodeId(), s.GetVoter())
	}
	conn := c.conn(c.nodes[st.GetLeaderId()].grpcAddr, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	topics, err := client.ListTopics(ctx, cohortv1.NewTopicsClient(conn), &cohortv1.ListTopicsRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, tp := range topics {
		fmt.Fprintf(&b, " topic %s/%d;", tp.GetTopic(), tp.GetPartitions())
	}
	return b.String()
}

// TestProcess_AdminCredential_CohortctlClusterChangesAndRestore: the
// operator's commands that change the cluster (add-nonvoter, promote,
// demote, add-voter, transfer-leader, snapshot restore), run through
// cohortctl against a cluster with mutual TLS and an admin token, are each
// refused without a credential and with a wrong token (Unauthenticated),
// and with a client's or another node's certificate (PermissionDenied), and
// nothing changes: same leader, same servers and suffrage, same topics.
// With the admin token, or the admin certificate, each does what it says.
// (TestProcess_Authz_EveryMutatingRPC_NeedsItsRole already calls AddVoter,
// Demote, TransferLeadership and SnapshotRestore through the gRPC API;
// AddNonvoter and Promote, whose rule also lets a node act on itself, were
// tried nowhere.)
func TestProcess_AdminCredential_CohortctlClusterChangesAndRestore(t *testing.T) {
	const token = "admin-token-for-cohortctl-0123"
	c := newSecureCluster(t, "--admin-token", token)
	c.waitVotersAfterForm(3)
	endpoints := "COHORT_ENDPOINTS=" + strings.Join(c.grpcAddrs("n1", "n2", "n3"), ",")
	ca := "COHORT_TLS_CA=" + c.files("admin").CA
	withToken := []string{endpoints, ca, "COHORT_TOKEN=" + token}
	withAdminCert := append([]string{endpoints}, c.tlsEnv("admin")...)
	refused := []struct {
		who  string
		env  []string
		want string
	}{
		{"no credential", []string{endpoints, ca}, "Unauthenticated"},
		{"a wrong token", []string{endpoints, ca, "COHORT_TOKEN=not-the-admin-token-0000"}, "Unauthenticated"},
		{"a client certificate", append([]string{endpoints}, c.tlsEnv("client")...), "PermissionDenied"},
		// A node may add and promote itself, not another node.
		{"another node's certificate", append([]string{endpoints}, c.tlsEnv("n2")...), "PermissionDenied"},
	}

	// n4 runs without --join: it waits for the cluster to add it.
	n4 := c.start("n4")
	c.mustCtl("topics", "create", "before-save", "--partitions", "2")
	snap := filepath.Join(t.TempDir(), "cluster.snap")
	c.mustCtl("snapshot", "save", snap)
	c.mustCtl("topics", "create", "after-save", "--partitions", "1")

	leaderNow := func() string {
		st, err := c.status()
		if err != nil {
			t.Fatal(err)
		}
		return st.GetLeaderId()
	}
	waitServer := func(what string, cond func(st *cohortv1.StatusResponse) bool) {
		t.Helper()
		proc.WaitFor(t, 60*time.Second, what, func() (bool, string) {
			st, err := c.status()
			if err != nil {
				return false, err.Error()
			}
			return cond(st), describe(st)
		})
	}
	isVoter := func(want bool) func(st *cohortv1.StatusResponse) bool {
		return func(st *cohortv1.StatusResponse) bool {
			s := server(st, "n4")
			return s != nil && s.GetVoter() == want && s.GetHealthy()
		}
	}

	steps := []struct {
		args   []string
		okEnv  []string
		okWith string
		done   func()
	}{
		{[]string{"cluster", "add-nonvoter", "n4", "--raft-addr", n4.raft, "--grpc-addr", n4.grpcAddr}, withToken, "the admin token", func() {
			waitServer("n4 a healthy non-voter", isVoter(false))
		}},
		{[]string{"cluster", "promote", "n4"}, withAdminCert, "the admin certificate", func() {
			waitServer("n4 a healthy voter", isVoter(true))
		}},
		{[]string{"cluster", "demote", "n4"}, withToken, "the admin token", func() {
			waitServer("n4 a healthy non-voter again", isVoter(false))
		}},
		{[]string{"cluster", "add-voter", "n4", "--raft-addr", n4.raft, "--grpc-addr", n4.grpcAddr}, withAdminCert, "the admin certificate", func() {
			waitServer("n4 a healthy voter again", isVoter(true))
		}},
		{[]string{"cluster", "transfer-leader", "n4"}, withToken, "the admin token", func() {
			proc.WaitFor(t, 30*time.Second, "n4 leads", func() (bool, string) {
				l := leaderNow()
				return l == "n4", "leader " + l
			})
		}},
		{[]string{"snapshot", "restore", snap}, withToken, "the admin token", func() {
			proc.WaitFor(t, 30*time.Second, "the restored topics: before-save only", func() (bool, string) {
				names, err := topicNames(c.grpcAddrs("n1", "n2", "n3"), c.creds("admin"))
				return err == nil && slices.Equal(names, []string{"before-save"}), fmt.Sprint(names, err)
			})
		}},
	}
	for _, step := range steps {
		before := c.membershipState()
		for _, r := range refused {
			res := runCtlEnv(t, r.env, step.args...)
			if res.code == 0 || !strings.Contains(res.stderr, r.want) {
				t.Fatalf("cohortctl %s with %s: want %s, got %s", strings.Join(step.args, " "), r.who, r.want, res)
			}
		}
		if after := c.membershipState(); after != before {
			t.Fatalf("refused cohortctl %s changed the cluster:\nbefore %s\nafter  %s", strings.Join(step.args, " "), before, after)
		}
		res := runCtlEnv(t, step.okEnv, step.args...)
		if res.code != 0 {
			t.Fatalf("cohortctl %s with %s: %s", strings.Join(step.args, " "), step.okWith, res)
		}
		t.Logf("cohortctl %s with %s: %s", strings.Join(step.args, " "), step.okWith, strings.TrimSpace(res.stdout))
		step.done()
	}
}

// topicNames lists the topics' names, sorted, through the first node that
// answers.
func topicNames(endpoints []string, creds client.Credentials) ([]string, error) {
	var lastErr error
	for _, addr := range endpoints {
		conn, err := grpc.NewClient(addr, creds.DialOptions()...)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		topics, err := client.ListTopics(ctx, cohortv1.NewTopicsClient(conn), &cohortv1.ListTopicsRequest{})
		cancel()
		conn.Close()
		if err == nil {
			var names []string
			for _, tp := range topics {
				names = append(names, tp.GetTopic())
			}
			slices.Sort(names)
			return names, nil
		}
		lastErr = err
	}
	return nil, lastErr
}
