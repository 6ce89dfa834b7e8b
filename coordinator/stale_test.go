package coordinator

import (
	"context"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// followerRaft is a node that does not lead.
type followerRaft struct{ fakeRaft }

func (*followerRaft) IsLeader() bool { return false }

func TestAllowsStaleRead_IsAllowStaleExceptInTheChaosbugBuild(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  any
		want bool
	}{
		{"offset fetch", &cohortv1.OffsetFetchRequest{}, staleReadBug},
		{"stale offset fetch", &cohortv1.OffsetFetchRequest{AllowStale: true}, true},
		{"describe", &cohortv1.DescribeGroupsRequest{}, false},
		{"stale describe", &cohortv1.DescribeGroupsRequest{AllowStale: true}, true},
		{"join", &cohortv1.JoinGroupRequest{}, false},
	} {
		if got := AllowsStaleRead(tc.req); got != tc.want {
			t.Errorf("%s: AllowsStaleRead = %t, want %t (staleReadBug %t)", tc.name, got, tc.want, staleReadBug)
		}
	}
}

// A node that does not lead refuses a linearizable OffsetFetch NOT_LEADER;
// the chaosbug build answers it from its own FSM instead. Run with and
// without -tags chaosbug.
func TestOffsetFetch_OnAFollower_OnlyTheChaosbugBuildAnswers(t *testing.T) {
	t.Parallel()
	f := fsm.New()
	for i, cmd := range []*fsmv1.Command{
		{Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: "t", Partitions: 1}}},
		{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{GroupId: "g", Generation: -1,
			Offsets: []*fsmv1.OffsetCommit{{Topic: "t", Partition: 0, Offset: 42}}}}},
	} {
		if res := f.Apply(uint64(i+1), cmd); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	e, err := New(DefaultConfig(), &followerRaft{}, f)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.OffsetFetch(context.Background(), &cohortv1.OffsetFetchRequest{GroupId: "g"})
	if staleReadBug {
		if err != nil || len(resp.GetPartitions()) != 1 || resp.GetPartitions()[0].GetOffset() != 42 {
			t.Fatalf("chaosbug build: OffsetFetch on a follower = %v, %v; want offset 42 from its FSM", resp, err)
		}
		return
	}
	if errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("OffsetFetch on a follower = %v, %v; want NOT_LEADER", resp, err)
	}
}
