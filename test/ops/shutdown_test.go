package ops

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
)

// statusOf asks one node for the cluster status as that node sees it.
func (c *cluster) statusOf(id string) (*cohortv1.StatusResponse, error) {
	conn, err := grpc.NewClient(c.nodes[id].grpcAddr, c.creds("admin").DialOptions()...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cohortv1.NewClusterServiceClient(conn).Status(ctx, &cohortv1.StatusRequest{})
}

// TestProcess_SIGTERMOnLeader_TransfersLeadershipBeforeExit: the leader of
// a three-node cluster, sent SIGTERM while a group commits, hands
// leadership to another node before it exits, so the cluster is without a
// leader for the moments a transfer takes rather than for an election
// timeout. The heartbeat timeout is 5 s: a follower cannot start an
// election of its own before 5 s without hearing from the leader, and the
// leader heartbeats until it stops, so a new leader within 4 s of the
// signal was elected by the transfer (one election: the term rises by
// exactly one). The process exits cleanly, no acknowledged commit is lost
// and the group keeps its generation.
func TestProcess_SIGTERMOnLeader_TransfersLeadershipBeforeExit(t *testing.T) {
	const heartbeatTimeout = 5 * time.Second
	// No election by timeout can begin before a heartbeat timeout after
	// the leader's last heartbeat, which it sends every tenth of it until
	// it stops.
	const transferBound = heartbeatTimeout - heartbeatTimeout/5
	c := newCluster(t, "--raft-heartbeat-timeout", heartbeatTimeout.String(), "--raft-election-timeout", heartbeatTimeout.String(),
		"--ready-max-last-contact", heartbeatTimeout.String(), "--raft-leader-lease-timeout", "1s")
	c.form(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "6")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	load := newGroupLoad(t, endpoints, "billing", "orders")
	load.add("m1", false)
	load.add("m2", false)
	gen := load.waitStable(endpoints, 6)

	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old, term := st.GetLeaderId(), st.GetTerm()
	var rest []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != old {
			rest = append(rest, id)
		}
	}
	// Commits acknowledged by the old leader, right up to the signal.
	proc.WaitFor(t, 10*time.Second, "commits acknowledged before the signal", func() (bool, string) {
		load.mu.Lock()
		defer load.mu.Unlock()
		return len(load.acked) == 6, fmt.Sprintf("%d of 6 partitions acknowledged", len(load.acked))
	})

	signalled := time.Now()
	c.signal(old, syscall.SIGTERM)
	var newLeader string
	var newTerm uint64
	var seenAt time.Time
	proc.WaitFor(t, transferBound, fmt.Sprintf("a survivor names a new leader within %s of SIGTERM to %s", transferBound, old), func() (bool, string) {
		var seen []string
		for _, id := range rest {
			s, err := c.statusOf(id)
			if err != nil {
				seen = append(seen, fmt.Sprintf("%s: %v", id, err))
				continue
			}
			if l := s.GetLeaderId(); l != "" && l != old {
				newLeader, newTerm, seenAt = l, s.GetTerm(), time.Now()
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s: %s", id, describe(s)))
		}
		return false, strings.Join(seen, "; ")
	})
	took := seenAt.Sub(signalled)
	t.Logf("%s leads term %d %s after SIGTERM to %s (term %d)", newLeader, newTerm, took.Round(time.Millisecond), old, term)
	if took > transferBound {
		t.Fatalf("%s was seen leading %s after SIGTERM to %s, past %s: elected by timeout, not by a transfer", newLeader, took, old, transferBound)
	}
	if newTerm != term+1 {
		t.Fatalf("the new leader %s leads term %d, the old one led term %d: more than the one election a transfer takes", newLeader, newTerm, term)
	}
	c.waitExit(old, 20*time.Second)
	if err := c.nodes[old].proc.Err(); err != nil {
		t.Fatalf("%s exited with %v after SIGTERM, want a clean exit", old, err)
	}
	// The stopping leader's own word that the transfer completed before it
	// shut Raft down, naming the node it handed over to.
	transferred := regexp.MustCompile(`msg="leadership transferred" .*new_leader=` + regexp.QuoteMeta(newLeader) + `(\s|$)`)
	if logs := c.nodes[old].out.String(); !transferred.MatchString(logs) {
		t.Fatalf("%s's log does not show a completed transfer to %s before it stopped:\n%s", old, newLeader, proc.Tail(logs, 30))
	}

	if g := load.waitStable(c.grpcAddrs(rest...), 6); g != gen {
		t.Fatalf("generation %d after the leader stopped, was %d: the members lost their sessions", g, gen)
	}
	load.pause()
	load.checkNoLoss(c.grpcAddrs(rest...))
}
