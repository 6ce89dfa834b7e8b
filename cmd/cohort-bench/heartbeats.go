package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// heartbeatOptions configure the heartbeats subcommand.
type heartbeatOptions struct {
	members     string // increasing group sizes
	wave        int
	concurrency string
	conns       int
	duration    time.Duration
}

func newHeartbeatsCommand(g *globalOptions) *cobra.Command {
	var o heartbeatOptions
	cmd := &cobra.Command{
		Use:   "heartbeats",
		Short: "Heartbeats/s one leader sustains, against the group's size",
		Long: `heartbeats joins --members members (client.Member, heartbeating slowly on
their own), then sends Heartbeat RPCs for them straight to the leader from
--concurrency callers over --conns gRPC connections, and reports the rate and
latency. Heartbeats never touch the Raft log: this is the leader's engine
and gRPC stack alone. The load generator shares the machine's cores.

--members takes increasing sizes (e.g. 10,100,1000): the same group grows
from one to the next, in waves of --form-wave members each joining once the
group is stable with the ones before (every member that arrives after a
join round closes reopens it for all, so thousands started at once keep
restarting it), and every --concurrency is measured at each size, with the
heartbeats cycling over all the group's members.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				return runHeartbeats(ctx, out, g, o)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.members, "members", "100", "comma-separated, increasing group sizes whose members' heartbeats are sent")
	f.IntVar(&o.wave, "form-wave", 1000, "members that join together while the group grows (the next wave starts once the group is stable)")
	f.StringVar(&o.concurrency, "concurrency", "16,64,256", "comma-separated numbers of concurrent callers")
	f.IntVar(&o.conns, "conns", 4, "gRPC connections to the leader")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measured phase")
	return cmd
}

func runHeartbeats(ctx context.Context, out io.Writer, g *globalOptions, o heartbeatOptions) error {
	start := time.Now()
	sizes, err := parseInts("members", o.members)
	if err != nil {
		return err
	}
	if err := increasing("members", sizes); err != nil {
		return err
	}
	concs, err := parseInts("concurrency", o.concurrency)
	if err != nil {
		return err
	}
	if o.wave < 1 {
		return fmt.Errorf("--form-wave %d: want at least 1", o.wave)
	}
	if o.conns < 1 {
		return fmt.Errorf("--conns %d: want at least 1", o.conns)
	}
	t, conn, err := openWithTopic(ctx, g, "hb", 64)
	if err != nil {
		return err
	}
	defer t.Close()
	defer conn.Close()
	f := newFleet(ctx, memberOptions{
		endpoints: t.addrs, group: "bench-heartbeats", topics: []string{"hb"},
		sessionTimeout: 30 * time.Second, heartbeatInterval: 10 * time.Second, creds: t.member, logger: g.logger(),
	})
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f.close(cctx)
	}()
	fmt.Fprintf(out, "heartbeats to the leader over %d connections, group bench-heartbeats (members heartbeating every 10 s on their own), %s, %s\n",
		o.conns, t.name(), report.LoadLine())
	tb := report.NewTable(out, "members", "C", "conns", "heartbeats/s", "p50", "p99", "max", "generation", "errors")
	gen := client.NoGeneration
	for _, n := range sizes {
		grow := time.Now()
		next, err := f.grow(ctx, n, o.wave, gen)
		if err != nil {
			tb.Flush() // the sizes measured so far
			return err
		}
		gen = next
		leader, err := t.probe.WaitServing(ctx, t.live)
		if err != nil {
			tb.Flush()
			return err
		}
		fmt.Fprintf(out, "members %d: stable at generation %d, grown in %v; leader %s\n",
			n, gen, time.Since(grow).Round(time.Millisecond), t.addrs[leader])
		if err := heartbeatSize(ctx, t, f, leader, gen, concs, o, tb); err != nil {
			tb.Flush()
			return err
		}
		if ctx.Err() != nil {
			break
		}
	}
	tb.Flush()
	fmt.Fprintf(out, "heartbeats done in %v, %s\n", time.Since(start).Round(time.Second), report.LoadLine())
	return ctx.Err()
}

// heartbeatSize measures every concurrency at the group's current size,
// sending each member's Heartbeat at generation gen in turn to node
// leader over connections of its own, and adds a row per concurrency.
func heartbeatSize(ctx context.Context, t *target, f *fleet, leader int, gen int32, concs []int, o heartbeatOptions, tb *report.Table) error {
	var clients []cohortv1.GroupCoordinatorClient
	for range o.conns {
		// One connection each: the probe shares connections per
		// address, so dial directly.
		cc, err := t.dial(t.addrs[leader])
		if err != nil {
			return err
		}
		defer cc.Close()
		clients = append(clients, cohortv1.NewGroupCoordinatorClient(cc))
	}
	reqs := make([]*cohortv1.HeartbeatRequest, len(f.members))
	for i, m := range f.members {
		reqs[i] = &cohortv1.HeartbeatRequest{GroupId: f.opts.group, Generation: gen, MemberId: m.m.MemberID()}
	}
	for _, c := range concs {
		r := runLoad(ctx, c, limit{dur: o.duration}, func(ctx context.Context, w int, seq int64) error {
			_, err := clients[w%len(clients)].Heartbeat(ctx, reqs[seq%int64(len(reqs))])
			return err
		})
		tb.Row(fmt.Sprint(len(reqs)), fmt.Sprint(c), fmt.Sprint(o.conns), report.PerSec(r.rate()), report.MS(r.p50), report.MS(r.p99), report.MS(r.max), fmt.Sprint(gen), r.errNote())
		if ctx.Err() != nil {
			break
		}
	}
	return nil
}
