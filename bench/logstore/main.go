// Command logstore-bench measures Cohort's commit rate over a long run on
// each Raft log store (issue 14): raft-boltdb/v2, Cohort's store today, and
// hashicorp/raft-wal. BoltDB keeps the pages a log truncation frees on a
// freelist, and appends after truncations were reported to slow down; a
// write-ahead log drops whole segment files instead. The run makes
// snapshots, and so truncations, happen every half minute or so, and
// samples the commit rate every interval, so that the curves show whether
// the rate bends as truncations accumulate.
//
// Three hashicorp/raft nodes run in this process over loopback TCP with
// raftnode's settings, Cohort's FSM (package fsm) and Cohort's command
// encoding: every entry is a one-partition offset commit. It lives in its
// own module (it was made one before raft-wal entered the product's go.mod,
// and drives raft below raftnode). The report
// has cohort-bench's --json format, so that `cohort-bench plot` overlays
// the stores' curves.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// options are the command line's.
type options struct {
	stores      string
	both        bool
	concurrency int
	duration    time.Duration
	interval    time.Duration
	raftSettings
	groups     int
	partitions int
	json       bool
	dir        string
	keepDir    bool
	verbose    bool
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.stores, "store", storeBolt, "log store to measure: "+strings.Join(storeNames, ", ")+" (a comma-separated list runs each in turn)")
	fs.BoolVar(&o.both, "both", false, "measure bolt, then wal, with the same settings, into one report (--store bolt,wal; overrides --store)")
	fs.IntVar(&o.concurrency, "concurrency", 16, "closed-loop callers applying on the leader")
	fs.DurationVar(&o.duration, "duration", 30*time.Minute, "length of each store's run")
	fs.DurationVar(&o.interval, "interval", 10*time.Second, "length of each sample (one table row)")
	fs.DurationVar(&o.snapshotInterval, "snapshot-interval", 30*time.Second, "raft SnapshotInterval: how often raft checks whether a snapshot is due (it waits 1-2× this)")
	fs.Uint64Var(&o.snapshotThreshold, "snapshot-threshold", 8192, "raft SnapshotThreshold: entries since the last snapshot that make one due")
	fs.Uint64Var(&o.trailingLogs, "trailing-logs", 10240, "raft TrailingLogs: entries kept in the log after a snapshot")
	fs.IntVar(&o.groups, "groups", 64, "consumer groups the commits spread over")
	fs.IntVar(&o.partitions, "partitions", 256, "partitions of the benchmark topic each group commits")
	fs.BoolVar(&o.json, "json", false, "print the results as one JSON document in cohort-bench's --json format (rows also go to stderr as they come)")
	fs.StringVar(&o.dir, "dir", "", "directory under which the nodes' data go (default: the system's temporary directory; must be on the disk to measure, not tmpfs)")
	fs.BoolVar(&o.keepDir, "keep-dir", false, "keep the nodes' data after the run")
	fs.BoolVar(&o.verbose, "verbose", false, "log raft's events (level info) to stderr")
}

// validate checks the options and returns the stores to run, in order.
func (o *options) validate() ([]string, error) {
	list := o.stores
	if o.both {
		list = storeBolt + "," + storeWAL
	}
	var stores []string
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(storeNames, s) {
			return nil, fmt.Errorf("--store %q: want one or more of %s, separated by commas", list, strings.Join(storeNames, ", "))
		}
		stores = append(stores, s)
	}
	switch {
	case o.concurrency < 1:
		return nil, fmt.Errorf("--concurrency %d: want at least 1", o.concurrency)
	case o.duration <= 0:
		return nil, fmt.Errorf("--duration %s: want more than 0", o.duration)
	case o.interval <= 0 || o.interval > o.duration:
		return nil, fmt.Errorf("--interval %s: want more than 0 and at most --duration (%s)", o.interval, o.duration)
	case o.snapshotThreshold < 1:
		return nil, errors.New("--snapshot-threshold: want at least 1")
	case o.groups < 1 || o.partitions < 1:
		return nil, fmt.Errorf("--groups %d, --partitions %d: want at least 1 of each", o.groups, o.partitions)
	}
	return stores, nil
}

func main() {
	fs := flag.NewFlagSet("logstore-bench", flag.ExitOnError)
	var o options
	o.register(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag has exited already
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "logstore-bench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "logstore-bench:", err)
		os.Exit(1)
	}
}

// columns of the samples table; `store` lets `cohort-bench plot --series
// store` draw one curve per store.
var columns = []string{"store", "elapsed s", "ops/s", "p50", "p99", "max", "CPU/op", "snapshots", "first index", "last index", "log bytes", "errors"}

// run measures each store in turn and writes the report to stdout: text
// as it goes, or with o.json one JSON document at the end (also when
// interrupted: the rows so far), with each row also on progress.
func run(ctx context.Context, o options, stdout, progress io.Writer) error {
	stores, err := o.validate()
	if err != nil {
		return err
	}
	if !o.json {
		return measureAll(ctx, o, stores, stdout)
	}
	report := &report.Report{Command: "logstore-bench", Started: time.Now().UTC()}
	err = measureAll(ctx, o, stores, teeReport{report: report, progress: progress})
	if werr := report.Encode(stdout); err == nil {
		err = werr
	}
	return err
}

func measureAll(ctx context.Context, o options, stores []string, out io.Writer) error {
	var summaries []summary
	for _, store := range stores {
		s, err := measure(ctx, o, store, out)
		if err != nil {
			return fmt.Errorf("%s: %w", store, err)
		}
		summaries = append(summaries, s)
	}
	tb := newTable(out, 8, "store", "ops", "mean ops/s", "first third ops/s", "last third ops/s", "last/first", "snapshots")
	for _, s := range summaries {
		first, last, ratio := "-", "-", "-" // fewer than three samples: no thirds
		if s.thirds {
			first, last = report.PerSec(s.first), report.PerSec(s.last)
		}
		if s.first > 0 {
			ratio = fmt.Sprintf("%.2f×", s.last/s.first)
		}
		tb.row(s.store, strconv.Itoa(s.ops), report.PerSec(s.mean), first, last, ratio, strconv.FormatInt(s.snapshots, 10))
	}
	return nil
}

// summary is one store's run in a row: whether the rate fell from the
// first third of the run to the last, as truncations accumulated.
type summary struct {
	store             string
	ops               int
	mean, first, last float64
	thirds            bool // there were samples enough for first and last
	snapshots         int64
}

func summarise(store string, samples []sample, snapshots int64) summary {
	s := summary{store: store, snapshots: snapshots}
	var total time.Duration
	for _, x := range samples {
		s.ops += x.ops
		total += x.length
	}
	if total > 0 {
		s.mean = float64(s.ops) / total.Seconds()
	}
	third := len(samples) / 3
	if third > 0 {
		s.thirds = true
		s.first = meanRate(samples[:third])
		s.last = meanRate(samples[len(samples)-third:])
	}
	return s
}

func meanRate(samples []sample) float64 {
	var ops int
	var d time.Duration
	for _, x := range samples {
		ops += x.ops
		d += x.length
	}
	if d <= 0 {
		return 0
	}
	return float64(ops) / d.Seconds()
}

// measure runs one store: a fresh cluster, the topic, then commits for
// o.duration, one row per o.interval.
func measure(ctx context.Context, o options, store string, out io.Writer) (summary, error) {
	// The load before the cluster starts: what else the machine was doing.
	load := report.LoadLine()
	dir, err := os.MkdirTemp(o.dir, "logstore-bench-"+store+"-")
	if err != nil {
		return summary{}, err
	}
	if !o.keepDir {
		defer os.RemoveAll(dir)
	}
	logOut := io.Discard
	if o.verbose {
		logOut = os.Stderr
	}
	c, err := startCluster(ctx, dir, store, o.raftSettings, logOut)
	if err != nil {
		return summary{}, err
	}
	defer c.close()

	const topic = "bench"
	setup, err := fsm.EncodeCommand(&fsmv1.Command{
		TimestampMs: time.Now().UnixMilli(), Version: fsm.CommandVersion,
		Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: topic, Partitions: int32(o.partitions)}},
	})
	if err != nil {
		return summary{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, opTimeout)
	err = c.apply(sctx, setup)
	cancel()
	if err != nil {
		return summary{}, fmt.Errorf("create topic: %w", err)
	}
	commit := func(seq int64) ([]byte, error) {
		// What raftnode.Node.Apply proposes for a standalone (generation
		// -1) commit of one partition: the leader's clock and the newest
		// rules go into the entry.
		return fsm.EncodeCommand(&fsmv1.Command{
			TimestampMs: time.Now().UnixMilli(), Version: fsm.CommandVersion,
			Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{
				GroupId:    fmt.Sprintf("bench-logstore-%d", (seq/int64(o.partitions))%int64(o.groups)),
				Generation: -1,
				Offsets:    []*fsmv1.OffsetCommit{{Topic: topic, Partition: int32(seq % int64(o.partitions)), Offset: seq}},
			}},
		})
	}
	example, err := commit(1 << 20)
	if err != nil {
		return summary{}, err
	}

	fmt.Fprintf(out, "store %s: %s; %d nodes in one process on loopback TCP, data on %s; Cohort's FSM, one-partition standalone offset commits (%d-byte entries) over %d groups × %d partitions from %d closed-loop callers on the leader; snapshot interval %s (raft waits 1-2×), threshold %d entries, trailing logs %d, 2 snapshots kept; raft otherwise at raftnode's defaults, a 512-entry log cache; snapshots, log indexes and log bytes are the leader's; %s\n",
		store, storeVersion(store), clusterSize, fsType(dir), len(example), o.groups, o.partitions, o.concurrency,
		o.snapshotInterval, o.snapshotThreshold, o.trailingLogs, load)

	tb := newTable(out, 8, columns...)
	var samples []sample
	runIntervals(ctx, o.concurrency, o.duration, o.interval, func(ctx context.Context, seq int64) error {
		data, err := commit(seq)
		if err != nil {
			return err
		}
		return c.apply(ctx, data)
	}, func(s sample) {
		samples = append(samples, s)
		snaps, first, last, bytes := "-", "-", "-", "-"
		if n := c.leader(); n != nil {
			snaps = strconv.FormatInt(n.snapshots.Load(), 10)
			if i, err := n.logs.FirstIndex(); err == nil {
				first = strconv.FormatUint(i, 10)
			}
			if i, err := n.logs.LastIndex(); err == nil {
				last = strconv.FormatUint(i, 10)
			}
			bytes = strconv.FormatInt(dirBytes(n.logDir), 10)
		}
		tb.row(store, fmt.Sprintf("%.1f", s.elapsed.Seconds()), report.PerSec(s.rate()), report.MS(s.p50), report.MS(s.p99), report.MS(s.max), report.US(s.cpuPerOp()),
			snaps, first, last, bytes, s.errNote())
	})
	var snapshots int64
	if n := c.leader(); n != nil {
		snapshots = n.snapshots.Load()
	}
	return summarise(store, samples, snapshots), ctx.Err()
}

// storeVersion names the store's library versions and options, as built.
func storeVersion(store string) string {
	v := func(path string) string {
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return path + " (version unknown)"
		}
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return path + " " + d.Replace.Version
				}
				return path + " " + d.Version
			}
		}
		return path + " (version unknown)"
	}
	raftV := v("github.com/hashicorp/raft")
	switch store {
	case storeBolt:
		return v("github.com/hashicorp/raft-boltdb/v2") + " on " + v("go.etcd.io/bbolt") + " with raftnode's options (NoFreelistSync, map freelist), " + raftV
	case storeBoltDefaults:
		return v("github.com/hashicorp/raft-boltdb/v2") + " on " + v("go.etcd.io/bbolt") + " with bbolt's default options (freelist synced at every commit, array freelist), " + raftV
	case storeWAL:
		return v("github.com/hashicorp/raft-wal") + " with its default 64 MiB segments, " + raftV
	}
	return store
}
