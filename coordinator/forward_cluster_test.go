package coordinator_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/raftnode"
)

// heldLog is a raft log store whose appends wait while it is held: a node
// on it takes no new entries (a follower held behind the leader) yet still
// answers heartbeats, so it stays fit to serve stale reads. Whatever such
// a node answers from its own state is visibly old.
type heldLog struct {
	raft.LogStore
	gate atomic.Pointer[chan struct{}]
}

func (h *heldLog) StoreLog(l *raft.Log) error { return h.StoreLogs([]*raft.Log{l}) }

func (h *heldLog) StoreLogs(logs []*raft.Log) error {
	if g := h.gate.Load(); g != nil {
		<-*g
	}
	return h.LogStore.StoreLogs(logs)
}

func (h *heldLog) hold() {
	g := make(chan struct{})
	h.gate.Store(&g)
}

func (h *heldLog) release() {
	if g := h.gate.Swap(nil); g != nil {
		close(*g)
	}
}

// heldBackCluster is cluster(t) with every node's log store holdable.
func heldBackCluster(t *testing.T) (*testcluster.Cluster, []*heldLog) {
	t.Helper()
	logs := make([]*heldLog, 3)
	cfg := testcluster.DefaultCoordinator()
	cfg.InitialRebalanceDelay = 200 * time.Millisecond
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg, Raft: func(i int, rc *raftnode.Config) {
		rc.WrapLogStore = func(s raft.LogStore) raft.LogStore {
			logs[i] = &heldLog{LogStore: s}
			return logs[i]
		}
	}})
	// Registered after the cluster's own cleanup, so it runs first: a
	// held node could not shut down.
	t.Cleanup(func() {
		for _, l := range logs {
			l.release()
		}
	})
	createTopic(t, c, "t", 6)
	return c, logs
}

// holdBehind stops follower taking new entries once it has applied all the
// leader has, so that its own state is exactly the cluster's state now.
func holdBehind(t *testing.T, c *testcluster.Cluster, logs []*heldLog, follower int) {
	t.Helper()
	leader := c.Nodes[c.Leader()].Node
	want := leader.AppliedIndex()
	testcluster.WaitFor(t, 10*time.Second, "the follower to apply all the leader has", func() (bool, string) {
		got := c.Nodes[follower].Node.AppliedIndex()
		return got >= want, fmt.Sprintf("applied %d, leader %d", got, want)
	})
	logs[follower].hold()
}
