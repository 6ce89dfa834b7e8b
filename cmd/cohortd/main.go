// Command cohortd is a Cohort server: one Raft replica of the consumer-group
// coordinator, with its gRPC API, /healthz, /readyz and /metrics.
//
// Every flag has a COHORT_* environment equivalent (--raft-addr is
// COHORT_RAFT_ADDR); a flag on the command line wins over the environment,
// which wins over the default.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "cohortd:", err)
		os.Exit(1)
	}
}
