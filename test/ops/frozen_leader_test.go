package ops

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// standaloneCommitter commits increasing offsets of partition 0 of a group
// without members (generation -1), back to back, through one client.Conn,
// and records each commit's outcome.
type standaloneCommitter struct {
	conn         *client.Conn
	group, topic string
	cancel       context.CancelFunc
	done         chan struct{}

	mu      sync.Mutex
	okStart []time.Time // issue times of the commits that succeeded
	acked   int64       // highest offset a commit of which succeeded
	lastErr error
}

func startStandaloneCommits(t *testing.T, conn *client.Conn, group, topic string) *standaloneCommitter {
	ctx, cancel := context.WithCancel(context.Background())
	s := &standaloneCommitter{conn: conn, group: group, topic: topic, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	t.Cleanup(s.stop)
	return s
}

func (s *standaloneCommitter) run(ctx context.Context) {
	defer close(s.done)
	for off := int64(1); ctx.Err() == nil; off++ {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		resp, err := s.conn.Groups().OffsetCommit(cctx, &cohortv1.OffsetCommitRequest{GroupId: s.group, Generation: -1,
			Offsets: []*cohortv1.OffsetCommitPartition{{Topic: s.topic, Partition: 0, Offset: off}}})
		cancel()
		if err == nil {
			for _, p := range resp.GetPartitions() {
				if p.GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
					err = fmt.Errorf("offset %d refused: %v %s", off, p.GetError(), p.GetErrorMessage())
				}
			}
		}
		s.mu.Lock()
		if err != nil {
			s.lastErr = err
		} else {
			s.okStart = append(s.okStart, start)
			s.acked = off
		}
		s.mu.Unlock()
	}
}

// stop ends the commits and waits for the one in flight.
func (s *standaloneCommitter) stop() {
	s.cancel()
	<-s.done
}

// succeededAfter reports whether a commit issued at or after t succeeded.
func (s *standaloneCommitter) succeededAfter(t time.Time) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, at := range s.okStart {
		if !at.Before(t) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%d commits succeeded, all issued before; last error: %v", len(s.okStart), s.lastErr)
}

func (s *standaloneCommitter) ackedOffset() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// nodeInfo asks the node at addr to describe itself.
func nodeInfo(addr string, creds client.Credentials) (*cohortv1.NodeInfoResponse, error) {
	conn, err := grpc.NewClient(addr, creds.DialOptions()...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return cohortv1.NewClusterServiceClient(conn).NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
}

// replicaOffset reads partition 0's committed offset of group from the
// node at addr's own replica (a stale read: not forwarded); -1 when none.
func replicaOffset(addr, group string, creds client.Credentials) (int64, error) {
	conn, err := grpc.NewClient(addr, creds.DialOptions()...)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	fetched, err := client.FetchOffsets(ctx, cohortv1.NewGroupCoordinatorClient(conn), &cohortv1.OffsetFetchRequest{GroupId: group, AllowStale: true})
	if err != nil {
		return 0, err
	}
	for _, p := range fetched {
		if p.GetPartition() == 0 {
			return p.GetOffset(), nil
		}
	}
	return -1, nil
}

// TestProcess_FrozenLeader_CommitsMoveToTheNewLeaderWhileTheOldIsStopped:
// the leader is frozen (SIGSTOP) while a client commits back to back. Its
// connections stay open, so the commit in flight on it neither fails nor
// answers, and the client's attempts wait 30 s, twice as long as the test
// keeps the leader stopped: a commit issued after the freeze succeeds
// while the old leader is still stopped only because the client asked the
// other nodes which leader they know and went to the one they named.
// Resumed, the old leader rejoins as a follower of the new one, and no
// acknowledged commit is lost on any replica.
func TestProcess_FrozenLeader_CommitsMoveToTheNewLeaderWhileTheOldIsStopped(t *testing.T) {
	c := newCluster(t)
	c.form(3)
	frozenLeaderScenario(t, c)
}

// The same with mutual TLS: the client asks the other nodes over its own
// connections, with its certificate.
func TestProcess_FrozenLeaderWithTLS_CommitsMoveToTheNewLeaderWhileTheOldIsStopped(t *testing.T) {
	c := newSecureCluster(t)
	c.form(3)
	frozenLeaderScenario(t, c)
}

// frozenLeaderScenario freezes the leader of c, a formed cluster of n1..n3,
// under a client committing as admin (a commit without a member).
func frozenLeaderScenario(t *testing.T, c *cluster) {
	creds := c.creds("admin")
	c.mustCtl("topics", "create", "orders", "--partitions", "1")
	ids := []string{"n1", "n2", "n3"}
	endpoints := c.grpcAddrs(ids...)
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old := st.GetLeaderId()
	oldAddr := c.nodes[old].grpcAddr

	conn, err := client.Dial(client.ConnConfig{Endpoints: endpoints, Credentials: creds, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cm := startStandaloneCommits(t, conn, "frozen-leader", "orders")
	warm := time.Now()
	proc.WaitFor(t, 15*time.Second, "commits succeed on the leader", func() (bool, string) { return cm.succeededAfter(warm) })
	if conn.Leader() != oldAddr {
		t.Fatalf("the client commits to %q, want the leader %s (%s)", conn.Leader(), old, oldAddr)
	}

	frozeAt := time.Now()
	c.signal(old, syscall.SIGSTOP)
	frozen := true
	t.Cleanup(func() {
		if frozen {
			_ = c.nodes[old].proc.Resume()
		}
	})
	proc.WaitFor(t, 15*time.Second, "a commit issued after "+old+" froze succeeds while it is stopped", func() (bool, string) {
		return cm.succeededAfter(frozeAt)
	})
	if !c.nodes[old].proc.Paused() {
		t.Fatalf("%s is no longer stopped", old)
	}
	if l := conn.Leader(); l == oldAddr || l == "" {
		t.Fatalf("the client's leader is %q after the switch, want a node other than %s", l, oldAddr)
	}

	c.signal(old, syscall.SIGCONT)
	frozen = false
	var newLeader string
	proc.WaitFor(t, 30*time.Second, old+" rejoins as a follower of the new leader", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		newLeader = st.GetLeaderId()
		info, err := nodeInfo(oldAddr, creds)
		if err != nil {
			return false, err.Error()
		}
		s := server(st, old)
		ok := newLeader != old && newLeader != "" && s != nil && s.GetVoter() && s.GetHealthy() &&
			info.GetState() == cohortv1.RaftState_RAFT_STATE_FOLLOWER && info.GetLeaderId() == newLeader
		return ok, fmt.Sprintf("%s; %s says %v, leader %q", describe(st), old, info.GetState(), info.GetLeaderId())
	})
	c.waitVoters(ids...)

	resumed := time.Now()
	proc.WaitFor(t, 15*time.Second, "commits succeed after "+old+" resumed", func() (bool, string) { return cm.succeededAfter(resumed) })
	cm.stop()
	acked := cm.ackedOffset()
	got, err := fetchOffsets(endpoints, "frozen-leader", creds)
	if err != nil || got[0] < acked {
		t.Fatalf("committed offset %v (%v), want at least the last acknowledged %d", got, err, acked)
	}
	for _, id := range ids {
		addr := c.nodes[id].grpcAddr
		proc.WaitFor(t, 10*time.Second, id+"'s replica holds the last acknowledged offset", func() (bool, string) {
			got, err := replicaOffset(addr, "frozen-leader", creds)
			return err == nil && got >= acked, fmt.Sprintf("%d %v, want >= %d", got, err, acked)
		})
	}
}
