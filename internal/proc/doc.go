// Package proc runs real processes for tests and tools: cohortd clusters in
// the end-to-end tests (test/ops, cmd/cohortd), the benchmark cluster
// (internal/benchcluster) and the chaos cluster (chaos/cluster, where a
// node runs under `ip netns exec`).
//
// It owns, once for the whole tree:
//   - building Go binaries once per process (Builds), or taking prebuilt
//     ones from $COHORT_BIN_DIR;
//   - starting a process with its output captured (Log: the tail in memory,
//     optionally everything in a file) and stopping it: SIGKILL, SIGTERM with
//     a deadline, SIGSTOP/SIGCONT (Process);
//   - loopback ports outside the kernel's ephemeral range, held under a lock
//     file so that parallel test binaries never hand out the same one
//     (Reservation);
//   - the one polling wait with a deadline (Poll, WaitFor).
//
// The API returns errors and needs no testing.TB, so tools use it as is;
// the functions taking a TB (StartT, PortsT, WaitFor, ...) are thin test
// conveniences that fail the test and register t.Cleanup.
//
// What it must never do: leave a process it started running after Kill or
// after the test's cleanup, or pick a port in the ephemeral range, where any
// outgoing connection may take it between the check and the listen.
package proc
