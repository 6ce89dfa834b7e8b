// Package checker decides from a run's history alone whether Cohort kept its
// promises. Each checker is a pure function of the history (no clock, no
// network), so crafted histories test it and any saved history.jsonl can be
// checked again. A run is valid only when every applicable checker is.
//
// What it must never do: guess in Cohort's favour. An operation whose outcome
// is unknown may have taken effect at any time after its invocation, or
// never; a checker that cannot decide says so instead of passing.
package checker

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/cohortlabs/cohort/chaos/history"
)

// Checker names, in the order.
const (
	NameLinearizable = "linearizable-offsets"             // 1
	NameAgreement    = "group-agreement"                  // 2
	NameMonotonic    = "monotonic-generations"            // 3
	NameFencing      = "commit-fencing"                   // 4
	NameDurability   = "durability"                       // 5
	NameFailover     = "failover-keeps-generation"        // 6
	NameLiveness     = "liveness"                         // 7
	NameStatic       = "static-member-fencing"            // 8
	NameCutJoins     = "cut-joins-keep-members"           // 9
	NameStaleGen     = "no-commit-after-newer-generation" // 10
	NameOffsetsBack  = "committed-offsets-never-go-back"  // 11
	NameExpiry       = "crashed-members-expire"           // 12
)

// Anomaly kinds.
const (
	KindNonLinearizable    = "nonlinearizable"
	KindUnchecked          = "linearizability-unchecked"
	KindDoubleOwner        = "double-owner"
	KindLeaderDisagree     = "leader-disagreement"
	KindMembersDisagree    = "member-list-disagreement"
	KindNotInGeneration    = "member-not-in-generation"
	KindGenerationBack     = "generation-went-back"
	KindGenerationRepeat   = "generation-repeated-with-other-assignment"
	KindFencingBreach      = "fencing-breach"
	KindLostWrite          = "lost-write"
	KindNoFinalRead        = "no-final-read"
	KindUnexplainedRebal   = "unexplained-generation"
	KindGroupNotStable     = "group-not-stable"
	KindClientNotRecovered = "client-not-recovered"
	KindZombieRejoined     = "zombie-rejoined"
	KindZombieSurvived     = "zombie-survived"
	KindCutLostMember      = "cut-join-lost-member"
	KindStaleGeneration    = "commit-after-newer-generation"
	KindOffsetWentBack     = "committed-offset-went-back"
	KindMemberNotExpired   = "crashed-member-not-expired"
)

// Anomaly is one violation, with the operations that show it.
type Anomaly struct {
	Kind    string          `json:"kind"`
	Message string          `json:"message"`
	Ops     []history.Entry `json:"ops,omitempty"`
}

// Result is one checker's verdict.
type Result struct {
	Name  string `json:"name"`
	Valid bool   `json:"valid"`
	// Skipped says why the checker did not apply to this run ("" when it
	// ran); a skipped checker is valid.
	Skipped string `json:"skipped,omitempty"`
	Checked int    `json:"checked"` // how many items it examined
	// Excused: items not judged because a fault the checker does not judge
	// may explain them (checker 6 on a mixed schedule).
	Excused   int       `json:"excused,omitempty"`
	Anomalies []Anomaly `json:"anomalies,omitempty"`
}

// Options tune the checkers to the run.
type Options struct {
	// LinearizabilityTimeout bounds porcupine per key (0: 30 s). A key it
	// cannot decide in time is an anomaly of kind linearizability-unchecked.
	LinearizabilityTimeout time.Duration
	// RideOut are the fault kinds a group must ride out without a
	// rebalance when they last less than a session timeout (checker 6);
	// nil: DefaultRideOut. A generation change near any other fault is
	// excused, not judged.
	RideOut []string
	// SessionTimeout and RebalanceTimeout of the group members (checker
	// 6's windows; checker 12's deadline). Defaults 10 s and twice the
	// session timeout.
	SessionTimeout, RebalanceTimeout time.Duration
	// LivenessWindow: how long after the final heal the cluster has to
	// recover (default 30 s).
	LivenessWindow time.Duration
	// VisualizeDir, when set, receives a porcupine HTML visualization of
	// every key found not linearizable.
	VisualizeDir string
}

// DefaultRideOut are the nemesis kinds that only move or interrupt the
// Raft leadership (chaos/nemesis: leader kill, pause and isolation, short
// repeated leader pauses, leadership transfers).
var DefaultRideOut = []string{"kill-leader", "pause-leader", "isolate-leader", "pause-leader-flicker",
	"transfer-leadership", "transfer-back"}

func (o Options) withDefaults() Options {
	if o.LinearizabilityTimeout == 0 {
		o.LinearizabilityTimeout = 30 * time.Second
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 10 * time.Second
	}
	if o.RebalanceTimeout == 0 {
		o.RebalanceTimeout = 2 * o.SessionTimeout
	}
	if o.RideOut == nil {
		o.RideOut = DefaultRideOut
	}
	if o.LivenessWindow == 0 {
		o.LivenessWindow = 30 * time.Second
	}
	return o
}

// All runs every checker over the history.
func All(es []history.Entry, o Options) []Result {
	o = o.withDefaults()
	es = slices.Clone(es)
	history.Sort(es)
	return []Result{
		Linearizable(es, o),
		Agreement(es),
		Monotonic(es),
		Fencing(es),
		Durability(es),
		Failover(es, o),
		Liveness(es, o),
		StaticFencing(es),
		CutJoins(es, o),
		StaleGeneration(es),
		OffsetsNeverGoBack(es),
		Expiry(es, o),
	}
}

// Valid reports whether every result is valid.
func Valid(rs []Result) bool {
	for _, r := range rs {
		if !r.Valid {
			return false
		}
	}
	return true
}

func result(name string, checked int, as []Anomaly) Result {
	return Result{Name: name, Valid: len(as) == 0, Checked: checked, Anomalies: as}
}

func skipped(name, why string) Result { return Result{Name: name, Valid: true, Skipped: why} }

// ops returns the client operations with function f.
func ops(es []history.Entry, fs ...string) []history.Entry {
	var out []history.Entry
	for _, e := range es {
		if e.Type == history.TypeOp && slices.Contains(fs, e.F) {
			out = append(out, e)
		}
	}
	return out
}

func secs(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }

// identity is who owns partitions: a static member's instance ID (which
// survives restarts and member ID replacement), else its member ID.
func identity(member, instance string) string {
	if instance != "" {
		return "instance:" + instance
	}
	return member
}

// truncate keeps anomaly reports readable.
func truncate(es []history.Entry, n int) []history.Entry {
	if len(es) <= n {
		return es
	}
	return es[:n]
}

// sortedKeys lists a history's keys in their printed order, so that a
// checker reports its anomalies in the same order on every run.
func sortedKeys[V any](m map[history.Key]V) []history.Key {
	keys := make([]history.Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys
}
