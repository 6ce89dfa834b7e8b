// Command kafka-bench measures Cohort's Kafka listener beside franz-go's
// kfake with the same kgo clients, in one run (issue 15):
// the time a consumer group (classic, or KIP-848 with --protocol consumer)
// takes to rebalance when one member joins, at several group sizes, and standalone offset commits per second
// at several concurrencies. It lives in its own module so that kfake never
// enters the product's go.mod.
//
// Cohort runs as three cohortd processes (--cluster process, the default:
// the nodes do not share a Go scheduler with a thousand clients, as in
// any deployment) or as an in-process three-node cluster (--cluster
// inprocess), fsync on either way; kfake as an in-memory, unreplicated
// cluster in this process (--kfake inprocess, the default) or in one of
// its own (--kfake process, kfakeproc.go). The clients run in this
// process. The report has cohort-bench's --json format, so that
// `cohort-bench plot` draws it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortlabs/cohort/bench/report"
)

// options are the command line's.
type options struct {
	sizes         string
	rounds        int
	protocol      string
	heartbeat     time.Duration
	consumerHB    time.Duration
	initialDelay  time.Duration
	balancer      string
	partitions    int
	roundTimeout  time.Duration
	concurrency   string
	duration      time.Duration
	warmup        time.Duration
	clients       int
	kfakeBrokers  int
	skipRebalance bool
	skipCommits   bool
	json          bool
	dir           string
	timeout       time.Duration
	cpuProfile    string
	logFile       string
	clientLogFile string
	cluster       string
	cohortd       string
	kfake         string

	// clientLog is where the consumers log (--client-log; nil: nowhere).
	clientLog io.Writer
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.sizes, "sizes", "10,100,1000", "comma-separated group sizes (members before the first added one) for the rebalance measurement")
	fs.IntVar(&o.rounds, "rounds", 3, "rebalances measured per size, each adding one member to the group")
	fs.StringVar(&o.protocol, "protocol", "classic", "the consumers' group protocol: classic (JoinGroup/SyncGroup) or consumer (KIP-848 ConsumerGroupHeartbeat, kgo's ServerSideBalancer)")
	fs.DurationVar(&o.heartbeat, "heartbeat", 3*time.Second, "with --protocol classic, the consumers' heartbeat interval (kgo's default 3s); members learn of a rebalance on their next heartbeat")
	fs.DurationVar(&o.consumerHB, "consumer-heartbeat", 5*time.Second, "the heartbeat interval both coordinators tell KIP-848 members (Cohort's coordinator ConsumerHeartbeatInterval, kfake's group.consumer.heartbeat.interval.ms; both default 5s); below the 45s session timeout")
	fs.DurationVar(&o.initialDelay, "initial-rebalance-delay", 3*time.Second, "Cohort's initial rebalance delay (Kafka's group.initial.rebalance.delay.ms, 3s in both; kfake has none): how long an empty group's first rebalance waits for more members")
	fs.StringVar(&o.balancer, "balancer", "", "the consumers' balancer; classic: cooperative-sticky (the default, kgo's), sticky, range or roundrobin; consumer: uniform (the default: kgo's StickyBalancer) or range, the server assignor the members ask for")
	fs.IntVar(&o.partitions, "partitions", 0, "partitions of each rebalance topic (0: max(64, size+rounds), so that every member holds at least one)")
	fs.DurationVar(&o.roundTimeout, "round-timeout", 2*time.Minute, "bound on a group's forming and on each measured rebalance")
	fs.StringVar(&o.concurrency, "concurrency", "1,16,256", "comma-separated numbers of concurrent committers")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measured commit phase, per target")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "an unrecorded commit phase per target at the highest concurrency before the first measured one (0: none)")
	fs.IntVar(&o.clients, "clients", 16, "kgo clients the committers share, committer w using client w%clients")
	fs.IntVar(&o.kfakeBrokers, "kfake-brokers", 1, "brokers of the kfake cluster")
	fs.BoolVar(&o.skipRebalance, "skip-rebalance", false, "measure commits only")
	fs.BoolVar(&o.skipCommits, "skip-commits", false, "measure rebalances only")
	fs.BoolVar(&o.json, "json", false, "print the results as one JSON document in cohort-bench's --json format instead of text")
	fs.StringVar(&o.dir, "dir", "", "directory under which Cohort's data go (default: the system's temporary directory); removed afterwards")
	fs.DurationVar(&o.timeout, "timeout", time.Hour, "bound on the whole run")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (both targets and the clients, one process) to this file")
	fs.StringVar(&o.logFile, "log", "", "write the Cohort nodes' logs (info and above: elections, leadership, readiness) to this file (default: discarded)")
	fs.StringVar(&o.clientLogFile, "client-log", "", "write every rebalance consumer's kgo log (info: joins, syncs, heartbeat errors, assignments), each line stamped to the microsecond and naming the target and member, to this file, to see what a slow round waited for (default: discarded)")
	fs.StringVar(&o.cluster, "cluster", "process", "how Cohort runs: process (three cohortd processes, --cohortd) or inprocess (three nodes in this process, sharing its Go scheduler with every client)")
	fs.StringVar(&o.cohortd, "cohortd", "bin/cohortd", "cohortd binary for --cluster process (make build)")
	fs.StringVar(&o.kfake, "kfake", "inprocess", "where kfake runs: inprocess (in this process, beside the clients) or process (this binary run again as a kfake server, so that kfake too answers from another process, as cohortd does)")
}

// validate checks the options once and returns the parsed lists.
func (o options) validate() (sizes, concs []int, err error) {
	if !o.skipRebalance {
		if sizes, err = parseInts("sizes", o.sizes); err != nil {
			return nil, nil, err
		}
	}
	if !o.skipCommits {
		if concs, err = parseInts("concurrency", o.concurrency); err != nil {
			return nil, nil, err
		}
	}
	_, _, berr := balancer(o.protocol, o.balancer)
	switch {
	case o.protocol != "classic" && o.protocol != "consumer":
		return nil, nil, fmt.Errorf("--protocol %q: want classic or consumer", o.protocol)
	case o.skipRebalance && o.skipCommits:
		return nil, nil, errors.New("--skip-rebalance and --skip-commits: nothing to measure")
	case berr != nil:
		return nil, nil, berr
	case o.rounds < 1:
		return nil, nil, fmt.Errorf("--rounds %d: want at least 1", o.rounds)
	case o.heartbeat <= 0:
		return nil, nil, fmt.Errorf("--heartbeat %s: want more than 0", o.heartbeat)
	case o.initialDelay < 0:
		return nil, nil, fmt.Errorf("--initial-rebalance-delay %s: want 0 or more", o.initialDelay)
	case o.consumerHB < time.Millisecond || o.consumerHB >= consumerSessionTimeout:
		return nil, nil, fmt.Errorf("--consumer-heartbeat %s: want at least 1ms and below the %s session timeout", o.consumerHB, consumerSessionTimeout)
	case o.partitions < 0:
		return nil, nil, fmt.Errorf("--partitions %d: want 0 or more", o.partitions)
	case o.roundTimeout <= 0:
		return nil, nil, fmt.Errorf("--round-timeout %s: want more than 0", o.roundTimeout)
	case o.duration <= 0:
		return nil, nil, fmt.Errorf("--duration %s: want more than 0", o.duration)
	case o.warmup < 0:
		return nil, nil, fmt.Errorf("--warmup %s: want 0 or more", o.warmup)
	case o.clients < 1:
		return nil, nil, fmt.Errorf("--clients %d: want at least 1", o.clients)
	case o.kfakeBrokers < 1:
		return nil, nil, fmt.Errorf("--kfake-brokers %d: want at least 1", o.kfakeBrokers)
	case o.cluster != "process" && o.cluster != "inprocess":
		return nil, nil, fmt.Errorf("--cluster %q: want process or inprocess", o.cluster)
	case o.kfake != "process" && o.kfake != "inprocess":
		return nil, nil, fmt.Errorf("--kfake %q: want inprocess or process", o.kfake)
	}
	return sizes, concs, nil
}

// balancer is the kgo balancer a --balancer name stands for under
// protocol, and the name the report gives it. Under consumer the balancer
// only picks the server assignor kgo asks for: StickyBalancer asks for
// "uniform", RangeBalancer for "range".
func balancer(protocol, name string) (kgo.GroupBalancer, string, error) {
	if protocol == "consumer" {
		switch name {
		case "", "uniform":
			return kgo.StickyBalancer(), "uniform", nil
		case "range":
			return kgo.RangeBalancer(), "range", nil
		}
		return nil, "", fmt.Errorf("--balancer %q with --protocol consumer: want uniform or range", name)
	}
	switch name {
	case "", "cooperative-sticky":
		return kgo.CooperativeStickyBalancer(), "cooperative-sticky", nil
	case "sticky":
		return kgo.StickyBalancer(), name, nil
	case "range":
		return kgo.RangeBalancer(), name, nil
	case "roundrobin":
		return kgo.RoundRobinBalancer(), name, nil
	}
	return nil, "", fmt.Errorf("--balancer %q: want cooperative-sticky, sticky, range or roundrobin", name)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == kfakeServeCommand {
		if err := kfakeServe(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "kafka-bench kfake-serve:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == stepsCommand {
		if err := steps(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "kafka-bench steps:", err)
			os.Exit(1)
		}
		return
	}
	fs := flag.NewFlagSet("kafka-bench", flag.ExitOnError)
	var o options
	o.register(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag has exited already
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kafka-bench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kafka-bench: cpuprofile:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, o, os.Stdout); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "kafka-bench:", err)
		os.Exit(1)
	}
}

// run starts both targets, measures and writes the report to stdout: a
// table, or with o.json one JSON document.
func run(ctx context.Context, o options, stdout io.Writer) error {
	sizes, concs, err := o.validate()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if !o.json {
		return measure(ctx, o, sizes, concs, stdout)
	}
	rep := &report.Report{Command: "kafka-bench", Started: time.Now().UTC()}
	err = measure(ctx, o, sizes, concs, rep)
	if werr := rep.Encode(stdout); err == nil {
		err = werr
	}
	return err
}

func measure(ctx context.Context, o options, sizes, concs []int, out io.Writer) error {
	// The load before the clusters start: what else the machine was doing.
	loadBefore := report.LoadLine()
	dir, err := os.MkdirTemp(o.dir, "kafka-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var logOut io.Writer
	if o.logFile != "" {
		f, err := os.Create(o.logFile)
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		defer f.Close()
		logOut = f
	}
	if o.clientLogFile != "" {
		f, err := os.Create(o.clientLogFile)
		if err != nil {
			return fmt.Errorf("--client-log: %w", err)
		}
		defer f.Close()
		o.clientLog = &lockedWriter{w: bufio.NewWriter(f)}
		defer o.clientLog.(*lockedWriter).flush()
	}
	targets, err := startTargets(ctx, o, dir, logOut)
	if err != nil {
		return err
	}
	defer closeTargets(targets)

	fmt.Fprintf(out, "kafka-bench: franz-go kgo %s in this process against Cohort (%s) and kfake %s (%s), before: %s\n",
		moduleVersion("github.com/twmb/franz-go"), targets[0].about, moduleVersion("github.com/twmb/franz-go/pkg/kfake"), targets[1].about, loadBefore)
	if len(sizes) > 0 {
		if err := measureRebalances(ctx, o, sizes, targets, out); err != nil {
			return err
		}
	}
	if len(concs) > 0 {
		if err := measureCommits(ctx, o, concs, targets, out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "after: %s\n", report.LoadLine())
	return ctx.Err()
}

// ratio is a/b with two decimals and an ×, or "-" when b is nothing.
func ratio(a, b float64) string {
	if b <= 0 || a <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
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

// lockedWriter serializes the writes of many clients' loggers to one
// buffered file.
type lockedWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
}
