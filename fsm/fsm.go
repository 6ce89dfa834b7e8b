package fsm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// FSM is the replicated state machine. Apply, Snapshot and Restore are called
// by one goroutine (Raft's FSM loop); the read methods may be called from any
// goroutine at the same time.
type FSM struct {
	mu      sync.RWMutex
	state   *State
	applied uint64
	// observer, when set, is told of every applied command (Observe).
	observer atomic.Pointer[func(*fsmv1.Command, *ApplyResult)]
	// maxRules is the newest command rules applied (0: CommandVersion).
	maxRules atomic.Uint32
}

// Observe has fn told of every command applied from now on, with its
// result, in log order, after the apply and outside the FSM's lock (fn may
// read the FSM). It runs on the applying goroutine (Raft's), so it must
// not block. The leader's engine follows the applied entries this way,
// whoever proposed them and whether or not the proposer saw the result.
func (f *FSM) Observe(fn func(cmd *fsmv1.Command, res *ApplyResult)) {
	f.observer.Store(&fn)
}

// New returns an empty FSM.
func New() *FSM {
	return &FSM{state: NewState()}
}

// ApplyResult is what applying one command produced. Err is a
// *errcode.ProtocolError when the command as a whole was refused; the state is then
// unchanged. Per-item outcomes of multi-item commands are in Partitions,
// Members and Groups.
type ApplyResult struct {
	Index uint64
	Err   error
	// Group is the group after the command (nil when the command concerned
	// no group or removed it). It is frozen: never modify it.
	Group *Group
	// JoinCompleted reports that this command closed the join barrier and
	// started Group.Generation.
	JoinCompleted bool
	// Partitions holds per-partition outcomes of CommitOffsets.
	Partitions []PartitionResult
	// Members holds per-member outcomes of RemoveMembers.
	Members []MemberResult
	// Groups holds per-group outcomes of DeleteGroups.
	Groups []GroupResult
	// Batch holds the result of each command of a Batch, in order.
	Batch []*ApplyResult
	// ServerAssignment reports how a server-side group's plan was
	// computed when this command completed its join phase (nil otherwise).
	ServerAssignment *ServerAssignment
	// Consumer is a ConsumerHeartbeat's answer for its member.
	Consumer *ConsumerResult
}

// PartitionResult is the outcome of one partition of an offset commit.
type PartitionResult struct {
	Topic     string
	Partition int32
	Err       error
}

// MemberResult is the outcome of removing one member.
type MemberResult struct {
	MemberID   string
	InstanceID string
	Err        error
}

// GroupResult is the outcome of deleting one group.
type GroupResult struct {
	GroupID string
	Err     error
}

// DecodeCommand parses a log entry's data.
func DecodeCommand(data []byte) (*fsmv1.Command, error) {
	cmd := &fsmv1.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "decode command (%d bytes): %v", len(data), err)
	}
	return cmd, nil
}

// EncodeCommand serialises a command for a log entry.
func EncodeCommand(cmd *fsmv1.Command) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	return b, nil
}

// ApplyEntry decodes and applies the data of the log entry at index.
func (f *FSM) ApplyEntry(index uint64, data []byte) *ApplyResult {
	cmd, err := DecodeCommand(data)
	if err != nil {
		f.mu.Lock()
		f.applied = index
		f.mu.Unlock()
		return &ApplyResult{Index: index, Err: err}
	}
	return f.Apply(index, cmd)
}

// Apply applies one decoded command as the log entry at index. A command
// under rules newer than MaxRules is not applied: the result's Err wraps
// ErrNewerRules and the applied index stays where it was.
func (f *FSM) Apply(index uint64, cmd *fsmv1.Command) *ApplyResult {
	if err := f.checkRules(index, cmd.GetVersion()); err != nil {
		return &ApplyResult{Index: index, Err: err}
	}
	f.mu.Lock()
	res := f.state.apply(cmd)
	res.Index = index
	f.applied = index
	f.mu.Unlock()
	if o := f.observer.Load(); o != nil {
		(*o)(cmd, res)
	}
	return res
}

// AppliedIndex is the index of the last log entry applied.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Snapshot returns a point-in-time copy of the state. It costs a copy of the
// top-level maps; groups and offset tables are shared copy-on-write, so Apply
// may continue while the snapshot is written out.
func (f *FSM) Snapshot() *Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Snapshot{state: f.state.clone(), index: f.applied}
}

// Restore replaces the whole state with the snapshot read from r. On error
// the state is unchanged.
func (f *FSM) Restore(r io.Reader) error {
	st, err := ReadSnapshot(r)
	if err != nil {
		return err
	}
	if max := f.MaxRules(); st.rulesSeen > max {
		return fmt.Errorf("%w: the snapshot holds entries written under command rules %d, and this binary applies rules up to %d; run a cohortd as new as the cluster's leader", ErrNewerRules, st.rulesSeen, max)
	}
	f.mu.Lock()
	f.state = st
	f.mu.Unlock()
	return nil
}

// SetAppliedIndex records the index the state corresponds to after a Restore
// (Raft knows it; the snapshot stream does not carry it).
func (f *FSM) SetAppliedIndex(index uint64) {
	f.mu.Lock()
	f.applied = index
	f.mu.Unlock()
}

// Read calls fn with the current state under a read lock. fn must not keep
// references to maps of the state, nor modify anything; *Group values it
// obtains are frozen and may be kept.
func (f *FSM) Read(fn func(s *State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Stats counts the state's contents, for metrics.
type Stats struct {
	Topics  int
	Groups  int
	Members int
	Offsets int
	Nodes   int
}

// Stats returns the current counts.
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.stats()
}

// Group returns the frozen group with the given ID.
func (f *FSM) Group(id string) (*Group, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g, ok := f.state.groups[id]
	return g, ok
}

// Nodes returns the node registry sorted by node ID.
func (f *FSM) Nodes() []Node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.sortedNodes()
}
