package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The wal kind is withdrawn from cohortd (walUsable); this package's
// tests exercise it regardless, for the day a fixed raft-wal lifts that.
func init() { walUsable = true }

// The defect the wal kind is withdrawn for, on the library alone: raft
// truncates a log's tail (a follower's conflicting entries), the store is
// closed and opened again, and the log cannot be read. When this test
// fails, the raft-wal in go.mod has the defect fixed: make walUsable true
// and run the chaos suite on wal (cohort-chaos passes cohortd flags).
func TestWAL_TailTruncation_ReopenFails(t *testing.T) {
	dir := t.TempDir()
	w, err := openWAL(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{{Index: 8, Term: 2, Type: raft.LogCommand, Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = openWAL(dir, hclog.NewNullLogger())
	if err == nil || !strings.Contains(err.Error(), "sealed segment has no index block") {
		t.Fatalf("reopening after a tail truncation: %v; raft-wal no longer has the defect the wal kind is withdrawn for: lift walUsable", err)
	}
	walUsable = false
	defer func() { walUsable = true }()
	if err := ValidateLogStore(LogStoreWAL); !errors.Is(err, errWALWithdrawn) {
		t.Fatalf("ValidateLogStore(wal) while withdrawn: %v", err)
	}
}

// A cluster on raft-wal commits, snapshots (which truncates the log), and
// a follower that crashed comes back from its own log and catches up.
func TestLogStore_WALCluster_CommitsSnapshotsAndRestarts(t *testing.T) {
	c := newTestCluster(t, 3, func(_ int, cfg *Config) { cfg.LogStore = LogStoreWAL })
	leader := c.leader()
	for _, tn := range c.nodes {
		if got := tn.node.LogStore(); got != LogStoreWAL {
			t.Fatalf("%s runs on %q, want wal", tn.node.ID(), got)
		}
		if _, err := os.Stat(filepath.Join(tn.cfg.DataDir, "raft", "raft.db")); err == nil {
			t.Fatalf("%s has a raft.db beside its wal", tn.node.ID())
		}
	}
	for i := range 30 {
		leader.apply(t, createTopic(fmt.Sprintf("t%02d", i), 2))
	}
	if err := leader.node.Snapshot(t.Context()); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	follower := c.followerOf(leader)
	follower.crash()
	for i := 30; i < 60; i++ {
		leader.apply(t, createTopic(fmt.Sprintf("t%02d", i), 2))
	}
	back := follower.restart(t)
	if !back.node.HadExistingState() || back.node.LogStore() != LogStoreWAL {
		t.Fatalf("restarted follower: existing state %v, log store %q; want true, wal", back.node.HadExistingState(), back.node.LogStore())
	}
	waitConverged(t, leader, c.runningWith(follower, back)...)
	if s := back.fsm.Stats(); s.Topics != 60 {
		t.Fatalf("restarted follower holds %d topics, want 60", s.Topics)
	}
}

// A data dir keeps the kind of log store it was created with: unset opens
// it whatever it is, the other kind named explicitly is refused with an
// error naming both, and a new data dir without a choice gets bolt.
func TestLogStore_DataDirKeepsItsKind(t *testing.T) {
	for _, kind := range []string{LogStoreBolt, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, "solo")
			if kind == LogStoreWAL {
				cfg.LogStore = LogStoreWAL
			}
			tn := newSingleNode(t, cfg)
			waitFor(t, 10*time.Second, "single node leads", func() (bool, string) { return tn.node.IsLeader(), "" })
			tn.apply(t, createTopic("kept", 3))
			if got := tn.node.LogStore(); got != kind {
				t.Fatalf("new data dir runs on %q, want %q", got, kind)
			}
			tn.stop()

			other := map[string]string{LogStoreBolt: LogStoreWAL, LogStoreWAL: LogStoreBolt}[kind]
			bad := tn.cfg
			bad.LogStore = other
			n, err := New(bad, fsm.New())
			if err == nil {
				n.Shutdown(t.Context())
				t.Fatalf("a %s data dir opened as %s", kind, other)
			}
			for _, want := range []string{tn.cfg.DataDir, "holds a " + kind + " log store", other + " asked for"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}

			unset := tn.cfg
			unset.LogStore = ""
			again := startTestNode(t, unset)
			if got := again.node.LogStore(); got != kind {
				t.Fatalf("reopened with the log store unset: runs on %q, want %q", got, kind)
			}
			waitFor(t, 10*time.Second, "reopened node leads", func() (bool, string) { return again.node.IsLeader(), "" })
			if err := again.node.Barrier(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !hasTopic(again.fsm, "kept") {
				t.Fatal("the reopened node lost its topic")
			}
			again.stop()

			// A stray store of the other kind beside it: the node cannot
			// tell which is its log.
			stray := filepath.Join(tn.cfg.DataDir, "raft", "wal")
			if kind == LogStoreWAL {
				stray = filepath.Join(tn.cfg.DataDir, "raft", "raft.db")
				if err := os.WriteFile(stray, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Mkdir(stray, 0o700); err != nil {
				t.Fatal(err)
			}
			if n, err := New(unset, fsm.New()); err == nil {
				n.Shutdown(t.Context())
				t.Fatal("a data dir with two log stores opened")
			} else if !strings.Contains(err.Error(), "two raft log stores") {
				t.Fatalf("error %q does not say the data dir holds two log stores", err)
			}
		})
	}
}

func TestLogStore_UnknownKindRefused(t *testing.T) {
	cfg := testConfig(t, "solo")
	cfg.LogStore = "rocksdb"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `log store "rocksdb"`) {
		t.Fatalf("Validate: %v, want an error naming the log store", err)
	}
}

// Damage to a raft-wal store is an error naming its directory, never a
// panic or a node that starts with entries missing from the middle.
func TestNew_CorruptWAL_ErrorNamesTheDirectory(t *testing.T) {
	cfg := testConfig(t, "solo")
	cfg.LogStore = LogStoreWAL
	tn := newSingleNode(t, cfg)
	waitFor(t, 10*time.Second, "single node leads", func() (bool, string) { return tn.node.IsLeader(), "" })
	for i := range 20 {
		tn.apply(t, createTopic(fmt.Sprintf("t%02d", i), 3))
	}
	tn.stop()

	dir := filepath.Join(tn.cfg.DataDir, "raft", "wal")
	segments, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(segments) != 1 {
		t.Fatalf("segments %v (%v), want one", segments, err)
	}
	seg, meta := segments[0], filepath.Join(dir, walMetaFile)
	for name, damage := range map[string]struct {
		file string
		fn   func(b []byte) []byte
	}{
		"metadata file garbage": {meta, func(b []byte) []byte { fill(b, 0xA5); return b }},
		"metadata file cut":     {meta, func(b []byte) []byte { return b[:100] }},
		"segment header":        {seg, func(b []byte) []byte { fill(b[:32], 0x5A); return b }},
	} {
		t.Run(name, func(t *testing.T) {
			orig, err := os.ReadFile(damage.file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(damage.file, damage.fn(append([]byte(nil), orig...)), 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(damage.file, orig, 0o600)
			n, err := New(tn.cfg, fsm.New())
			if err == nil {
				n.Shutdown(t.Context())
				t.Fatal("the damaged log store opened without an error")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q does not name %s", err, dir)
			}
		})
	}

	// Undamaged again, it opens with every entry.
	again := startTestNode(t, tn.cfg)
	waitFor(t, 10*time.Second, "node leads", func() (bool, string) { return again.node.IsLeader(), "" })
	if err := again.node.Barrier(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := again.fsm.Stats(); s.Topics != 20 {
		t.Fatalf("reopened node holds %d topics, want 20", s.Topics)
	}
}

// raft-wal cannot tell damage inside its newest segment from a write torn
// by a crash: it keeps the entries before the damage and drops the rest.
// In a cluster that costs nothing committed: the follower starts behind
// and the leader sends it what it lost.
func TestLogStore_WALFollowerWithDamagedTail_CatchesUpFromTheLeader(t *testing.T) {
	c := newTestCluster(t, 3, func(_ int, cfg *Config) { cfg.LogStore = LogStoreWAL })
	leader := c.leader()
	for i := range 40 {
		leader.apply(t, createTopic(fmt.Sprintf("t%02d", i), 2))
	}
	waitConverged(t, leader, c.nodes...)
	follower := c.followerOf(leader)
	before := follower.node.LastIndex()
	follower.stop()
	segments, err := filepath.Glob(filepath.Join(follower.cfg.DataDir, "raft", "wal", "*.wal"))
	if err != nil || len(segments) != 1 {
		t.Fatalf("segments %v (%v), want one", segments, err)
	}
	b, err := os.ReadFile(segments[0])
	if err != nil {
		t.Fatal(err)
	}
	fill(b[1000:1600], 0x5A)
	if err := os.WriteFile(segments[0], b, 0o600); err != nil {
		t.Fatal(err)
	}

	// Reopened alone (its peers' addresses unreachable for now) it holds
	// a shorter log: the damage dropped entries.
	alone := follower.cfg
	alone.RaftBind = "127.0.0.1:0"
	n, err := New(alone, fsm.New())
	if err != nil {
		t.Fatalf("reopen the damaged follower: %v", err)
	}
	short := n.LastIndex()
	if err := n.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if short >= before {
		t.Fatalf("after the damage the follower's log ends at %d, not before %d: the damage dropped nothing, the test proves nothing", short, before)
	}

	back := follower.restart(t)
	for i := 40; i < 45; i++ {
		leader.apply(t, createTopic(fmt.Sprintf("t%02d", i), 2))
	}
	waitConverged(t, leader, c.runningWith(follower, back)...)
	if s := back.fsm.Stats(); s.Topics != 45 {
		t.Fatalf("the follower holds %d topics after catching up, want 45", s.Topics)
	}
}

// Recovery from a lost quorum works on a raft-wal data dir as on bolt.
func TestRecoverAsSingleNode_WAL(t *testing.T) {
	c := newTestCluster(t, 3, func(_ int, cfg *Config) { cfg.LogStore = LogStoreWAL })
	leader := c.leader()
	leader.apply(t, createTopic("survives", 2))
	waitConverged(t, leader, c.nodes...)
	for _, tn := range c.nodes {
		tn.stop()
	}
	survivor := c.nodes[0]
	id, err := RecoverAsSingleNode(survivor.cfg.DataDir, survivor.cfg.RaftBind, testLogger())
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if id != survivor.node.ID() {
		t.Fatalf("recovered node ID %q, want %q", id, survivor.node.ID())
	}
	cfg := survivor.cfg
	cfg.LogStore = ""
	again := startTestNode(t, cfg)
	waitFor(t, 10*time.Second, "recovered node leads alone", func() (bool, string) { return again.node.IsLeader(), "" })
	if err := again.node.Barrier(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !hasTopic(again.fsm, "survives") {
		t.Fatal("the recovered node lost the topic")
	}
	again.apply(t, createTopic("after", 1))
}
