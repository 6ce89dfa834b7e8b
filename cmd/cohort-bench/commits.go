package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/client"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// commitOptions configure the raw and commits subcommands.
type commitOptions struct {
	concurrency string
	groups      string // mode conn: the numbers of groups commits spread over
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
		f.StringVar(&o.groups, "groups", "1", "mode conn: comma-separated, increasing numbers of groups each phase's commits spread over (one row per groups and concurrency)")
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

// commitSpread spreads standalone commits over groups: the commit with
// sequence number seq goes to group seq mod groups and partition seq mod
// partitions. Group i so only ever sees the partitions p with
// p ≡ i (mod gcd(groups, partitions)), and the groups hold
// lcm(groups, partitions) offsets together: few enough to commit them all
// before a measurement (10,000 groups of a 256-partition topic: 160,000),
// so that the measured commits find their group and offset in place.
type commitSpread struct {
	names      []string // group i's ID
	partitions int32
}

func newCommitSpread(prefix string, groups int, partitions int32) commitSpread {
	s := commitSpread{names: make([]string, groups), partitions: partitions}
	for i := range s.names {
		s.names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return s
}

// at is the group and partition of the commit with sequence number seq.
func (s commitSpread) at(seq int64) (group string, partition int32) {
	return s.names[seq%int64(len(s.names))], int32(seq % int64(s.partitions))
}

// step is gcd(groups, partitions): group i's partitions are i mod step,
// then every step-th one.
func (s commitSpread) step() int32 {
	a, b := int32(len(s.names)), s.partitions
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// partitionsOf are the partitions commits to group i go to.
func (s commitSpread) partitionsOf(i int) []int32 {
	d := s.step()
	var ps []int32
	for p := int32(i) % d; p < s.partitions; p += d {
		ps = append(ps, p)
	}
	return ps
}

// offsets is how many offsets the groups hold together.
func (s commitSpread) offsets() int {
	return len(s.names) * int(s.partitions/s.step())
}

// rawPhase measures Node.Apply on the current in-process leader, committing
// to a group of its own.
func rawPhase(ctx context.Context, t *target, conc int, lim limit, partitions int32) (loadResult, error) {
	return rawSpreadPhase(ctx, t, conc, lim, newCommitSpread("bench-raw", 1, partitions))
}

// rawSpreadPhase measures Node.Apply on the current in-process leader of
// one-partition standalone commits spread as s says.
func rawSpreadPhase(ctx context.Context, t *target, conc int, lim limit, s commitSpread) (loadResult, error) {
	leader := t.inproc.Leader()
	if leader == nil {
		return loadResult{}, errors.New("no in-process leader")
	}
	return runLoad(ctx, conc, lim, func(ctx context.Context, _ int, seq int64) error {
		group, partition := s.at(seq)
		cmd := &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{
			GroupId: group, Generation: -1,
			Offsets: []*fsmv1.OffsetCommit{{Topic: "bench", Partition: partition, Offset: seq}},
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
apply phase at the same concurrency, and the table gives the ratios.

--groups (mode conn) is the cost curve against the number of groups: for
each N the commits spread over the standalone groups bench-conn-0 to
bench-conn-<N-1>, commit s (numbered across callers) to group s mod N,
partition s mod --partitions, one partition per commit; the raw phase
applies the same commits to the same groups, so its ratio compares like
with like. A standalone group comes to exist with its first commit, so
before N's phases every group gets one commit of all the partitions it will
see (lcm(N, --partitions) offsets in all): the phases measure the steady
state, overwriting offsets of existing groups. The cluster keeps the groups
of earlier sizes, so the sizes must increase; the leader's group and offset
counts are printed after each prefill and at the end. The default budgets
of the started cluster (fsm.DefaultBudgets: 100,000 groups, 256 MiB of
state) hold 10,000 groups (about 25 MiB with 256 partitions); a cluster
whose budgets refuse the groups fails the prefill naming the budget.`,
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
	start := time.Now()
	concs, err := parseInts("concurrency", o.concurrency)
	if err != nil {
		return err
	}
	sizes, err := parseInts("groups", o.groups)
	if err != nil {
		return err
	}
	if err := increasing("groups", sizes); err != nil {
		return err
	}
	if o.mode != "member" && o.mode != "conn" {
		return fmt.Errorf("--mode %q: want member or conn", o.mode)
	}
	if o.partitions < 1 {
		return fmt.Errorf("--partitions %d: want at least 1", o.partitions)
	}
	if o.mode == "member" && (len(sizes) > 1 || sizes[0] != 1) {
		return fmt.Errorf("--groups %s: mode member measures the members of one group; spreading commits over groups needs --mode conn", o.groups)
	}
	t, err := g.openTarget(ctx, "")
	if err != nil {
		return err
	}
	defer t.Close()
	setup, err := prepareCommits(ctx, g, t, o)
	if err != nil {
		return err
	}
	defer setup.close()
	f := setup.fleet
	if f != nil {
		fmt.Fprintf(out, "group bench-commits: %d members stable\n", len(f.members))
	}

	withRaw := o.raw && t.inproc != nil
	fmt.Fprintf(out, "offset commits through the client (mode %s), %s, %s\n", o.mode, t.name(), report.LoadLine())
	withFloor := o.floor && f != nil
	tb := report.NewTable(out, "groups", "C", "raw ops/s", "raw p50", "raw p99", "raw CPU/op", "client ops/s", "p50", "p99", "max", "CPU/op", "ops ratio", "p50 ratio", "heartbeat p50", "errors")
	lim := limit{ops: o.ops, dur: o.duration}
	// Where the client's commits spend their time, from the in-process
	// leader's stage histograms (the engine's parts of a commit) and the
	// client's mean: what is left over is the client and gRPC.
	var stageRows [][]string
measure:
	for _, n := range sizes {
		spread := newCommitSpread("bench-conn", n, o.partitions)
		rawSpread := spread
		if o.mode == "member" {
			rawSpread = newCommitSpread("bench-raw", 1, o.partitions)
		} else {
			took, err := setup.prefill(ctx, spread)
			if err != nil {
				tb.Flush() // the sizes measured so far
				return err
			}
			fmt.Fprintf(out, "groups %d: prefilled in %v, one commit per group, %d offsets%s\n", n, took.Round(time.Millisecond), spread.offsets(), stateNote(t))
		}
		commit := setup.op(spread)
		for _, c := range concs {
			var raw loadResult
			if withRaw {
				if raw, err = rawSpreadPhase(ctx, t, c, lim, rawSpread); err != nil {
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
				stageRows = append(stageRows, append([]string{fmt.Sprint(n)}, stageRow(c, r, raw, after.meanSince(before))...))
			}
			floor := "-"
			if withFloor {
				hb := runLoad(ctx, c, lim, heartbeatOp(f))
				floor = report.MS(hb.p50)
				if hb.errors > 0 {
					floor += " (" + hb.errNote() + ")"
				}
			}
			tb.Row(fmt.Sprint(n), fmt.Sprint(c), report.PerSec(raw.rate()), report.MS(raw.p50), report.MS(raw.p99), report.US(raw.cpuPerOp()),
				report.PerSec(r.rate()), report.MS(r.p50), report.MS(r.p99), report.MS(r.max), report.US(r.cpuPerOp()),
				ratio(r.rate(), raw.rate()), ratio(float64(r.p50), float64(raw.p50)), floor, r.errNote())
			if ctx.Err() != nil {
				break measure
			}
		}
	}
	tb.Flush()
	if len(stageRows) > 0 {
		fmt.Fprintf(out, "where a commit's time goes (means in µs; the leader's commit_stage_seconds; client+gRPC is the client's mean less the engine's)\n")
		st := report.NewTable(out, "groups", "C", "client mean", "client+gRPC", "admit", "queue", "replicate", "wake", "engine", "raw apply mean")
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
	fmt.Fprintf(out, "commits done in %v%s, %s\n", time.Since(start).Round(time.Second), stateNote(t), report.LoadLine())
	return ctx.Err()
}

// stateNote describes the in-process leader's replicated state (groups,
// offsets, the size estimate the state-bytes budget holds), or is empty
// for other clusters.
func stateNote(t *target) string {
	leader := t.leaderServer()
	if leader == nil {
		return ""
	}
	st := leader.FSM.Stats()
	u, _ := leader.FSM.Usage()
	return fmt.Sprintf("; the leader's state: %d groups, %d offsets, %.1f MiB estimated", st.Groups, st.Offsets, float64(u.StateBytes)/(1<<20))
}

// increasing checks that a list of sizes grows from each to the next: the
// runs that take one keep what each size left behind (groups, members).
func increasing(flag string, vs []int) error {
	for i := 1; i < len(vs); i++ {
		if vs[i] <= vs[i-1] {
			return fmt.Errorf("--%s: %d after %d; the sizes must increase (each size keeps what the one before it made)", flag, vs[i], vs[i-1])
		}
	}
	return nil
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

// commitSetup is what the commits of --mode run on: the admin's
// connection (it created the topic; mode conn commits through it), and for
// mode member a stable group.
type commitSetup struct {
	conn  *client.Conn
	fleet *fleet // mode member
	close func()
}

// commitLoad prepares the commit operation of --mode on t: the topic, and
// for mode member a stable group; mode conn commits to one group.
// closeLoad releases what it started.
func commitLoad(ctx context.Context, g *globalOptions, t *target, o commitOptions) (commit func(ctx context.Context, worker int, seq int64) error, f *fleet, closeLoad func(), err error) {
	s, err := prepareCommits(ctx, g, t, o)
	if err != nil {
		return nil, nil, nil, err
	}
	return s.op(newCommitSpread("bench-conn", 1, o.partitions)), s.fleet, s.close, nil
}

// prepareCommits creates the topic and, for mode member, starts the
// group and waits until it is stable. close releases what it started.
func prepareCommits(ctx context.Context, g *globalOptions, t *target, o commitOptions) (*commitSetup, error) {
	// The admin's credentials: they create the topic, and mode conn's
	// member-less commits are an admin's (an offset reset).
	conn, err := client.Dial(client.ConnConfig{Endpoints: t.addrs, Credentials: t.admin, Logger: g.logger()})
	if err != nil {
		return nil, err
	}
	s := &commitSetup{conn: conn, close: func() { _ = conn.Close() }}
	fail := func(err error) (*commitSetup, error) {
		s.close()
		return nil, err
	}
	if err := createTopic(ctx, conn.Topics(), "bench", o.partitions); err != nil {
		return fail(err)
	}
	switch o.mode {
	case "member":
		f := newFleet(ctx, memberOptions{
			endpoints: t.addrs, group: "bench-commits", topics: []string{"bench"},
			sessionTimeout: 10 * time.Second, creds: t.member, logger: g.logger(),
		})
		s.fleet = f
		closeConn := s.close
		s.close = func() {
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
	case "conn":
	default:
		return fail(fmt.Errorf("--mode %q: want member or conn", o.mode))
	}
	return s, nil
}

// op is one commit: in mode member, of one of member w%members'
// partitions; in mode conn, a standalone commit spread as spread says.
func (s *commitSetup) op(spread commitSpread) func(ctx context.Context, worker int, seq int64) error {
	if f := s.fleet; f != nil {
		return func(ctx context.Context, worker int, seq int64) error {
			m := f.members[worker%len(f.members)]
			parts := m.partitions()
			if len(parts) == 0 {
				return fmt.Errorf("member %d holds no partitions", worker%len(f.members))
			}
			tp := parts[(worker/len(f.members))%len(parts)]
			return m.m.Commit(ctx, []client.PartitionOffset{{TopicPartition: tp, Offset: seq}})
		}
	}
	groups := s.conn.Groups()
	return func(ctx context.Context, _ int, seq int64) error {
		group, partition := spread.at(seq)
		return standaloneCommit(ctx, groups, group, []*cohortv1.OffsetCommitPartition{{Topic: "bench", Partition: partition, Offset: seq}})
	}
}

// prefillCallers is how many callers commit the prefill side by side.
const prefillCallers = 32

// prefill commits, in one request per group, every partition spread's
// commits to that group go to: it creates the groups and their offsets, so
// that a measured commit only overwrites an offset. It returns how long
// that took.
func (s *commitSetup) prefill(ctx context.Context, spread commitSpread) (time.Duration, error) {
	groups := s.conn.Groups()
	r := runLoad(ctx, prefillCallers, limit{ops: int64(len(spread.names))}, func(ctx context.Context, _ int, seq int64) error {
		i := int(seq - 1)
		var offsets []*cohortv1.OffsetCommitPartition
		for _, p := range spread.partitionsOf(i) {
			offsets = append(offsets, &cohortv1.OffsetCommitPartition{Topic: "bench", Partition: p})
		}
		return standaloneCommit(ctx, groups, spread.names[i], offsets)
	})
	if r.errors > 0 || r.ops != len(spread.names) {
		return 0, fmt.Errorf("prefill of %d groups: %d committed, %s", len(spread.names), r.ops, r.errNote())
	}
	return r.elapsed, nil
}

// standaloneCommit commits offsets to group as a member-less committer
// (generation -1), and fails unless every partition is accepted.
func standaloneCommit(ctx context.Context, groups cohortv1.GroupCoordinatorClient, group string, offsets []*cohortv1.OffsetCommitPartition) error {
	resp, err := groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: group, Generation: -1, Offsets: offsets})
	if err != nil {
		return err
	}
	ps := resp.GetPartitions()
	if len(ps) != len(offsets) {
		return fmt.Errorf("commit of %d offsets to %s: %d results", len(offsets), group, len(ps))
	}
	for _, p := range ps {
		if p.GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
			return fmt.Errorf("commit to %s refused %s/%d: %v %s", group, p.GetTopic(), p.GetPartition(), p.GetError(), p.GetErrorMessage())
		}
	}
	return nil
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
