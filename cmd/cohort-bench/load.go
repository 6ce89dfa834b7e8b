package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cohortlabs/cohort/bench/report"
)

// limit bounds one load phase: it ends after ops operations or after dur,
// whichever comes first (ops 0: no count bound).
type limit struct {
	ops int64
	dur time.Duration
}

// loadResult summarises one load phase.
type loadResult struct {
	conc     int
	ops      int
	errors   int
	firstErr error
	elapsed  time.Duration
	p50, p99 time.Duration
	max      time.Duration
	mean     time.Duration
	// cpu is this process's CPU time (user+system) during the phase: with
	// the in-process cluster, the nodes' and the load generator's work. On
	// a shared machine CPU per operation varies far less than throughput.
	cpu time.Duration
}

// cpuPerOp is the process CPU time per successful operation.
func (r loadResult) cpuPerOp() time.Duration {
	if r.ops == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.ops)
}

func (r loadResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// opTimeout bounds one operation of a load phase.
const opTimeout = 10 * time.Second

// runLoad runs op from conc workers until lim is reached or ctx ends and
// measures each call. op gets the worker's index and a sequence number
// unique across workers.
func runLoad(ctx context.Context, conc int, lim limit, op func(ctx context.Context, worker int, seq int64) error) loadResult {
	lctx, cancel := context.WithCancel(ctx)
	if lim.dur > 0 {
		lctx, cancel = context.WithTimeout(ctx, lim.dur)
	}
	defer cancel()
	var seq, errs atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	lat := make([][]time.Duration, conc)
	cpu0 := report.ProcessCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				n := seq.Add(1)
				if lim.ops > 0 && n > lim.ops {
					return
				}
				octx, ocancel := context.WithTimeout(ctx, opTimeout)
				t0 := time.Now()
				err := op(octx, w, n)
				d := time.Since(t0)
				ocancel()
				if err != nil {
					if lctx.Err() != nil && ctx.Err() == nil && lim.ops == 0 {
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
		}()
	}
	wg.Wait()
	r := loadResult{conc: conc, elapsed: time.Since(start), errors: int(errs.Load()), firstErr: firstErr, cpu: report.ProcessCPU() - cpu0}
	all := slices.Concat(lat...)
	r.ops = len(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	if len(all) > 0 {
		r.mean = sum / time.Duration(len(all))
	}
	r.p50, r.p99, r.max = report.Percentiles(all)
	return r
}

// median returns the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	p50, _, _ := report.Percentiles(ds)
	return p50
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// errNote is the phase's error count, with its first error.
func (r loadResult) errNote() string { return report.ErrNote(r.errors, r.firstErr) }
