package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/benchcluster"
)

func newFailoverCommand(g *globalOptions) *cobra.Command {
	var (
		kills          int
		mode           string
		members        int
		sessionTimeout time.Duration
		backoffMax     time.Duration
		pause          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Time from losing the leader until a member's commit succeeds again",
		Long: `failover runs a group of --members members on a cluster it starts (real
cohortd processes with --cluster process, which is what the figures in
docs/benchmarks.md use), with member 0 committing back to back. Each round it
takes the leader away and measures the time until a commit issued after that
moment succeeds; then it restarts the node, waits until every node has caught
up, and checks that no member saw a new generation or a rebalance.

--mode kill: SIGKILL (server.Kill in-process): no leadership transfer.
--mode transfer: the ClusterService TransferLeadership admin RPC (what
'cohortctl cluster transfer-leader' sends): raft hands leadership to the
most up-to-date voter; no node stops.
--mode sigterm: SIGTERM (server.Shutdown in-process): the leader hands
leadership over before it stops, the path of a rolling restart.
--mode pause: SIGSTOP for --pause, then SIGCONT (--cluster process only): a
frozen leader (a long GC or VM pause) keeps its connections open, so the
commit in flight on it hangs until the client's leader check hears of the
new leader from the other nodes. The old leader rejoins as a follower; no
node restarts.
--mode all runs kill, transfer, sigterm and, with --cluster process, pause.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				var modes []string
				switch mode {
				case "kill", "transfer", "sigterm", "pause":
					modes = []string{mode}
				case "all":
					modes = []string{"kill", "transfer", "sigterm"}
					if g.cluster == "process" {
						modes = append(modes, "pause")
					}
				default:
					return fmt.Errorf("--mode %q: want kill, transfer, sigterm, pause or all", mode)
				}
				if len(g.endpoints) > 0 {
					return errors.New("failover kills nodes, so it needs a cluster it started itself (no --endpoints)")
				}
				if mode == "pause" && g.cluster != "process" {
					return errors.New("--mode pause stops a process with SIGSTOP: it needs --cluster process")
				}
				if pause <= 0 {
					return fmt.Errorf("--pause %v: want a positive duration", pause)
				}
				t, err := g.openTarget(ctx, "")
				if err != nil {
					return err
				}
				defer t.Close()
				return runFailover(ctx, out, g, t, failoverOptions{modes: modes, kills: kills, members: members, session: sessionTimeout, backoffMax: backoffMax, pause: pause})
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&kills, "kills", 10, "leader losses per mode")
	f.StringVar(&mode, "mode", "all", "kill, transfer, sigterm, pause or all")
	f.DurationVar(&pause, "pause", 3*time.Second, "how long --mode pause keeps the leader stopped")
	f.IntVar(&members, "members", 5, "members of the group")
	f.DurationVar(&sessionTimeout, "session-timeout", 10*time.Second, "members' session timeout (heartbeat every third of it)")
	f.DurationVar(&backoffMax, "client-retry-backoff-max", 0, "members' client.Config.RetryBackoffMax (0: the client's default, 250ms)")
	return cmd
}

// committer commits member 0's first partition back to back and reports
// the first success of a commit issued after a mark.
type committer struct {
	m    *member
	next int64 // the next offset; only run touches it, one run at a time

	mu    sync.Mutex
	mark  time.Time
	found chan time.Time // receives the end of the first commit issued after mark
	last  error
}

func (c *committer) run(ctx context.Context) {
	tp := c.m.partitions()[0]
	for ctx.Err() == nil {
		c.next++
		off := c.next
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.m.m.Commit(cctx, []client.PartitionOffset{{TopicPartition: tp, Offset: off}})
		cancel()
		end := time.Now()
		c.mu.Lock()
		if err != nil {
			c.last = err
		} else if c.found != nil && !start.Before(c.mark) {
			c.found <- end
			c.found = nil
		}
		c.mu.Unlock()
		if err != nil {
			// Refused outright (not a retryable failover error): do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// arm sets the mark and returns the channel of the first success after it.
func (c *committer) arm(at time.Time) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.mark, c.found = at, ch
	c.mu.Unlock()
	return ch
}

func (c *committer) lastErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

type failoverRound struct {
	// election: a survivor says it leads; serving: a standalone commit
	// sent straight to it (plain gRPC, no client retries) succeeds;
	// commit: member 0's Commit through the client library succeeds.
	election, serving, commit time.Duration
	newGenerations            int
	reassigned                int
}

type failoverOptions struct {
	modes          []string
	kills, members int
	session        time.Duration
	backoffMax     time.Duration
	pause          time.Duration // --mode pause: how long the leader stays stopped
}

// backoffName describes the members' retry backoff cap.
func (o failoverOptions) backoffName() string {
	if o.backoffMax > 0 {
		return o.backoffMax.String()
	}
	return "client default " + client.DefaultRetryBackoffMax.String()
}

// failoverRig is what a failover measurement runs on one cluster: the
// topic, a stable group of members and member 0's committer.
type failoverRig struct {
	t    *target
	conn *client.Conn
	f    *fleet
	cm   *committer
	gen  int32 // the group's generation once stable
	// pause is how long a pause round keeps the leader stopped.
	pause time.Duration

	stopCommits context.CancelFunc // nil while paused
	wg          sync.WaitGroup
}

// newFailoverRig creates the topic and forms the group on t; the
// committer is not started.
func newFailoverRig(ctx context.Context, g *globalOptions, t *target, o failoverOptions) (*failoverRig, error) {
	conn, err := client.Dial(client.ConnConfig{Endpoints: t.addrs, Credentials: t.admin, Logger: g.logger()})
	if err != nil {
		return nil, err
	}
	r := &failoverRig{t: t, conn: conn, pause: o.pause}
	if err := createTopic(ctx, conn.Topics(), "failover", 16); err != nil {
		r.close()
		return nil, err
	}
	r.f = newFleet(ctx, memberOptions{
		endpoints: t.addrs, group: "bench-failover", topics: []string{"failover"},
		sessionTimeout: o.session, retryBackoffMax: o.backoffMax, creds: t.member, logger: g.logger(),
	})
	if _, err := r.f.add(o.members); err != nil {
		r.close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	r.gen, _, err = r.f.stable(sctx, client.NoGeneration)
	cancel()
	if err != nil {
		r.close()
		return nil, err
	}
	r.cm = &committer{m: r.f.members[0]}
	return r, nil
}

// startCommits starts member 0 committing back to back.
func (r *failoverRig) startCommits(ctx context.Context) {
	if r.stopCommits != nil {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	r.stopCommits = cancel
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.cm.run(cctx) }()
}

// pauseCommits stops the committer and waits for it (the members go on
// heartbeating).
func (r *failoverRig) pauseCommits() {
	if r.stopCommits == nil {
		return
	}
	r.stopCommits()
	r.wg.Wait()
	r.stopCommits = nil
}

// round takes the leader away once (mode kill, transfer, sigterm or pause)
// and measures the recovery; the committer must run.
func (r *failoverRig) round(ctx context.Context, mode string) (failoverRound, error) {
	return leaderLoss(ctx, r.t, r.f, r.cm, mode, r.pause)
}

func (r *failoverRig) close() {
	r.pauseCommits()
	if r.f != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.f.close(cctx)
		cancel()
	}
	_ = r.conn.Close()
}

// failoverSummary are a mode's rounds, each duration sorted.
type failoverSummary struct {
	election, serving, commit []time.Duration
	newGenerations            int
	reassigned                int
}

func summarize(rounds []failoverRound) failoverSummary {
	var s failoverSummary
	for _, r := range rounds {
		s.election = append(s.election, r.election)
		s.serving = append(s.serving, r.serving)
		s.commit = append(s.commit, r.commit)
		s.newGenerations += r.newGenerations
		s.reassigned += r.reassigned
	}
	slices.Sort(s.election)
	slices.Sort(s.serving)
	slices.Sort(s.commit)
	return s
}

func maxOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

func runFailover(ctx context.Context, out io.Writer, g *globalOptions, t *target, o failoverOptions) error {
	rig, err := newFailoverRig(ctx, g, t, o)
	if err != nil {
		return err
	}
	defer rig.close()
	rig.startCommits(ctx)

	fmt.Fprintf(out, "failover, %s (raft defaults: heartbeat/election 500 ms), group of %d members at generation %d, session timeout %v, client retry backoff max %s, %s\n",
		t.name(), o.members, rig.gen, o.session, o.backoffName(), report.LoadLine())
	tb := report.NewTable(out, "mode", "rounds", "new leader median", "max", "leader serves median", "max", "client commit median", "max", "new generations", "reassignments")
	for _, mode := range o.modes {
		var rounds []failoverRound
		for range o.kills {
			r, err := rig.round(ctx, mode)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", mode, len(rounds)+1, err)
			}
			rounds = append(rounds, r)
		}
		s := summarize(rounds)
		tb.Row(mode, fmt.Sprint(len(rounds)), report.MS(median(s.election)), report.MS(maxOf(s.election)), report.MS(median(s.serving)), report.MS(maxOf(s.serving)),
			report.MS(median(s.commit)), report.MS(maxOf(s.commit)),
			fmt.Sprint(s.newGenerations), fmt.Sprint(s.reassigned))
		fmt.Fprintf(out, "%s: commit times %v\n", mode, roundMs(s.commit))
		if mode == "pause" {
			during := 0
			for _, d := range s.commit {
				if d < o.pause {
					during++
				}
			}
			fmt.Fprintf(out, "pause: %d of %d rounds had a commit succeed while the leader was stopped (%v)\n", during, len(s.commit), o.pause)
		}
	}
	tb.Flush()
	return ctx.Err()
}

func roundMs(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return out
}

// leaderLoss takes the leader away once and measures the recovery. pause
// is how long mode pause keeps the leader stopped.
func leaderLoss(ctx context.Context, t *target, f *fleet, cm *committer, mode string, pause time.Duration) (failoverRound, error) {
	var r failoverRound
	leader, err := t.probe.WaitServing(ctx, t.live)
	if err != nil {
		return r, err
	}
	// The committer must be succeeding before the leader goes.
	if _, err := waitFor(ctx, cm.arm(time.Now()), 30*time.Second); err != nil {
		return r, fmt.Errorf("commits do not succeed before the round: %w (last error: %v)", err, cm.lastErr())
	}
	type snap struct {
		gen      int32
		assigned int
	}
	before := make([]snap, len(f.members))
	for i, m := range f.members {
		gen, _, ok := m.holding()
		if !ok {
			return r, fmt.Errorf("member %d holds no assignment before the round", i)
		}
		a, _ := m.counts()
		before[i] = snap{gen, a}
	}
	survivors := func(i int) bool { return i != leader && t.live(i) }

	t0 := time.Now()
	found := cm.arm(t0)
	stopped := make(chan error, 1)
	restart := true
	switch mode {
	case "kill":
		stopped <- t.cluster.Kill(leader)
	case "transfer":
		restart = false
		go func() { stopped <- transferLeadership(ctx, t, leader) }()
	case "pause":
		restart = false
		procs, ok := t.cluster.(*benchcluster.Processes)
		if !ok {
			return r, errors.New("--mode pause needs --cluster process")
		}
		pid := procs.Pid(leader)
		if pid == 0 {
			return r, fmt.Errorf("node %d has no process to pause", leader+1)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return r, fmt.Errorf("SIGSTOP node %d (pid %d): %w", leader+1, pid, err)
		}
		// SIGCONT after the pause, and at once if the round fails
		// earlier: a second SIGCONT to a running process does nothing.
		defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
		go func() {
			select {
			case <-time.After(pause):
			case <-ctx.Done():
			}
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				stopped <- fmt.Errorf("SIGCONT node %d (pid %d): %w", leader+1, pid, err)
				return
			}
			stopped <- nil
		}()
	default:
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			stopped <- t.cluster.Stop(sctx, leader)
		}()
	}
	var next int
	for {
		if next = t.probe.Leader(ctx, survivors); next >= 0 {
			r.election = time.Since(t0)
			break
		}
		if time.Since(t0) > 30*time.Second || ctx.Err() != nil {
			return r, errors.New("no new leader within 30s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if r.serving, err = untilServing(ctx, t, next, t0); err != nil {
		return r, err
	}
	end, err := waitFor(ctx, found, 30*time.Second)
	if err != nil {
		return r, fmt.Errorf("no commit succeeded after losing the leader: %w (last error: %v)", err, cm.lastErr())
	}
	r.commit = end.Sub(t0)
	if err := <-stopped; err != nil {
		return r, err
	}
	if restart {
		if err := t.cluster.Restart(ctx, leader); err != nil {
			return r, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	_, err = t.probe.WaitServing(wctx, t.live)
	cancel()
	if err != nil {
		return r, err
	}
	for i, m := range f.members {
		gen, _, ok := m.holding()
		a, _ := m.counts()
		if !ok || gen != before[i].gen {
			r.newGenerations++
		}
		if a != before[i].assigned {
			r.reassigned++
		}
	}
	return r, nil
}

// transferLeadership asks node i (the leader) to hand leadership to the
// most up-to-date voter, through the cluster admin API.
func transferLeadership(ctx context.Context, t *target, i int) error {
	cc, err := t.probe.Conn(t.addrs[i])
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cohortv1.NewClusterServiceClient(cc).TransferLeadership(tctx, &cohortv1.TransferLeadershipRequest{})
	if err != nil {
		return fmt.Errorf("TransferLeadership on %s: %w", t.addrs[i], err)
	}
	if !resp.GetChanged() {
		return fmt.Errorf("TransferLeadership on %s changed nothing: %s", t.addrs[i], resp.GetMessage())
	}
	return nil
}

// untilServing sends standalone commits straight to node i every 2 ms until
// one succeeds, and returns the time since t0.
func untilServing(ctx context.Context, t *target, i int, t0 time.Time) (time.Duration, error) {
	cc, err := t.probe.Conn(t.addrs[i])
	if err != nil {
		return 0, err
	}
	groups := cohortv1.NewGroupCoordinatorClient(cc)
	req := &cohortv1.OffsetCommitRequest{GroupId: "bench-failover-probe", Generation: -1,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "failover", Partition: 0, Offset: 1}}}
	for {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := groups.OffsetCommit(rctx, req)
		cancel()
		if err == nil {
			return time.Since(t0), nil
		}
		if time.Since(t0) > 30*time.Second || ctx.Err() != nil {
			return 0, fmt.Errorf("new leader %s does not take commits within 30s: %v", t.addrs[i], err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitFor(ctx context.Context, ch <-chan time.Time, d time.Duration) (time.Time, error) {
	select {
	case at := <-ch:
		return at, nil
	case <-time.After(d):
		return time.Time{}, fmt.Errorf("timed out after %v", d)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}
