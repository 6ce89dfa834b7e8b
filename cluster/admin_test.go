package cluster

import (
	"errors"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/hashicorp/raft"
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
		{"3 with c dead, remove b", ids("a", "b", "c"), healthySet("a", "b"), "b", false, errcode.ErrQuorumAtRisk},
		{"3 with c dead, remove b forced", ids("a", "b", "c"), healthySet("a", "b"), "b", true, nil},
		{"2 voters, remove one", ids("a", "b"), healthySet("a", "b"), "b", false, errcode.ErrQuorumAtRisk},
		{"2 voters, remove one forced", ids("a", "b"), healthySet("a", "b"), "b", true, nil},
		{"last voter", ids("a"), healthySet("a"), "a", false, errcode.ErrLastVoter},
		{"last voter forced", ids("a"), healthySet("a"), "a", true, errcode.ErrLastVoter},
		{"5 with 2 dead, remove a healthy one", ids("a", "b", "c", "d", "e"), healthySet("a", "b", "c"), "a", false, errcode.ErrQuorumAtRisk},
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

func TestServerHealth_LagAndContact(t *testing.T) {
	cl := &Cluster{cfg: DefaultConfig()}
	cl.cfg.PromoteMaxLag = 10
	ok := probeRecord{info: nodeInfoAt(95, 5, 100)}
	if lag, reason := cl.serverHealth(ok, 100, 5, ok.infoAt); lag != 5 || reason != "" {
		t.Fatalf("healthy follower: lag %d reason %q", lag, reason)
	}
	behind := probeRecord{info: nodeInfoAt(50, 5, 100)}
	if lag, reason := cl.serverHealth(behind, 100, 5, behind.infoAt); lag != 50 || reason == "" {
		t.Fatalf("lagging follower: lag %d reason %q", lag, reason)
	}
	stale := probeRecord{info: nodeInfoAt(100, 5, 60_000)}
	if _, reason := cl.serverHealth(stale, 100, 5, stale.infoAt); reason == "" {
		t.Fatal("a follower that has not heard from the leader for a minute is healthy")
	}
	oldTerm := probeRecord{info: nodeInfoAt(100, 4, 10)}
	if _, reason := cl.serverHealth(oldTerm, 100, 5, oldTerm.infoAt); reason == "" {
		t.Fatal("a follower in an old term is healthy")
	}
	if _, reason := cl.serverHealth(probeRecord{err: errors.New("refused")}, 100, 5, oldTerm.infoAt); reason == "" {
		t.Fatal("a server that never answered is healthy")
	}
}

func nodeInfoAt(last, term uint64, lastContactMs int64) *NodeInfo {
	return &NodeInfo{LastIndex: last, Term: term, LastContactMs: lastContactMs, State: raft.Follower}
}

// Addresses nobody can reach never enter the configuration or the registry.
func TestValidateAddresses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		raft, grpc string
		ok         bool
	}{
		{"10.0.0.4:7000", "10.0.0.4:9000", true},
		{"cohort-3.cohort.default.svc:7000", "", true},
		{"[fd00::4]:7000", "localhost:9000", true},
		{"", "10.0.0.4:9000", false},
		{"not-an-address", "", false},
		{"999.999.999.999:99999", "", false},
		{"999.999.999.999:7000", "", false},
		{"10.0.0.4:0", "", false},
		{"10.0.0.4:70000", "", false},
		{"0.0.0.0:7000", "", false},
		{"bad_host!:7000", "", false},
		{"10.0.0.4:7000", "no-port", false},
	} {
		err := validateAddresses("n4", c.raft, c.grpc)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, errcode.ErrInvalidArgument)) {
			t.Errorf("raft %q grpc %q: %v, want ok=%t (INVALID_ARGUMENT otherwise)", c.raft, c.grpc, err, c.ok)
		}
	}
}
