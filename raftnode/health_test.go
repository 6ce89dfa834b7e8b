package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/internal/faultstore"
)

func TestLagFault_Threshold(t *testing.T) {
	tests := []struct {
		leaderCommit, applied, limit uint64
		want                         bool
	}{
		{100, 100, 10, false},
		{110, 100, 10, false}, // exactly at the limit
		{111, 100, 10, true},
		{90, 100, 10, false}, // ahead of an old observation
		{2000, 0, 1024, true},
	}
	for _, tt := range tests {
		err := lagFault(tt.leaderCommit, tt.applied, tt.limit)
		if (err != nil) != tt.want || (err != nil && !errors.Is(err, ErrLagging)) {
			t.Errorf("lagFault(commit %d, applied %d, limit %d) = %v, want fault %t", tt.leaderCommit, tt.applied, tt.limit, err, tt.want)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("limit --ready-max-lag %d", tt.limit)) {
			t.Errorf("lag fault %q does not name the limit", err)
		}
	}
}

func TestContactFault_Threshold(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		last time.Time
		want bool
	}{
		{"recent", now.Add(-100 * time.Millisecond), false},
		{"at the limit", now.Add(-2 * time.Second), false},
		{"past the limit", now.Add(-2*time.Second - time.Millisecond), true},
		{"never", time.Time{}, true},
	}
	for _, tt := range tests {
		err := contactFault(tt.last, now, 2*time.Second)
		if (err != nil) != tt.want || (err != nil && !errors.Is(err, ErrNoLeaderContact)) {
			t.Errorf("%s: contactFault = %v, want fault %t", tt.name, err, tt.want)
		}
	}
}

func TestTrailingFor_KeepsHalfTheLogBytesAtMost(t *testing.T) {
	tests := []struct {
		bytes, entries, limit int64
		configured, want      uint64
	}{
		{1 << 20, 256, 1 << 20, 10240, 128},       // 4 KiB entries: half of 1 MiB is 128 of them
		{1 << 20, 1 << 20, 1 << 20, 10240, 10240}, // tiny entries: the configured count binds
		{64 << 20, 1, 1 << 20, 10240, 1},          // one entry larger than the limit: keep one
		{0, 0, 1 << 20, 10240, 10240},             // nothing counted
	}
	for _, tt := range tests {
		if got := trailingFor(tt.bytes, tt.entries, tt.limit, tt.configured); got != tt.want {
			t.Errorf("trailingFor(%d bytes, %d entries, limit %d, configured %d) = %d, want %d",
				tt.bytes, tt.entries, tt.limit, tt.configured, got, tt.want)
		}
	}
}

// follower returns a running node other than leader.
func (c *testCluster) follower(leader *testNode) int {
	for i, tn := range c.nodes {
		if tn != leader {
			return i
		}
	}
	c.t.Fatal("no follower")
	return -1
}

func TestFollower_LogStoreFailsWrites_NotReadyWithReasonUntilWritesSucceed(t *testing.T) {
	stores := make([]*faultstore.FullDisk, 3)
	c := newTestCluster(t, 3, func(i int, cfg *Config) {
		cfg.ReadyMaxLag = 5
		cfg.WrapLogStore = func(s raft.LogStore) raft.LogStore {
			stores[i] = &faultstore.FullDisk{LogStore: s}
			return stores[i]
		}
	})
	leader := c.leader()
	fi := c.follower(leader)
	f := c.nodes[fi]
	waitFor(t, 20*time.Second, "the follower to be ready", func() (bool, string) {
		ok, reason := f.node.Ready()
		return ok, reason
	})

	stores[fi].Failing.Store(true)
	for i := range 20 {
		leader.apply(t, createTopic(fmt.Sprintf("t%d", i), 1))
	}
	waitFor(t, 20*time.Second, "the follower to report its failing disk", func() (bool, string) {
		ok, reason := f.node.Ready()
		fault := f.node.Fault()
		switch {
		case ok:
			return false, "Ready() is true"
		case !strings.Contains(reason, "no space left on device"):
			return false, fmt.Sprintf("reason %q does not name the write error", reason)
		case !errors.Is(fault, ErrLogWriteFailing):
			return false, fmt.Sprintf("Fault() = %v, want ErrLogWriteFailing", fault)
		case !errors.Is(fault, ErrLagging) || !strings.Contains(reason, "limit --ready-max-lag 5"):
			return false, fmt.Sprintf("reason %q: want the lag and its limit too", reason)
		}
		return true, ""
	})
	if ok, reason := leader.node.Ready(); !ok {
		t.Errorf("the leader is not ready while a follower's disk fails: %s", reason)
	}
	if v := counterValue(t, f.node.metrics.writeErrors.WithLabelValues("raft log append")); v == 0 {
		t.Error("cohort_raft_write_errors_total{write=\"raft log append\"} did not count the failures")
	}

	stores[fi].Failing.Store(false)
	waitFor(t, 60*time.Second, "the follower to be ready again once writes succeed", func() (bool, string) {
		ok, reason := f.node.Ready()
		return ok && f.node.Fault() == nil, reason
	})
	waitConverged(t, leader, c.nodes...)
}

func TestFollower_CutOffFromLeader_FaultNamesLastContact(t *testing.T) {
	c := newTestCluster(t, 2, func(_ int, cfg *Config) {
		cfg.ReadyMaxLastContact = cfg.HeartbeatTimeout
	})
	leader := c.leader()
	f := c.nodes[c.follower(leader)]
	waitFor(t, 20*time.Second, "the follower to be fit", func() (bool, string) {
		err := f.node.Fault()
		return err == nil, fmt.Sprint(err)
	})
	leader.crash()
	waitFor(t, 20*time.Second, "the survivor to report the lost contact", func() (bool, string) {
		err := f.node.Fault()
		if !errors.Is(err, ErrNoLeaderContact) || !strings.Contains(err.Error(), "limit --ready-max-last-contact 500ms") {
			return false, fmt.Sprintf("Fault() = %v", err)
		}
		return true, ""
	})
}

// bigCommand is a command whose log entry is about size bytes (the FSM
// refuses it; the log holds it all the same).
func bigCommand(size int) *fsmv1.Command {
	return joinMember("g", strings.Repeat("m", size), false, "t")
}

func TestNode_LogBytesPastLimit_TakesSnapshotAndCompacts(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.SnapshotThreshold = 1 << 40 // never by count
	cfg.SnapshotLogBytes = minSnapshotLogBytes
	tn := newSingleNode(t, cfg)
	c := &testCluster{t: t, nodes: []*testNode{tn}}
	c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 40 { // 40 × ~4 KiB: more than twice the 64 KiB limit
		if _, err := tn.node.Apply(ctx, bigCommand(4096)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "a size-triggered snapshot", func() (bool, string) {
		s := tn.node.Stats()
		return s.LastSnapshot > 0, fmt.Sprintf("last snapshot index %d, log bytes since %d", s.LastSnapshot, tn.node.logBytes.Load())
	})
	if v := counterValue(t, tn.node.metrics.sizeSnapshots); v == 0 {
		t.Error("cohort_raft_size_triggered_snapshots_total is 0")
	}
	// Fewer trailing entries than the 10240 configured: the log keeps
	// about half the limit's worth.
	first, err := tn.node.store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 1 {
		t.Errorf("log not compacted: first index %d", first)
	}
	waitFor(t, 20*time.Second, "the configured trailing logs back", func() (bool, string) {
		got := tn.node.raft.ReloadableConfig().TrailingLogs
		return got == cfg.TrailingLogs, fmt.Sprintf("trailing logs %d, configured %d", got, cfg.TrailingLogs)
	})
	// Entries appended after the first snapshot make another one due.
	waitFor(t, 20*time.Second, "the log byte count to restart below the limit", func() (bool, string) {
		b := tn.node.logBytes.Load()
		return b < cfg.SnapshotLogBytes, fmt.Sprintf("%d bytes since the last snapshot", b)
	})
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
