package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/internal/benchcluster"
	"github.com/cohortlabs/cohort/raftnode"
)

// target is one Kafka cluster the clients are pointed at.
type target struct {
	// name prefixes the target's columns ("cohort", "kfake").
	name string
	// seeds are every broker's address: the clients' seed brokers.
	seeds []string
	// about says what runs behind the seeds, for the report's first note.
	about string
	// raftStats are the Raft figures of the target's nodes that answer
	// (nil: not replicated). Only Term and LastIndex are read: the
	// highest term moves with each election, during which the group's
	// coordinator is away, and the highest last index grows by the Raft
	// entries written.
	raftStats func() []raftnode.Stats
	// cpu is the CPU time the target and the clients have used so far:
	// this process's, and the target's own processes' when it runs apart
	// (nil: this process's alone).
	cpu   func() time.Duration
	close func()
}

// cpuOf is t's CPU clock (see target.cpu).
func cpuOf(t *target) time.Duration {
	if t.cpu == nil {
		return report.ProcessCPU()
	}
	return t.cpu()
}

// cohortNodes is the size of Cohort's cluster, the size cohortd is run at.
const cohortNodes = 3

// consumerSessionTimeout is both targets' default KIP-848 session timeout
// (Cohort's coordinator.Config.ConsumerSessionTimeout, kfake's
// group.consumer.session.timeout.ms), which the heartbeat interval must
// stay below.
const consumerSessionTimeout = 45 * time.Second

// startTargets starts Cohort (three nodes as o.cluster says, data under
// dir) and kfake, and waits until each names all its brokers and a
// controller. Cohort is first: its columns come first in every row. Both
// tell KIP-848 members o.consumerHB as their heartbeat interval (classic
// members heartbeat at their own interval, whatever it is). Cohort's
// nodes log to logOut (nil: nowhere).
func startTargets(ctx context.Context, o options, dir string, logOut io.Writer) ([]*target, error) {
	var cohort *target
	var err error
	if o.cluster == "inprocess" {
		cohort, err = startInProcess(ctx, o, dir, logOut)
	} else {
		cohort, err = startProcesses(ctx, o, dir, logOut)
	}
	if err != nil {
		return nil, fmt.Errorf("start Cohort: %w", err)
	}
	var kf *target
	if o.kfake == "process" {
		kf, err = startKfakeProcess(ctx, o)
	} else {
		var fake *kfake.Cluster
		if fake, err = startKfake(o.kfakeBrokers, o.consumerHB); err == nil {
			kf = &target{
				name:  "kfake",
				seeds: fake.ListenAddrs(),
				about: fmt.Sprintf("%d broker(s) on loopback, in memory, unreplicated, in this process", o.kfakeBrokers),
				close: fake.Close,
			}
		}
	}
	if err != nil {
		cohort.close()
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	targets := []*target{cohort, kf}
	for _, t := range []struct {
		t       *target
		brokers int
	}{{cohort, cohortNodes}, {kf, o.kfakeBrokers}} {
		if err := waitBrokers(ctx, t.t, t.brokers); err != nil {
			closeTargets(targets)
			return nil, err
		}
	}
	return targets, nil
}

func closeTargets(ts []*target) {
	for _, t := range ts {
		t.close()
	}
}

// waitBrokers waits until every one of t's seed brokers names n brokers
// and a controller (where topics are created) in its own Metadata answer:
// Cohort's nodes name each other once the node registry holds their Kafka
// addresses and a dial answered, a second or two after start.
func waitBrokers(ctx context.Context, t *target, n int) error {
	return waitMetadata(ctx, t, "", func(resp *kmsg.MetadataResponse) error {
		if len(resp.Brokers) != n || resp.ControllerID < 0 {
			return fmt.Errorf("%d brokers, controller %d; want %d and a controller", len(resp.Brokers), resp.ControllerID, n)
		}
		return nil
	})
}

// createTopic creates topic with the given partitions on t through kadm,
// as an operator would, and waits until every seed broker's own Metadata
// shows all of them (Cohort's followers learn of a topic when they apply
// its entry), so that a consumer reads the topic whichever broker it asks.
func createTopic(ctx context.Context, t *target, topic string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.seeds...))
	if err != nil {
		return fmt.Errorf("%s: client: %w", t.name, err)
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(cctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("%s: create topic %s (%d partitions): %w", t.name, topic, partitions, err)
	}
	return waitMetadata(ctx, t, topic, func(resp *kmsg.MetadataResponse) error {
		switch {
		case len(resp.Topics) != 1:
			return fmt.Errorf("%d topics in the answer, want 1", len(resp.Topics))
		case resp.Topics[0].ErrorCode != 0:
			return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		case len(resp.Topics[0].Partitions) != partitions:
			return fmt.Errorf("%d partitions, want %d", len(resp.Topics[0].Partitions), partitions)
		}
		return nil
	})
}

// waitMetadata asks each of t's seed brokers for Metadata (of topic, or
// of no topic when it is "") until check accepts its answer, for at most
// a minute. It sends raw requests to each seed: kadm's metadata calls
// answer the brokers from the client's cache, which a client refreshes
// only every few minutes.
func waitMetadata(ctx context.Context, t *target, topic string, check func(*kmsg.MetadataResponse) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.seeds...))
	if err != nil {
		return fmt.Errorf("%s: client: %w", t.name, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i, b := range cl.SeedBrokers() {
		var last error
		for {
			req := kmsg.NewPtrMetadataRequest()
			if topic != "" {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(topic)
				req.Topics = append(req.Topics, rt)
			}
			resp, err := req.RequestWith(ctx, b)
			if err == nil {
				err = check(resp)
			}
			if err == nil {
				break
			}
			last = err
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: Metadata from %s: %w (last: %v)", t.name, t.seeds[i], ctx.Err(), last)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// moduleVersion is the version of module path this program was built
// with, for the report.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(version unknown)"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "(version unknown)"
}

// nodeStats is a target's raftStats: the figures of every node read
// answers for.
func nodeStats(read func(node int) (raftnode.Stats, bool)) func() []raftnode.Stats {
	return func() []raftnode.Stats {
		var st []raftnode.Stats
		for i := range cohortNodes {
			if s, ok := read(i); ok {
				st = append(st, s)
			}
		}
		return st
	}
}

// startInProcess starts Cohort as three nodes in this process.
func startInProcess(ctx context.Context, o options, dir string, logOut io.Writer) (*target, error) {
	logger := slog.New(slog.DiscardHandler)
	if logOut != nil {
		logger = slog.New(slog.NewTextHandler(logOut, nil))
	}
	cfg := coordinator.DefaultConfig()
	cfg.Logger = logger
	cfg.ConsumerHeartbeatInterval = o.consumerHB
	cfg.InitialRebalanceDelay = o.initialDelay
	cl, err := benchcluster.StartInProcess(ctx, benchcluster.InProcessOptions{
		Size: cohortNodes, Dir: dir, Coordinator: cfg, Kafka: true, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	return &target{
		name:  "cohort",
		seeds: cl.KafkaAddrs(),
		about: fmt.Sprintf("%d in-process nodes on loopback, Raft-replicated, fsync on, all %d as seeds", cohortNodes, cohortNodes),
		raftStats: nodeStats(func(i int) (raftnode.Stats, bool) {
			s := cl.Server(i)
			if s == nil {
				return raftnode.Stats{}, false
			}
			return s.Node.Stats(), true
		}),
		close: func() { _ = cl.Close() },
	}, nil
}

// startProcesses starts Cohort as three cohortd processes (the binary at
// cohortd) with their defaults and Kafka listeners, and reads their Raft
// figures over gRPC (NodeInfo). With logOut, the nodes log at info and
// their logs are copied to it when they stop.
func startProcesses(ctx context.Context, o options, dir string, logOut io.Writer) (*target, error) {
	level := "warn"
	if logOut != nil {
		level = "info"
	}
	cl, err := benchcluster.StartProcesses(ctx, benchcluster.ProcessOptions{
		Binary: o.cohortd, Size: cohortNodes, Dir: dir, Kafka: true, LogLevel: level,
		// --pprof: the nodes' profiles on their loopback HTTP addresses,
		// for `go tool pprof` while a run goes on.
		Args: []string{"--consumer-heartbeat-interval=" + o.consumerHB.String(), "--initial-rebalance-delay=" + o.initialDelay.String(), "--pprof"},
	})
	if err != nil {
		return nil, err
	}
	probe, err := benchcluster.NewProbe(cl.Addrs())
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	return &target{
		name:  "cohort",
		seeds: cl.KafkaAddrs(),
		about: fmt.Sprintf("%d cohortd processes on loopback, Raft-replicated, fsync on, all %d as seeds", cohortNodes, cohortNodes),
		raftStats: nodeStats(func(i int) (raftnode.Stats, bool) {
			info, err := probe.Info(ctx, i)
			return raftnode.Stats{Term: info.GetTerm(), LastIndex: info.GetLastIndex()}, err == nil
		}),
		cpu: func() time.Duration {
			d := report.ProcessCPU()
			for i := range cohortNodes {
				if pid := cl.Pid(i); pid != 0 {
					d += report.PidCPU(pid)
				}
			}
			return d
		},
		close: func() {
			probe.Close()
			_ = cl.Close()
			if logOut != nil {
				for _, p := range cl.LogPaths() {
					fmt.Fprintf(logOut, "==> %s <==\n", filepath.Base(p))
					if b, err := os.ReadFile(p); err == nil {
						_, _ = logOut.Write(b)
					}
				}
			}
		},
	}, nil
}
