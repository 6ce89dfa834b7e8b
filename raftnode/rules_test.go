package raftnode

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/hashicorp/raft"
)

func TestClusterRules_TheOldestAnyServerApplies(t *testing.T) {
	cfg := raft.Configuration{Servers: []raft.Server{{ID: "a"}, {ID: "b"}, {ID: "c", Suffrage: raft.Nonvoter}}}
	reg := func(a, b, c uint32) []fsm.Node {
		return []fsm.Node{{ID: "a", MaxCommandVersion: a}, {ID: "b", MaxCommandVersion: b}, {ID: "c", MaxCommandVersion: c}}
	}
	for _, tc := range []struct {
		own      uint32
		registry []fsm.Node
		want     uint32
	}{
		{2, reg(2, 2, 2), 2},
		{2, reg(2, 2, 1), 1}, // a nonvoter applies entries too
		{2, reg(2, 0, 2), 1}, // never said: an older binary, rules 1
		{2, reg(2, 2, 2)[:2], 1},
		{1, reg(2, 2, 2), 1}, // never above this node's own
		{2, append(reg(2, 2, 2), fsm.Node{ID: "gone", MaxCommandVersion: 1}), 2},
	} {
		if got := clusterRules(tc.own, cfg, tc.registry); got != tc.want {
			t.Errorf("own %d, registry %+v: rules %d, want %d", tc.own, tc.registry, got, tc.want)
		}
	}
}

// A rolling upgrade: while one server's binary applies rules 1 only, the
// leader writes rules 1; once every server says it applies rules 2 the
// leader writes 2, and a server whose binary (wrongly) still applies 1
// stops at that entry instead of applying it its own way, then applies it
// after the "upgrade" (a restart with the full rules).
func TestRules_AMixedClusterWritesTheOldestRulesAndAnOlderBinaryHalts(t *testing.T) {
	halts := make([]chan error, 3)
	for i := range halts {
		halts[i] = make(chan error, 1)
	}
	c := newTestCluster(t, 3, func(i int, cfg *Config) {
		ch := halts[i]
		cfg.OnHalt = func(err error) { ch <- err }
	})
	l := c.leader()
	var old *testNode
	oldAt := 0
	for i, tn := range c.nodes {
		if tn != l {
			old, oldAt = tn, i
			break
		}
	}
	if err := old.fsm.LimitRules(1); err != nil {
		t.Fatal(err)
	}
	register := func(tn *testNode, rules uint32) {
		l.apply(t, &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
			NodeId: tn.node.ID(), GrpcAddress: "127.0.0.1:1", RaftAddress: tn.node.RaftAddress(), MaxCommandVersion: rules}}})
	}
	writes := func(want uint32) {
		t.Helper()
		waitFor(t, 10*time.Second, fmt.Sprintf("the leader to write rules %d", want), func() (bool, string) {
			got := l.node.CommandRules()
			return got == want, fmt.Sprintf("rules %d", got)
		})
	}
	for _, tn := range c.nodes {
		register(tn, map[bool]uint32{true: 1, false: 2}[tn == old])
	}
	writes(1)
	if res := l.apply(t, createTopic("under-1", 1)); res.Err != nil {
		t.Fatal(res.Err)
	}
	waitConverged(t, l, c.nodes...)

	register(old, 2)
	writes(2)
	l.apply(t, createTopic("under-2", 1))
	select {
	case err := <-halts[oldAt]:
		if !errors.Is(err, fsm.ErrNewerRules) {
			t.Fatalf("%s halted with %v, want ErrNewerRules", old.node.ID(), err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, whose binary applies rules 1, did not halt at an entry under rules 2", old.node.ID())
	}
	if err := old.node.Fault(); !errors.Is(err, ErrHalted) {
		t.Fatalf("Fault of the halted node: %v, want ErrHalted", err)
	}
	if hasTopic(old.fsm, "under-2") {
		t.Fatal("the halted node applied the entry under rules 2")
	}
	for i, ch := range halts {
		if i != oldAt && len(ch) > 0 {
			t.Fatalf("%s halted: %v", c.nodes[i].node.ID(), <-ch)
		}
	}

	old.stop()
	upgraded := old.restart(t)
	others := []*testNode{upgraded}
	for _, tn := range c.nodes {
		if tn != old {
			others = append(others, tn)
		}
	}
	waitConverged(t, l, others...)
	if !hasTopic(upgraded.fsm, "under-2") {
		t.Fatal("after the upgrade the node still lacks the entry under rules 2")
	}
}
