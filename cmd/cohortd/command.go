package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/fsm"
	"github.com/cohortlabs/cohort/raftnode"
	"github.com/cohortlabs/cohort/rpc"
	"github.com/cohortlabs/cohort/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// options are cohortd's flags: the raft and cluster configurations are
// their packages' DefaultConfig with the flags applied.
type options struct {
	raft                                 raftnode.Config
	cluster                              cluster.Config
	grpcAddr, grpcAdvertise, httpAddr    string
	pprof                                bool
	kafkaAddr, kafkaAdvertise            string // kafkaAddr "": no Kafka listener
	shutdownTimeout                      time.Duration
	initialDelay, minSession, maxSession time.Duration
	consumerSession, consumerHeartbeat   time.Duration
	offsetsRetention, retentionCheck     time.Duration
	budgets                              fsm.Budgets
	maxPending                           int
	pages                                coordinator.Pages
	logLevel, logFormat                  string
	adminToken, tokenFile                string
	tls                                  auth.Files
	insecure, tlsPermissive              bool
	reloadInterval                       time.Duration
	grpcLimits                           rpc.Limits
}

const envPrefix = "COHORT_"

// exitHalted is cohortd's exit status when its node met a log entry it
// cannot apply (written under newer command rules: run a newer cohortd).
const exitHalted = 3

func newRootCommand() *cobra.Command {
	o := options{raft: raftnode.DefaultConfig(), cluster: cluster.DefaultConfig(), grpcLimits: rpc.DefaultLimits()}
	cmd := &cobra.Command{
		Use:   "cohortd",
		Short: "Cohort server: a Raft replica of the consumer-group coordinator",
		Long: `cohortd runs one node of a Cohort cluster.

Form a three-node cluster by starting three nodes with --bootstrap-expect 3
and --join listing the nodes' gRPC addresses, or a single node with
--bootstrap. A restarted node rejoins from its data dir and never bootstraps
again. A new node joins a running cluster with --join alone: it enters as a
non-voter and is promoted once it has caught up (by autopilot when the
leader runs it). A node removed from the cluster stops itself; 'cohortd
leave' removes a node. Every flag can also be set as COHORT_<FLAG> (dashes become
underscores), e.g. COHORT_RAFT_ADDR; the command line wins.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd.Flags(), os.Getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return run(ctx, o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	r, c := &o.raft, &o.cluster
	f.StringVar(&r.NodeID, "node-id", "", "Raft server ID; stored in the data dir on first start (generated when empty)")
	f.StringVar(&r.DataDir, "data-dir", "./data", "directory for the node ID, the raft log and snapshots")
	f.StringVar(&r.LogStore, "log-store", "", "log store of a new data dir: bolt (raft-boltdb); wal (raft-wal) is withdrawn until a fixed raft-wal is available (docs/operations.md); an existing data dir keeps its own (default: the data dir's, bolt when new)")
	f.StringVar(&r.RaftBind, "raft-addr", "127.0.0.1:7001", "address the Raft transport listens on")
	f.StringVar(&r.RaftAdvertise, "raft-advertise", "", "address other nodes reach the Raft transport on (default: --raft-addr)")
	f.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:9001", "address the gRPC server listens on")
	f.StringVar(&o.grpcAdvertise, "grpc-advertise", "", "address other nodes and clients reach the gRPC server on (default: --grpc-addr)")
	f.StringVar(&o.kafkaAddr, "kafka-addr", "", "address the Kafka protocol listener listens on (default: none, no Kafka listener)")
	f.StringVar(&o.kafkaAdvertise, "kafka-advertise", "", "address Kafka clients reach this node's Kafka listener on, as every node names it in the node registry (default: --kafka-addr)")
	gl := &o.grpcLimits
	f.IntVar(&gl.MaxRecvBytes, "grpc-max-recv-bytes", gl.MaxRecvBytes, "largest gRPC request message accepted, in bytes; larger ones are refused with ResourceExhausted")
	f.IntVar(&gl.MaxSendBytes, "grpc-max-send-bytes", gl.MaxSendBytes, "largest gRPC answer sent, in bytes (at most 1 GiB, what Cohort's clients accept)")
	f.Uint32Var(&gl.MaxConcurrentStreams, "grpc-max-concurrent-streams", gl.MaxConcurrentStreams, "gRPC calls in flight on one client connection")
	f.DurationVar(&gl.KeepaliveTime, "grpc-keepalive-time", gl.KeepaliveTime, "ping a gRPC connection quiet for this long")
	f.DurationVar(&gl.KeepaliveTimeout, "grpc-keepalive-timeout", gl.KeepaliveTimeout, "close a gRPC connection whose ping is not answered within this")
	f.DurationVar(&gl.KeepaliveMinTime, "grpc-keepalive-min-time", gl.KeepaliveMinTime, "clients pinging more often than this are sent GOAWAY (at most 2s, the nodes' own ping interval)")
	f.IntVar(&gl.MaxConnections, "grpc-max-conns", gl.MaxConnections, "connections open on the gRPC port at once; one more is closed as soon as it is accepted")
	f.DurationVar(&gl.HandshakeTimeout, "grpc-handshake-timeout", gl.HandshakeTimeout, "close a new gRPC connection that has not finished its TLS handshake and HTTP/2 preface within this")
	f.DurationVar(&gl.MaxConnectionIdle, "grpc-max-conn-idle", gl.MaxConnectionIdle, "close a gRPC connection with no call in flight for this long (the client reconnects at its next call)")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8001", "address of /healthz, /readyz and /metrics")
	f.BoolVar(&o.pprof, "pprof", false, "also serve Go's runtime profiles (/debug/pprof/: CPU, heap, goroutines, execution trace) on --http-addr, which must then be a loopback address")
	f.BoolVar(&c.Bootstrap, "bootstrap", false, "bootstrap a one-node cluster if this node has no raft state")
	f.IntVar(&c.BootstrapExpect, "bootstrap-expect", 0, "bootstrap once this many nodes (this one included) are reachable through --join, none with raft state")
	f.StringSliceVar(&c.Join, "join", nil, "gRPC addresses of other nodes, comma-separated")
	f.DurationVar(&r.HeartbeatTimeout, "raft-heartbeat-timeout", r.HeartbeatTimeout, "follower's wait for the leader before an election")
	f.DurationVar(&r.ElectionTimeout, "raft-election-timeout", r.ElectionTimeout, "candidate's wait for votes")
	f.DurationVar(&r.LeaderLeaseTimeout, "raft-leader-lease-timeout", r.LeaderLeaseTimeout, "leader steps down after this long without a quorum")
	f.DurationVar(&r.CommitTimeout, "raft-commit-timeout", r.CommitTimeout, "leader's idle wait before sending the commit index")
	f.DurationVar(&r.SnapshotInterval, "raft-snapshot-interval", r.SnapshotInterval, "how often to check whether a snapshot is due")
	f.Uint64Var(&r.SnapshotThreshold, "raft-snapshot-threshold", r.SnapshotThreshold, "new log entries that make a snapshot due")
	f.Uint64Var(&r.TrailingLogs, "raft-trailing-logs", r.TrailingLogs, "log entries kept after a snapshot")
	f.IntVar(&r.MaxAppendEntries, "raft-max-append-entries", r.MaxAppendEntries, "largest batch of entries per AppendEntries RPC (max 1024)")
	f.Int64Var(&r.MaxSnapshotSize, "max-snapshot-size", r.MaxSnapshotSize, "largest snapshot (bytes) a restore accepts; the leader buffers it in the data dir first")
	f.DurationVar(&r.SnapshotRestoreIdleTimeout, "snapshot-restore-idle-timeout", r.SnapshotRestoreIdleTimeout, "a snapshot restore stream that sends nothing for this long is ended (nothing changes)")
	f.Int64Var(&r.LogCacheBytes, "raft-log-cache-bytes", r.LogCacheBytes, "bytes of recent log entries kept in memory (at most 512 entries)")
	f.Int64Var(&r.SnapshotLogBytes, "raft-snapshot-log-bytes", r.SnapshotLogBytes, "bytes appended to the log since the last snapshot that make a snapshot due, whatever their count")
	f.Uint64Var(&r.ReadyMaxLag, "ready-max-lag", r.ReadyMaxLag, "a follower further behind the leader's commit index (entries) is not ready: /readyz 503, unhealthy, no local stale reads")
	f.DurationVar(&r.ReadyMaxLastContact, "ready-max-last-contact", r.ReadyMaxLastContact, "a follower that has not heard from the leader for longer is not ready")
	f.IntVar(&r.MaxConns, "raft-max-conns", r.MaxConns, "inbound connections the Raft port keeps open at once; more are closed when accepted")
	f.DurationVar(&r.RaftHandshakeTimeout, "raft-handshake-timeout", r.RaftHandshakeTimeout, "with TLS: close an inbound Raft connection that has not completed its handshake within this (it holds a --raft-max-conns slot meanwhile)")
	f.DurationVar(&r.IdleTimeout, "raft-idle-timeout", r.IdleTimeout, "close an inbound Raft connection after this long without a byte from the peer (at least 10× --raft-heartbeat-timeout)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "bound on a graceful shutdown (leadership transfer, draining RPCs)")
	cd := coordinator.DefaultConfig()
	f.DurationVar(&o.initialDelay, "initial-rebalance-delay", cd.InitialRebalanceDelay, "how long the first rebalance of an empty group waits for more members (Kafka's group.initial.rebalance.delay.ms; 0 turns it off)")
	f.DurationVar(&o.minSession, "min-session-timeout", cd.MinSessionTimeout, "smallest session timeout a member may ask for")
	f.DurationVar(&o.maxSession, "max-session-timeout", cd.MaxSessionTimeout, "largest session timeout a member may ask for")
	f.DurationVar(&o.consumerSession, "consumer-session-timeout", cd.ConsumerSessionTimeout, "how long a member of a Kafka consumer group (KIP-848) may go without a heartbeat before it is removed")
	f.DurationVar(&o.consumerHeartbeat, "consumer-heartbeat-interval", cd.ConsumerHeartbeatInterval, "the heartbeat interval members of Kafka consumer groups (KIP-848) are told to keep")
	o.pages = cd.Pages
	f.IntVar(&o.pages.DefaultSize, "read-page-size", o.pages.DefaultSize, "items in one page of OffsetFetch, DescribeGroups, ListGroups and ListTopics when the request names no page size")
	f.IntVar(&o.pages.MaxSize, "read-max-page-size", o.pages.MaxSize, "largest page size a paged read may ask for (larger requests are lowered to it)")
	f.IntVar(&o.pages.MaxBytes, "read-max-page-bytes", o.pages.MaxBytes, "a page ends once its items hold this many bytes (at most half of --grpc-max-send-bytes)")
	f.IntVar(&o.maxPending, "max-pending-members", cd.MaxPendingMembers, "member IDs the leader hands out (MEMBER_ID_REQUIRED) and keeps until used; past it new members are told to retry")
	o.budgets = cd.Budgets
	for _, b := range fsm.BudgetFields() {
		name := "budget-" + b.Name
		if b.Name == "members-per-group" {
			name = "max-group-size" // Kafka's name
		}
		f.Int64Var(b.Value(&o.budgets), name, *b.Value(&o.budgets), "replicated budget: "+b.Help+" (the leader's value is the cluster's)")
	}
	f.DurationVar(&o.offsetsRetention, "offsets-retention", cd.OffsetsRetention, "how long offsets of a group without members are kept (Kafka's offsets.retention.minutes)")
	f.DurationVar(&o.retentionCheck, "offsets-retention-check-interval", cd.OffsetsRetentionCheckInterval, "how often the leader sweeps expired offsets")
	f.StringVar(&o.tls.Cert, "tls-cert", "", "this node's certificate (PEM), naming node/<node-id> (URI SAN cohort://node/<node-id>): TLS on the Raft, gRPC and Kafka ports, and what the node presents to other nodes")
	f.StringVar(&o.tls.Key, "tls-key", "", "the key of --tls-cert (PEM)")
	f.StringVar(&o.tls.CA, "tls-ca", "", "CA bundle (PEM) that signs the certificates of nodes and clients")
	f.StringVar(&o.tokenFile, "token-file", "", "bearer tokens accepted on gRPC, one per line: token,role,name (roles: admin, client, node); with TLS, callers may use a token instead of a client certificate")
	f.StringVar(&o.adminToken, "admin-token", "", "a bearer token for principal admin/admin (as a --token-file line would give); without a node token or a certificate the node also sends it to other nodes")
	f.BoolVar(&o.tlsPermissive, "tls-permissive", false, "with --tls-*: also serve and dial plaintext on the Raft and gRPC ports, unauthenticated, for the one rolling restart that moves a plaintext cluster to TLS (docs/security.md); restart without it once every node runs TLS")
	f.BoolVar(&o.insecure, "insecure", false, "allow Raft, gRPC and Kafka on a non-loopback address without TLS: anyone who reaches the ports can read and change everything")
	f.DurationVar(&o.reloadInterval, "credentials-reload-interval", auth.DefaultReloadInterval, "how often the certificate, key, CA bundle and token file are checked for changes (SIGHUP reloads at once)")
	f.Uint64Var(&c.PromoteMaxLag, "promote-max-lag", c.PromoteMaxLag, "largest log lag (entries) at which a non-voter may be promoted")
	f.DurationVar(&c.HealthyLastContact, "healthy-last-contact", c.HealthyLastContact, "a server that has not heard from the leader for longer is unhealthy")
	f.BoolVar(&c.JoinAsNonvoter, "join-as-nonvoter", false, "with --join (without --bootstrap-expect): stay a non-voter instead of asking for promotion")
	ap := &c.Autopilot
	f.BoolVar(&ap.Enabled, "autopilot", false, "run autopilot on the leader: promote stable non-voters, optionally remove dead servers")
	f.BoolVar(&ap.CleanupDeadServers, "autopilot-cleanup-dead-servers", false, "let autopilot remove servers that failed for --autopilot-dead-server-threshold")
	f.DurationVar(&ap.DeadServerThreshold, "autopilot-dead-server-threshold", ap.DeadServerThreshold, "how long a server must fail the leader's probes before autopilot removes it")
	f.DurationVar(&ap.ServerStabilizationTime, "autopilot-server-stabilization-time", ap.ServerStabilizationTime, "how long a non-voter must be healthy before autopilot promotes it")
	f.UintVar(&ap.MinQuorum, "autopilot-min-quorum", 0, "autopilot never removes voters below this number")
	f.Uint64Var(&ap.MaxTrailingLogs, "autopilot-max-trailing-logs", ap.MaxTrailingLogs, "autopilot counts a server lagging more entries as unhealthy")
	f.DurationVar(&ap.Interval, "autopilot-interval", ap.Interval, "how often autopilot checks health and reconciles")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")
	cmd.AddCommand(newLeaveCommand(), newRecoverCommand())
	return cmd
}

// applyEnv sets every flag not given on the command line from its COHORT_*
// variable, if set.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed || fl.Name == "help" {
			return
		}
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		v := getenv(name)
		if v == "" {
			return
		}
		if err := fs.Set(fl.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
}

// kafkaAdvertised is the Kafka address this node records in the node
// registry: --kafka-advertise, or --kafka-addr when it is not given, and ""
// without a Kafka listener. Like the gRPC advertise address it must name a
// reachable host: a wildcard listen address (0.0.0.0:9092) needs an
// explicit --kafka-advertise.
func (o options) kafkaAdvertised() (string, error) {
	if o.kafkaAddr == "" {
		if o.kafkaAdvertise != "" {
			return "", fmt.Errorf("--kafka-advertise %q needs --kafka-addr: without it this node has no Kafka listener", o.kafkaAdvertise)
		}
		return "", nil
	}
	host, port, err := net.SplitHostPort(o.kafkaAddr)
	if err != nil {
		return "", fmt.Errorf("--kafka-addr %q: %w", o.kafkaAddr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("--kafka-addr %q: port %q is not in 0..65535", o.kafkaAddr, port)
	}
	if o.kafkaAdvertise != "" {
		return o.kafkaAdvertise, raftnode.ValidateAdvertise("--kafka-advertise", o.kafkaAdvertise)
	}
	// Port 0 is the listener's choice, advertised once it binds (run).
	check := o.kafkaAddr
	if port == "0" {
		check = net.JoinHostPort(host, "1")
	}
	if err := raftnode.ValidateAdvertise("--kafka-addr", check); err != nil {
		msg := strings.ReplaceAll(err.Error(), strconv.Quote(check), strconv.Quote(o.kafkaAddr))
		return "", fmt.Errorf("%s; give --kafka-advertise, the address Kafka clients reach this node on", msg)
	}
	return o.kafkaAddr, nil
}

// advertised returns adv, or the listener's actual address when adv is
// empty (which also resolves port 0).
func advertised(adv string, lis net.Listener) string {
	if adv != "" {
		return adv
	}
	return lis.Addr().String()
}

func run(ctx context.Context, o options, logOut io.Writer) error {
	log, err := newLogger(logOut, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	kafkaAdvertise, err := o.kafkaAdvertised()
	if err != nil {
		return err
	}
	if o.pprof && !isLoopbackAddr(o.httpAddr) {
		return fmt.Errorf("--pprof needs a loopback --http-addr, not %s: profiles and goroutine dumps are for whoever is on the node's machine", o.httpAddr)
	}
	// Bind the client-facing ports before raft starts, so a port clash
	// fails the start instead of leaving a half-running node.
	grpcLis, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return fmt.Errorf("listen for gRPC on %s: %w", o.grpcAddr, err)
	}
	defer grpcLis.Close()
	httpLis, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w", o.httpAddr, err)
	}
	defer httpLis.Close()
	var kafkaLis net.Listener
	if o.kafkaAddr != "" {
		if kafkaLis, err = net.Listen("tcp", o.kafkaAddr); err != nil {
			return fmt.Errorf("listen for Kafka on %s: %w", o.kafkaAddr, err)
		}
		defer kafkaLis.Close()
		kafkaAdvertise = advertised(o.kafkaAdvertise, kafkaLis)
	}

	sec, err := o.security(grpcLis.Addr())
	if err != nil {
		return err
	}
	rc := o.raft
	rc.Logger = log
	rc.TLS, rc.TLSPermissive = sec.TLS, sec.Permissive
	rc.OnHalt = func(err error) {
		// The entry stays in the log for a newer binary; a process that
		// exits is restarted by its supervisor, and says why each time.
		log.Error("stopping: this node cannot apply the replicated log", "err", err)
		os.Exit(exitHalted)
	}
	cc := o.cluster
	cc.GRPCAdvertise = advertised(o.grpcAdvertise, grpcLis)
	cc.KafkaAdvertise = kafkaAdvertise
	cc.Logger = log
	srv, err := server.Start(server.Config{
		Raft:          rc,
		Cluster:       cc,
		Security:      sec,
		GRPC:          o.grpcLimits,
		Coordinator:   o.coordinatorConfig(log),
		GRPCListener:  grpcLis,
		KafkaListener: kafkaLis,
		Logger:        log,
	})
	if err != nil {
		return err
	}
	log = log.With("node_id", srv.Node.ID())
	switch {
	case !sec.Enforced():
		log.Warn("no TLS and no tokens: every caller may do everything (fine on loopback only)", "insecure", o.insecure)
	case sec.Permissive:
		log.Warn("TLS permissive mode: plaintext callers and peers are still served, unauthenticated; restart without --tls-permissive once every node and client uses TLS")
	case sec.TLS != nil:
		log.Info("TLS on Raft and gRPC; calls authorized", "principal", sec.TLS.Principal().String(), "client_certificates_required", sec.Tokens == nil)
	default:
		log.Warn("calls authorized by bearer token over plaintext: tokens can be read off the network (loopback or --insecure only)")
	}
	var reloadable []auth.Reloadable
	if sec.TLS != nil {
		reloadable = append(reloadable, sec.TLS)
	}
	if sec.Tokens != nil {
		reloadable = append(reloadable, sec.Tokens)
	}
	if len(reloadable) > 0 {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go auth.Watch(wctx, log, o.reloadInterval, hup, reloadable...)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collectors()...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	httpSrv := &http.Server{Handler: httpHandler(srv.Node, reg, o.pprof), ReadHeaderTimeout: 5 * time.Second}

	errCh := make(chan error, 1)
	go func() {
		if err := httpSrv.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errCh <- fmt.Errorf("HTTP server on %s: %w", httpLis.Addr(), err)
		}
	}()
	log.Info("cohortd started", "grpc_address", grpcLis.Addr().String(), "http_address", httpLis.Addr().String(),
		"raft_address", srv.Node.RaftAddress(), "data_dir", o.raft.DataDir, "log_store", srv.Node.LogStore())

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", context.Cause(ctx))
	case runErr = <-errCh:
		log.Error("server failed; shutting down", "err", runErr)
	case runErr = <-srv.Err():
		log.Error("server failed; shutting down", "err", runErr)
	case <-srv.Cluster.Removed():
		log.Warn("removed from the cluster; shutting down (wipe the data dir before this node joins again)")
	}

	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	// Health turns NOT_SERVING, leadership is handed over (parked calls
	// are answered NOT_LEADER), raft stops, in-flight RPCs drain (bounded).
	if err := srv.Shutdown(sctx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if err := httpSrv.Shutdown(sctx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop HTTP server: %w", err))
	}
	if runErr == nil {
		log.Info("cohortd stopped cleanly")
	}
	return runErr
}

// readiness is what /readyz needs from the node.
type readiness interface {
	Ready() (bool, string)
}

// coordinatorConfig is the engine's configuration: its defaults with the
// flags applied.
func (o options) coordinatorConfig(log *slog.Logger) coordinator.Config {
	c := coordinator.DefaultConfig()
	c.InitialRebalanceDelay = o.initialDelay
	c.MinSessionTimeout, c.MaxSessionTimeout = o.minSession, o.maxSession
	c.ConsumerSessionTimeout, c.ConsumerHeartbeatInterval = o.consumerSession, o.consumerHeartbeat
	c.OffsetsRetention, c.OffsetsRetentionCheckInterval = o.offsetsRetention, o.retentionCheck
	c.Budgets = o.budgets
	c.MaxPendingMembers = o.maxPending
	c.Pages = o.pages
	c.Logger = log
	return c
}

// httpHandler serves health, readiness and metrics, and with withPprof
// the runtime profiles under /debug/pprof/.
func httpHandler(node readiness, reg *prometheus.Registry, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	// /healthz: the process is alive and serving HTTP.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	// /readyz: a leader is known, the node is fit to serve (raftnode's
	// Fault: its disk writes succeed, and as a follower it keeps up with
	// the leader) and its FSM has applied what it knows to be committed.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ok, reason := node.Ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", reason)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if withPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// isLoopbackAddr reports whether a host:port names a loopback IP.
func isLoopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// security builds the node's credentials from the flags, and refuses to
// serve a non-loopback address in plaintext unless --insecure says so:
// secure by default, open only where nobody else can reach.
func (o options) security(grpcAddr net.Addr) (rpc.Security, error) {
	var sec rpc.Security
	if o.tls.Enabled() {
		if !o.tls.Complete() {
			return sec, errors.New("TLS needs --tls-cert, --tls-key and --tls-ca together")
		}
		creds, err := auth.LoadCredentials(o.tls)
		if err != nil {
			return sec, err
		}
		sec.TLS = creds
		sec.Permissive = o.tlsPermissive
	} else if o.tlsPermissive {
		return sec, errors.New("--tls-permissive needs --tls-cert, --tls-key and --tls-ca")
	}
	if o.tokenFile != "" || o.adminToken != "" {
		static := map[string]auth.Principal{}
		if o.adminToken != "" {
			static[o.adminToken] = auth.Principal{Role: auth.RoleAdmin, Name: "admin"}
		}
		toks, err := auth.NewTokens(o.tokenFile, static)
		if err != nil {
			return sec, fmt.Errorf("--admin-token/--token-file: %w", err)
		}
		sec.Tokens = toks
	}
	if sec.TLS != nil || o.insecure {
		return sec, nil
	}
	var exposed []string
	if !isLoopback(grpcAddr) {
		exposed = append(exposed, "gRPC "+grpcAddr.String())
	}
	for _, a := range []string{o.raft.RaftBind, o.raft.RaftAdvertise} {
		if a != "" && !isLoopbackAddr(a) {
			exposed = append(exposed, "Raft "+a)
			break
		}
	}
	if o.kafkaAddr != "" && !isLoopbackAddr(o.kafkaAddr) {
		exposed = append(exposed, "Kafka "+o.kafkaAddr)
	}
	if len(exposed) > 0 {
		return sec, fmt.Errorf("refusing to serve %s without TLS: anyone who reaches it could read and change the cluster; give --tls-cert, --tls-key and --tls-ca (docs/security.md; `cohortctl certs dev` makes a development set), or --insecure to accept the risk", strings.Join(exposed, " and "))
	}
	return sec, nil
}
