package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cohortlabs/cohort/bench/report"
)

// The load loop mirrors cmd/cohort-bench/load.go's (closed-loop callers,
// latency of successful calls only); the percentile rule, process CPU and
// cell formats are bench/report's, shared with it, so the curves compare.

// loadResult summarises one load phase.
type loadResult struct {
	conc     int
	ops      int
	errors   int
	firstErr error
	elapsed  time.Duration
	p50, p99 time.Duration
	max      time.Duration
	// cpu is this process's CPU time (user+system) during the phase: the
	// three embedded members' work and the callers', as cohort-bench's
	// in-process cluster counts its nodes' and callers'.
	cpu time.Duration
}

func (r loadResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// cpuPerOp is the process CPU time per successful operation.
func (r loadResult) cpuPerOp() time.Duration {
	if r.ops == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.ops)
}

// opTimeout bounds one operation, as cohort-bench's does.
const opTimeout = 10 * time.Second

// runLoad runs op from conc closed-loop callers for dur (or until ctx
// ends) and measures each call. op gets the caller's index and a sequence
// number unique across callers.
func runLoad(ctx context.Context, conc int, dur time.Duration, op func(ctx context.Context, worker int, seq int64) error) loadResult {
	lctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var seq, errs atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	lat := make([][]time.Duration, conc)
	cpu0 := report.ProcessCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for lctx.Err() == nil {
				n := seq.Add(1)
				octx, ocancel := context.WithTimeout(ctx, opTimeout)
				t0 := time.Now()
				err := op(octx, w, n)
				d := time.Since(t0)
				ocancel()
				if err != nil {
					if lctx.Err() != nil && ctx.Err() == nil {
						return // cut off by the end of the phase, not a failure
					}
					errs.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					continue
				}
				lat[w] = append(lat[w], d)
			}
		})
	}
	wg.Wait()
	r := loadResult{conc: conc, elapsed: time.Since(start), errors: int(errs.Load()), firstErr: firstErr, cpu: report.ProcessCPU() - cpu0}
	all := slices.Concat(lat...)
	r.ops = len(all)
	r.p50, r.p99, r.max = report.Percentiles(all)
	return r
}

// errNote is the phase's error count, with its first error.
func (r loadResult) errNote() string { return report.ErrNote(r.errors, r.firstErr) }
