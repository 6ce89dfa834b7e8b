package main

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchTarget starts an in-process three-node cluster for a benchmark.
func benchTarget(b *testing.B) (*target, *globalOptions) {
	b.Helper()
	g := &globalOptions{cluster: "inprocess", dir: b.TempDir(), timeout: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t, err := g.openTarget(ctx, "")
	if err != nil {
		b.Fatalf("start cluster: %v", err)
	}
	b.Cleanup(func() { _ = t.Close() })
	return t, g
}

func report(b *testing.B, r loadResult) {
	b.Helper()
	if r.errors > 0 {
		b.Fatalf("%d of %d operations failed; first: %v", r.errors, r.ops+r.errors, r.firstErr)
	}
	b.ReportMetric(r.rate(), "ops/s")
	b.ReportMetric(float64(r.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
}

// BenchmarkCommits measures, on one in-process three-node cluster, raw
// replicated apply (Node.Apply on the leader) and offset commits through
// the client library (Member.Commit from 16 members, and a standalone
// committer on client.Dial) at concurrency 1, 16 and 256.
//
//	go test -run '^$' -bench BenchmarkCommits -benchtime 5000x ./cmd/cohort-bench/
func BenchmarkCommits(b *testing.B) {
	t, g := benchTarget(b)
	ctx := context.Background()
	loads := map[string]func(context.Context, int, int64) error{}
	for _, mode := range []string{"member", "conn"} {
		op, _, closeLoad, err := commitLoad(ctx, g, t, commitOptions{mode: mode, members: 16, partitions: 256})
		if err != nil {
			b.Fatalf("prepare %s commits: %v", mode, err)
		}
		b.Cleanup(closeLoad)
		loads[mode] = op
	}
	for _, conc := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("path=raw/conc=%d", conc), func(b *testing.B) {
			r, err := rawPhase(ctx, t, conc, limit{ops: int64(b.N)}, 256)
			if err != nil {
				b.Fatal(err)
			}
			report(b, r)
		})
		for _, mode := range []string{"member", "conn"} {
			b.Run(fmt.Sprintf("path=client-%s/conc=%d", mode, conc), func(b *testing.B) {
				report(b, runLoad(ctx, conc, limit{ops: int64(b.N)}, loads[mode]))
			})
		}
	}
}
