package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// clusterState is what a snapshot must carry over: topics, groups with
// their generations, members and assignments, and committed offsets.
type clusterState struct {
	topics  *cohortv1.ListTopicsResponse
	groups  *cohortv1.DescribeGroupsResponse
	offsets map[string]*cohortv1.OffsetFetchResponse
}

// readState reads the cluster's state through one node, which forwards
// to the leader (a linearizable read), retrying while that node does not
// know the leader's address yet.
func readState(t *testing.T, endpoint string, groups ...string) clusterState {
	t.Helper()
	var s clusterState
	var err error
	proc.WaitFor(t, 10*time.Second, "state via "+endpoint, func() (bool, string) {
		s, err = tryReadState(endpoint, false, groups...)
		return err == nil, fmt.Sprint(err)
	})
	return s
}

// waitOwnState waits until the node at endpoint holds want itself: it is
// asked with allow_stale, so it answers from its own state rather than
// forwarding to the leader (whose state would be compared with itself).
func waitOwnState(t *testing.T, what, endpoint string, want clusterState, groups ...string) {
	t.Helper()
	proc.WaitFor(t, 20*time.Second, what+": "+endpoint+" to hold the state itself", func() (bool, string) {
		got, err := tryReadState(endpoint, true, groups...)
		if err != nil {
			return false, err.Error()
		}
		return stateDiff(want, got)
	})
}

// tryReadState reads topics, groups and each group's offsets through
// endpoint; stale: from the node's own state.
func tryReadState(endpoint string, stale bool, groups ...string) (clusterState, error) {
	var s clusterState
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return s, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.topics, err = cohortv1.NewTopicsClient(conn).ListTopics(ctx, &cohortv1.ListTopicsRequest{AllowStale: stale}); err != nil {
		return s, fmt.Errorf("list topics: %w", err)
	}
	gc := cohortv1.NewGroupCoordinatorClient(conn)
	if s.groups, err = gc.DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: groups, AllowStale: stale}); err != nil {
		return s, fmt.Errorf("describe groups: %w", err)
	}
	s.offsets = map[string]*cohortv1.OffsetFetchResponse{}
	for _, g := range groups {
		if s.offsets[g], err = gc.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: g, AllowStale: stale}); err != nil {
			return s, fmt.Errorf("fetch offsets of %s: %w", g, err)
		}
	}
	return s, nil
}

// stateDiff reports whether got is want, and else the first difference.
func stateDiff(want, got clusterState) (bool, string) {
	if !proto.Equal(want.topics, got.topics) {
		return false, fmt.Sprintf("topics differ:\nwant %v\ngot  %v", want.topics, got.topics)
	}
	if !proto.Equal(want.groups, got.groups) {
		return false, fmt.Sprintf("groups differ:\nwant %v\ngot  %v", want.groups, got.groups)
	}
	for g, w := range want.offsets {
		if !proto.Equal(w, got.offsets[g]) {
			return false, fmt.Sprintf("offsets of %s differ:\nwant %v\ngot  %v", g, w, got.offsets[g])
		}
	}
	return true, ""
}

// TestProcess_SnapshotRestoreIntoFreshCluster_StateIdentical: a snapshot
// saved from one cluster and restored into a fresh three-node cluster
// carries groups, generations, assignments, offsets and topics over
// exactly, on every node. A corrupted, truncated or foreign file is
// refused, locally and by the leader, and nothing changes.
func TestProcess_SnapshotRestoreIntoFreshCluster_StateIdentical(t *testing.T) {
	a := newCluster(t)
	a.form(3)
	a.mustCtl("topics", "create", "orders", "--partitions", "6")
	a.mustCtl("topics", "create", "audit", "--partitions", "2")
	endpointsA := a.grpcAddrs("n1", "n2", "n3")
	load := newGroupLoad(t, endpointsA, "billing", "orders")
	load.add("s1", true)
	load.add("s2", true)
	load.waitStable(endpointsA, 6)
	proc.WaitFor(t, 10*time.Second, "some commits", func() (bool, string) {
		o, err := fetchOffsets(endpointsA, "billing", load.admin)
		return err == nil && len(o) == 6, "not every partition committed yet"
	})
	load.pause()
	a.mustCtl("offsets", "reset", "archive", "--topic", "audit", "--to", "7")
	wantState := readState(t, endpointsA[0], "billing", "archive")
	if len(wantState.groups.GetGroups()[0].GetMembers()) != 2 {
		t.Fatalf("billing should have its two members: %v", wantState.groups)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "a.snap")
	// Through a follower: the stream is forwarded from the leader.
	stA, err := a.status()
	if err != nil {
		t.Fatal(err)
	}
	if r := runCtl(t, a.nodes[follower(stA)].grpcAddr, "snapshot", "save", file); r.code != 0 {
		t.Fatalf("snapshot save via a follower: %s", r)
	}
	var info struct {
		Index, Term             uint64
		FSMFormatVersion        uint32 `json:"fsm_format_version"`
		SHA256                  string
		Topics, Groups, Offsets int
		Members                 int
		FileVersion             uint32 `json:"file_version"`
	}
	if err := json.Unmarshal([]byte(a.mustCtl("snapshot", "inspect", file, "-o", "json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Index == 0 || info.Term == 0 || info.FSMFormatVersion == 0 || len(info.SHA256) != 64 ||
		info.Topics != 2 || info.Groups != 2 || info.Members != 2 || info.Offsets != 8 {
		t.Fatalf("inspect: %+v", info)
	}

	b := newCluster(t)
	b.form(3)
	endpointsB := b.grpcAddrs("n1", "n2", "n3")
	b.mustCtl("topics", "create", "scratch", "--partitions", "1") // replaced by the restore
	before := readState(t, endpointsB[0], "billing", "archive")

	// Refused files: corrupted data, truncated, foreign. Nothing changes.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)/2] ^= 0xff
	truncated := data[:len(data)-40]
	bad := map[string][]byte{"corrupt.snap": corrupt, "truncated.snap": truncated, "foreign.snap": []byte("PK\x03\x04 this is a zip file, not a snapshot")}
	for name, content := range bad {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"snapshot", "inspect", path}, {"snapshot", "restore", path}} {
			r := b.ctl(args...)
			if r.code == 0 || !strings.Contains(r.stderr, "not a valid Cohort snapshot file") {
				t.Fatalf("cohortctl %v: want a refusal, got %s", args, r)
			}
		}
	}
	// The leader refuses a corrupted stream by itself too.
	r := b.ctl("snapshot", "restore", "--no-verify", filepath.Join(dir, "corrupt.snap"))
	if r.code == 0 || !strings.Contains(r.stderr, "InvalidArgument") || !strings.Contains(r.stderr, "corrupted): nothing changed") {
		t.Fatalf("server-side refusal of a corrupted snapshot: %s", r)
	}
	for _, addr := range endpointsB {
		waitOwnState(t, "after refused restores", addr, before, "billing", "archive")
	}

	// Through a follower: the client stream is forwarded to the leader.
	stB, err := b.status()
	if err != nil {
		t.Fatal(err)
	}
	r = runCtl(t, b.nodes[follower(stB)].grpcAddr, "snapshot", "restore", file)
	if r.code != 0 || !strings.Contains(r.stdout, "restored the snapshot") {
		t.Fatalf("restore via a follower: %s", r)
	}
	// Every node of B has A's state, each in its own, and B keeps
	// working (forwarding reaches the right leader).
	for _, addr := range endpointsB {
		waitOwnState(t, "after the restore", addr, wantState, "billing", "archive")
	}
	b.waitVoters("n1", "n2", "n3")
	b.mustCtl("topics", "create", "after-restore", "--partitions", "1")
}

// follower names a voter that does not lead.
func follower(st *cohortv1.StatusResponse) string {
	for _, s := range st.GetServers() {
		if s.GetVoter() && s.GetNodeId() != st.GetLeaderId() {
			return s.GetNodeId()
		}
	}
	return ""
}
