package proc

import (
	"context"
	"time"
)

// TB is the part of testing.TB the test conveniences use; *testing.T and
// *testing.B satisfy it. It is declared here so that the package does not
// link the testing package into tools.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
}

// dumpLines is how many lines of a process's output StartT logs when the
// test fails.
const dumpLines = 100

// StartT starts a process for a test and fails t if it cannot. The process
// is killed by t.Cleanup if it still runs; when spec.Log is nil, the
// process's own Log is also dumped (last lines) if the test failed. With a
// Log of its own, the caller dumps it once with DumpOnFailure.
func StartT(t TB, spec Spec) *Process {
	t.Helper()
	own := spec.Log == nil
	if own {
		spec.Log = NewLog(DefaultKeep)
		// Registered before the kill below, so that it runs after it
		// (cleanups run last-in first-out) and sees the final output.
		DumpOnFailure(t, spec.name(), spec.Log, dumpLines)
	}
	p, err := Start(spec)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return p
}

// DumpOnFailure logs the last lines of log when t has failed by the time
// its cleanups run.
func DumpOnFailure(t TB, name string, log *Log, lines int) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- %s output (last %d lines) ----\n%s", name, lines, log.Tail(lines))
		}
	})
}

// PortsT reserves n loopback ports for the test (see ReservePorts); they are
// released by t.Cleanup, after the processes started later are killed.
func PortsT(t TB, n int) []int {
	t.Helper()
	r, err := ReservePorts(n)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(r.Release)
	return r.Ports
}

// PortRunT reserves n consecutive loopback ports for the test and returns
// the first (see ReservePortRun).
func PortRunT(t TB, n int) int {
	t.Helper()
	r, err := ReservePortRun(n)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(r.Release)
	return r.Ports[0]
}

// BuildTimeout bounds one `go build` of the test conveniences: a cold
// build cache under load takes minutes, a hung toolchain forever.
const BuildTimeout = 10 * time.Minute

// BuildT is Build of one package for a test.
func (b *Builds) BuildT(t TB, pkg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	bins, err := b.Build(ctx, pkg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return bins[0]
}
