package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/internal/benchcluster"
	"github.com/cohortlabs/cohort/raftnode"
)

// globalOptions are the flags every subcommand shares.
type globalOptions struct {
	endpoints  []string
	cluster    string // inprocess or process, when no endpoints
	cohortd    string
	dir        string
	keepDir    bool
	timeout    time.Duration
	cpuprofile string
	trace      string
	verbose    bool
	// json prints the results as one JSON document (report.Report).
	json bool
	// tls starts the cluster with mutual TLS from a throwaway CA.
	tls bool
	// tlsFiles are the caller's certificate for a running cluster
	// (--endpoints); tlsAdmin the admin certificate, when not that one.
	tlsFiles, tlsAdmin auth.Files
	// logStore is the started cluster's log store (raftnode.LogStore*).
	logStore string
	// nodeArgs are extra cohortd flags for --cluster process.
	nodeArgs []string
}

func newRootCommand() *cobra.Command {
	var g globalOptions
	root := &cobra.Command{
		Use:   "cohort-bench",
		Short: "Load generator for Cohort: rebalance, heartbeats, commits, failover",
		Long: `cohort-bench measures a three-node Cohort cluster on loopback.

Without --endpoints it starts the cluster itself: in-process nodes
(--cluster inprocess, the default; real Raft over TCP, real bolt files, real
gRPC) or real cohortd processes (--cluster process, needs --cohortd, e.g.
bin/cohortd from 'make build'). With --endpoints it drives a running cluster
(e.g. 'make run', started with --initial-rebalance-delay 0); the raw Raft
apply comparison is then not available.

--tls starts the cluster with mutual TLS on Raft and gRPC, as cohortd with
--tls-cert/--tls-key/--tls-ca runs: a throwaway CA, a node/<id> certificate
per node, and an admin and a client certificate in the data directory.
Group members call with the client certificate; admin calls (creating
topics, member-less commits of --mode conn, TransferLeadership, the probes'
standalone commits) with the admin one. For a running cluster with TLS give
--tls-cert/--tls-key/--tls-ca (and --tls-admin-cert/--tls-admin-key when
that certificate is not an admin's). 'tls-cost' measures both side by side.

Every run is bounded by --timeout; results are printed as tables, or with
--json as one JSON document (for scripts and the plots in docs/).`,
		SilenceUsage: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			for _, e := range g.endpoints {
				if err := benchcluster.CheckLoopback(e); err != nil {
					return err
				}
			}
			if g.cluster != "inprocess" && g.cluster != "process" {
				return fmt.Errorf("--cluster %q: want inprocess or process", g.cluster)
			}
			if len(g.nodeArgs) > 0 && (g.cluster != "process" || len(g.endpoints) > 0) {
				return errors.New("--node-arg passes flags to the cohortd processes that --cluster process starts; add --cluster process (with --endpoints or --cluster inprocess there is no cohortd to pass them to)")
			}
			if err := raftnode.ValidateLogStore(g.logStore); err != nil {
				return err
			}
			return g.checkTLS()
		},
	}
	f := root.PersistentFlags()
	f.StringSliceVar(&g.endpoints, "endpoints", nil, "gRPC addresses of a running cluster (loopback only); default: start one")
	f.StringVar(&g.cluster, "cluster", "inprocess", "cluster to start without --endpoints: inprocess or process")
	f.StringVar(&g.cohortd, "cohortd", "bin/cohortd", "cohortd binary for --cluster process")
	f.StringVar(&g.dir, "dir", "", "directory for the started cluster's data (default: a new temporary directory)")
	f.BoolVar(&g.keepDir, "keep-dir", false, "keep the data directory after the run")
	f.DurationVar(&g.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	f.StringVar(&g.cpuprofile, "cpuprofile", "", "write a CPU profile of this process (with --cluster inprocess it includes the nodes)")
	f.StringVar(&g.trace, "trace", "", "write an execution trace of this process (go tool trace; -pprof=sched shows where goroutines waited for a processor)")
	f.StringVar(&g.logStore, "log-store", "bolt", "log store of the started cluster's nodes: bolt, or wal (cohortd's --log-store; wal is withdrawn for now, raftnode/logstore.go)")
	f.StringArrayVar(&g.nodeArgs, "node-arg", nil, "extra cohortd flag for every node of --cluster process, e.g. --node-arg=--pprof (repeatable)")
	f.BoolVarP(&g.verbose, "verbose", "v", false, "log cluster and client events to stderr")
	f.BoolVar(&g.json, "json", false, "print the results as one JSON document (notes and tables, rows in column order) instead of text")
	f.BoolVar(&g.tls, "tls", false, "start the cluster with mutual TLS on Raft and gRPC (a throwaway CA; members use a client certificate, admin calls an admin one)")
	f.StringVar(&g.tlsFiles.Cert, "tls-cert", "", "with --endpoints: certificate (PEM) to call the running cluster with over TLS (members; admin calls too unless --tls-admin-cert)")
	f.StringVar(&g.tlsFiles.Key, "tls-key", "", "with --endpoints: the key of --tls-cert")
	f.StringVar(&g.tlsFiles.CA, "tls-ca", "", "with --endpoints: CA bundle (PEM) that signs the nodes' certificates")
	f.StringVar(&g.tlsAdmin.Cert, "tls-admin-cert", "", "with --endpoints and --tls-*: an admin certificate for admin calls (topics, member-less commits); default --tls-cert")
	f.StringVar(&g.tlsAdmin.Key, "tls-admin-key", "", "the key of --tls-admin-cert")

	root.AddCommand(newRawCommand(&g), newCommitsCommand(&g), newHeartbeatsCommand(&g),
		newRebalanceCommand(&g), newFailoverCommand(&g), newTLSCostCommand(&g), newStateCommand(&g), newPlotCommand())
	return root
}

// checkTLS checks that the TLS flags fit the cluster: --tls for one this
// command starts, --tls-* for --endpoints.
func (g *globalOptions) checkTLS() error {
	if len(g.endpoints) > 0 && g.tls {
		return errors.New("--tls starts a cluster with TLS; for a running one (--endpoints) give --tls-cert, --tls-key and --tls-ca")
	}
	if len(g.endpoints) == 0 && (g.tlsFiles.Enabled() || g.tlsAdmin.Cert != "" || g.tlsAdmin.Key != "") {
		return errors.New("--tls-cert, --tls-key, --tls-ca and --tls-admin-* are for a running cluster (--endpoints); use --tls to start one with TLS")
	}
	if g.tlsFiles.Enabled() && !g.tlsFiles.Complete() {
		return errors.New("--tls-cert, --tls-key and --tls-ca go together: the cluster requires a client certificate")
	}
	if (g.tlsAdmin.Cert == "") != (g.tlsAdmin.Key == "") {
		return errors.New("--tls-admin-cert needs --tls-admin-key, and the key its certificate")
	}
	if g.tlsAdmin.Cert != "" && !g.tlsFiles.Enabled() {
		return errors.New("--tls-admin-cert needs --tls-cert, --tls-key and --tls-ca")
	}
	return nil
}

// run bounds a subcommand by --timeout and wraps it in the CPU profile
// and the execution trace.
func (g *globalOptions) run(cmd *cobra.Command, body func(ctx context.Context, out io.Writer) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	for _, r := range []struct {
		what, path string
		start      func(io.Writer) error
		stop       func()
	}{
		{"cpu profile", g.cpuprofile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"trace", g.trace, trace.Start, trace.Stop},
	} {
		if r.path == "" {
			continue
		}
		stop, err := record(r.what, r.path, r.start, r.stop)
		if err != nil {
			return err
		}
		defer stop()
	}
	if !g.json {
		return body(ctx, cmd.OutOrStdout())
	}
	doc := &report.Report{Command: cmd.CommandPath(), Started: time.Now().UTC()}
	err := body(ctx, doc)
	if werr := doc.Encode(cmd.OutOrStdout()); err == nil {
		err = werr
	}
	return err
}

// record starts one of the runtime's recordings (a CPU profile, an
// execution trace) into a new file at path; the returned func ends it and
// closes the file.
func record(what, path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return func() {
		stop()
		f.Close()
	}, nil
}

func (g *globalOptions) logger() *slog.Logger {
	if g.verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// target is the cluster a run drives.
type target struct {
	addrs   []string
	kind    string                  // "endpoints", "inprocess" or "process"
	tls     bool                    // callers use TLS with certificates
	store   string                  // the started cluster's log store; "" with --endpoints
	cluster benchcluster.Cluster    // nil with --endpoints
	inproc  *benchcluster.InProcess // set for inprocess
	// probe's connections carry the admin credentials.
	probe *benchcluster.Probe
	// member are the group members' credentials (a client certificate),
	// admin those of admin calls: creating topics, member-less commits.
	// Both zero (plaintext) without TLS.
	member, admin client.Credentials
	closeFn       func() error
}

// name describes the cluster in result headers.
func (t *target) name() string {
	n := t.kind + " cluster"
	if t.store != "" {
		n += " on the " + t.store + " log store"
	}
	if t.tls {
		n += " with mutual TLS"
	}
	return n
}

// dial is a connection of its own to addr with the members' credentials.
func (t *target) dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, t.member.DialOptions()...)
}

func (t *target) Close() error {
	t.probe.Close()
	if t.closeFn != nil {
		return t.closeFn()
	}
	return nil
}

// cpu is the CPU time (user and system) this process has used so far and,
// with --cluster process, the nodes' processes too: what a run costs,
// whichever side does the work.
func (t *target) cpu() time.Duration {
	d := report.ProcessCPU()
	if p, ok := t.cluster.(*benchcluster.Processes); ok {
		for i := range t.addrs {
			if pid := p.Pid(i); pid != 0 {
				d += report.PidCPU(pid)
			}
		}
	}
	return d
}

// live reports whether node i runs (always true for --endpoints).
func (t *target) live(i int) bool {
	if t.cluster == nil {
		return true
	}
	return t.cluster.Live(i)
}

// loadCredentials are a caller's credentials from PEM files.
func loadCredentials(f auth.Files) (client.Credentials, error) {
	tc, err := client.LoadTLS(f.Cert, f.Key, f.CA)
	if err != nil {
		return client.Credentials{}, err
	}
	return client.Credentials{TLS: tc}, nil
}

// openTarget starts (or connects to) the cluster for one run, with TLS
// when --tls says so. kind overrides --cluster when not empty.
func (g *globalOptions) openTarget(ctx context.Context, kind string) (*target, error) {
	if len(g.endpoints) > 0 {
		return g.openEndpoints(ctx)
	}
	return g.startTarget(ctx, kind, g.tls, "")
}

// openEndpoints connects to the running cluster of --endpoints.
func (g *globalOptions) openEndpoints(ctx context.Context) (*target, error) {
	t := &target{addrs: g.endpoints, kind: "endpoints"}
	if g.tlsFiles.Enabled() {
		admin := g.tlsFiles
		if g.tlsAdmin.Cert != "" {
			admin.Cert, admin.Key = g.tlsAdmin.Cert, g.tlsAdmin.Key
		}
		var err error
		if t.member, err = loadCredentials(g.tlsFiles); err != nil {
			return nil, fmt.Errorf("--tls-*: %w", err)
		}
		if t.admin, err = loadCredentials(admin); err != nil {
			return nil, fmt.Errorf("--tls-admin-*: %w", err)
		}
		t.tls = true
	}
	probe, err := benchcluster.NewProbe(g.endpoints, t.admin.DialOptions()...)
	if err != nil {
		return nil, err
	}
	t.probe = probe
	if _, err := probe.WaitServing(ctx, nil); err != nil {
		probe.Close()
		return nil, err
	}
	return t, nil
}

// startTarget starts a cluster of kind (default --cluster), with mutual
// TLS when withTLS, in --dir/sub (a new temporary directory without --dir).
func (g *globalOptions) startTarget(ctx context.Context, kind string, withTLS bool, sub string) (*target, error) {
	if kind == "" {
		kind = g.cluster
	}
	dir := g.dir
	removeDir := false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "cohort-bench-"); err != nil {
			return nil, err
		}
		removeDir = !g.keepDir
	} else {
		dir = filepath.Join(dir, sub)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	cleanup := func() {
		if removeDir {
			_ = os.RemoveAll(dir)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t := &target{kind: kind, tls: withTLS, store: g.logStore}
	var pki *benchcluster.PKI
	if withTLS {
		var err error
		pki, err = benchcluster.NewPKI(filepath.Join(dir, "pki"))
		if err == nil {
			t.member, err = loadCredentials(pki.Client())
		}
		if err == nil {
			t.admin, err = loadCredentials(pki.Admin())
		}
		if err != nil {
			cleanup()
			return nil, err
		}
	}
	switch kind {
	case "inprocess":
		// cohortd's defaults, with the initial rebalance delay off as the
		// issue's benchmarks ask.
		cc := coordinator.DefaultConfig()
		cc.InitialRebalanceDelay = 0
		cc.Logger = g.logger()
		c, err := benchcluster.StartInProcess(sctx, benchcluster.InProcessOptions{
			Dir: dir, Coordinator: cc, PKI: pki, Logger: g.logger(),
			Raft: func(_ int, rc *raftnode.Config) { rc.LogStore = g.logStore },
		})
		if err != nil {
			cleanup()
			return nil, err
		}
		t.cluster, t.inproc = c, c
	case "process":
		c, err := benchcluster.StartProcesses(sctx, benchcluster.ProcessOptions{
			Binary: g.cohortd, Dir: dir, Args: append([]string{"--initial-rebalance-delay=0", "--log-store=" + g.logStore}, g.nodeArgs...), PKI: pki,
		})
		if err != nil {
			cleanup()
			return nil, err
		}
		t.cluster = c
	default:
		cleanup()
		return nil, fmt.Errorf("unknown cluster kind %q", kind)
	}
	t.addrs = t.cluster.Addrs()
	probe, err := benchcluster.NewProbe(t.addrs, t.admin.DialOptions()...)
	if err != nil {
		_ = t.cluster.Close()
		cleanup()
		return nil, err
	}
	t.probe = probe
	t.closeFn = func() error {
		err := t.cluster.Close()
		cleanup()
		return err
	}
	return t, nil
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("--%s: %q is not a positive integer", flag, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s: empty list", flag)
	}
	return out, nil
}

var errNoRaw = errors.New("raw apply needs the in-process cluster (no --endpoints, --cluster inprocess)")
