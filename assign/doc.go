// Package assign owns Cohort's partition assignors (range, roundrobin,
// sticky, cooperative-sticky, consistent-hash), their registry by protocol
// name, and the versioned binary encoding of a member's subscription
// metadata and of an assignment.
//
// An assignor is a pure function of its input: the group's members (ID,
// optional instance ID, subscribed topics, partitions owned in the previous
// generation and that generation) and the topics' partition counts. The same
// input, in any map or slice order, gives the same Plan and byte-identical
// encodings, which is what lets the coordinator compute an assignment inside
// the replicated state machine's apply and lets every replica agree.
//
// The package must never do I/O, read a clock, use randomness (including
// hash/maphash, whose seeds differ per process), start goroutines, keep
// state between calls, or let map iteration order reach its output. Decoders
// must reject malformed input with an error and never panic. It imports
// nothing from Cohort: fsm, coordinator and the client import it.
//
// See docs/assignors.md for what each assignor optimises and how they
// compare on the benchmark scenarios.
package assign
