package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/cohortlabs/cohort/bench/report"
)

// The commit measurement: closed-loop OffsetCommit requests of one
// partition each, with generation -1 and no member ID (a standalone
// commit to a group with no members, Kafka's offset reset), so that both
// targets do the same work: no membership is checked, the offset is
// stored. Committer w uses client w%clients, as etcd-bench's callers do.

const (
	commitGroup = "bench-commits"
	commitTopic = "bench-commits"
	// commitPartitions are the commit topic's; the partition committed is
	// the commit's sequence number modulo this.
	commitPartitions = 256
	// commitVersion pins OffsetCommit to v8, the newest both targets serve
	// by topic name: Cohort serves v0–v8, kfake up to v10, whose topics
	// are named by ID, which a raw request from kgo does not fill in.
	commitVersion = 8
)

// commitClients are the kgo clients the committers share on t.
func commitClients(t *target, n int) ([]*kgo.Client, error) {
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(kmsg.OffsetCommit.Int16(), commitVersion)
	cls := make([]*kgo.Client, 0, n)
	for range n {
		cl, err := kgo.NewClient(kgo.SeedBrokers(t.seeds...), kgo.MaxVersions(versions))
		if err != nil {
			closeClients(cls)
			return nil, fmt.Errorf("%s: client: %w", t.name, err)
		}
		cls = append(cls, cl)
	}
	return cls, nil
}

func closeClients(cls []*kgo.Client) {
	for _, cl := range cls {
		cl.Close()
	}
}

// commitOp is one standalone commit through cls, routed by kgo to the
// group's coordinator.
func commitOp(cls []*kgo.Client) func(ctx context.Context, worker int, seq int64) error {
	return func(ctx context.Context, worker int, seq int64) error {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group = commitGroup
		req.Generation = -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = commitTopic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition = int32(seq % commitPartitions)
		rp.Offset = seq
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cls[worker%len(cls)])
		if err != nil {
			return err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return fmt.Errorf("OffsetCommit answered %d topics, want 1 with 1 partition", len(resp.Topics))
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			return fmt.Errorf("OffsetCommit: %w", kerr.ErrorForCode(code))
		}
		return nil
	}
}

// measureCommits measures every concurrency on every target, Cohort
// first, each target's phase right after the other's, and writes one row
// per concurrency.
func measureCommits(ctx context.Context, o options, concs []int, targets []*target, out io.Writer) error {
	ops := make([]func(context.Context, int, int64) error, len(targets))
	for i, t := range targets {
		if err := createTopic(ctx, t, commitTopic, commitPartitions); err != nil {
			return err
		}
		cls, err := commitClients(t, o.clients)
		if err != nil {
			return err
		}
		defer closeClients(cls)
		ops[i] = commitOp(cls)
	}
	fmt.Fprintf(out, "commits: standalone OffsetCommit v%d (generation -1, no member ID, group %s, 1 of %d partitions each), %d kgo clients per target (committer w on client w%%%d), closed loop, %s per phase, each target's phase right after the other's; CPU/op: the user and system time per commit of this process and of the target's own processes (cohortd's nodes with --cluster process)\n",
		commitVersion, commitGroup, commitPartitions, o.clients, o.clients, o.duration)
	if o.warmup > 0 {
		for i, t := range targets {
			if r := runLoad(ctx, slices.Max(concs), o.warmup, t, ops[i]); r.ops == 0 {
				return fmt.Errorf("%s warm-up: no commit succeeded: %s", t.name, r.errNote())
			}
		}
	}
	cols := []string{"C"}
	for _, t := range targets {
		cols = append(cols, t.name+" ops/s", t.name+" p50", t.name+" p99")
	}
	cols = append(cols, "ops/s ratio", "p50 ratio")
	for _, t := range targets {
		cols = append(cols, t.name+" CPU/op")
	}
	for _, t := range targets {
		cols = append(cols, t.name+" errors")
	}
	tb := report.NewTable(out, cols...)
	defer tb.Flush()
	for _, conc := range concs {
		rs := make([]loadResult, len(targets))
		for i, t := range targets {
			term0 := termOf(t)
			rs[i] = runLoad(ctx, conc, o.duration, t, ops[i])
			if t.raftStats != nil && termOf(t) != term0 {
				fmt.Fprintf(out, "commits %s, C=%d: %s\n", t.name, conc, strings.TrimPrefix(termNote(t, term0), "; "))
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		row := []string{strconv.Itoa(conc)}
		for _, r := range rs {
			row = append(row, report.PerSec(r.rate()), report.MS(r.p50), report.MS(r.p99))
		}
		row = append(row, ratio(rs[0].rate(), rs[1].rate()), ratio(float64(rs[0].p50), float64(rs[1].p50)))
		for _, r := range rs {
			row = append(row, report.US(r.cpuPerOp()))
		}
		for _, r := range rs {
			row = append(row, r.errNote())
		}
		tb.Row(row...)
	}
	return nil
}

// The load loop mirrors etcd-bench's and cmd/cohort-bench/load.go's
// (closed-loop callers, latency of successful calls only); the percentile
// rule, process CPU and cell formats are bench/report's, so the figures
// compare.

// loadResult summarises one load phase.
type loadResult struct {
	ops      int
	errors   int
	firstErr error
	elapsed  time.Duration
	p50, p99 time.Duration
	max      time.Duration
	// cpu is the CPU time (user+system) of this process and the target's
	// own processes during the phase (cpuOf): the target's work and the
	// callers'. The target not measured idles (Cohort's nodes keep their
	// Raft and registry heartbeats), and in this process its idling counts.
	cpu time.Duration
}

func (r loadResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// cpuPerOp is the CPU time per successful operation.
func (r loadResult) cpuPerOp() time.Duration {
	if r.ops == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.ops)
}

// errNote is the phase's error count, with its first error.
func (r loadResult) errNote() string { return report.ErrNote(r.errors, r.firstErr) }

// opTimeout bounds one operation, as cohort-bench's does.
const opTimeout = 10 * time.Second

// runLoad runs op from conc closed-loop callers against t for dur (or
// until ctx ends) and measures each call and the CPU used. op gets the caller's index and a sequence
// number unique across callers.
func runLoad(ctx context.Context, conc int, dur time.Duration, t *target, op func(ctx context.Context, worker int, seq int64) error) loadResult {
	lctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var seq, errs atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	lat := make([][]time.Duration, conc)
	cpu0 := cpuOf(t)
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
	r := loadResult{elapsed: time.Since(start), errors: int(errs.Load()), firstErr: firstErr, cpu: cpuOf(t) - cpu0}
	all := slices.Concat(lat...)
	r.ops = len(all)
	r.p50, r.p99, r.max = report.Percentiles(all)
	return r
}
