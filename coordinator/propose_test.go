package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
