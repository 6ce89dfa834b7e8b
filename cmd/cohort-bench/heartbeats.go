package main

import (
	"context"
	"fmt"
	"github.com/cohortlabs/cohort/bench/report"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func newHeartbeatsCommand(g *globalOptions) *cobra.Command {
	var (
		members     int
		concurrency string
		conns       int
		duration    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "heartbeats",
		Short: "Heartbeats/s one leader sustains",
		Long: `heartbeats joins --members members (client.Member, heartbeating slowly on
their own), then sends Heartbeat RPCs for them straight to the leader from
--concurrency callers over --conns gRPC connections, and reports the rate and
latency. Heartbeats never touch the Raft log: this is the leader's engine
and gRPC stack alone. The load generator shares the machine's cores.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				concs, err := parseInts("concurrency", concurrency)
				if err != nil {
					return err
				}
				t, err := g.openTarget(ctx, "")
				if err != nil {
					return err
				}
				defer t.Close()
				conn, err := client.Dial(client.ConnConfig{Endpoints: t.addrs, Credentials: t.admin, Logger: g.logger()})
				if err != nil {
					return err
				}
				defer conn.Close()
				if err := createTopic(ctx, conn.Topics(), "hb", 64); err != nil {
					return err
				}
				f := newFleet(ctx, memberOptions{
					endpoints: t.addrs, group: "bench-heartbeats", topics: []string{"hb"},
					sessionTimeout: 30 * time.Second, heartbeatInterval: 10 * time.Second, creds: t.member, logger: g.logger(),
				})
				defer func() {
					cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					f.close(cctx)
				}()
				if _, err := f.add(members); err != nil {
					return err
				}
				sctx, cancel := context.WithTimeout(ctx, 120*time.Second)
				gen, _, err := f.stable(sctx, client.NoGeneration)
				cancel()
				if err != nil {
					return err
				}
				leader, err := t.probe.WaitServing(ctx, t.live)
				if err != nil {
					return err
				}
				var clients []cohortv1.GroupCoordinatorClient
				for range conns {
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
					reqs[i] = &cohortv1.HeartbeatRequest{GroupId: "bench-heartbeats", Generation: gen, MemberId: m.m.MemberID()}
				}
				fmt.Fprintf(out, "heartbeats to the leader (%s), %d members at generation %d, %s, %s\n",
					t.addrs[leader], len(reqs), gen, t.name(), report.LoadLine())
				tb := report.NewTable(out, "C", "conns", "heartbeats/s", "p50", "p99", "max", "errors")
				for _, c := range concs {
					r := runLoad(ctx, c, limit{dur: duration}, func(ctx context.Context, w int, seq int64) error {
						_, err := clients[w%len(clients)].Heartbeat(ctx, reqs[seq%int64(len(reqs))])
						return err
					})
					tb.Row(fmt.Sprint(c), fmt.Sprint(conns), report.PerSec(r.rate()), report.MS(r.p50), report.MS(r.p99), report.MS(r.max), r.errNote())
				}
				tb.Flush()
				return ctx.Err()
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&members, "members", 100, "members whose heartbeats are sent")
	f.StringVar(&concurrency, "concurrency", "16,64,256", "comma-separated numbers of concurrent callers")
	f.IntVar(&conns, "conns", 4, "gRPC connections to the leader")
	f.DurationVar(&duration, "duration", 5*time.Second, "length of each measured phase")
	return cmd
}
