package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cohortlabs/cohort/chaos/history"
)

// Exposure counts how often a run drove Cohort into the situations its
// fences and leadership checks exist for: a run that never reached them
// proves nothing about them, whatever its verdict.
type Exposure struct {
	// CommitsRefused: member commit partitions refused, by error code
	// (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ...).
	CommitsRefused map[string]int `json:"commits_refused_by_code"`
	// LeaderChanges the runner saw (node or term), and the nodes that led
	// in two or more terms: leadership that came back to a process.
	LeaderChanges int      `json:"leader_changes"`
	LedAgain      []string `json:"nodes_that_led_again,omitempty"`
	// Register reads answered that began within one second after a new
	// leader was seen, and how many of them the chaser sent to it.
	ReadsAfterLeaderChange int `json:"reads_within_1s_of_leader_change"`
	ChaserOps              int `json:"chaser_ops_ok"`
	// Zombie commits (sent with a generation the group had left):
	// delivered, refused, acknowledged, unknown.
	ZombieCommits        int `json:"zombie_commits_sent"`
	ZombieCommitsRefused int `json:"zombie_commits_refused"`
	ZombieCommitsAcked   int `json:"zombie_commits_acked"`
	// Frozen members, and their calls refused after they resumed.
	Freezes         int `json:"member_freezes"`
	Duplicates      int `json:"static_duplicates"`
	CrashesExpected int `json:"crashed_members_expected_to_expire"`
}

// Expose counts a history's exposure.
func Expose(es []history.Entry) Exposure {
	x := Exposure{CommitsRefused: map[string]int{}}
	var changes []int64
	var lastLeader string
	led := map[string]int{} // node → separate leaderships
	for _, e := range es {
		if e.Type != history.TypeEvent || e.F != history.EvLeader {
			continue
		}
		x.LeaderChanges++
		if e.Node != "" {
			changes = append(changes, e.Start)
			if e.Node != lastLeader {
				led[e.Node]++
			}
		}
		lastLeader = e.Node
	}
	for n, k := range led {
		if k >= 2 {
			x.LedAgain = append(x.LedAgain, fmt.Sprintf("%s (%d times)", n, k))
		}
	}
	sort.Strings(x.LedAgain)
	sort.Slice(changes, func(i, j int) bool { return changes[i] < changes[j] })
	for _, e := range es {
		switch {
		case e.Type == history.TypeEvent:
			switch e.F {
			case history.EvMemberFreeze:
				x.Freezes++
			case history.EvMemberDuplicate:
				x.Duplicates++
			case history.EvMemberCrash:
				if e.Instance == "" && e.Member != "" {
					x.CrashesExpected++
				}
			}
		case e.Type == history.TypeOp && e.F == history.FRead && e.Outcome == history.OK:
			i := sort.Search(len(changes), func(i int) bool { return changes[i] > e.Start }) - 1
			if i >= 0 && e.Start-changes[i] <= 1e9 {
				x.ReadsAfterLeaderChange++
			}
			if e.Note == history.NoteChase {
				x.ChaserOps++
			}
		case e.Type == history.TypeOp && e.F == history.FWrite && e.Outcome == history.OK && e.Note == history.NoteChase:
			x.ChaserOps++
		case e.Type == history.TypeOp && e.F == history.FCommit:
			zombie := e.ZombieProbe()
			if zombie {
				x.ZombieCommits++
			}
			refused, ok := false, false
			for _, c := range e.Commits {
				switch c.Outcome {
				case history.Fail:
					code := c.Error
					if code == "" {
						code = e.Error
					}
					code = codeOf(code)
					x.CommitsRefused[code]++
					refused = true
				case history.OK:
					ok = true
				}
			}
			if zombie && refused {
				x.ZombieCommitsRefused++
			}
			if zombie && ok {
				x.ZombieCommitsAcked++
			}
		}
	}
	return x
}

// text is the exposure in the run's summary.
func (x Exposure) text() string {
	var b strings.Builder
	codes := make([]string, 0, len(x.CommitsRefused))
	for c := range x.CommitsRefused {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	var refused []string
	for _, c := range codes {
		refused = append(refused, fmt.Sprintf("%s %d", c, x.CommitsRefused[c]))
	}
	fmt.Fprintf(&b, "  exposure: commits refused, by code: %s\n", strings.Join(refused, ", "))
	fmt.Fprintf(&b, "  exposure: %d leader changes; led again: %s; %d reads within 1 s of a leader change (%d chaser ops)\n",
		x.LeaderChanges, strings.Join(x.LedAgain, ", "), x.ReadsAfterLeaderChange, x.ChaserOps)
	fmt.Fprintf(&b, "  exposure: zombie commits %d sent, %d refused, %d acknowledged; %d freezes, %d static duplicates, %d crashed members to expire\n",
		x.ZombieCommits, x.ZombieCommitsRefused, x.ZombieCommitsAcked, x.Freezes, x.Duplicates, x.CrashesExpected)
	return b.String()
}

// codeOf shortens a refusal to its code: Cohort's error code
// (ILLEGAL_GENERATION), from a partition's result or a refused call's
// status message, else the call's gRPC code (a call that reached no
// leader, not a fence).
func codeOf(err string) string {
	if rest, ok := strings.CutPrefix(err, "rpc error: code = "); ok {
		code, desc, _ := strings.Cut(rest, " desc = ")
		if c, _, ok := strings.Cut(desc, ":"); ok && c != "" && strings.Trim(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == "" {
			return c
		}
		return "grpc " + code
	}
	err = strings.TrimPrefix(err, "ERROR_CODE_")
	if i := strings.IndexAny(err, ": "); i > 0 {
		err = err[:i]
	}
	return err
}
