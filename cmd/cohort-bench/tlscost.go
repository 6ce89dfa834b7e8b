package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/bench/report"
)

// tlsCostOptions configure the tls-cost subcommand.
type tlsCostOptions struct {
	commits     bool
	concurrency string
	duration    time.Duration
	warmup      time.Duration
	pairs       int
	paths       string
	members     int
	partitions  int32

	failover        bool
	failoverCluster string
	failoverModes   string
	kills           int
	failoverMembers int
	session         time.Duration
	backoffMax      time.Duration
}

// tlsCostTimeout bounds tls-cost when --timeout is not given: the default
// measurement takes about 10 minutes, more than the other subcommands'
// 10-minute bound.
const tlsCostTimeout = time.Hour

func newTLSCostCommand(g *globalOptions) *cobra.Command {
	var o tlsCostOptions
	cmd := &cobra.Command{
		Use:   "tls-cost",
		Short: "Commits and failover with TLS off and on, side by side in one run",
		Long: `tls-cost measures what mutual TLS costs: the commit benchmark (commits) at
each --concurrency and the failover measurement (failover), each on two
clusters of the same kind, one in plaintext and one with mutual TLS on Raft
and gRPC (--tls: a throwaway CA, members with a client certificate, admin
calls with an admin one).

Commits: both clusters run at once, idle but for the phase being measured.
For each path (--paths: raw Node.Apply on the in-process leader, which sees
TLS on the Raft transport only; member: client.Member.Commit; conn:
member-less commits on one client.Dial Conn) and concurrency, the phases
alternate off, on, off, on ... --pairs times, so that both sides see the
same machine; after a --warmup phase of each path on each cluster. Each
phase prints a line; the table gives the medians over the pairs and the
on/off ratio (the median of the pairs' ratios, their range in brackets).
CPU/op is this process's CPU per commit: with the in-process cluster
(--cluster inprocess, the default) the nodes', both clusters' and the load
generator's.

Failover: two clusters of --failover-cluster (default: cohortd processes,
as docs/benchmarks.md measures failover; needs --cohortd), each with a group
of --failover-members members; the rounds alternate between them (off, on,
off, on ...), member 0 committing back to back on the cluster whose round it
is only. The client's retry backoff is capped at --client-retry-backoff-max
(200 ms by default here, so that the client commit column follows the
election rather than the backoff's jitter; 0: the client's 2 s).

Without --timeout the run is bounded by 1 h.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(g.endpoints) > 0 {
				return errors.New("tls-cost starts its own clusters, one with TLS and one without (no --endpoints)")
			}
			if g.tls {
				return errors.New("tls-cost runs every measurement with TLS off and on; drop --tls")
			}
			if !cmd.Flags().Changed("timeout") {
				g.timeout = tlsCostTimeout
			}
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				return runTLSCost(ctx, out, g, o)
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.commits, "commits", true, "measure commits")
	f.StringVar(&o.concurrency, "concurrency", "1,16,256", "comma-separated numbers of concurrent committers")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measured commit phase")
	f.DurationVar(&o.warmup, "warmup", time.Second, "an unrecorded phase of each path on each cluster, at the highest concurrency, before the first pair (0: none)")
	f.IntVar(&o.pairs, "pairs", 3, "off/on pairs of phases per path and concurrency")
	f.StringVar(&o.paths, "paths", "raw,member,conn", "commit paths: raw (in-process only), member, conn")
	f.IntVar(&o.members, "members", 16, "group members sharing the committers (path member)")
	f.Int32Var(&o.partitions, "partitions", 256, "partitions of the commit benchmark's topic")
	f.BoolVar(&o.failover, "failover", true, "measure failover")
	f.StringVar(&o.failoverCluster, "failover-cluster", "process", "clusters of the failover measurement: process (cohortd, --cohortd) or inprocess")
	f.StringVar(&o.failoverModes, "failover-modes", "kill,transfer", "comma-separated failover modes: kill, transfer, sigterm")
	f.IntVar(&o.kills, "kills", 10, "failover rounds per mode on each cluster")
	f.IntVar(&o.failoverMembers, "failover-members", 5, "members of the failover group")
	f.DurationVar(&o.session, "session-timeout", 10*time.Second, "failover members' session timeout")
	f.DurationVar(&o.backoffMax, "client-retry-backoff-max", 200*time.Millisecond, "failover members' client.Config.RetryBackoffMax (0: the client's default, 250ms)")
	return cmd
}

var tlsSides = [2]bool{false, true}

func sideName(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func runTLSCost(ctx context.Context, out io.Writer, g *globalOptions, o tlsCostOptions) error {
	if !o.commits && !o.failover {
		return errors.New("nothing to measure: --commits=false and --failover=false")
	}
	var concs []int
	var paths, modes []string
	var err error
	if o.commits {
		if concs, err = parseInts("concurrency", o.concurrency); err != nil {
			return err
		}
		if o.pairs < 1 {
			return errors.New("--pairs: at least 1")
		}
		if paths, err = parseList("paths", o.paths, "raw", "member", "conn"); err != nil {
			return err
		}
	}
	if o.failover {
		if modes, err = parseList("failover-modes", o.failoverModes, "kill", "transfer", "sigterm"); err != nil {
			return err
		}
		if o.kills < 1 {
			return errors.New("--kills: at least 1")
		}
		if o.failoverCluster != "inprocess" && o.failoverCluster != "process" {
			return fmt.Errorf("--failover-cluster %q: want inprocess or process", o.failoverCluster)
		}
		// Found missing now, not after the commit phases.
		if _, err := os.Stat(g.cohortd); o.failoverCluster == "process" && err != nil {
			return fmt.Errorf("--failover-cluster process needs cohortd (--cohortd): %w (run `make build`, or --failover-cluster inprocess)", err)
		}
	}
	start := time.Now()
	fmt.Fprintf(out, "TLS off vs on (mutual TLS 1.3 on Raft and gRPC, client certificates), %s\n", report.LoadLine())
	if o.commits {
		if err := tlsCostCommits(ctx, out, g, o, concs, paths); err != nil {
			return err
		}
	}
	if o.failover {
		if err := tlsCostFailover(ctx, out, g, o, modes); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "tls-cost done in %v, %s\n", time.Since(start).Round(time.Second), report.LoadLine())
	return ctx.Err()
}

// parseList parses a comma-separated list of words out of allowed, in the
// order given, without repeats.
func parseList(flag, s string, allowed ...string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(allowed, f) {
			return nil, fmt.Errorf("--%s: %q is not one of %s", flag, f, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s: empty list", flag)
	}
	return out, nil
}

// phaseFunc runs one load phase of a commit path.
type phaseFunc func(ctx context.Context, conc int, lim limit) (loadResult, error)

// commitSide is one cluster of the commit comparison with its paths.
type commitSide struct {
	t      *target
	phases map[string]phaseFunc
}

func tlsCostCommits(ctx context.Context, out io.Writer, g *globalOptions, o tlsCostOptions, concs []int, paths []string) error {
	var sides [2]*commitSide
	for i, on := range tlsSides {
		t, err := g.startTarget(ctx, "", on, "commits-tls-"+sideName(on))
		if err != nil {
			return fmt.Errorf("start the commits cluster with TLS %s: %w", sideName(on), err)
		}
		defer t.Close()
		if t.inproc == nil && slices.Contains(paths, "raw") {
			fmt.Fprintf(out, "path raw left out: %v\n", errNoRaw)
			paths = slices.DeleteFunc(paths, func(p string) bool { return p == "raw" })
			if len(paths) == 0 {
				return errors.New("--paths: nothing left to measure")
			}
		}
		s := &commitSide{t: t, phases: map[string]phaseFunc{}}
		for _, path := range paths {
			if path == "raw" {
				s.phases[path] = func(ctx context.Context, conc int, lim limit) (loadResult, error) {
					return rawPhase(ctx, t, conc, lim, o.partitions)
				}
				continue
			}
			op, _, closeLoad, err := commitLoad(ctx, g, t, commitOptions{mode: path, members: o.members, partitions: o.partitions})
			if err != nil {
				return fmt.Errorf("prepare %s commits with TLS %s: %w", path, sideName(on), err)
			}
			defer closeLoad()
			s.phases[path] = func(ctx context.Context, conc int, lim limit) (loadResult, error) {
				return runLoad(ctx, conc, lim, op), nil
			}
		}
		sides[i] = s
	}
	fmt.Fprintf(out, "commits: two %s clusters (TLS off, on), paths %s, %v phases, %d pairs per point, %s\n",
		sides[0].t.kind, strings.Join(paths, ","), o.duration, o.pairs, report.LoadLine())
	if o.warmup > 0 {
		for _, path := range paths {
			for i := range sides {
				if _, err := sides[i].phases[path](ctx, slices.Max(concs), limit{dur: o.warmup}); err != nil {
					return err
				}
			}
		}
	}
	type row struct {
		path string
		conc int
		res  [2][]loadResult
	}
	var rows []row
	for _, c := range concs {
		for _, path := range paths {
			r := row{path: path, conc: c}
			for p := range o.pairs {
				for i, on := range tlsSides {
					res, err := sides[i].phases[path](ctx, c, limit{dur: o.duration})
					if err != nil {
						return err
					}
					r.res[i] = append(r.res[i], res)
					fmt.Fprintf(out, "  %s C=%d pair %d TLS %s: %s ops/s, p50 %s, p99 %s, CPU/op %s, errors %s\n",
						path, c, p+1, sideName(on), report.PerSec(res.rate()), report.MS(res.p50), report.MS(res.p99), report.US(res.cpuPerOp()), res.errNote())
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
			}
			rows = append(rows, r)
		}
	}
	fmt.Fprintf(out, "commits, TLS off vs on (medians of %d pairs; on/off: median of the pairs' ratios [range]), %s\n", o.pairs, report.LoadLine())
	tb := report.NewTable(out, "path", "C", "off ops/s", "on ops/s", "ops on/off", "off p50", "on p50", "p50 on/off", "off CPU/op", "on CPU/op", "CPU/op on/off", "errors off/on")
	for _, r := range rows {
		off, on := r.res[0], r.res[1]
		tb.Row(r.path, fmt.Sprint(r.conc),
			report.PerSec(medianOf(off, loadResult.rate)), report.PerSec(medianOf(on, loadResult.rate)), pairRatio(off, on, loadResult.rate),
			report.MS(medianDur(off, func(r loadResult) time.Duration { return r.p50 })), report.MS(medianDur(on, func(r loadResult) time.Duration { return r.p50 })),
			pairRatio(off, on, func(r loadResult) float64 { return float64(r.p50) }),
			report.US(medianDur(off, loadResult.cpuPerOp)), report.US(medianDur(on, loadResult.cpuPerOp)),
			pairRatio(off, on, func(r loadResult) float64 { return float64(r.cpuPerOp()) }),
			fmt.Sprintf("%d/%d", errorsOf(off), errorsOf(on)))
	}
	tb.Flush()
	return nil
}

func medianOf(rs []loadResult, f func(loadResult) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	return medianFloat(vs)
}

func medianDur(rs []loadResult, f func(loadResult) time.Duration) time.Duration {
	return time.Duration(medianOf(rs, func(r loadResult) float64 { return float64(f(r)) }))
}

// medianFloat is the median of vs (the mean of the middle two for an even
// count); 0 for none.
func medianFloat(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// pairRatio is on/off of f for each pair: the median, and the range when
// there are several pairs.
func pairRatio(off, on []loadResult, f func(loadResult) float64) string {
	var rs []float64
	for i := range min(len(off), len(on)) {
		if b := f(off[i]); b != 0 {
			rs = append(rs, f(on[i])/b)
		}
	}
	switch len(rs) {
	case 0:
		return "-"
	case 1:
		return fmt.Sprintf("%.2f×", rs[0])
	}
	return fmt.Sprintf("%.2f× [%.2f–%.2f]", medianFloat(rs), slices.Min(rs), slices.Max(rs))
}

func errorsOf(rs []loadResult) int {
	n := 0
	for _, r := range rs {
		n += r.errors
	}
	return n
}

func tlsCostFailover(ctx context.Context, out io.Writer, g *globalOptions, o tlsCostOptions, modes []string) error {
	fo := failoverOptions{members: o.failoverMembers, session: o.session, backoffMax: o.backoffMax}
	var rigs [2]*failoverRig
	for i, on := range tlsSides {
		t, err := g.startTarget(ctx, o.failoverCluster, on, "failover-tls-"+sideName(on))
		if err != nil {
			return fmt.Errorf("start the failover cluster with TLS %s: %w", sideName(on), err)
		}
		defer t.Close()
		rig, err := newFailoverRig(ctx, g, t, fo)
		if err != nil {
			return fmt.Errorf("failover group with TLS %s: %w", sideName(on), err)
		}
		defer rig.close()
		rigs[i] = rig
	}
	fmt.Fprintf(out, "failover: two %s clusters (TLS off, on; raft defaults: heartbeat/election 500 ms), groups of %d members, session timeout %v, client retry backoff max %s, %d rounds per mode on each, alternating, %s\n",
		o.failoverCluster, o.failoverMembers, o.session, fo.backoffName(), o.kills, report.LoadLine())
	summaries := map[string][2]failoverSummary{}
	for _, mode := range modes {
		var rounds [2][]failoverRound
		for k := range o.kills {
			for i, on := range tlsSides {
				rigs[i].startCommits(ctx)
				r, err := rigs[i].round(ctx, mode)
				rigs[i].pauseCommits()
				if err != nil {
					return fmt.Errorf("%s round %d with TLS %s: %w", mode, k+1, sideName(on), err)
				}
				rounds[i] = append(rounds[i], r)
				fmt.Fprintf(out, "  %s round %d TLS %s: new leader %s, serves %s, client commit %s, new generations %d, reassignments %d\n",
					mode, k+1, sideName(on), report.MS(r.election), report.MS(r.serving), report.MS(r.commit), r.newGenerations, r.reassigned)
			}
		}
		summaries[mode] = [2]failoverSummary{summarize(rounds[0]), summarize(rounds[1])}
	}
	fmt.Fprintf(out, "failover, TLS off vs on (medians of %d rounds each; on/off of the medians), %s\n", o.kills, report.LoadLine())
	tb := report.NewTable(out, "mode", "rounds", "off new leader", "on new leader", "off serves", "on serves", "serves on/off",
		"off client commit", "on client commit", "commit on/off", "off commit max", "on commit max", "new generations off/on", "reassignments off/on")
	for _, mode := range modes {
		s := summaries[mode]
		off, on := s[0], s[1]
		tb.Row(mode, fmt.Sprint(len(off.commit)),
			report.MS(median(off.election)), report.MS(median(on.election)),
			report.MS(median(off.serving)), report.MS(median(on.serving)), ratio(float64(median(on.serving)), float64(median(off.serving))),
			report.MS(median(off.commit)), report.MS(median(on.commit)), ratio(float64(median(on.commit)), float64(median(off.commit))),
			report.MS(maxOf(off.commit)), report.MS(maxOf(on.commit)),
			fmt.Sprintf("%d/%d", off.newGenerations, on.newGenerations), fmt.Sprintf("%d/%d", off.reassigned, on.reassigned))
	}
	tb.Flush()
	return nil
}
