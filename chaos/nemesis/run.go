package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/chaos/cluster"
	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Runner injects a schedule's faults into a cluster.
type Runner struct {
	C   *cluster.Cluster
	Rec *history.Recorder
	Log *slog.Logger
	// StrictJoin: a re-added node must become a voter by itself (its
	// --join path promises it). Without it, the runner promotes a node left
	// a non-voter with `cohortctl cluster promote`, as an operator would,
	// and says so in the history (the join-path bug in docs/chaos.md).
	StrictJoin bool
	// Resumed, when set, is called (on its own goroutine) the moment a
	// paused leader is resumed: it still believes it leads until it hears
	// of the newer term, and a read it answers from its own state then is
	// stale unless it confirms its leadership first.
	Resumed func(n *cluster.Node)
	// LeaderKilled, when set, is called (on its own goroutine) the moment
	// the leader is killed, with the nodes that remain.
	LeaderKilled func(rest []*cluster.Node)
}

// resume sends SIGCONT and calls Resumed.
func (r *Runner) resume(n *cluster.Node) error {
	err := r.C.Resume(n)
	if err == nil && r.Resumed != nil {
		go r.Resumed(n)
	}
	return err
}

// active is a fault in place, with what undoes it.
type active struct {
	kind  string
	nodes []string
	heal  func(ctx context.Context) error
}

// Run carries out the schedule, starting at the moment it is called; it
// returns when the schedule is done or ctx ends, and in both cases heals
// everything first (HealAll).
func (r *Runner) Run(ctx context.Context, s Schedule) error {
	t0 := time.Now()
	var errs []error
	for _, st := range s.Steps {

		if !sleepUntil(ctx, t0.Add(st.At)) {
			break
		}
		a, err := r.start(ctx, st)
		if err != nil {
			r.Log.Warn("nemesis: fault did not start (fully)", "kind", st.Kind, "err", err)
			if a == nil {
				r.Rec.Add(history.Entry{Type: history.TypeNemesis, F: st.Kind, Phase: history.NemStart, Fault: st.Kind,
					Start: r.Rec.Now(), Note: "failed to start: " + err.Error()})
				continue
			}
		}
		sleepUntil(ctx, t0.Add(st.At+st.Duration))
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		err = a.heal(hctx)
		cancel()
		note := ""
		if err != nil {
			note = "heal: " + err.Error()
			errs = append(errs, fmt.Errorf("%s: heal: %w", st.Kind, err))
		}
		r.Rec.Add(history.Entry{Type: history.TypeNemesis, F: st.Kind, Phase: history.NemStop, Fault: st.Kind,
			Nodes: a.nodes, Start: r.Rec.Now(), Note: note})
		r.Log.Info("nemesis: healed", "kind", st.Kind, "nodes", a.nodes)
		// A heal that overran (a slow rejoin) pushes the rest of the
		// schedule back, keeping the planned pauses, instead of squeezing it.
		if over := time.Since(t0.Add(st.At + st.Duration)); over > 0 {
			t0 = t0.Add(over)
		}
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	if err := r.HealAll(hctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// HealAll undoes every fault: partitions removed, paused nodes resumed,
// killed nodes restarted, removed nodes started again (they rejoin), and
// waits for a leader.
func (r *Runner) HealAll(ctx context.Context) error {
	var errs []error
	if err := r.C.Heal(); err != nil {
		errs = append(errs, err)
	}
	for _, n := range r.C.Nodes {
		if n.Paused() {
			errs = append(errs, r.C.Resume(n))
		}
		if !n.Running() {
			errs = append(errs, r.C.Start(n))
		}
	}
	if _, err := r.C.WaitLeader(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, n := range r.C.Nodes {
		if n.Removed() {
			errs = append(errs, r.awaitVoter(ctx, n))
		}
	}
	r.Rec.Add(history.Entry{Type: history.TypeNemesis, F: "heal-all", Phase: history.NemStop, Fault: "heal-all", Start: r.Rec.Now()})
	return errors.Join(errs...)
}

// pickRand is the step's own random source for target choices.
func pickRand(st Step) *rand.Rand { return rand.New(rand.NewPCG(st.Pick, st.Pick>>7|1)) }

// others are the gRPC addresses of every node but n.
func others(c *cluster.Cluster, n *cluster.Node) []string {
	var out []string
	for _, o := range c.Nodes {
		if o != n {
			out = append(out, o.GRPCAddr)
		}
	}
	return out
}

func ids(ns []*cluster.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// leaderOr returns the leader, or the step's random node when there is none
// (recorded in the note).
func (r *Runner) leaderOr(ctx context.Context, rng *rand.Rand) (*cluster.Node, string) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		if l := r.C.Leader(lctx); l != nil {
			return l, ""
		}
		select {
		case <-lctx.Done():
			n := r.C.Nodes[rng.IntN(len(r.C.Nodes))]
			return n, "no leader found; took " + n.ID
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *Runner) start(ctx context.Context, st Step) (*active, error) {
	rng := pickRand(st)
	nodes := r.C.Nodes
	perm := slices.Clone(nodes)
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	one := perm[0]
	var targets []*cluster.Node
	note := ""
	a := &active{kind: st.Kind}
	switch st.Kind {
	case KillOne, PauseOne, IsolateOne:
		targets = []*cluster.Node{one}
	case KillLeader, PauseLeader, IsolateLeader, TransferLeader, PauseLeaderFlicker, TransferBack:
		l, n := r.leaderOr(ctx, rng)
		targets, note = []*cluster.Node{l}, n
	case KillMajority:
		l, n := r.leaderOr(ctx, rng)
		note = n
		targets = []*cluster.Node{l}
		for _, o := range perm {
			if len(targets) >= len(nodes)/2+1 {
				break
			}
			if o != l {
				targets = append(targets, o)
			}
		}
	case MemberRemoveAdd:
		targets = []*cluster.Node{one}
	}
	var err error
	switch st.Kind {
	case KillOne, KillLeader, KillMajority:
		for _, t := range targets {
			err = errors.Join(err, r.C.Kill(t))
		}
		if st.Kind == KillLeader && err == nil && r.LeaderKilled != nil {
			var rest []*cluster.Node
			for _, n := range nodes {
				if n != targets[0] {
					rest = append(rest, n)
				}
			}
			go r.LeaderKilled(rest)
		}
		a.heal = func(context.Context) error {
			var errs []error
			for _, t := range targets {
				errs = append(errs, r.C.Start(t))
			}
			return errors.Join(errs...)
		}
	case PauseOne, PauseLeader:
		for _, t := range targets {
			err = errors.Join(err, r.C.Pause(t))
		}
		a.heal = func(context.Context) error {
			var errs []error
			for _, t := range targets {
				errs = append(errs, r.resume(t))
			}
			return errors.Join(errs...)
		}
	case IsolateOne, IsolateLeader, PartitionHalves, PartitionRing, PartitionBridge:
		var g Grudge
		var desc string
		switch st.Kind {
		case IsolateOne, IsolateLeader:
			g, desc = Isolate(ids(nodes), targets[0].ID), targets[0].ID+" | rest"
		case PartitionHalves:
			g, desc = Halves(ids(perm))
		case PartitionRing:
			g, desc = Ring(ids(perm))
		case PartitionBridge:
			g, desc = Bridge(ids(perm))
		}
		targets = perm
		note = strings.TrimSpace(note + " " + desc)
		err = r.C.Partition(g)
		a.heal = func(context.Context) error { return r.C.Heal() }
	case TransferLeader:
		var out string
		out, err = r.C.Ctl(ctx, "cluster", "transfer-leader")
		note = strings.TrimSpace(note + " from " + targets[0].ID + ": " + strings.TrimSpace(out))
		a.heal = func(context.Context) error { return nil }
	case PauseLeaderFlicker, TransferBack:
		// Repeated until healed; every node it touched is listed at the stop.
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan []string, 1)
		loop := r.flicker
		if st.Kind == TransferBack {
			loop = r.transferBack
		}
		go func() { done <- loop(lctx, rng, targets[0]) }()
		a.heal = func(context.Context) error {
			stop()
			a.nodes = <-done
			return nil
		}
	case MemberRemoveAdd:
		err = r.removeNode(ctx, targets[0])
		a.heal = func(ctx context.Context) error { return r.readdNode(ctx, targets[0]) }
	default:
		return nil, fmt.Errorf("unknown fault kind %q", st.Kind)
	}
	a.nodes = ids(targets)
	if err != nil {
		note = strings.TrimSpace("failed to start: " + err.Error() + "; " + note)
	}
	r.Rec.Add(history.Entry{Type: history.TypeNemesis, F: st.Kind, Phase: history.NemStart, Fault: st.Kind,
		Nodes: a.nodes, Start: r.Rec.Now(), Note: note})
	r.Log.Info("nemesis: fault", "kind", st.Kind, "nodes", a.nodes, "for", st.Duration, "note", note, "err", err)
	return a, err
}

// flicker pauses the leader for 300-2300 ms (most of them past the 500 ms
// heartbeat timeout, so a new leader is elected while the paused one still
// believes it leads), resumes it, waits 200-1000 ms and does it
// again (the leader may have changed) until ctx ends. It returns the nodes
// it paused.
func (r *Runner) flicker(ctx context.Context, rng *rand.Rand, first *cluster.Node) []string {
	var touched []string
	l := first
	for ctx.Err() == nil {
		if l == nil {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			l = r.C.Leader(lctx)
			cancel()
			if l == nil {
				sleepFor(ctx, 100*time.Millisecond)
				continue
			}
		}
		if err := r.C.Pause(l); err != nil {
			r.Log.Warn("nemesis: flicker: pause", "node", l.ID, "err", err)
		} else {
			if !slices.Contains(touched, l.ID) {
				touched = append(touched, l.ID)
			}
			sleepFor(context.WithoutCancel(ctx), 300*time.Millisecond+time.Duration(rng.Int64N(int64(2*time.Second))))
			if err := r.resume(l); err != nil {
				r.Log.Warn("nemesis: flicker: resume", "node", l.ID, "err", err)
			}
		}
		sleepFor(ctx, 200*time.Millisecond+time.Duration(rng.Int64N(int64(800*time.Millisecond))))
		l = nil
	}
	return touched
}

// transferBack moves leadership from the leader to another node and back
// (cohortctl cluster transfer-leader [NODE]), 300-1500 ms apart, until ctx
// ends: the original leader leads again each time it works. It returns
// the nodes that took part.
func (r *Runner) transferBack(ctx context.Context, rng *rand.Rand, first *cluster.Node) []string {
	touched := []string{first.ID}
	home := first
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l := r.C.Leader(lctx)
		cancel()
		switch {
		case l == nil:
			sleepFor(ctx, 100*time.Millisecond)
			continue
		case l == home:
			_, err := r.C.Ctl(ctx, "cluster", "transfer-leader")
			if err != nil {
				r.Log.Warn("nemesis: transfer away", "from", home.ID, "err", err)
			}
		default:
			if !slices.Contains(touched, l.ID) {
				touched = append(touched, l.ID)
			}
			_, err := r.C.Ctl(ctx, "cluster", "transfer-leader", home.ID)
			if err != nil {
				r.Log.Warn("nemesis: transfer back", "to", home.ID, "err", err)
			}
		}
		sleepFor(ctx, 300*time.Millisecond+time.Duration(rng.Int64N(int64(1200*time.Millisecond))))
	}
	return touched
}

func sleepFor(ctx context.Context, d time.Duration) { sleepUntil(ctx, time.Now().Add(d)) }

// removeNode takes a node out of the raft configuration (the Cluster
// service's RemoveServer, the call `cohortctl cluster remove` makes; called
// directly, with the admin credential, so that a refusal's gRPC code can
// be read), waits for it to stop
// itself (kills it if it lingers) and wipes its data.
func (r *Runner) removeNode(ctx context.Context, n *cluster.Node) error {
	conn, err := client.Dial(client.ConnConfig{Endpoints: r.C.Endpoints(), Credentials: r.C.AdminCredentials(), RequestTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	admin := cohortv1.NewClusterServiceClient(conn)
	// A remove is refused (FailedPrecondition) while the rest would lack a
	// healthy quorum (a node just restarted or resumed by the previous
	// fault): wait for health rather than skip the fault.
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := admin.RemoveServer(cctx, &cohortv1.RemoveServerRequest{NodeId: n.ID})
		cancel()
		if err == nil {
			break
		}
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			return fmt.Errorf("remove %s: %w", n.ID, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	n.SetRemoved(true)
	deadline = time.Now().Add(15 * time.Second)
	for n.Running() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n.Running() {
		r.Log.Warn("nemesis: removed node did not stop itself; killing it", "node", n.ID)
		if err := r.C.Kill(n); err != nil {
			return err
		}
	}
	return r.C.Wipe(n)
}

// readdNode starts a removed node afresh; it joins through --join as a
// non-voter and is promoted once caught up.
func (r *Runner) readdNode(ctx context.Context, n *cluster.Node) error {
	if !n.Removed() {
		return nil
	}
	if err := r.C.Start(n); err != nil {
		return err
	}
	return r.awaitVoter(ctx, n)
}

// awaitVoter waits until the other nodes list n as a voter.
func (r *Runner) awaitVoter(ctx context.Context, n *cluster.Node) error {
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	promoted := false
	state := "not in the configuration"
	for time.Now().Before(deadline) {
		// Ask the other nodes: a fresh node answers from its own view.
		out, err := r.C.CtlVia(ctx, others(r.C, n), "cluster", "peers", "-o", "json")
		if err == nil {
			voter, present := peerState(out, n.ID)
			switch {
			case voter:
				n.SetRemoved(false)
				return nil
			case present:
				state = "a non-voter"
				if !r.StrictJoin && !promoted && time.Since(start) > 10*time.Second {
					note := fmt.Sprintf("%s still a non-voter %v after it started joining (it logged \"joined the cluster as a voter\"); promoting it with cohortctl", n.ID, time.Since(start).Round(time.Second))
					r.Log.Warn("nemesis: "+note, "node", n.ID)
					if _, perr := r.C.Ctl(ctx, "cluster", "promote", n.ID); perr == nil {
						promoted = true
						r.Rec.Add(history.Entry{Type: history.TypeNemesis, F: "operator-promote", Phase: history.NemStop,
							Fault: "operator-promote", Nodes: []string{n.ID}, Start: r.Rec.Now(), Note: note})
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("%s did not become a voter again within 60s: it is %s", n.ID, state)
}
