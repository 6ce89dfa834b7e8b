package raftnode

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
)

func TestConfig_Validate(t *testing.T) {
	base := DefaultConfig()
	base.DataDir, base.RaftBind = "/tmp/x", "127.0.0.1:7000"
	tests := []struct {
		name    string
		mod     func(c *Config)
		wantErr string
	}{
		{"defaults are valid", func(*Config) {}, ""},
		{"data dir required", func(c *Config) { c.DataDir = "" }, "data dir is required"},
		{"wildcard bind needs advertise", func(c *Config) { c.RaftBind = "0.0.0.0:7000" }, "wildcard"},
		{"wildcard bind with advertise", func(c *Config) { c.RaftBind = "0.0.0.0:7000"; c.RaftAdvertise = "10.0.0.1:7000" }, ""},
		{"advertise port 0", func(c *Config) { c.RaftAdvertise = "127.0.0.1:0" }, `port "0" is not in 1..65535`},
		{"advertise malformed IP", func(c *Config) { c.RaftAdvertise = "999.999.999.999:7000" }, "neither an IP address nor a host name"},
		{"bad node id", func(c *Config) { c.NodeID = "a b" }, `node id "a b"`},
		{"zero heartbeat is not a default", func(c *Config) { c.HeartbeatTimeout = 0 }, "heartbeat timeout 0s"},
		{"zero apply timeout", func(c *Config) { c.ApplyTimeout = 0 }, "apply timeout 0s"},
		{"no logger", func(c *Config) { c.Logger = nil }, "logger is required"},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, "leader lease timeout"},
		{"election below heartbeat", func(c *Config) { c.HeartbeatTimeout = time.Second; c.ElectionTimeout = 600 * time.Millisecond }, "election timeout"},
		{"max append too large", func(c *Config) { c.MaxAppendEntries = 2048 }, "max append entries 2048"},
		{"log cache bytes too small", func(c *Config) { c.LogCacheBytes = 1000 }, "raft log cache bytes 1000: must be at least 65536"},
		{"snapshot log bytes too small", func(c *Config) { c.SnapshotLogBytes = 0 }, "raft snapshot log bytes 0: must be at least 65536"},
		{"ready max lag 0", func(c *Config) { c.ReadyMaxLag = 0 }, "ready max lag 0"},
		{"ready last contact below heartbeat", func(c *Config) { c.ReadyMaxLastContact = 100 * time.Millisecond }, "ready max last contact 100ms: must be at least the heartbeat timeout 500ms"},
		{"no raft connections", func(c *Config) { c.MaxConns = 0 }, "raft max conns 0"},
		{"idle timeout under 10 heartbeats", func(c *Config) { c.IdleTimeout = time.Second }, "raft idle timeout 1s: must be at least 10× the heartbeat timeout 500ms (5s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNodeID_PersistedAndMismatchRefused(t *testing.T) {
	dir := t.TempDir()
	id, err := loadOrCreateNodeID(dir, "")
	if err != nil || !strings.HasPrefix(id, "node-") {
		t.Fatalf("generated id %q, %v", id, err)
	}
	again, err := loadOrCreateNodeID(dir, "")
	if err != nil || again != id {
		t.Fatalf("second load: %q, %v; want %q", again, err, id)
	}
	if same, err := loadOrCreateNodeID(dir, id); err != nil || same != id {
		t.Fatalf("load with matching id: %q, %v", same, err)
	}
	if _, err := loadOrCreateNodeID(dir, "other"); err == nil || !strings.Contains(err.Error(), "belongs to node") {
		t.Fatalf("load with another id: %v, want a 'belongs to node' error", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, nodeIDFile))
	if strings.TrimSpace(string(b)) != id {
		t.Fatalf("node-id file holds %q", b)
	}
}

func TestSingleNode_RestartKeepsStateAndLeads(t *testing.T) {
	tn := newSingleNode(t, testConfig(t, "solo"))
	waitFor(t, 10*time.Second, "single node leads", func() (bool, string) { return tn.node.IsLeader(), tn.node.State().String() })
	tn.apply(t, createTopic("t", 3))
	tn.stop()

	// Same data dir: the node finds its state and needs no bootstrap.
	again := tn.restart(t)
	if !again.node.HadExistingState() {
		t.Fatalf("restart did not find raft state")
	}
	waitFor(t, 10*time.Second, "restarted single node leads", func() (bool, string) { return again.node.IsLeader(), again.node.State().String() })
	// Leading comes before replaying the old log: the barrier waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := again.node.Barrier(ctx); err != nil {
		t.Fatalf("barrier after restart: %v", err)
	}
	if s := again.fsm.Stats(); s.Topics != 1 {
		t.Fatalf("restarted FSM has %d topics, want 1", s.Topics)
	}

	// A different node id on the same data dir is refused.
	bad := again.cfg
	bad.NodeID = "someone-else"
	again.stop()
	if _, err := New(bad, fsm.New()); err == nil || !strings.Contains(err.Error(), "belongs to node") {
		t.Fatalf("start with another node id: %v, want a 'belongs to node' error", err)
	}
}

func TestLeadershipSubscription_DeliversEveryTransitionInOrder(t *testing.T) {
	tn := newSingleNode(t, testConfig(t, "solo"))
	waitFor(t, 10*time.Second, "leadership", func() (bool, string) { return tn.node.IsLeader(), "" })
	// Raft reports leadership on NotifyCh before IsLeader can be true; once
	// the fan-out has seen it, the subscription starts from "leader".
	waitFor(t, 10*time.Second, "fan-out saw leadership", func() (bool, string) {
		tn.node.subsMu.Lock()
		defer tn.node.subsMu.Unlock()
		return tn.node.isLeader, ""
	})
	sub := tn.node.SubscribeLeadership()
	defer sub.Close()
	// Nobody reads while transitions pile up: none may be lost.
	for _, v := range []bool{false, true, false, true} {
		tn.node.notifyCh <- v
	}
	var got []bool
	timeout := time.After(10 * time.Second)
	for len(got) < 5 {
		select {
		case ev := <-sub.C():
			got = append(got, ev.IsLeader)
		case <-timeout:
			t.Fatalf("got %v, want 5 events", got)
		}
	}
	// The state at subscription, then every transition.
	want := []bool{true, false, true, false, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	tn.stop()
	select {
	case _, ok := <-sub.C():
		for ok {
			_, ok = <-sub.C()
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("subscription channel not closed after shutdown")
	}
}

func TestHCLogAdapter_RoutesLevelsAndKeyValues(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHCLogAdapter(l, "raft").Named("transport").With("peer", "n2")
	h.Trace("hidden")
	h.Warn("failed to contact", "server-id", "n3", "error", context.DeadlineExceeded, "odd")
	out := buf.String()
	for _, want := range []string{"level=WARN", `msg="failed to contact"`, "logger=raft.transport", "peer=n2", "server-id=n3", "EXTRA_VALUE_AT_END=odd"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log output %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "hidden") || h.IsTrace() || !h.IsDebug() {
		t.Fatalf("trace must be below the debug handler level: %q", out)
	}
}
