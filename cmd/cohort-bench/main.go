// Command cohort-bench is Cohort's load generator: rebalance latency,
// heartbeat and offset-commit throughput, and failover time, each measured
// against a three-node loopback cluster it starts itself (in-process nodes,
// or real cohortd processes) or against the --endpoints of a running one.
// The raw replicated apply rate of the same in-process cluster is measured
// alongside, so that every figure has its ratio to what Raft alone does.
//
// Every run is bounded in count and time, every target must be a loopback
// address, and results are printed as a table. docs/benchmarks.md records
// the figures with the command behind each.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cohort-bench:", err)
		os.Exit(1)
	}
}
