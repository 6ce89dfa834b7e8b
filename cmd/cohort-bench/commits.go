package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/cohortlabs/cohort/bench/report"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/client"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// commitOptions configure the raw and commits subcommands.
type commitOptions struct {
	concurrency string
	duration    time.Duration
	ops         int64
	mode        string // member or conn
	members     int
	partitions  int32
	raw         bool
	floor       bool
}

func (o *commitOptions) flags(cmd *cobra.Command, withClient bool) {
	f := cmd.Flags()
	f.StringVar(&o.concurrency, "concurrency", "1,16,256", "comma-separated numbers of concurrent callers")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measured phase")
	f.Int64Var(&o.ops, "ops", 0, "stop a phase after this many operations (0: only --duration)")
	f.Int32Var(&o.partitions, "partitions", 256, "partitions of the benchmark topic")
	if withClient {
		f.StringVar(&o.mode, "mode", "member", "member: client.Member.Commit from --members group members; conn: client.Dial + OffsetCommit as a standalone (generation -1) committer")
		f.IntVar(&o.members, "members", 16, "group members sharing the callers (mode member)")
		f.BoolVar(&o.raw, "raw", true, "measure raw Raft apply on the same cluster before each phase (in-process only)")
		f.BoolVar(&o.floor, "rpc-floor", true, "mode member: also measure Heartbeat (no Raft) through the same members' connections, the RPC floor under a commit")
	}
}

func newRawCommand(g *globalOptions) *cobra.Command {
	var o commitOptions
	cmd := &cobra.Command{
		Use:   "raw",
		Short: "Raw replicated apply: raftnode.Node.Apply on the in-process leader (no gRPC, no engine)",
		Long: `raw drives the in-process three-node cluster's leader with Node.Apply of a
one-partition standalone offset commit, as raftnode's BenchmarkReplicatedApply
does: the ceiling every other figure is compared with.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				concs, err := parseInts("concurrency", o.concurrency)
				if err != nil {
					return err
				}
				t, err := g.openTarget(ctx, "inprocess")
				if err != nil {
					return err
				}
				defer t.Close()
				if t.inproc == nil {
					return errNoRaw
				}
				fmt.Fprintf(out, "raw replicated apply, %s of 3 nodes, %s\n", t.name(), report.LoadLine())
				tb := report.NewTable(out, "C", "ops/s", "p50", "p99", "max", "CPU/op", "errors")
				for _, c := range concs {
					r, err := rawPhase(ctx, t, c, limit{ops: o.ops, dur: o.duration}, o.partitions)
					if err != nil {
						return err
					}
					tb.Row(fmt.Sprint(c), report.PerSec(r.rate()), report.MS(r.p50), report.MS(r.p99), report.MS(r.max), report.US(r.cpuPerOp()), r.errNote())
				}
				tb.Flush()
				return nil
			})
		},
	}
	o.flags(cmd, false)
	return cmd
}

// rawPhase measures Node.Apply on the current in-process leader.
func rawPhase(ctx context.Context, t *target, conc int, lim limit, partitions int32) (loadResult, error) {
	leader := t.inproc.Leader()
	if leader == nil {
		return loadResult{}, errors.New("no in-process leader")
	}
	return runLoad(ctx, conc, lim, func(ctx context.Context, _ int, seq int64) error {
		cmd := &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{
			GroupId: "bench-raw", Generation: -1,
			Offsets: []*fsmv1.OffsetCommit{{Topic: "bench", Partition: int32(seq % int64(partitions)), Offset: seq}},
		}}}
		res, err := leader.Node.Apply(ctx, cmd)
		if err != nil {
			return err
		}
		return res.Err
	}), nil
}

func newCommitsCommand(g *globalOptions) *cobra.Command {
	var o commitOptions
	cmd := &cobra.Command{
		Use:   "commits",
		Short: "Offset commits/s and p50/p99 latency through the client library",
		Long: `commits measures offset commits through package client at each concurrency.

--mode member (default): --members members of one group (client.Member) own
the topic's partitions; caller w commits one of member w%members' partitions
with Member.Commit (fenced by member and generation).
--mode conn: callers share one client.Dial Conn and send OffsetCommit for a
standalone committer (no member, generation -1), as Kafka's simple consumers do.

With the in-process cluster each client phase is preceded by a raw Raft
apply phase at the same concurrency, and the table gives the ratios.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				return runCommits(ctx, out, g, o)
			})
		},
	}
	o.flags(cmd, true)
	return cmd
}

func runCommits(ctx context.Context, out io.Writer, g *globalOptions, o commitOptions) error {
	concs, err := parseInts("concurrency", o.concurrency)
	if err != nil {
		return err
	}
	if o.mode != "member" && o.mode != "conn" {
		return fmt.Errorf("--mode %q: want member or conn", o.mode)
	}
	t, err := g.openTarget(ctx, "")
	if err != nil {
		return err
	}
	defer t.Close()
	commit, f, closeLoad, err := commitLoad(ctx, g, t, o)
	if err != nil {
		return err
	}
	defer closeLoad()
	if f != nil {
		fmt.Fprintf(out, "group bench-commits: %d members stable\n", len(f.members))
	}

	withRaw := o.raw && t.inproc != nil
	fmt.Fprintf(out, "offset commits through the client (mode %s), %s, %s\n", o.mode, t.name(), report.LoadLine())
	withFloor := o.floor && f != nil
	tb := report.NewTable(out, "C", "raw ops/s", "raw p50", "raw p99", "raw CPU/op", "client ops/s", "p50", "p99", "max", "CPU/op", "ops ratio", "p50 ratio", "heartbeat p50", "errors")
	lim := limit{ops: o.ops, dur: o.duration}
	// Where the client's commits spend their time, from the in-process
	// leader's stage histograms (the engine's parts of a commit) and the
	// client's mean: what is left over is the client and gRPC.
	var stageRows [][]string
	for _, c := range concs {
		var raw loadResult
		if withRaw {
			if raw, err = rawPhase(ctx, t, c, lim, o.partitions); err != nil {
				return err
			}
		}
		var before commitStages
		leader := t.leaderServer()
		if leader != nil {
			if before, err = readCommitStages(leader); err != nil {
				return err
			}
		}
		r := runLoad(ctx, c, lim, commit)
		if leader != nil {
			after, err := readCommitStages(leader)
			if err != nil {
				return err
			}
			stageRows = append(stageRows, stageRow(c, r, raw, after.meanSince(before)))
		}
		floor := "-"
		if withFloor {
			hb := runLoad(ctx, c, lim, heartbeatOp(f))
			floor = report.MS(hb.p50)
			if hb.errors > 0 {
				floor += " (" + hb.errNote() + ")"
			}
		}
		tb.Row(fmt.Sprint(c), report.PerSec(raw.rate()), report.MS(raw.p50), report.MS(raw.p99), report.US(raw.cpuPerOp()),
			report.PerSec(r.rate()), report.MS(r.p50), report.MS(r.p99), report.MS(r.max), report.US(r.cpuPerOp()),
			ratio(r.rate(), raw.rate()), ratio(float64(r.p50), float64(raw.p50)), floor, r.errNote())
		if ctx.Err() != nil {
			break
		}
	}
	tb.Flush()
	if len(stageRows) > 0 {
		fmt.Fprintf(out, "where a commit's time goes (means in µs; the leader's commit_stage_seconds; client+gRPC is the client's mean less the engine's)\n")
		st := report.NewTable(out, "C", "client mean", "client+gRPC", "admit", "queue", "replicate", "wake", "engine", "raw apply mean")
		for _, row := range stageRows {
			st.Row(row...)
		}
		st.Flush()
	}
	if f != nil {
		changed := 0
		for _, m := range f.members {
			if a, _ := m.counts(); a != 1 {
				changed++
			}
		}
		fmt.Fprintf(out, "members that were assigned more than once during the run: %d\n", changed)
	}
	return ctx.Err()
}

// heartbeatOp sends Heartbeat for member w%len through that member's own
// connection: the same client, gRPC and forwarding path as its commits,
// without Raft.
func heartbeatOp(f *fleet) func(ctx context.Context, worker int, seq int64) error {
	return func(ctx context.Context, worker int, _ int64) error {
		m := f.members[worker%len(f.members)]
		_, err := m.m.Conn().Groups().Heartbeat(ctx, &cohortv1.HeartbeatRequest{
			GroupId: f.opts.group, Generation: m.m.Generation(), MemberId: m.m.MemberID(),
		})
		return err
	}
}

// commitLoad prepares the commit operation of --mode on t: the topic, and
// for mode member a stable group. closeLoad releases what it started.
func commitLoad(ctx context.Context, g *globalOptions, t *target, o commitOptions) (commit func(ctx context.Context, worker int, seq int64) error, f *fleet, closeLoad func(), err error) {
	// The admin's credentials: they create the topic, and mode conn's
	// member-less commits are an admin's (an offset reset).
	conn, err := client.Dial(client.ConnConfig{Endpoints: t.addrs, Credentials: t.admin, Logger: g.logger()})
	if err != nil {
		return nil, nil, nil, err
	}
	closeLoad = func() { _ = conn.Close() }
	fail := func(err error) (func(context.Context, int, int64) error, *fleet, func(), error) {
		closeLoad()
		return nil, nil, nil, err
	}
	if err := createTopic(ctx, conn.Topics(), "bench", o.partitions); err != nil {
		return fail(err)
	}
	switch o.mode {
	case "member":
		f = newFleet(ctx, memberOptions{
			endpoints: t.addrs, group: "bench-commits", topics: []string{"bench"},
			sessionTimeout: 10 * time.Second, creds: t.member, logger: g.logger(),
		})
		closeConn := closeLoad
		closeLoad = func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			f.close(cctx)
			closeConn()
		}
		if _, err := f.add(o.members); err != nil {
			return fail(err)
		}
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		_, _, err := f.stable(sctx, client.NoGeneration)
		cancel()
		if err != nil {
			return fail(err)
		}
		commit = func(ctx context.Context, worker int, seq int64) error {
			m := f.members[worker%len(f.members)]
			parts := m.partitions()
			if len(parts) == 0 {
				return fmt.Errorf("member %d holds no partitions", worker%len(f.members))
			}
			tp := parts[(worker/len(f.members))%len(parts)]
			return m.m.Commit(ctx, []client.PartitionOffset{{TopicPartition: tp, Offset: seq}})
		}
	case "conn":
		groups := conn.Groups()
		commit = func(ctx context.Context, _ int, seq int64) error {
			resp, err := groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{
				GroupId: "bench-standalone", Generation: -1,
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "bench", Partition: int32(seq % int64(o.partitions)), Offset: seq}},
			})
			if err != nil {
				return err
			}
			if p := resp.GetPartitions(); len(p) != 1 || p[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
				return fmt.Errorf("commit refused: %v", p)
			}
			return nil
		}
	default:
		return fail(fmt.Errorf("--mode %q: want member or conn", o.mode))
	}
	return commit, f, closeLoad, nil
}

// stageRow is one concurrency's row of the stage table.
func stageRow(c int, r, raw loadResult, means map[string]float64) []string {
	cell := func(name string) string {
		v, ok := means[name]
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.0f", v)
	}
	clientMean := float64(r.mean.Microseconds())
	rest := "-"
	if e, ok := means["engine"]; ok {
		rest = fmt.Sprintf("%.0f", clientMean-e)
	}
	rawMean := "-"
	if raw.ops > 0 {
		rawMean = fmt.Sprintf("%d", raw.mean.Microseconds())
	}
	return []string{fmt.Sprint(c), fmt.Sprintf("%.0f", clientMean), rest, cell("admit"), cell("queue"), cell("replicate"), cell("wake"), cell("engine"), rawMean}
}
