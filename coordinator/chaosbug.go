//go:build chaosbug

// This file exists only in a deliberately broken build (go build -tags
// chaosbug), against which the chaos suite must report the run invalid
// (`make chaos-bug`). It never ships: without the tag, chaosbug_off.go is
// compiled instead.
//
// The fault: every OffsetFetch is served as if the client had asked for a
// stale read (AllowsStaleRead), i.e. by whichever node received it, from
// its own FSM, without forwarding to the leader and without the read
// barrier. An isolated or lagging node then answers with offsets the
// cluster has already overwritten — a stale read the linearizability
// checker must flag.

package coordinator

const staleReadBug = true
