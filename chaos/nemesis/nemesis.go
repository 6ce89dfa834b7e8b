// Package nemesis plans and injects the faults of a chaos run. A Schedule is
// drawn from a seed alone (same seed, same kinds, times, durations and
// target choices); Run carries it out against a cluster and records every
// fault's start and stop in the history.
//
// What it must never do: leave a fault in place when it returns. Run heals
// everything before it returns, also when its context ends.
package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Fault kinds.
const (
	KillOne         = "kill-one"
	KillLeader      = "kill-leader"
	KillMajority    = "kill-majority"
	PauseOne        = "pause-one"
	PauseLeader     = "pause-leader"
	IsolateOne      = "isolate-one"
	IsolateLeader   = "isolate-leader"
	PartitionHalves = "partition-halves"
	PartitionRing   = "partition-majority-ring"
	PartitionBridge = "partition-bridge"
	MemberRemoveAdd = "member-remove-add"
	TransferLeader  = "transfer-leadership"
	// PauseLeaderFlicker pauses whoever leads for 300-2300 ms, again and
	// again (200-1000 ms apart) for the fault's duration: short leader
	// pauses, each long enough for an election or not.
	PauseLeaderFlicker = "pause-leader-flicker"
	// TransferBack moves leadership away from the leader and back to it,
	// again and again: a process that led, lost leadership and leads
	// again, without a restart.
	TransferBack = "transfer-back"
)

// AllKinds in a fixed order.
var AllKinds = []string{
	KillOne, KillLeader, KillMajority, PauseOne, PauseLeader,
	IsolateOne, IsolateLeader, PartitionHalves, PartitionRing, PartitionBridge,
	MemberRemoveAdd, TransferLeader, PauseLeaderFlicker, TransferBack,
}

// Groups of kinds a user can name instead of one kind.
var Groups = map[string][]string{
	"kill":       {KillOne, KillLeader, KillMajority},
	"pause":      {PauseOne, PauseLeader},
	"partition":  {IsolateOne, IsolateLeader, PartitionHalves, PartitionRing, PartitionBridge},
	"membership": {MemberRemoveAdd, TransferLeader, TransferBack},
	// Faults that only hit the leader: the failover checker applies.
	"leader": {KillLeader, PauseLeader, IsolateLeader},
	// Leadership moving often and coming back to processes that led
	// before (make chaos-leader).
	"leader-flap": {PauseLeaderFlicker, TransferBack, IsolateLeader, KillLeader},
	"mixed":       AllKinds,
	"none":        {},
}

// NeedsNetwork: kinds that need netns mode.
func NeedsNetwork(kind string) bool {
	return slices.Contains(Groups["partition"], kind)
}

// NeedsCtl: kinds that need the cluster admin RPCs (cohortctl).
func NeedsCtl(kind string) bool { return slices.Contains(Groups["membership"], kind) }

// LeaderOnly: kinds that interrupt the leader; their duration is capped
// below the session timeout so that no group need rebalance.
func LeaderOnly(kind string) bool {
	return slices.Contains(Groups["leader"], kind) || kind == PauseLeaderFlicker || kind == TransferBack
}

// RideOut are the kinds a group must ride out without a rebalance
// (checker 6): the leader-only ones and leadership transfers.
var RideOut = []string{KillLeader, PauseLeader, IsolateLeader, PauseLeaderFlicker, TransferLeader, TransferBack}

// Resolve turns a comma-separated list of kinds and group names into kinds,
// keeping only those available (partitions need the network, membership
// faults need cohortctl). It says what it dropped.
func Resolve(spec string, network, ctl bool) (kinds, dropped []string, err error) {
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ks, ok := Groups[part]
		if !ok {
			if !slices.Contains(AllKinds, part) {
				return nil, nil, fmt.Errorf("unknown nemesis %q: want one of %s or a group (%s)",
					part, strings.Join(AllKinds, ", "), strings.Join(groupNames(), ", "))
			}
			ks = []string{part}
		}
		for _, k := range ks {
			if slices.Contains(kinds, k) || slices.Contains(dropped, k) {
				continue
			}
			if (NeedsNetwork(k) && !network) || (NeedsCtl(k) && !ctl) {
				dropped = append(dropped, k)
				continue
			}
			kinds = append(kinds, k)
		}
	}
	return kinds, dropped, nil
}

func groupNames() []string {
	var out []string
	for g := range Groups {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// Step is one planned fault.
type Step struct {
	At       time.Duration `json:"at"`       // start, from the beginning of the fault period
	Kind     string        `json:"kind"`     // what
	Duration time.Duration `json:"duration"` // how long it stays before healing
	// Pick chooses the targets when the fault starts (which node, which
	// halves): drawn from the seed, so the choice reproduces.
	Pick uint64 `json:"pick"`
}

// Schedule is a run's planned faults.
type Schedule struct {
	Seed  uint64 `json:"seed"`
	Steps []Step `json:"steps"`
}

// Plan options.
type Plan struct {
	Kinds []string
	// Length of the fault period; no fault is still active at its end.
	Length time.Duration
	// Quiet time between faults, and fault durations.
	QuietMin, QuietMax time.Duration
	FaultMin, FaultMax time.Duration
	// LeaderFaultMax caps leader-only faults (below the session timeout, so
	// checker 6 applies); 0 means FaultMax.
	LeaderFaultMax time.Duration
}

// NewSchedule draws a schedule from seed: first every kind once in a
// shuffled order (a run covers each kind as early as it can), then kinds at
// random until the fault period is used.
func NewSchedule(seed uint64, p Plan) Schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	s := Schedule{Seed: seed}
	if len(p.Kinds) == 0 {
		return s
	}
	tour := slices.Clone(p.Kinds)
	rng.Shuffle(len(tour), func(i, j int) { tour[i], tour[j] = tour[j], tour[i] })
	t := between(p.QuietMin, p.QuietMax)
	for i := 0; ; i++ {
		kind := tour[i%len(tour)]
		if i >= len(tour) {
			kind = p.Kinds[rng.IntN(len(p.Kinds))]
		}
		hi := p.FaultMax
		if LeaderOnly(kind) && p.LeaderFaultMax > 0 {
			hi = min(hi, p.LeaderFaultMax)
		}
		d := between(min(p.FaultMin, hi), hi)
		step := Step{At: t, Kind: kind, Duration: d, Pick: rng.Uint64()}
		if t+d > p.Length {
			break
		}
		s.Steps = append(s.Steps, step)
		t += d + between(p.QuietMin, p.QuietMax)
	}
	return s
}

// Kinds in the schedule, sorted.
func (s Schedule) Kinds() []string {
	var out []string
	for _, st := range s.Steps {
		if !slices.Contains(out, st.Kind) {
			out = append(out, st.Kind)
		}
	}
	sort.Strings(out)
	return out
}

// FailoverOnly: every fault only moves or interrupts the leadership and is
// shorter than sessionTimeout.
func (s Schedule) FailoverOnly(sessionTimeout time.Duration) bool {
	if len(s.Steps) == 0 {
		return false
	}
	for _, st := range s.Steps {
		if !slices.Contains(RideOut, st.Kind) || st.Duration >= sessionTimeout {
			return false
		}
	}
	return true
}

// String prints the schedule, one fault a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule for seed %d: %d faults\n", s.Seed, len(s.Steps))
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "  %7.1fs  %-24s for %4.1fs\n", st.At.Seconds(), st.Kind, st.Duration.Seconds())
	}
	return b.String()
}
