package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/client"
)

func newRebalanceCommand(g *globalOptions) *cobra.Command {
	var (
		sizes             string
		rounds            int
		partitions        int32
		sessionTimeout    time.Duration
		heartbeatInterval time.Duration
		watch             string
		wave              int
		perConn           int
	)
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Rebalance latency: a new member's JoinGroup until every member holds the new generation",
		Long: `rebalance forms a stable group of N members (client.Member) for each size,
then --rounds times starts one more member and measures the time from the
start of its Run (its first JoinGroup) until every member, the new one
included, holds the assignment of one new generation (OnAssigned).

Existing members learn of the rebalance from their watch (WatchGroup, the
client's default: within a round trip of the entry that started it) or,
with --watch off, from their next heartbeat (the eager protocol as in
Kafka's classic coordinator), which adds up to one --heartbeat-interval.
Rounds start at a random phase of the heartbeat rhythm, so on average half
an interval; --watch on,off measures both side by side. The "after last
rejoin" columns exclude the wait: the time from the last existing member's revocation (the moment
its watch or heartbeat told it to rejoin) to the last member's new assignment.
"CPU/member" is the CPU time (user and system) of this process and, with
--cluster process, of the nodes' processes, from the new member's start
until the group is stable, divided by the members, median over rounds: the
nodes' and the clients' work either way (with --endpoints the clients'
alone).

The group forms in waves of --form-wave members, each wave joining once the
group is stable with the ones before. --members-per-conn lets members share
client connections (each still makes every call of its own): an in-process
cluster holds both ends of every connection, and a member may connect to
every node, so 10,000 members each on their own would need more open files
than a default limit allows.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				ns, err := parseInts("sizes", sizes)
				if err != nil {
					return err
				}
				var watchModes []bool // disableWatch per run
				for _, w := range strings.Split(watch, ",") {
					switch strings.TrimSpace(w) {
					case "on":
						watchModes = append(watchModes, false)
					case "off":
						watchModes = append(watchModes, true)
					default:
						return fmt.Errorf("--watch %q: want on, off or on,off", watch)
					}
				}
				t, conn, err := openWithTopic(ctx, g, "rebalance", partitions)
				if err != nil {
					return err
				}
				defer t.Close()
				defer conn.Close()
				fmt.Fprintf(out, "rebalance latency, %s, heartbeat interval %v, session timeout %v, topic of %d partitions, %s\n",
					t.name(), heartbeatInterval, sessionTimeout, partitions, report.LoadLine())
				tb := report.NewTable(out, "members", "watch", "rounds", "median", "max", "min", "after last rejoin median", "max", "CPU/member", "generations/round", "form group")
				for _, n := range ns {
					for _, off := range watchModes {
						row, err := rebalanceSize(ctx, t, g, n, wave, perConn, rounds, sessionTimeout, heartbeatInterval, off)
						if err != nil {
							tb.Flush() // the sizes measured so far
							return err
						}
						tb.Row(row...)
					}
				}
				tb.Flush()
				return ctx.Err()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizes, "sizes", "10,100,1000", "comma-separated group sizes")
	f.IntVar(&rounds, "rounds", 5, "new members per size (each one rebalance)")
	f.IntVar(&perConn, "members-per-conn", 1, "members sharing one client connection (1: each its own, as consumers in processes of their own; more keeps thousands of members within the open-files limit)")
	f.IntVar(&wave, "form-wave", 1000, "members that join together while the group forms (the next wave starts once the group is stable)")
	f.Int32Var(&partitions, "partitions", 1024, "partitions of the group's topic")
	f.DurationVar(&sessionTimeout, "session-timeout", 10*time.Second, "members' session timeout")
	f.DurationVar(&heartbeatInterval, "heartbeat-interval", time.Second, "members' heartbeat interval")
	f.StringVar(&watch, "watch", "on", "members watch their group (on), rely on heartbeats (off), or both side by side (on,off)")
	return cmd
}

func rebalanceSize(ctx context.Context, t *target, g *globalOptions, n, wave, perConn, rounds int, session, hb time.Duration, disableWatch bool) ([]string, error) {
	if wave < 1 {
		return nil, fmt.Errorf("--form-wave %d: want at least 1", wave)
	}
	mode := "on"
	if disableWatch {
		mode = "off"
	}
	group := fmt.Sprintf("bench-rebalance-%d-watch-%s", n, mode)
	f := newFleet(ctx, memberOptions{
		endpoints: t.addrs, group: group, topics: []string{"rebalance"},
		sessionTimeout: session, heartbeatInterval: hb, disableWatch: disableWatch, creds: t.member, logger: g.logger(),
		perConn: perConn,
	})
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f.close(cctx)
	}()
	formStart := time.Now()
	gen, err := f.grow(ctx, n, wave, client.NoGeneration)
	if err != nil {
		return nil, err
	}
	form := time.Since(formStart)
	var lat, proto, cpu []time.Duration
	gens := 0
	for range rounds {
		// Let heartbeats settle into their rhythm after the last rebalance.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(hb + rand.N(hb)):
		}
		old := slices.Clone(f.members)
		cpu0 := t.cpu()
		t0 := time.Now()
		if _, err := f.add(1); err != nil {
			return nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		next, last, err := f.stable(sctx, gen)
		cancel()
		if err != nil {
			return nil, err
		}
		lat = append(lat, last.Sub(t0))
		cpu = append(cpu, (t.cpu()-cpu0)/time.Duration(len(f.members)))
		var lastRevoke time.Time
		for _, m := range old {
			if r := m.lastRevoked(); r.After(lastRevoke) {
				lastRevoke = r
			}
		}
		proto = append(proto, last.Sub(lastRevoke))
		gens += int(next - gen)
		gen = next
	}
	slices.Sort(lat)
	slices.Sort(proto)
	return []string{fmt.Sprint(n), mode, fmt.Sprint(rounds), report.MS(median(lat)), report.MS(lat[len(lat)-1]), report.MS(lat[0]),
		report.MS(median(proto)), report.MS(proto[len(proto)-1]), report.US(median(cpu)),
		fmt.Sprintf("%.1f", float64(gens)/float64(rounds)), form.Round(time.Millisecond).String()}, nil
}
