// Package history is the record of a chaos run: every client operation with
// its invocation and completion time and outcome, every fault the nemesis
// started and stopped, and the workload's own events (member churn, final
// checks). It is written as JSON lines while the run goes on, so a crashed
// run still leaves what it saw, and read back by the checkers.
//
// Times are nanoseconds since the start of the run.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Outcome of a client operation, in Jepsen's terms.
type Outcome string

const (
	// OK: the operation took effect (a write was acknowledged, a read
	// returned a value).
	OK Outcome = "ok"
	// Fail: the operation certainly did not take effect (a refusal).
	Fail Outcome = "fail"
	// Info: the outcome is unknown (a timeout, or a write whose answer was
	// lost); it may take effect at any time after its invocation.
	Info Outcome = "info"
)

// Entry types.
const (
	TypeOp      = "op"      // a client operation
	TypeNemesis = "nemesis" // a fault started or stopped
	TypeEvent   = "event"   // workload bookkeeping (churn, phases)
)

// Op functions.
const (
	FRead      = "read"      // offsets: OffsetFetch of one key
	FWrite     = "write"     // offsets: standalone OffsetCommit of one key
	FJoin      = "join"      // groups: JoinGroup answer
	FSync      = "sync"      // groups: SyncGroup answer
	FCommit    = "commit"    // groups: OffsetCommit of a member
	FHeartbeat = "heartbeat" // groups: Heartbeat of a member
	FFetch     = "fetch"     // groups: OffsetFetch by a member's owner
	FDescribe  = "describe"  // final liveness check of a group
)

// Event names (TypeEvent) and nemesis phases (TypeNemesis).
const (
	EvMemberStart   = "member-start"   // a member client incarnation starts
	EvMemberLeave   = "member-leave"   // graceful leave (LeaveGroup)
	EvMemberCrash   = "member-crash"   // stops without leaving
	EvMemberRestart = "member-restart" // a static member comes back
	// A second process with a static member's instance ID starts while the
	// first still runs (the first becomes a zombie that must be fenced).
	EvMemberDuplicate = "member-duplicate"
	// The zombie of a duplicate stopped (Note: why), or was still running
	// after three session timeouts ("zombie-survived").
	EvZombieStopped  = "zombie-stopped"
	EvZombieSurvived = "zombie-survived"
	// A member's JoinGroup was cut (its connection reset) while it waited
	// at the join barrier.
	EvJoinCut = "join-cut"
	// A member client froze (every call held, as a stopped process's would
	// be) and resumed with its old member ID and generation.
	EvMemberFreeze = "member-freeze"
	EvMemberResume = "member-resume"
	// A member's commit was held until the group had moved to a newer
	// generation, then sent with the old one (Note says which).
	EvZombieCommit = "zombie-commit"
	// The leader the runner saw changed (Node: the new leader, "" for none;
	// Term: its Raft term).
	EvLeader     = "leader"
	EvFinalPhase = "final-phase" // every fault healed; final reads begin
	// After the final liveness check a member was crashed and leadership
	// moved (Member: the crashed member; Note: cohortctl's answer).
	EvFinalTransfer = "final-transfer"
	EvEnd           = "end" // the run's last moment

	// NoteChase marks a register operation sent to a new leader the moment
	// the runner saw it elected (not a client that must recover after the
	// final heal).
	NoteChase = "chase"
	// NoteZombie begins the note of a commit the workload held until the
	// group had moved on and then sent with the old generation: a fencing
	// probe of a member incarnation that may have left or crashed (not a
	// client that must recover after the final heal).
	NoteZombie = "zombie: "

	NemStart = "start"
	NemStop  = "stop"
)

// Entry is one line of history.jsonl.
type Entry struct {
	Type    string  `json:"type"`
	Process int     `json:"process"`
	F       string  `json:"f"`
	Start   int64   `json:"start"`
	End     int64   `json:"end,omitempty"`
	Outcome Outcome `json:"outcome,omitempty"`
	Error   string  `json:"error,omitempty"`
	Node    string  `json:"node,omitempty"` // endpoint the client used

	// Offsets registers and member commits.
	Group     string `json:"group,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	Value     *int64 `json:"value,omitempty"`

	// Group protocol.
	Member     string `json:"member,omitempty"`
	Instance   string `json:"instance,omitempty"`
	Generation int32  `json:"generation,omitempty"`
	Leader     string `json:"leader,omitempty"`
	// Members of the generation, as the group leader's JoinGroup answer
	// lists them (other members' answers have none).
	Members    []Member    `json:"members,omitempty"`
	Assignment []Partition `json:"assignment,omitempty"`
	// Plan is the group leader's assignment for everyone, sent in its
	// SyncGroup (empty for followers).
	Plan []Member `json:"plan,omitempty"`
	// Offsets of a member's commit, per partition, with the per-partition
	// outcome (a commit may be accepted for some partitions only).
	Commits []PartitionCommit `json:"commits,omitempty"`
	// Incarnation names one run of one member client (static members keep
	// their instance ID across incarnations, never their incarnation).
	Incarnation string `json:"incarnation,omitempty"`
	State       string `json:"state,omitempty"`
	Final       bool   `json:"final,omitempty"`

	// Nemesis: the fault kind, its phase (start/stop) and its targets.
	Fault string   `json:"fault,omitempty"`
	Phase string   `json:"phase,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
	Note  string   `json:"note,omitempty"`
	// Term of a leader event.
	Term uint64 `json:"term,omitempty"`
}

// ZombieProbe reports whether e is a held-back commit the workload sent
// with an old generation (its note begins with NoteZombie).
func (e Entry) ZombieProbe() bool { return strings.HasPrefix(e.Note, NoteZombie) }

// Partition is one partition of a topic.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// Member is one member of a generation, with its assignment in a plan.
type Member struct {
	Member     string      `json:"member"`
	Instance   string      `json:"instance,omitempty"`
	Assignment []Partition `json:"assignment,omitempty"`
}

// PartitionCommit is one partition of a member's commit.
type PartitionCommit struct {
	Partition
	Offset  int64   `json:"offset"`
	Outcome Outcome `json:"outcome"`
	Error   string  `json:"error,omitempty"`
}

// Key names a register of the offsets workload (and a committed offset of
// the groups workload).
type Key struct {
	Group     string
	Topic     string
	Partition int32
}

func (k Key) String() string { return fmt.Sprintf("%s/%s/%d", k.Group, k.Topic, k.Partition) }

// Key of an entry.
func (e Entry) Key() Key { return Key{e.Group, e.Topic, e.Partition} }

// Int64 returns a pointer to v, for Entry.Value.
func Int64(v int64) *int64 { return &v }

// Recorder collects entries, in memory and as JSON lines. Safe for
// concurrent use.
type Recorder struct {
	t0 time.Time

	mu      sync.Mutex
	entries []Entry
	w       *bufio.Writer
	f       io.Closer
	err     error
}

// NewRecorder records into memory and, when path is not empty, into the
// file at path (created or truncated).
func NewRecorder(path string) (*Recorder, error) {
	r := &Recorder{t0: time.Now()}
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("create history %s: %w", path, err)
		}
		r.w, r.f = bufio.NewWriter(f), f
	}
	return r, nil
}

// Now is the run's clock: nanoseconds since the recorder was made.
func (r *Recorder) Now() int64 { return int64(time.Since(r.t0)) }

// Origin is the wall-clock time of Now() == 0.
func (r *Recorder) Origin() time.Time { return r.t0 }

// Add records e.
func (r *Recorder) Add(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
	if r.w == nil || r.err != nil {
		return
	}
	b, err := json.Marshal(e)
	if err == nil {
		b = append(b, '\n')
		_, err = r.w.Write(b)
	}
	r.err = err
}

// Entries returns a copy of everything recorded, ordered by start time.
func (r *Recorder) Entries() []Entry {
	r.mu.Lock()
	out := append([]Entry(nil), r.entries...)
	r.mu.Unlock()
	Sort(out)
	return out
}

// Flush writes buffered lines to the file.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil {
		return r.err
	}
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

// Close flushes and closes the file.
func (r *Recorder) Close() error {
	err := r.Flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		if cerr := r.f.Close(); cerr != nil && err == nil {
			err = cerr
		}
		r.f, r.w = nil, nil
	}
	return err
}

// Sort orders entries by start time (stable, so equal starts keep their
// recording order).
func Sort(es []Entry) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Start < es[j].Start })
}

// Load reads a history.jsonl file.
func Load(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	Sort(out)
	return out, nil
}
