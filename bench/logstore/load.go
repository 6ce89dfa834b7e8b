package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cohortlabs/cohort/bench/report"
)

// This file measures as cmd/cohort-bench/load.go does (closed-loop callers,
// latency of successful calls only, process CPU from getrusage, the same
// percentile rule and cell formats), cut into intervals: one sample per
// --interval instead of one per phase. It repeats that code rather than
// importing it (a main package); keep the two in step, or the curves stop
// being comparable.

// opTimeout bounds one apply, as cohort-bench's does.
const opTimeout = 10 * time.Second

// sample is one interval of a run.
type sample struct {
	elapsed  time.Duration // since the run started, at the interval's end
	length   time.Duration // of the interval
	ops      int
	p50, p99 time.Duration
	max      time.Duration
	cpu      time.Duration // process CPU time (user+system) in the interval
	errors   int
	firstErr error
}

func (s sample) rate() float64 {
	if s.length <= 0 {
		return 0
	}
	return float64(s.ops) / s.length.Seconds()
}

func (s sample) cpuPerOp() time.Duration {
	if s.ops == 0 {
		return 0
	}
	return s.cpu / time.Duration(s.ops)
}

// callerLatencies is one caller's latencies since the last sample.
type callerLatencies struct {
	mu  sync.Mutex
	lat []time.Duration
}

// runIntervals runs op from conc closed-loop callers for dur (or until ctx
// ends) and calls onSample at the end of every interval, on this goroutine,
// with the calls completed in it. A last interval shorter than interval
// ends the run when dur is not a multiple of it. op gets a sequence number
// unique across callers.
func runIntervals(ctx context.Context, conc int, dur, interval time.Duration, op func(ctx context.Context, seq int64) error, onSample func(sample)) {
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	callers := make([]*callerLatencies, conc)
	var seq atomic.Int64
	var errMu sync.Mutex
	var errs int
	var firstErr error
	var wg sync.WaitGroup
	for w := range callers {
		cl := &callerLatencies{}
		callers[w] = cl
		wg.Go(func() {
			for lctx.Err() == nil {
				n := seq.Add(1)
				octx, ocancel := context.WithTimeout(ctx, opTimeout)
				t0 := time.Now()
				err := op(octx, n)
				d := time.Since(t0)
				ocancel()
				if err == nil {
					cl.mu.Lock()
					cl.lat = append(cl.lat, d)
					cl.mu.Unlock()
					continue
				}
				if lctx.Err() != nil {
					return // cut off by the end of the run, not a failure
				}
				errMu.Lock()
				errs++
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
				if errors.Is(err, errNoLeader) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
					// time passes: an election is under way; retrying at once
					// would only count errors until it ends.
					select {
					case <-lctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		})
	}

	start := time.Now()
	end := start.Add(dur)
	last, cpuLast := start, report.ProcessCPU()
	var all []time.Duration
	for k := 1; ; k++ {
		boundary := start.Add(time.Duration(k) * interval)
		if boundary.After(end) {
			boundary = end
		}
		t := time.NewTimer(time.Until(boundary))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		now, cpu := time.Now(), report.ProcessCPU()
		all = all[:0]
		for _, cl := range callers {
			cl.mu.Lock()
			all = append(all, cl.lat...)
			cl.lat = cl.lat[:0]
			cl.mu.Unlock()
		}
		errMu.Lock()
		s := sample{elapsed: now.Sub(start), length: now.Sub(last), ops: len(all), cpu: cpu - cpuLast, errors: errs, firstErr: firstErr}
		errs, firstErr = 0, nil
		errMu.Unlock()
		s.p50, s.p99, s.max = report.Percentiles(all)
		last, cpuLast = now, cpu
		onSample(s)
		if !boundary.Before(end) {
			break
		}
	}
	stop()
	wg.Wait()
}

// errNote is the interval's error count, with its first error.
func (s sample) errNote() string { return report.ErrNote(s.errors, s.firstErr) }

// fsType names the file system holding dir: a log store on tmpfs has no
// fsync cost, and its figures say nothing about a disk.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown file system"
	}
	switch uint64(st.Type) {
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x01021994:
		return "tmpfs (no fsync cost: not a disk measurement)"
	case 0x794C7630:
		return "overlayfs"
	case 0x2FC12FC1:
		return "zfs"
	}
	return fmt.Sprintf("file system 0x%x", uint64(st.Type))
}
