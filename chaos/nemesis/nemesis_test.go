package nemesis

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var plan = Plan{Kinds: AllKinds, Length: 3 * time.Minute, QuietMin: 2 * time.Second, QuietMax: 5 * time.Second,
	FaultMin: 3 * time.Second, FaultMax: 8 * time.Second, LeaderFaultMax: 5 * time.Second}

func TestNewSchedule_SameSeedSameSchedule(t *testing.T) {
	a, b := NewSchedule(42, plan), NewSchedule(42, plan)
	if a.String() != b.String() || !slices.Equal(a.Steps, b.Steps) {
		t.Fatalf("seed 42 gave two schedules:\n%s\n%s", a, b)
	}
	if c := NewSchedule(43, plan); slices.Equal(a.Steps, c.Steps) {
		t.Fatalf("seeds 42 and 43 gave the same schedule")
	}
}

func TestNewSchedule_CoversEveryKindAndEndsInTime(t *testing.T) {
	s := NewSchedule(7, plan)
	if got := s.Kinds(); len(got) != len(AllKinds) {
		t.Fatalf("3 minutes cover %d of %d kinds: %v\n%s", len(got), len(AllKinds), got, s)
	}
	var last time.Duration
	for _, st := range s.Steps {
		if st.At < last {
			t.Fatalf("overlapping faults:\n%s", s)
		}
		last = st.At + st.Duration
		if LeaderOnly(st.Kind) && st.Duration > plan.LeaderFaultMax {
			t.Fatalf("leader fault %v longer than %v", st.Duration, plan.LeaderFaultMax)
		}
	}
	if last > plan.Length {
		t.Fatalf("schedule runs to %v, past %v", last, plan.Length)
	}
}

func TestFailoverOnly(t *testing.T) {
	p := plan
	p.Kinds = Groups["leader"]
	if s := NewSchedule(1, p); !s.FailoverOnly(10 * time.Second) {
		t.Fatalf("leader-only schedule not recognised:\n%s", s)
	}
	if s := NewSchedule(1, plan); s.FailoverOnly(10 * time.Second) {
		t.Fatalf("mixed schedule taken for failover-only")
	}
}

func TestLeaderFlapSchedule_KeepsEveryFaultBelowTheLeaderCap(t *testing.T) {
	p := Plan{Kinds: Groups["leader-flap"], Length: 90 * time.Second, QuietMin: time.Second, QuietMax: 3 * time.Second,
		FaultMin: 2 * time.Second, FaultMax: 10 * time.Second, LeaderFaultMax: 4 * time.Second}
	s := NewSchedule(1, p)
	if !s.FailoverOnly(6 * time.Second) {
		t.Fatalf("leader-flap schedule not judged as failover-only:\n%s", s)
	}
	for _, st := range s.Steps {
		if st.Duration > p.LeaderFaultMax {
			t.Errorf("%s lasts %v, above the leader cap %v", st.Kind, st.Duration, p.LeaderFaultMax)
		}
	}
	for _, k := range Groups["leader-flap"] {
		if !slices.Contains(s.Kinds(), k) {
			t.Errorf("90 s of leader-flap holds no %s:\n%s", k, s)
		}
	}
}

func TestResolve_DropsWhatTheModeCannotDo(t *testing.T) {
	kinds, dropped, err := Resolve("mixed", false, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if NeedsNetwork(k) || NeedsCtl(k) {
			t.Fatalf("local mode kept %s", k)
		}
	}
	if len(kinds)+len(dropped) != len(AllKinds) {
		t.Fatalf("kinds %v + dropped %v do not add up to every kind", kinds, dropped)
	}
	if _, _, err := Resolve("kill-everyone", true, true); err == nil {
		t.Fatal("unknown nemesis accepted")
	}
}

func majority(g Grudge, nodes []string, a string) []string {
	var out []string
	for _, b := range nodes {
		if a == b || g.Sees(a, b) {
			out = append(out, b)
		}
	}
	return out
}

func TestGrudges(t *testing.T) {
	five := []string{"n1", "n2", "n3", "n4", "n5"}
	g, _ := Ring(five)
	seen := map[string]bool{}
	for _, n := range five {
		m := majority(g, five, n)
		if len(m) != 3 {
			t.Fatalf("ring: %s sees %v, want a majority of 3", n, m)
		}
		key := slices.Clone(m)
		slices.Sort(key)
		k := strings.Join(key, ",")
		if seen[k] {
			t.Fatalf("ring: two nodes see the same majority %v", key)
		}
		seen[k] = true
	}
	g, _ = Bridge(five)
	if len(majority(g, five, "n1")) != 5 {
		t.Fatalf("bridge node n1 must see everyone: %v", majority(g, five, "n1"))
	}
	if g.Sees("n2", "n5") || !g.Sees("n2", "n3") {
		t.Fatalf("bridge sides wrong: %v", g)
	}
	g, _ = Halves(five)
	if len(majority(g, five, "n1")) != 2 || len(majority(g, five, "n5")) != 3 {
		t.Fatalf("halves wrong: %v", g)
	}
	g = Isolate(five, "n3")
	if len(majority(g, five, "n3")) != 1 || len(majority(g, five, "n1")) != 4 {
		t.Fatalf("isolate wrong: %v", g)
	}
}

func TestVoterIn(t *testing.T) {
	js := `{"servers":[{"nodeId":"n1","voter":true},{"nodeId":"n2","voter":false}]}`
	if !voterIn(js, "n1") || voterIn(js, "n2") || voterIn(js, "n3") {
		t.Fatal("voterIn misread the peers JSON")
	}
	arr := `[{"nodeId":"n1","voter":true,"lag":"0"},{"nodeId":"n2","voter":false}]`
	if v, p := peerState(arr, "n2"); v || !p {
		t.Fatal("peerState misread the array form")
	}
	if !voterIn(arr, "n1") {
		t.Fatal("voterIn misread the array form")
	}
}
