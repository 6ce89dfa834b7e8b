package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
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

// processCPU is the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	cpu0 := processCPU()
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
	r := loadResult{conc: conc, elapsed: time.Since(start), errors: int(errs.Load()), firstErr: firstErr, cpu: processCPU() - cpu0}
	all := slices.Concat(lat...)
	r.ops = len(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	if len(all) > 0 {
		r.mean = sum / time.Duration(len(all))
	}
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

// median returns the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	p50, _, _ := percentiles(ds)
	return p50
}

// table prints aligned columns, or with --json (w is the run's
// *jsonReport) adds them to the report.
type table struct {
	tw     *tabwriter.Writer
	report *jsonReport
	json   *jsonReportTable
}

func newTable(w io.Writer, header ...string) *table {
	if r, ok := w.(*jsonReport); ok {
		return &table{report: r, json: r.table(header)}
	}
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	if t.report != nil {
		t.report.addRow(t.json, cells)
		return
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t")+"\t")
}

func (t *table) flush() {
	if t.tw != nil {
		_ = t.tw.Flush()
	}
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

func perSec(v float64) string { return fmt.Sprintf("%.0f", v) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

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
