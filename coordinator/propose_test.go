package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// failingRaft fails every Apply with err.
type failingRaft struct {
	fakeRaft
	err error
}

func (f *failingRaft) Apply(context.Context, *fsmv1.Command) (*fsm.ApplyResult, error) {
	return nil, f.err
}

// The engine answers NOT_LEADER for a command its Raft did not propose or
// whose outcome is unknown, and passes any other failure on as it is.
func TestPropose_ClassifiesApplyFailures(t *testing.T) {
	t.Parallel()
	other := errors.New("disk on fire")
	for _, tc := range []struct {
		name string
		err  error
		want errcode.Code
	}{
		{"not proposed", fmt.Errorf("%w: not the raft leader", ErrNotProposed), errcode.NotLeader},
		{"outcome unknown", fmt.Errorf("%w: leadership lost", ErrOutcomeUnknown), errcode.NotLeader},
		{"other", other, errcode.Unknown},
	} {
		e, err := New(DefaultConfig(), &failingRaft{err: tc.err}, fsm.New())
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.propose(context.Background(), &fsmv1.Command{Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: "t", Partitions: 1}}})
		if got := errcode.Of(err); got != tc.want {
			t.Errorf("%s: propose error %v has code %s, want %s", tc.name, err, got, tc.want)
		}
		if tc.want == errcode.Unknown && !errors.Is(err, other) {
			t.Errorf("%s: propose error %v does not wrap the Raft error", tc.name, err)
		}
	}
}

// A join phase closed by a join inside a Batch entry is timed with the
// batch's timestamp (its commands carry none), not from the epoch.
func TestObserve_TimesJoinPhasesClosedInsideABatch(t *testing.T) {
	t.Parallel()
	f := fsm.New()
	e, err := New(DefaultConfig(), &failingRaft{err: ErrNotProposed}, f)
	if err != nil {
		t.Fatal(err)
	}
	// a's join opens the group's first round and, a being its only
	// member, closes it in the same apply.
	join := &fsmv1.Command{Kind: &fsmv1.Command_JoinMember{JoinMember: &fsmv1.JoinMember{
		GroupId: "g", ProtocolType: "consumer", NewMember: true,
		Member: &fsmv1.MemberSpec{MemberId: "a", SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 10_000,
			Protocols: []*fsmv1.Protocol{{Name: "range"}}},
	}}}
	batch := &fsmv1.Command{TimestampMs: 1_000_250, Version: fsm.CommandVersion, Kind: &fsmv1.Command_Batch{Batch: &fsmv1.Batch{
		Commands: []*fsmv1.Command{join},
	}}}
	res := f.Apply(1, batch)
	if res.Err != nil || len(res.Batch) != 1 || res.Batch[0].Err != nil || !res.Batch[0].JoinCompleted {
		t.Fatalf("batch: %+v, want a's join to close the join phase", res)
	}
	e.observe(res, batch, batch.GetTimestampMs())
	var m dto.Metric
	if err := e.m.rebalanceSeconds.Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0 {
		t.Fatalf("rebalance durations: %d, sum %v s; want one of 0 s (opened and closed by the same entry)", h.GetSampleCount(), h.GetSampleSum())
	}
}
