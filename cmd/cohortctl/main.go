// Command cohortctl is the operator's CLI for a Cohort cluster: cluster
// membership and health, snapshots, consumer groups, offsets and topics.
// Every command talks gRPC to the nodes named by --endpoints (or
// COHORT_ENDPOINTS); any node answers, forwarding to the leader.
package main

import (
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/status"
)

func main() {
	cmd := newRootCommand()
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", describeError(err))
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// describeError turns a gRPC status into "CODE: message".
func describeError(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return describeError(ee.err)
	}
	// A wrapped status keeps its text.
	return err.Error()
}
