package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/chaos/checker"
	"github.com/cohortlabs/cohort/chaos/cluster"
	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/chaos/nemesis"
	"github.com/cohortlabs/cohort/chaos/report"
	"github.com/cohortlabs/cohort/chaos/workload"
)

// Options of one run. Zero fields take the documented defaults.
type Options struct {
	Time     time.Duration // fault period (default 2 m)
	Nodes    int           // 3 or 5 (default 3)
	Nemesis  string        // kinds and groups, comma-separated (default mixed)
	Workload string        // offsets, groups or both (default both)
	Seed     uint64        // 0: drawn from the clock (and printed)
	Mode     string        // auto, netns or local (default auto)
	// CI makes a missing prerequisite of netns mode a failure instead of a
	// fallback to local mode.
	CI        bool
	Instance  int    // parallel runs on one machine use different instances
	Store     string // report root (default store)
	Name      string // run directory name (default time-nemesis-seed)
	Cohortd   string // cohortd binary (required)
	Cohortctl string // cohortctl binary (membership faults; optional)
	// RequireAllKinds fails the run before it starts when the schedule
	// does not contain every requested kind (the smoke run's promise).
	RequireAllKinds bool
	// StrictJoin: see nemesis.Runner.StrictJoin.
	StrictJoin bool
	// Fault timing.
	QuietMin, QuietMax, FaultMin, FaultMax time.Duration
	// SessionTimeout of the group members (default 6 s); leader-only faults
	// stay below two thirds of it so that checker 6 applies.
	SessionTimeout time.Duration
	// Liveness window after the final heal (default 30 s).
	Recovery time.Duration
	// Hostile adds the hostile workload (workload.Hostile): oversized,
	// near-budget and malformed requests, with budgets it can reach (and,
	// with TLS, calls authorization must refuse).
	Hostile bool
	// Kafka adds the Kafka workload (workload.Kafka): kgo consumers of
	// one group through the nodes' Kafka listeners, judged by its own
	// verdict.
	Kafka bool
	// KafkaProtocol is the Kafka workload's group protocol:
	// workload.KafkaClassic (default) or workload.KafkaConsumer (KIP-848).
	KafkaProtocol string
	// NoMemberFaults turns off the groups workload's member faults
	// (duplicated static members, JoinGroup calls cut at the barrier).
	NoMemberFaults bool
	// Plaintext runs the cluster without TLS (cohortd --insecure in netns
	// mode). By default every node-to-node and client connection is mutual
	// TLS: a CA made for the run, a certificate per node, the workloads'
	// members and readers as a client, topic creation, the registers'
	// commits and the nemeses as an admin.
	Plaintext bool
	Out       io.Writer
}

func (o *Options) defaults() {
	if o.Time == 0 {
		o.Time = 2 * time.Minute
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nemesis == "" {
		o.Nemesis = "mixed"
	}
	if o.Workload == "" {
		o.Workload = "both"
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano()) % 1_000_000_007
	}
	if o.Mode == "" {
		o.Mode = "auto"
	}
	if o.Store == "" {
		o.Store = "store"
	}
	if o.QuietMin == 0 {
		o.QuietMin = 2 * time.Second
	}
	if o.QuietMax == 0 {
		o.QuietMax = 6 * time.Second
	}
	if o.FaultMin == 0 {
		o.FaultMin = 3 * time.Second
	}
	if o.FaultMax == 0 {
		o.FaultMax = 10 * time.Second
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 6 * time.Second
	}
	if o.Recovery == 0 {
		o.Recovery = 30 * time.Second
	}
	if o.KafkaProtocol == "" {
		o.KafkaProtocol = workload.KafkaClassic
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
}

// extraArgs are the cohortd flags of a run: fast rebalances and short
// sessions, and with the hostile workload budgets it can reach. Consumer
// groups (KIP-848) get the run's session timeout and a heartbeat as
// frequent as the classic members' own, so that they rebalance as fast
// under faults lasting seconds (cohortd's defaults are 45 s and 5 s); no
// other workload has such groups.
func extraArgs(hostile bool, session time.Duration) []string {
	args := []string{"--initial-rebalance-delay", "500ms", "--min-session-timeout", "1s", "--shutdown-timeout", "10s",
		"--consumer-session-timeout", session.String(), "--consumer-heartbeat-interval", "200ms"}
	if hostile {
		args = append(args, workload.HostileBudgetFlags...)
	}
	return args
}

// ErrPrerequisite: netns mode was required (CI) but cannot run here.
var ErrPrerequisite = errors.New("chaos: prerequisite missing")

// Run performs one chaos run and writes its report. The returned results
// say whether the run was valid; the error is for runs that could not be
// carried out at all.
func Run(ctx context.Context, o Options) (*report.Results, error) {
	o.defaults()
	if o.Cohortd == "" {
		return nil, errors.New("chaos: no cohortd binary given")
	}
	if err := workload.CheckKafkaProtocol(o.KafkaProtocol); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	var notes []string
	mode := cluster.Mode(o.Mode)
	if o.Mode == "auto" || o.Mode == "netns" {
		why := cluster.Preflight()
		switch {
		case why == "":
			mode = cluster.ModeNetns
		case o.CI || o.Mode == "netns":
			return nil, fmt.Errorf("%w: netns mode: %s", ErrPrerequisite, why)
		default:
			mode = cluster.ModeLocal
			notes = append(notes, "local mode on loopback ("+why+"): only kill and pause faults run")
		}
	}
	if mode == cluster.ModeLocal && o.Mode != "auto" {
		notes = append(notes, "local mode on loopback: only kill and pause faults run")
	}
	ctl := o.Cohortctl != "" && mode == cluster.ModeNetns
	if o.Cohortctl != "" {
		if _, err := os.Stat(o.Cohortctl); err != nil {
			ctl = false
			notes = append(notes, "no cohortctl at "+o.Cohortctl+": membership faults do not run")
		}
	}
	kinds, dropped, err := nemesis.Resolve(o.Nemesis, mode == cluster.ModeNetns, ctl)
	if err != nil {
		return nil, err
	}
	if len(dropped) > 0 {
		notes = append(notes, "nemesis kinds not available in this mode: "+strings.Join(dropped, ", "))
	}
	sched := nemesis.NewSchedule(o.Seed, nemesis.Plan{
		Kinds: kinds, Length: o.Time, QuietMin: o.QuietMin, QuietMax: o.QuietMax,
		FaultMin: o.FaultMin, FaultMax: o.FaultMax, LeaderFaultMax: o.SessionTimeout * 2 / 3,
	})
	if o.RequireAllKinds {
		if missing := missingKinds(kinds, sched.Kinds()); len(missing) > 0 {
			return nil, fmt.Errorf("chaos: %v of faults with seed %d leaves out %s: lengthen TIME or shorten the faults",
				o.Time, o.Seed, strings.Join(missing, ", "))
		}
		if len(dropped) > 0 && o.CI {
			return nil, fmt.Errorf("%w: nemesis kinds unavailable: %s", ErrPrerequisite, strings.Join(dropped, ", "))
		}
	}

	name := o.Name
	if name == "" {
		name = fmt.Sprintf("%s-%s-%s-s%d", time.Now().Format("20060102-150405"),
			strings.ReplaceAll(o.Nemesis, ",", "+"), o.Workload, o.Seed)
	}
	dir := filepath.Join(o.Store, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	latest := filepath.Join(o.Store, "latest")
	_ = os.Remove(latest)
	_ = os.Symlink(name, latest)
	logf, err := os.Create(filepath.Join(dir, "chaos.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	log := slog.New(slog.NewTextHandler(io.MultiWriter(o.Out, logf), &slog.HandlerOptions{Level: slog.LevelInfo}))
	security := "mutual TLS"
	if o.Plaintext {
		security = "plaintext"
	}
	fmt.Fprintf(o.Out, "cohort-chaos: run %s, seed %d (rerun with SEED=%d), %s mode, %s, %d nodes, workload %s, nemesis %s\n",
		name, o.Seed, o.Seed, mode, security, o.Nodes, o.Workload, strings.Join(kinds, ","))
	fmt.Fprint(o.Out, sched.String())
	for _, n := range notes {
		log.Warn(n)
	}
	if err := os.WriteFile(filepath.Join(dir, "schedule.txt"), []byte(sched.String()), 0o644); err != nil {
		return nil, err
	}

	rec, err := history.NewRecorder(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	started := time.Now()

	cl, err := cluster.New(cluster.Config{
		Mode: mode, Nodes: o.Nodes, Instance: o.Instance, Binary: abs(o.Cohortd), CtlBinary: ctlPath(ctl, o.Cohortctl),
		LogDir: filepath.Join(dir, "nodes"), Logger: log,
		ExtraArgs: extraArgs(o.Hostile, o.SessionTimeout), TLS: !o.Plaintext,
	})
	if err != nil {
		return nil, err
	}
	closed := false
	closeCluster := func() {
		if closed {
			return
		}
		closed = true
		if err := cl.Close(); err != nil {
			log.Error("cluster teardown", "err", err)
		}
	}
	defer closeCluster()

	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	_, err = cl.WaitLeaderAfterStart(sctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("chaos: cluster did not come up: %w", err)
	}
	log.Info("cluster up", "nodes", cl.Endpoints(), "security", security)
	creds := workload.Credentials{Client: cl.ClientCredentials(), Admin: cl.AdminCredentials()}

	var offs *workload.Offsets
	var grps *workload.Groups
	if o.Workload == "offsets" || o.Workload == "both" {
		offs = &workload.Offsets{Endpoints: cl.Endpoints(), Rec: rec, Log: log, Seed: o.Seed, Creds: creds}
	}
	if o.Workload == "groups" || o.Workload == "both" {
		grps = &workload.Groups{Endpoints: cl.Endpoints(), Rec: rec, Log: log, Seed: o.Seed, SessionTimeout: o.SessionTimeout, Creds: creds}
		if o.NoMemberFaults {
			grps.Duplicates, grps.CutJoins = -1, -1
		}
		if sched.FailoverOnly(o.SessionTimeout) {
			// Sparse churn, so that a rebalance a failover caused stands out.
			grps.LifetimeMin, grps.LifetimeMax = 30*time.Second, 90*time.Second
		}
	}
	var hostile *workload.Hostile
	if o.Hostile {
		hostile = &workload.Hostile{Endpoints: cl.Endpoints(), Log: log, Seed: o.Seed, Creds: creds}
	}
	var kafka *workload.Kafka
	if o.Kafka {
		clientLog, err := os.Create(filepath.Join(dir, "kafka-clients.log"))
		if err != nil {
			return nil, err
		}
		defer clientLog.Close()
		kafka = &workload.Kafka{Endpoints: cl.Endpoints(), KafkaEndpoints: cl.KafkaEndpoints(), Log: log, Seed: o.Seed,
			Creds: creds, Protocol: o.KafkaProtocol, SessionTimeout: o.SessionTimeout, Recovery: o.Recovery, ClientLog: clientLog}
	}
	if offs == nil && grps == nil {
		return nil, fmt.Errorf("chaos: unknown workload %q: want offsets, groups or both", o.Workload)
	}
	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	if offs != nil {
		err = errors.Join(err, offs.Setup(setupCtx))
	}
	if grps != nil {
		err = errors.Join(err, grps.Setup(setupCtx))
	}
	if hostile != nil {
		err = errors.Join(err, hostile.Setup(setupCtx))
	}
	if kafka != nil {
		err = errors.Join(err, kafka.Setup(setupCtx))
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("chaos: workload setup: %w", err)
	}

	wctx, stopWorkloads := context.WithCancel(ctx)
	defer stopWorkloads()
	var wg sync.WaitGroup
	if offs != nil {
		wg.Go(func() { offs.Run(wctx) })
	}
	if grps != nil {
		wg.Go(func() { grps.Run(wctx) })
	}
	if hostile != nil {
		wg.Go(func() { hostile.Run(wctx) })
	}
	if kafka != nil {
		wg.Go(func() { kafka.Run(wctx) })
	}
	if grps != nil {
		wg.Go(func() { grps.Monitor(wctx) })
	}
	wg.Go(func() { watchLeader(wctx, cl, rec, offs) })
	// Let the groups form before the first fault.
	sleepCtx(ctx, 5*time.Second)

	nem := &nemesis.Runner{C: cl, Rec: rec, Log: log, StrictJoin: o.StrictJoin}
	if offs != nil {
		nem.Resumed = func(n *cluster.Node) { offs.Burst(wctx, n.GRPCAddr) }
		nem.LeaderKilled = func(rest []*cluster.Node) {
			var eps []string
			for _, n := range rest {
				eps = append(eps, n.GRPCAddr)
			}
			offs.Hammer(wctx, eps, 3*time.Second)
		}
	}
	healErr := nem.Run(ctx, sched)
	if healErr != nil {
		log.Error("nemesis", "err", healErr)
		notes = append(notes, "invalid: the cluster could not be healed: "+healErr.Error())
	}
	rec.Add(history.Entry{Type: history.TypeEvent, F: history.EvFinalPhase, Start: rec.Now()})
	log.Info("final phase: every fault healed; waiting for recovery")
	healed := time.Now()
	// The Kafka consumers' final check runs beside the other workloads'
	// recovery, within the same window (and the read after it).
	kafkaDone := make(chan struct{})
	if kafka != nil {
		go func() {
			defer close(kafkaDone)
			kctx, cancel := context.WithTimeout(ctx, o.Recovery+15*time.Second)
			defer cancel()
			kafka.Final(kctx)
		}()
	} else {
		close(kafkaDone)
	}
	if grps != nil {
		grps.StopChurn()
		grps.AwaitStable(ctx, o.Recovery)
	}
	// Keep the clients going until each has succeeded since the heal (or
	// the recovery window is over), and at least 5 s.
	for offs != nil && !offs.Recovered(healed) && time.Since(healed) < o.Recovery && ctx.Err() == nil {
		sleepCtx(ctx, 200*time.Millisecond)
	}
	sleepCtx(ctx, time.Until(healed.Add(5*time.Second)))
	// Before leadership is moved below: the Kafka check is done by then.
	<-kafkaDone
	if grps != nil {
		// A crash just before leadership moves (to a process that has
		// usually led before), in a leadership that then lasts: checker
		// 12 judges whether the new leader expires a member it never
		// heard from (its deadline, plus slack for the transfer and the
		// monitor).
		if group, member := grps.CrashOne(); member != "" {
			out, err := cl.Ctl(ctx, "cluster", "transfer-leader")
			rec.Add(history.Entry{Type: history.TypeEvent, F: history.EvFinalTransfer, Group: group, Member: member,
				Start: rec.Now(), Note: strings.TrimSpace(out + " " + errString(err))})
			grps.AwaitGone(ctx, group, member, 3*o.SessionTimeout+10*time.Second)
		}
	}
	stopWorkloads()
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Recovery)
	if offs != nil {
		offs.Final(fctx)
	}
	if grps != nil {
		grps.FinalFetch(fctx)
	}
	if hostile != nil {
		hostile.Final(fctx)
	}
	cancel()
	rec.Add(history.Entry{Type: history.TypeEvent, F: history.EvEnd, Start: rec.Now()})
	if err := rec.Flush(); err != nil {
		return nil, fmt.Errorf("chaos: write history: %w", err)
	}
	closeCluster()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("chaos: interrupted: %w", ctx.Err())
	}

	es := rec.Entries()
	res := checker.All(es, checker.Options{
		RideOut: nemesis.RideOut, SessionTimeout: o.SessionTimeout, RebalanceTimeout: 2 * o.SessionTimeout,
		LivenessWindow: o.Recovery, VisualizeDir: dir,
	})
	r := &report.Results{Run: name, Seed: o.Seed, Mode: string(mode), Security: security, Nodes: o.Nodes, Workload: o.Workload,
		Nemesis: kinds, Dropped: dropped, Duration: time.Since(started).Round(time.Second).String(), Schedule: sched, Notes: notes}
	report.Summarise(r, es, res)
	if healErr != nil {
		r.Valid = false
	}
	if hostile != nil {
		summary, violations := hostile.Verdict()
		r.Notes = append(r.Notes, summary)
		for _, v := range violations {
			r.Valid = false
			r.Notes = append(r.Notes, "invalid: hostile workload: "+v)
		}
	}
	if kafka != nil {
		summary, violations := kafka.Verdict()
		r.Notes = append(r.Notes, summary)
		for _, v := range violations {
			r.Valid = false
			r.Notes = append(r.Notes, "invalid: kafka workload: "+v)
		}
	}
	for _, e := range es {
		if e.F == "operator-promote" {
			r.Notes = append(r.Notes, "operator action: "+e.Note)
		}
	}
	var unexercised []string
	for _, k := range kinds {
		if r.Faults[k] == 0 {
			unexercised = append(unexercised, k)
		}
	}
	if len(unexercised) > 0 {
		r.Notes = append(r.Notes, "fault kinds that never started: "+strings.Join(unexercised, ", "))
		if o.RequireAllKinds {
			r.Valid = false
			r.Notes = append(r.Notes, "invalid: --require-all-kinds and not every kind ran")
		}
	}
	if err := report.Write(dir, r); err != nil {
		return r, err
	}
	if err := report.Plots(dir, fmt.Sprintf("nemesis %s, workload %s, %d nodes (seed %d)", o.Nemesis, o.Workload, o.Nodes, o.Seed), es); err != nil {
		log.Error("plots", "err", err)
	}
	fmt.Fprint(o.Out, report.Text(r))
	fmt.Fprintf(o.Out, "report: %s\n", dir)
	return r, nil
}

// watchLeader records every change of leader (node or term) it sees,
// polling every 100 ms, and has the offsets workload's chaser send a burst
// of operations to each new leader at once.
func watchLeader(ctx context.Context, cl *cluster.Cluster, rec *history.Recorder, offs *workload.Offsets) {
	var node string
	var term uint64
	seen := false
	chase := make(chan string, 1)
	if offs != nil {
		go func() {
			defer offs.CloseChasers()
			// A connection to every node first, so that a burst at a
			// resumed leader goes out at once.
			for _, n := range cl.Nodes {
				offs.Chase(ctx, n.GRPCAddr, 2)
			}
			for {
				select {
				case <-ctx.Done():
					return
				case ep := <-chase:
					offs.Chase(ctx, ep, 10)
				}
			}
		}()
	}
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		n, t := cl.LeaderTerm(lctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		id, ep := "", ""
		if n != nil {
			id, ep = n.ID, n.GRPCAddr
		}
		if !seen || id != node || t != term {
			seen, node, term = true, id, t
			rec.Add(history.Entry{Type: history.TypeEvent, F: history.EvLeader, Node: id, Term: t, Start: rec.Now()})
			if ep != "" {
				select {
				case chase <- ep:
				default: // a burst is under way; the next change gets one
				}
			}
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func missingKinds(want, got []string) []string {
	var out []string
	for _, k := range want {
		if !slices.Contains(got, k) {
			out = append(out, k)
		}
	}
	return out
}

func ctlPath(ok bool, p string) string {
	if !ok {
		return ""
	}
	return abs(p)
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
