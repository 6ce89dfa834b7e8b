package fsm

import (
	"errors"
	"fmt"
)

// Command rules and mixed-version clusters.
//
// Every command carries the rules it was written under (its version
// field), and every replica applies it under those rules, so replicas
// running different binaries stay identical as long as each knows the
// rules of every entry it applies. A binary applies rules up to
// CommandVersion; the leader writes entries under the oldest rules any
// server of the Raft configuration applies (each node states its own in
// the node registry: Node.MaxCommandVersion), so a rolling upgrade moves
// to new rules only once every server runs the new binary.
//
// An entry under rules newer than this FSM applies is not applied:
// guessing would make this replica differ from the others for good. Apply
// refuses it with ErrNewerRules and the node stops (raftnode halts the
// process); the entry stays in its log for the newer binary to apply.

// ErrNewerRules: a command was written under rules this FSM does not know.
var ErrNewerRules = errors.New("command written under newer rules than this cohortd applies")

// LimitRules makes this FSM apply rules up to v only, as a binary whose
// CommandVersion is v would (1 <= v <= CommandVersion): for tests of
// mixed-version clusters.
func (f *FSM) LimitRules(v uint32) error {
	if v < 1 || v > CommandVersion {
		return fmt.Errorf("command rules %d: this binary knows 1 to %d", v, CommandVersion)
	}
	f.maxRules.Store(v)
	return nil
}

// MaxRules is the newest command rules this FSM applies.
func (f *FSM) MaxRules() uint32 {
	if v := f.maxRules.Load(); v != 0 {
		return v
	}
	return CommandVersion
}

// checkRules refuses a command written under rules newer than MaxRules.
func (f *FSM) checkRules(index uint64, version uint32) error {
	if max := f.MaxRules(); version > max {
		return fmt.Errorf("%w: log entry %d was written under command rules %d, and this binary applies rules up to %d; run a cohortd as new as the cluster's leader", ErrNewerRules, index, version, max)
	}
	return nil
}
