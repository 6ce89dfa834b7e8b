// Package fsm is Cohort's replicated state machine: topics, consumer groups,
// committed offsets and the node registry, changed only by commands that
// arrive as Raft log entries.
//
// The package must stay pure and deterministic: no clock (time travels in the
// command), no randomness, no goroutines, no I/O except the snapshot stream it
// is handed, and no map-iteration order reaching state or output. Two FSMs fed
// the same log hold byte-identical snapshots. A bad command is a typed result
// (an *errcode.ProtocolError), never a panic, and leaves the state exactly as
// it was.
package fsm
