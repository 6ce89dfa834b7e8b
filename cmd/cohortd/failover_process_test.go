package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// procNode is one cohortd process of a test cluster.
type procNode struct {
	id, grpc, http string
	args           []string
	proc           *proc.Process
}

func (n *procNode) start(t *testing.T, bin string) {
	t.Helper()
	n.proc = proc.StartT(t, proc.Spec{Name: n.id, Path: bin, Args: n.args})
}

// TestProcess_KillLeader_MembersKeepGenerationAndCommits runs three real
// cohortd processes and three client members; kill -9 of the leader's
// process changes no member's generation or assignment, every commit made
// before it is readable, commits resume on the new leader, and the killed
// node restarts from its data dir as a follower.
func TestProcess_KillLeader_MembersKeepGenerationAndCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the cohortd binary")
	}
	dir := t.TempDir()
	bin := cohortdBinary(t)
	ports := proc.PortsT(t, 9)
	var join []string
	for i := range 3 {
		join = append(join, proc.LoopbackAddr(ports[3*i]))
	}
	nodes := make([]*procNode, 3)
	for i := range 3 {
		n := &procNode{id: fmt.Sprintf("node%d", i+1), grpc: join[i], http: proc.LoopbackAddr(ports[3*i+2])}
		n.args = []string{
			"--node-id", n.id, "--data-dir", filepath.Join(dir, n.id),
			"--raft-addr", proc.LoopbackAddr(ports[3*i+1]), "--grpc-addr", n.grpc, "--http-addr", n.http,
			"--bootstrap-expect", "3", "--join", strings.Join(join, ","),
			"--initial-rebalance-delay", "300ms", "--min-session-timeout", "1s",
		}
		n.start(t, bin)
		nodes[i] = n
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, err := client.Dial(client.ConnConfig{Endpoints: join})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	proc.WaitFor(t, 30*time.Second, "the cluster to serve", func() (bool, string) {
		_, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "orders", Partitions: 6}, client.AttemptTimeout(2*time.Second))
		return err == nil, fmt.Sprint(err)
	})

	var members []*client.Member
	for i := range 3 {
		m, err := client.NewMember(client.Config{
			Endpoints: join, GroupID: "g", ClientID: fmt.Sprintf("c%d", i), Topics: []string{"orders"},
			SessionTimeout: 6 * time.Second, HeartbeatInterval: 300 * time.Millisecond, RebalanceTimeout: 10 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		members = append(members, m)
	}
	settled := func() (bool, string) {
		gen := members[0].Generation()
		owned := 0
		for _, m := range members {
			if m.Generation() != gen || gen == client.NoGeneration {
				return false, fmt.Sprintf("generations differ or unset: %d vs %d", m.Generation(), gen)
			}
			owned += len(m.Assignment())
		}
		return owned == 6, fmt.Sprintf("%d of 6 partitions owned", owned)
	}
	proc.WaitFor(t, 30*time.Second, "three members sharing one generation", settled)
	gen := members[0].Generation()
	before := make([][]client.TopicPartition, len(members))
	want := map[string]int64{}
	for i, m := range members {
		before[i] = m.Assignment()
		var offs []client.PartitionOffset
		for _, tp := range m.Assignment() {
			offs = append(offs, client.PartitionOffset{TopicPartition: tp, Offset: int64(1000 + tp.Partition)})
			want[tp.String()] = int64(1000 + tp.Partition)
		}
		if err := m.Commit(ctx, offs); err != nil {
			t.Fatalf("commit before the kill: %v", err)
		}
	}

	// kill -9 the leader's process.
	leader := -1
	for i, n := range nodes {
		if conn.Leader() == n.grpc {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("the client knows no leader among %v (it says %q)", join, conn.Leader())
	}
	if err := nodes[leader].proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()

	// Commits resume; no member sees a new generation or assignment.
	for i, m := range members {
		offs := []client.PartitionOffset{{TopicPartition: before[i][0], Offset: 5000}}
		if err := m.Commit(ctx, offs); err != nil {
			t.Fatalf("member %d commit after the kill: %v", i, err)
		}
		want[before[i][0].String()] = 5000
	}
	t.Logf("first commits after kill -9 of %s done %v later", nodes[leader].id, time.Since(killedAt))
	for i, m := range members {
		if m.Generation() != gen || !slices.Equal(m.Assignment(), before[i]) {
			t.Fatalf("member %d after failover: generation %d assignment %v, had %d %v", i, m.Generation(), m.Assignment(), gen, before[i])
		}
	}
	// Through the client: the new leader's answer, linearizable.
	fetched, err := conn.Groups().OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g"})
	if err != nil {
		t.Fatal(err)
	}
	missing := maps.Clone(want)
	for _, p := range fetched.GetPartitions() {
		k := client.TopicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}.String()
		if p.GetOffset() != want[k] {
			t.Fatalf("offset %s = %d after failover, want %d", k, p.GetOffset(), want[k])
		}
		delete(missing, k)
	}
	if len(missing) > 0 {
		t.Fatalf("offsets missing after failover: %v", missing)
	}
	described, err := conn.Groups().DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
	if err != nil || described.GetGroups()[0].GetGeneration() != gen {
		t.Fatalf("after failover: %v %v, want generation %d", described, err, gen)
	}

	// The killed node restarts from its data dir and follows.
	nodes[leader].start(t, bin)
	proc.WaitFor(t, 30*time.Second, "the restarted node to be ready", func() (bool, string) {
		code, body := httpGet(ctx, "http://"+nodes[leader].http+"/readyz")
		return code == 200, body
	})
	// Every node holds the leader's state itself, the restarted one
	// included: each is asked for its own (a stale read, which it serves
	// from its own state rather than forwarding to the leader).
	for _, n := range nodes {
		proc.WaitFor(t, 20*time.Second, n.id+" to hold the leader's group and offsets", func() (bool, string) {
			d, o, err := ownState(ctx, n.grpc, "g")
			switch {
			case err != nil:
				return false, err.Error()
			case !proto.Equal(o, fetched):
				return false, fmt.Sprintf("its offsets %v, the leader's %v", o.GetPartitions(), fetched.GetPartitions())
			case !proto.Equal(d, described):
				return false, fmt.Sprintf("its group %v, the leader's %v", d.GetGroups(), described.GetGroups())
			}
			return true, ""
		})
	}
}

// ownState is what the node at addr holds itself of group: its description
// and committed offsets, read with allow_stale so that the node answers
// from its own state instead of forwarding to the leader.
func ownState(ctx context.Context, addr, group string) (*cohortv1.DescribeGroupsResponse, *cohortv1.OffsetFetchResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gc := cohortv1.NewGroupCoordinatorClient(conn)
	d, err := gc.DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{group}, AllowStale: true})
	if err != nil {
		return nil, nil, fmt.Errorf("describe %s: %w", group, err)
	}
	o, err := gc.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: group, AllowStale: true})
	if err != nil {
		return nil, nil, fmt.Errorf("offsets of %s: %w", group, err)
	}
	return d, o, nil
}
