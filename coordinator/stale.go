package coordinator

import cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"

// staleReader is a read request that may accept a stale answer.
type staleReader interface{ GetAllowStale() bool }

// AllowsStaleRead reports whether req is served by whichever node receives
// it, from that node's FSM, without forwarding to the leader and without
// the read barrier: when the request sets allow_stale. It is the one place
// that decides, for the forwarder (rpc) and the engine's reads alike.
//
// In the chaosbug build (chaosbug.go) every OffsetFetch is served so: a
// deliberate stale-read bug the chaos suite must catch.
func AllowsStaleRead(req any) bool {
	if _, ok := req.(*cohortv1.OffsetFetchRequest); ok && staleReadBug {
		return true
	}
	r, ok := req.(staleReader)
	return ok && r.GetAllowStale()
}
