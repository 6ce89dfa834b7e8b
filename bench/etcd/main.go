// Command etcd-bench measures an embedded three-member etcd cluster's Put
// at several concurrencies: the comparison target beside cohort-bench's
// offset commits (issue 14). It lives in its own module so that etcd's
// server and its dependencies never enter the product's go.mod.
//
// A Put here stands for an offset commit: key group/topic/partition, an
// 8-byte offset as value, through clientv3 as a Kafka-like client would
// send it. The report has cohort-bench's --json format, so that
// `cohort-bench plot` overlays its curves on cohort-bench's.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cohortlabs/cohort/bench/report"
)

// options are the command line's; the defaults match cohort-bench
// commits' so that one run of each compares like with like.
type options struct {
	concurrency string
	duration    time.Duration
	warmup      time.Duration
	clients     int
	leaderOnly  bool
	partitions  int
	json        bool
	dir         string
	keepDir     bool
	timeout     time.Duration
	verbose     bool
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.concurrency, "concurrency", "1,16,256", "comma-separated numbers of concurrent callers")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measured phase")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "an unrecorded phase at the highest concurrency before the first measured one (0: none)")
	fs.IntVar(&o.clients, "clients", 16, "clientv3 clients the callers share, caller w using client w%clients (cohort-bench commits' 16 members each have their own connection)")
	fs.BoolVar(&o.leaderOnly, "leader-only", false, "give the clients only the leader's endpoint (default: all three, so that two Puts in three are forwarded by a follower)")
	fs.IntVar(&o.partitions, "partitions", 256, "partitions of the benchmark topic: Put keys are bench-commits/bench/<seq mod partitions>")
	fs.BoolVar(&o.json, "json", false, "print the results as one JSON document in cohort-bench's --json format instead of text")
	fs.StringVar(&o.dir, "dir", "", "directory under which the members' data go (default: the system's temporary directory)")
	fs.BoolVar(&o.keepDir, "keep-dir", false, "keep the members' data after the run")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.BoolVar(&o.verbose, "verbose", false, "log the etcd members' events (level info) to stderr")
}

func main() {
	fs := flag.NewFlagSet("etcd-bench", flag.ExitOnError)
	var o options
	o.register(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag has exited already
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "etcd-bench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-bench:", err)
		os.Exit(1)
	}
}

// run starts the cluster, measures every concurrency and writes the report
// to stdout: a table, or with o.json one JSON document.
func run(ctx context.Context, o options, stdout io.Writer) error {
	concs, err := parseInts("concurrency", o.concurrency)
	if err != nil {
		return err
	}
	switch {
	case o.duration <= 0:
		return fmt.Errorf("--duration %s: want more than 0", o.duration)
	case o.warmup < 0:
		return fmt.Errorf("--warmup %s: want 0 or more", o.warmup)
	case o.clients < 1:
		return fmt.Errorf("--clients %d: want at least 1", o.clients)
	case o.partitions < 1:
		return fmt.Errorf("--partitions %d: want at least 1", o.partitions)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if !o.json {
		return measure(ctx, o, concs, stdout)
	}
	report := &report.Report{Command: "etcd-bench", Started: time.Now().UTC()}
	err = measure(ctx, o, concs, report)
	if werr := report.Encode(stdout); err == nil {
		err = werr
	}
	return err
}

func measure(ctx context.Context, o options, concs []int, out io.Writer) error {
	// The load before the cluster starts: what else the machine was doing.
	load := report.LoadLine()
	dir, err := os.MkdirTemp(o.dir, "etcd-bench-")
	if err != nil {
		return err
	}
	if !o.keepDir {
		defer os.RemoveAll(dir)
	}
	logLevel := ""
	if o.verbose {
		logLevel = "info"
	}
	c, err := startCluster(ctx, dir, logLevel)
	if err != nil {
		return err
	}
	defer c.Close()

	endpoints, which := c.clients, "all three endpoints"
	if o.leaderOnly {
		lead, err := c.leader()
		if err != nil {
			return err
		}
		endpoints, which = c.clients[lead:lead+1], "the leader's endpoint only"
	}
	clients := make([]*clientv3.Client, o.clients)
	defer func() {
		for _, cli := range clients {
			if cli != nil {
				_ = cli.Close()
			}
		}
	}()
	for i := range clients {
		if clients[i], err = clientv3.New(clientv3.Config{
			Endpoints:   endpoints,
			DialTimeout: 10 * time.Second,
			Logger:      zap.NewNop(),
			Context:     ctx,
		}); err != nil {
			return fmt.Errorf("etcd client: %w", err)
		}
	}
	put := func(ctx context.Context, worker int, seq int64) error {
		key := fmt.Sprintf("bench-commits/bench/%d", seq%int64(o.partitions))
		var offset [8]byte
		binary.BigEndian.PutUint64(offset[:], uint64(seq))
		_, err := clients[worker%len(clients)].Put(ctx, key, string(offset[:]))
		return err
	}

	fmt.Fprintf(out, "etcd %s Put through clientv3 (%d clients, %s, caller w on client w%%%d), embedded %d-member cluster on loopback, fsync on (etcd's default), %s\n",
		version.Version, o.clients, which, o.clients, members, load)
	if o.warmup > 0 {
		if r := runLoad(ctx, slices.Max(concs), o.warmup, put); r.ops == 0 {
			return fmt.Errorf("warm-up: no Put succeeded: %s", r.errNote())
		}
	}
	tb := report.NewTable(out, "C", "etcd ops/s", "etcd p50", "etcd p99", "etcd max", "etcd CPU/op", "etcd errors")
	for _, conc := range concs {
		r := runLoad(ctx, conc, o.duration, put)
		if ctx.Err() != nil {
			break
		}
		tb.Row(strconv.Itoa(conc), report.PerSec(r.rate()), report.MS(r.p50), report.MS(r.p99), report.MS(r.max), report.US(r.cpuPerOp()), r.errNote())
	}
	tb.Flush()
	return ctx.Err()
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--%s %q: want positive integers separated by commas", flagName, s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("--" + flagName + ": empty")
	}
	return out, nil
}
