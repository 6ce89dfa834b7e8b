// Command cohort-chaos runs Cohort's Jepsen-style failure suite: a cluster
// of real cohortd processes (each in its own network namespace, or on
// loopback in local mode) with mutual TLS unless --tls=false, concurrent
// clients, faults on a seeded schedule, and checkers over the recorded
// history. The report goes to
// store/<run>/; the exit status is 0 for a valid run, 1 for an invalid one
// and 2 when the run could not be carried out.
//
//	cohort-chaos --time 3m --nodes 3 --nemesis mixed --workload both --seed 42
//	cohort-chaos --tls=false ...      # plaintext (mutual TLS is the default)
//	cohort-chaos --cleanup            # remove what a crashed run left behind
//	cohort-chaos --check store/latest # check a saved history again
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cohortlabs/cohort/chaos"
	"github.com/cohortlabs/cohort/chaos/checker"
	"github.com/cohortlabs/cohort/chaos/cluster"
	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/chaos/nemesis"
	"github.com/cohortlabs/cohort/chaos/report"
	"github.com/cohortlabs/cohort/chaos/workload"
)

func main() { os.Exit(run()) }

func run() int {
	var o chaos.Options
	var seed uint64
	var cleanup, expectInvalid, useTLS bool
	var check string
	fs := flag.NewFlagSet("cohort-chaos", flag.ExitOnError)
	fs.DurationVar(&o.Time, "time", 2*time.Minute, "length of the fault period (setup and the final phase come on top)")
	fs.IntVar(&o.Nodes, "nodes", 3, "cohortd nodes: 3 or 5")
	fs.StringVar(&o.Nemesis, "nemesis", "mixed", "fault kinds or groups, comma-separated: "+strings.Join(nemesis.AllKinds, ", ")+
		"; groups: kill, pause, partition, membership, leader, leader-flap, mixed, none")
	fs.StringVar(&o.Workload, "workload", "both", "offsets, groups or both")
	fs.BoolVar(&o.NoMemberFaults, "no-member-faults", false, "groups workload without its member faults: a second process taking a static member's instance ID while the first runs, JoinGroup calls cut while parked at the barrier")
	fs.BoolVar(&o.Hostile, "hostile", false, "mix oversized, near-budget and malformed requests into the run, and with TLS calls authorization must refuse (every one must be refused as promised)")
	fs.BoolVar(&o.Kafka, "kafka", false, "add kgo consumers of one group through the nodes' Kafka listeners (every acknowledged commit must be kept, and after recovery every partition held once)")
	fs.StringVar(&o.KafkaProtocol, "kafka-protocol", "classic", "the --kafka consumers' group protocol: classic (JoinGroup/SyncGroup, cooperative-sticky) or consumer (KIP-848, the coordinator assigns)")
	fs.BoolVar(&useTLS, "tls", true, "run the cluster with mutual TLS on every node-to-node and client connection (a CA and certificates made for the run); --tls=false runs plaintext")
	fs.Uint64Var(&seed, "seed", 0, "schedule seed (0: drawn from the clock; printed either way)")
	fs.StringVar(&o.Mode, "mode", "auto", "auto (netns when possible), netns, or local (loopback; kill and pause only)")
	fs.IntVar(&o.Instance, "instance", 0, "instance number for parallel runs (names cch<N>-*, subnet 10.77.<N>.0/24)")
	fs.StringVar(&o.Store, "store", "store", "directory for run reports")
	fs.StringVar(&o.Name, "name", "", "run directory name (default: time-nemesis-workload-seed)")
	fs.StringVar(&o.Cohortd, "cohortd", "bin/cohortd", "cohortd binary")
	fs.StringVar(&o.Cohortctl, "cohortctl", "bin/cohortctl", "cohortctl binary (membership faults)")
	fs.BoolVar(&o.RequireAllKinds, "require-all-kinds", false, "fail unless the schedule contains every requested kind")
	fs.DurationVar(&o.QuietMin, "quiet-min", 2*time.Second, "shortest pause between faults")
	fs.DurationVar(&o.QuietMax, "quiet-max", 6*time.Second, "longest pause between faults")
	fs.DurationVar(&o.FaultMin, "fault-min", 3*time.Second, "shortest fault")
	fs.DurationVar(&o.FaultMax, "fault-max", 10*time.Second, "longest fault")
	fs.DurationVar(&o.SessionTimeout, "session-timeout", 6*time.Second, "group members' session timeout")
	fs.BoolVar(&o.StrictJoin, "strict-join", false, "do not promote a re-added node that stays a non-voter (the regression case of the join-path bug)")
	fs.BoolVar(&expectInvalid, "expect-invalid", false, "exit 0 only if the run is INVALID (for deliberately broken builds)")
	fs.BoolVar(&cleanup, "cleanup", false, "remove namespaces, links, rules, processes and directories a crashed run of --instance left, then exit")
	fs.StringVar(&check, "check", "", "check the history.jsonl of a saved run directory again and exit")
	_ = fs.Parse(os.Args[1:])
	o.Seed = seed
	o.Plaintext = !useTLS
	o.CI = os.Getenv("CI") == "true"
	if err := workload.CheckKafkaProtocol(o.KafkaProtocol); err != nil {
		fmt.Fprintln(os.Stderr, "cohort-chaos: --kafka-protocol:", err)
		return 2
	}

	if cleanup {
		if err := cluster.CleanupIdle(o.Instance, slog.Default()); err != nil {
			fmt.Fprintln(os.Stderr, "cohort-chaos cleanup:", err)
			return 2
		}
		fmt.Println("cohort-chaos: nothing of instance", o.Instance, "left")
		return 0
	}
	if check != "" {
		return recheck(check, o.SessionTimeout)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		fmt.Fprintln(os.Stderr, "cohort-chaos: interrupted; cleaning up (cluster, network, temp dirs); interrupt again to abandon the cleanup")
		cancel()
		if _, ok := <-sigs; ok {
			os.Exit(130)
		}
	}()
	r, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cohort-chaos:", err)
		if errors.Is(err, chaos.ErrPrerequisite) {
			fmt.Fprintln(os.Stderr, "cohort-chaos: netns mode needs root, ip(8) and iptables(8): run chaos/install-deps.sh, or --mode local")
		}
		return 2
	}
	switch {
	case expectInvalid && r.Valid:
		fmt.Println("cohort-chaos: expected an INVALID run (deliberately broken build) but the checkers found nothing")
		return 1
	case expectInvalid:
		fmt.Println("cohort-chaos: the deliberately broken build was caught:", r.Anomalies)
		return 0
	case !r.Valid:
		return 1
	}
	return 0
}

// recheck runs the checkers over a saved history again, with the run's
// session timeout (--session-timeout, as the run was given it).
func recheck(dir string, session time.Duration) int {
	es, err := history.Load(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cohort-chaos:", err)
		return 2
	}
	rs := checker.All(es, checker.Options{RideOut: nemesis.RideOut, SessionTimeout: session, RebalanceTimeout: 2 * session})
	r := &report.Results{Run: dir}
	report.Summarise(r, es, rs)
	fmt.Print(report.Text(r))
	if !r.Valid {
		return 1
	}
	return 0
}
