package ops

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestProcess_ReplaceNode_CatchesUpThroughSnapshotAndBecomesVoter: a node
// is killed, its data wiped and it is removed; started fresh with --join it
// catches up through a snapshot install (the log was compacted) and is
// promoted to voter.
func TestProcess_ReplaceNode_CatchesUpThroughSnapshotAndBecomesVoter(t *testing.T) {
	c := newCluster(t, "--raft-snapshot-threshold", "16", "--raft-trailing-logs", "4", "--raft-snapshot-interval", "100ms")
	c.form(3)
	createTopics(t, c.grpcAddrs("n1", "n2", "n3"), "t", 40)
	st := c.waitVoters("n1", "n2", "n3")
	leader := st.GetLeaderId()
	proc.WaitFor(t, 20*time.Second, "a snapshot on the leader", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(c.nodes[leader].dir, "raft", "snapshots", "*", "state.bin"))
		return len(m) > 0, "no snapshot yet"
	})

	victim := "n3"
	if leader == "n3" {
		victim = "n2"
	}
	c.kill(victim)
	if err := os.RemoveAll(c.nodes[victim].dir); err != nil {
		t.Fatal(err)
	}
	if out := c.mustCtl("cluster", "remove", victim); !strings.Contains(out, "removed "+victim) {
		t.Fatalf("remove %s: %q", victim, out)
	}
	var others []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != victim {
			others = append(others, id)
		}
	}
	c.waitVoters(others...)
	c.start(victim, "--join", strings.Join(c.grpcAddrs(others...), ","))
	c.waitVoters("n1", "n2", "n3")
	if !strings.Contains(c.nodes[victim].out.String(), "Installed remote snapshot") {
		t.Fatalf("%s caught up without a snapshot install", victim)
	}
	proc.WaitFor(t, 10*time.Second, victim+" has every topic", func() (bool, string) {
		n, err := countTopics(c.nodes[victim].grpcAddr)
		return err == nil && n == 40, fmt.Sprintf("%d topics, err %v", n, err)
	})
}

func createTopics(t *testing.T, endpoints []string, prefix string, n int) {
	t.Helper()
	conn, err := grpc.NewClient(endpoints[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tc := cohortv1.NewTopicsClient(conn)
	for i := range n {
		// Retried: right after formation a node may not know the
		// leader's gRPC address yet (Unavailable).
		proc.WaitFor(t, 10*time.Second, fmt.Sprintf("create topic %s%d", prefix, i), func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := tc.CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: fmt.Sprintf("%s%d", prefix, i), Partitions: 3})
			return err == nil || status.Code(err) == codes.AlreadyExists, fmt.Sprint(err)
		})
	}
}

// countTopics reads the topic count from one node's own state.
func countTopics(addr string) (int, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := cohortv1.NewTopicsClient(conn).ListTopics(ctx, &cohortv1.ListTopicsRequest{AllowStale: true})
	if err != nil {
		return 0, err
	}
	return len(resp.GetTopics()), nil
}

// TestProcess_RemoveAndReaddRepeatedly_BecomesVoterEachTime: a node removed
// and re-added fresh several times replays a log whose old configurations
// list it as a voter, then as removed; it must neither stop itself on an old
// configuration nor take an old one for its promotion.
func TestProcess_RemoveAndReaddRepeatedly_BecomesVoterEachTime(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	for round := range 3 {
		createTopics(t, c.grpcAddrs("n1", "n2"), fmt.Sprintf("r%d-", round), 10)
		c.kill("n3")
		if err := os.RemoveAll(c.nodes["n3"].dir); err != nil {
			t.Fatal(err)
		}
		c.mustCtl("cluster", "remove", "n3")
		c.waitVoters("n1", "n2")
		c.start("n3", "--join", strings.Join(c.grpcAddrs("n1", "n2"), ","))
		c.waitVoters("n1", "n2", "n3")
		proc.WaitFor(t, 10*time.Second, "n3 logs that it joined as a voter", func() (bool, string) {
			return strings.Count(c.nodes["n3"].out.String(), "joined the cluster as a voter") == round+1, "not yet"
		})
		if strings.Contains(c.nodes["n3"].out.String(), "removed from the cluster; shutting down") {
			t.Fatalf("round %d: n3 stopped itself on an old configuration", round)
		}
	}
}
