package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/internal/benchcluster"
)

// globalOptions are the flags every subcommand shares.
type globalOptions struct {
	endpoints  []string
	cluster    string // inprocess or process, when no endpoints
	cohortd    string
	dir        string
	keepDir    bool
	timeout    time.Duration
	cpuprofile string
	verbose    bool
}

func newRootCommand() *cobra.Command {
	var g globalOptions
	root := &cobra.Command{
		Use:   "cohort-bench",
		Short: "Load generator for Cohort: rebalance, heartbeats, commits, failover",
		Long: `cohort-bench measures a three-node Cohort cluster on loopback.

Without --endpoints it starts the cluster itself: in-process nodes
(--cluster inprocess, the default; real Raft over TCP, real bolt files, real
gRPC) or real cohortd processes (--cluster process, needs --cohortd, e.g.
bin/cohortd from 'make build'). With --endpoints it drives a running cluster
(e.g. 'make run', started with --initial-rebalance-delay 0); the raw Raft
apply comparison is then not available.

Every run is bounded by --timeout; results are printed as a table.`,
		SilenceUsage: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			for _, e := range g.endpoints {
				if err := benchcluster.CheckLoopback(e); err != nil {
					return err
				}
			}
			if g.cluster != "inprocess" && g.cluster != "process" {
				return fmt.Errorf("--cluster %q: want inprocess or process", g.cluster)
			}
			return nil
		},
	}
	f := root.PersistentFlags()
	f.StringSliceVar(&g.endpoints, "endpoints", nil, "gRPC addresses of a running cluster (loopback only); default: start one")
	f.StringVar(&g.cluster, "cluster", "inprocess", "cluster to start without --endpoints: inprocess or process")
	f.StringVar(&g.cohortd, "cohortd", "bin/cohortd", "cohortd binary for --cluster process")
	f.StringVar(&g.dir, "dir", "", "directory for the started cluster's data (default: a new temporary directory)")
	f.BoolVar(&g.keepDir, "keep-dir", false, "keep the data directory after the run")
	f.DurationVar(&g.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	f.StringVar(&g.cpuprofile, "cpuprofile", "", "write a CPU profile of this process (with --cluster inprocess it includes the nodes)")
	f.BoolVarP(&g.verbose, "verbose", "v", false, "log cluster and client events to stderr")

	root.AddCommand(newRawCommand(&g), newCommitsCommand(&g), newHeartbeatsCommand(&g),
		newRebalanceCommand(&g), newFailoverCommand(&g))
	return root
}

// run bounds a subcommand by --timeout and wraps it in the CPU profile.
func (g *globalOptions) run(cmd *cobra.Command, body func(ctx context.Context, out io.Writer) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	if g.cpuprofile != "" {
		f, err := os.Create(g.cpuprofile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	return body(ctx, cmd.OutOrStdout())
}

func (g *globalOptions) logger() *slog.Logger {
	if g.verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// target is the cluster a run drives.
type target struct {
	addrs   []string
	kind    string                  // "endpoints", "inprocess" or "process"
	cluster benchcluster.Cluster    // nil with --endpoints
	inproc  *benchcluster.InProcess // set for inprocess
	probe   *benchcluster.Probe
	closeFn func() error
}

func (t *target) Close() error {
	t.probe.Close()
	if t.closeFn != nil {
		return t.closeFn()
	}
	return nil
}

// live reports whether node i runs (always true for --endpoints).
func (t *target) live(i int) bool {
	if t.cluster == nil {
		return true
	}
	return t.cluster.Live(i)
}

// openTarget starts (or connects to) the cluster for one run. kind
// overrides --cluster when not empty.
func (g *globalOptions) openTarget(ctx context.Context, kind string) (*target, error) {
	if len(g.endpoints) > 0 {
		probe, err := benchcluster.NewProbe(g.endpoints)
		if err != nil {
			return nil, err
		}
		t := &target{addrs: g.endpoints, kind: "endpoints", probe: probe}
		if _, err := probe.WaitServing(ctx, nil); err != nil {
			probe.Close()
			return nil, err
		}
		return t, nil
	}
	if kind == "" {
		kind = g.cluster
	}
	dir := g.dir
	removeDir := false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "cohort-bench-"); err != nil {
			return nil, err
		}
		removeDir = !g.keepDir
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cleanup := func() {
		if removeDir {
			_ = os.RemoveAll(dir)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t := &target{kind: kind}
	switch kind {
	case "inprocess":
		// cohortd's defaults, with the initial rebalance delay off as the
		// issue's benchmarks ask.
		cc := coordinator.DefaultConfig()
		cc.InitialRebalanceDelay = 0
		cc.Logger = g.logger()
		c, err := benchcluster.StartInProcess(sctx, benchcluster.InProcessOptions{
			Dir: dir, Coordinator: cc, Logger: g.logger(),
		})
		if err != nil {
			cleanup()
			return nil, err
		}
		t.cluster, t.inproc = c, c
	case "process":
		c, err := benchcluster.StartProcesses(sctx, benchcluster.ProcessOptions{
			Binary: g.cohortd, Dir: dir, Args: []string{"--initial-rebalance-delay=0"},
		})
		if err != nil {
			cleanup()
			return nil, err
		}
		t.cluster = c
	default:
		cleanup()
		return nil, fmt.Errorf("unknown cluster kind %q", kind)
	}
	t.addrs = t.cluster.Addrs()
	probe, err := benchcluster.NewProbe(t.addrs)
	if err != nil {
		_ = t.cluster.Close()
		cleanup()
		return nil, err
	}
	t.probe = probe
	t.closeFn = func() error {
		err := t.cluster.Close()
		cleanup()
		return err
	}
	return t, nil
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("--%s: %q is not a positive integer", flag, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s: empty list", flag)
	}
	return out, nil
}

var errNoRaw = errors.New("raw apply needs the in-process cluster (no --endpoints, --cluster inprocess)")
