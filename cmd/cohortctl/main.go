// Command cohortctl is the operator's CLI for a Cohort cluster: cluster
// membership and health, snapshots, consumer groups, offsets and topics.
// Every command talks gRPC to the nodes named by --endpoints (or
// COHORT_ENDPOINTS); any node answers, forwarding to the leader.
package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"

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

// rpcErrorPrefix is how grpc-go spells a status in an error string.
var rpcErrorPrefix = regexp.MustCompile(`rpc error: code = (\w+) desc = `)

// describeError turns gRPC statuses, also wrapped ones, into "CODE: message".
func describeError(err error) string {
	if st, ok := status.FromError(err); ok && st.Err() == err {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return rpcErrorPrefix.ReplaceAllString(err.Error(), "$1: ")
}
