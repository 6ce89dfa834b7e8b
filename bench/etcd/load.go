package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// This file repeats cmd/cohort-bench/load.go's measurement (closed-loop
// callers, latency of successful calls only, process CPU from getrusage,
// the same percentile rule and cell formats) rather than importing it: that
// is a main package of the root module, and this module must not depend on
// the product's. Keep the two in step, or the curves stop being comparable.

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

// processCPU is the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	cpu0 := processCPU()
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
	r := loadResult{conc: conc, elapsed: time.Since(start), errors: int(errs.Load()), firstErr: firstErr, cpu: processCPU() - cpu0}
	all := slices.Concat(lat...)
	r.ops = len(all)
	r.p50, r.p99, r.max = percentiles(all)
	return r
}

// percentiles returns p50, p99 and max of ds (which it sorts).
func percentiles(ds []time.Duration) (p50, p99, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return at(0.50), at(0.99), ds[len(ds)-1]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

func perSec(v float64) string { return fmt.Sprintf("%.0f", v) }

// loadLine describes the machine's load, recorded with every result.
func loadLine() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return fmt.Sprintf("load average %s %s %s", f[0], f[1], f[2])
}

func errNote(r loadResult) string {
	if r.errors == 0 {
		return "0"
	}
	msg := fmt.Sprint(r.firstErr)
	if len(msg) > 120 {
		msg = msg[:120] + "…"
	}
	return fmt.Sprintf("%d (first: %s)", r.errors, msg)
}
