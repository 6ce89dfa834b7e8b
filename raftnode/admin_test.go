package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func ids(s ...string) []raft.ServerID {
	out := make([]raft.ServerID, len(s))
	for i, x := range s {
		out[i] = raft.ServerID(x)
	}
	return out
}

func healthySet(s ...string) map[raft.ServerID]bool {
	m := map[raft.ServerID]bool{}
	for _, x := range s {
		m[raft.ServerID(x)] = true
	}
	return m
}

func TestCheckVoterLoss_QuorumMath(t *testing.T) {
	cases := []struct {
		name    string
		voters  []raft.ServerID
		healthy map[raft.ServerID]bool
		target  string
		force   bool
		want    error
	}{
		{"non-voter is always fine", ids("a", "b", "c"), healthySet(), "d", false, nil},
		{"3 healthy, remove one", ids("a", "b", "c"), healthySet("a", "b", "c"), "c", false, nil},
		{"3 with c dead, remove c", ids("a", "b", "c"), healthySet("a", "b"), "c", false, nil},
		{"3 with c dead, remove b", ids("a", "b", "c"), healthySet("a", "b"), "b", false, ErrQuorumAtRisk},
		{"3 with c dead, remove b forced", ids("a", "b", "c"), healthySet("a", "b"), "b", true, nil},
		{"2 voters, remove one", ids("a", "b"), healthySet("a", "b"), "b", false, ErrQuorumAtRisk},
		{"2 voters, remove one forced", ids("a", "b"), healthySet("a", "b"), "b", true, nil},
		{"last voter", ids("a"), healthySet("a"), "a", false, ErrLastVoter},
		{"last voter forced", ids("a"), healthySet("a"), "a", true, ErrLastVoter},
		{"5 with 2 dead, remove a healthy one", ids("a", "b", "c", "d", "e"), healthySet("a", "b", "c"), "a", false, ErrQuorumAtRisk},
		{"5 with 2 dead, remove a dead one", ids("a", "b", "c", "d", "e"), healthySet("a", "b", "c"), "e", false, nil},
		{"5 healthy, remove one", ids("a", "b", "c", "d", "e"), healthySet("a", "b", "c", "d", "e"), "a", false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckVoterLoss(tc.voters, tc.healthy, raft.ServerID(tc.target), tc.force)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("CheckVoterLoss = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestClusterService_Authorize_RequiresTheConfiguredToken(t *testing.T) {
	s := &ClusterService{n: &Node{cfg: Config{AdminToken: "s3cret"}}}
	withAuth := func(v string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(AuthorizationHeader, v))
	}
	for name, ctx := range map[string]context.Context{
		"missing":   context.Background(),
		"wrong":     withAuth("Bearer nope"),
		"no scheme": withAuth("s3cret"),
		"prefix":    withAuth("Bearer s3cre"),
	} {
		if err := s.authorize(ctx); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: %v, want Unauthenticated", name, err)
		}
	}
	if err := s.authorize(withAuth("Bearer s3cret")); err != nil {
		t.Errorf("right token refused: %v", err)
	}
	open := &ClusterService{n: &Node{cfg: Config{}}}
	if err := open.authorize(context.Background()); err != nil {
		t.Errorf("no token configured, call refused: %v", err)
	}
}

func TestStatusOf_MapsSentinelsToCodes(t *testing.T) {
	for err, want := range map[error]codes.Code{
		ErrNotLeader:             codes.Unavailable,
		ErrUnknownServer:         codes.NotFound,
		ErrLagging:               codes.FailedPrecondition,
		ErrQuorumAtRisk:          codes.FailedPrecondition,
		ErrLastVoter:             codes.FailedPrecondition,
		ErrConflict:              codes.FailedPrecondition,
		ErrAutopilotManaged:      codes.FailedPrecondition,
		ErrInvalidArgument:       codes.InvalidArgument,
		ErrShutdown:              codes.Unavailable,
		context.DeadlineExceeded: codes.DeadlineExceeded,
	} {
		got := statusOf(fmt.Errorf("op: %w", err))
		if status.Code(got) != want {
			t.Errorf("%v → %v, want %v", err, status.Code(got), want)
		}
	}
}

func TestServerHealth_LagAndContact(t *testing.T) {
	n := &Node{cfg: Config{}.WithDefaults()}
	n.cfg.PromoteMaxLag = 10
	ok := probeRecord{info: nodeInfoAt(95, 5, 100)}
	if lag, reason := n.serverHealth(ok, 100, 5, ok.infoAt); lag != 5 || reason != "" {
		t.Fatalf("healthy follower: lag %d reason %q", lag, reason)
	}
	behind := probeRecord{info: nodeInfoAt(50, 5, 100)}
	if lag, reason := n.serverHealth(behind, 100, 5, behind.infoAt); lag != 50 || reason == "" {
		t.Fatalf("lagging follower: lag %d reason %q", lag, reason)
	}
	stale := probeRecord{info: nodeInfoAt(100, 5, 60_000)}
	if _, reason := n.serverHealth(stale, 100, 5, stale.infoAt); reason == "" {
		t.Fatal("a follower that has not heard from the leader for a minute is healthy")
	}
	oldTerm := probeRecord{info: nodeInfoAt(100, 4, 10)}
	if _, reason := n.serverHealth(oldTerm, 100, 5, oldTerm.infoAt); reason == "" {
		t.Fatal("a follower in an old term is healthy")
	}
	if _, reason := n.serverHealth(probeRecord{err: errors.New("refused")}, 100, 5, oldTerm.infoAt); reason == "" {
		t.Fatal("a server that never answered is healthy")
	}
}

func nodeInfoAt(last, term uint64, lastContactMs int64) *cohortv1.NodeInfoResponse {
	return &cohortv1.NodeInfoResponse{LastIndex: last, Term: term, LastContactMs: lastContactMs, State: cohortv1.RaftState_RAFT_STATE_FOLLOWER}
}
