package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Defaults for Config. Raft's own defaults (1 s heartbeat and election
// timeouts) are tuned for WANs and slow disks; Cohort runs on a LAN, and a
// consumer group stalls for as long as there is no leader, so the failure
// detector is tighter. Measured on the 2-core development machine with a
// three-node in-process cluster on loopback TCP and real bolt files
// (raftnode BenchmarkReplicatedApply and BenchmarkLeaderFailover; numbers
// also in docs/benchmarks.md):
//
//	go test -run '^$' -bench BenchmarkReplicatedApply -benchtime 2s ./raftnode/
//	go test -run '^$' -bench BenchmarkLeaderFailover -benchtime 5x ./raftnode/
const (
	// DefaultHeartbeatTimeout is how long a follower waits without contact
	// from the leader before it starts an election. A leader crash was
	// followed by an agreed new leader after 2.09 s on average (worst 2.33 s)
	// with raft's 1 s, 1.06 s (worst 1.39 s) with 500 ms and 0.41 s with
	// 200 ms. 500 ms keeps failover far inside any consumer session timeout
	// (Kafka's are 10–45 s) while leaving headroom for fsync stalls and GC
	// pauses on a loaded node; no timing profile caused a spurious election
	// under 256 concurrent appliers, and none changed throughput.
	DefaultHeartbeatTimeout = 500 * time.Millisecond
	// DefaultElectionTimeout is how long a candidate waits for votes before
	// retrying. Raft randomises both timeouts between 1× and 2×.
	DefaultElectionTimeout = 500 * time.Millisecond
	// DefaultLeaderLeaseTimeout is how long a leader keeps leading without
	// hearing from a quorum; half the heartbeat timeout, as raft's defaults
	// have it, so a partitioned leader steps down before a new one is
	// elected on the other side.
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
	// DefaultCommitTimeout is raft's default. CommitTimeout only paces the
	// idle heartbeats that carry the commit index to followers; a leader's
	// apply does not wait for it. 5 ms measured no better: 1054 vs 1051
	// ops/s at concurrency 1, 5769 vs 6019 at 16, 16.3k vs 15.0k at 256
	// (within run-to-run noise), at ten times the idle RPC rate.
	DefaultCommitTimeout = 50 * time.Millisecond
	// DefaultMaxAppendEntries is the batch limit per AppendEntries RPC and
	// leader disk write. 256 instead of raft's 64: at concurrency 256,
	// 20.4–23.2k ops/s with p99 18–20 ms vs 15.0–18.0k ops/s with p99
	// 22–26 ms at 64; unchanged at concurrency 1 and 16 (~1.05k and
	// ~6.5k ops/s), whose batches never reach 64.
	DefaultMaxAppendEntries = 256
	// DefaultSnapshotInterval is how often raft checks whether
	// SnapshotThreshold entries have accumulated (raft's default).
	DefaultSnapshotInterval = 120 * time.Second
	// DefaultSnapshotThreshold is the number of new log entries that makes
	// a snapshot worth taking (raft's default): offset commits are small,
	// so 8192 entries are a few MB of log.
	DefaultSnapshotThreshold = 8192
	// DefaultTrailingLogs is how many entries stay in the log after a
	// snapshot, so that a follower briefly down catches up from the log
	// rather than with a full snapshot install (raft's default).
	DefaultTrailingLogs = 10240
	// DefaultApplyTimeout bounds Node.Apply when its context has no deadline.
	DefaultApplyTimeout = 10 * time.Second
	// DefaultFormationTimeout bounds the wait for --bootstrap-expect peers.
	DefaultFormationTimeout = 10 * time.Minute
	// DefaultPollInterval is how often formation polls the join addresses
	// and registration retries.
	DefaultPollInterval = 500 * time.Millisecond
	// DefaultTransportTimeout bounds one Raft RPC (except snapshot installs,
	// which raft scales with the snapshot size).
	DefaultTransportTimeout = 10 * time.Second
	// DefaultTransportMaxPool is the number of pooled connections per peer.
	DefaultTransportMaxPool = 3
)

// Config configures a Node. Zero fields take the defaults above; call
// WithDefaults then Validate once at start (New does both).
type Config struct {
	// NodeID is the Raft server ID. On first start it is stored in
	// DataDir/node-id (generated when empty); on later starts an empty
	// NodeID takes the stored one and a different one is an error.
	NodeID string
	// DataDir holds node-id, raft/raft.db (log and stable store) and
	// raft/snapshots/. Required.
	DataDir string
	// RaftBind is the TCP address the Raft transport listens on. Required.
	RaftBind string
	// RaftAdvertise is the address other nodes reach the Raft transport on.
	// Defaults to RaftBind's actual address; required when RaftBind is a
	// wildcard address (0.0.0.0, [::]).
	RaftAdvertise string
	// GRPCAdvertise is this node's gRPC address as other nodes and clients
	// reach it; it is what the node records in the replicated node
	// registry and answers in NodeInfo.
	GRPCAdvertise string

	// Bootstrap makes a node with no Raft state bootstrap a one-node
	// cluster with itself as the only voter.
	Bootstrap bool
	// BootstrapExpect > 0 makes a node with no Raft state poll the Join
	// addresses until it knows BootstrapExpect distinct nodes (itself
	// included), none of them with Raft state, and then bootstrap them all
	// as voters. Every one of the nodes computes the same configuration.
	BootstrapExpect int
	// Join lists gRPC addresses of other nodes (ClusterService).
	Join []string

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long the leader waits before sending a heartbeat
	// that carries the new commit index when there is nothing else to send.
	CommitTimeout     time.Duration
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// MaxAppendEntries is the largest batch of entries in one AppendEntries
	// RPC (and one disk write on the leader); at most 1024.
	MaxAppendEntries int

	// ApplyTimeout bounds Apply when its context has no deadline.
	ApplyTimeout time.Duration
	// FormationTimeout bounds the --bootstrap-expect wait.
	FormationTimeout time.Duration
	// PollInterval paces formation polling and registration retries.
	PollInterval time.Duration

	// AdminToken, when set, is required as `authorization: Bearer <token>`
	// on every ClusterService call except NodeInfo and Health, and is sent
	// by this node on its own calls to other nodes.
	AdminToken string
	// PromoteMaxLag is the largest number of log entries a non-voter may
	// be behind the leader and still be promoted (DefaultPromoteMaxLag).
	PromoteMaxLag uint64
	// HealthyLastContact is how long a server may go without hearing from
	// the leader and still count as healthy (DefaultHealthyLastContact).
	HealthyLastContact time.Duration
	// JoinAsNonvoter keeps a node that joins through Join (without
	// BootstrapExpect) a non-voter instead of asking for its promotion.
	JoinAsNonvoter bool
	// Autopilot configures the leader's autopilot; off unless Enabled.
	Autopilot AutopilotConfig

	// Logger receives the node's and raft's logs. Default: slog.Default().
	Logger *slog.Logger
	// Peers reaches other nodes' ClusterService. Default: a gRPC client
	// without TLS, owned (and closed) by the Node.
	Peers PeerClient
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	setDur(&c.ElectionTimeout, DefaultElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	setDur(&c.CommitTimeout, DefaultCommitTimeout)
	setDur(&c.SnapshotInterval, DefaultSnapshotInterval)
	setDur(&c.ApplyTimeout, DefaultApplyTimeout)
	setDur(&c.FormationTimeout, DefaultFormationTimeout)
	setDur(&c.PollInterval, DefaultPollInterval)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = DefaultMaxAppendEntries
	}
	if c.PromoteMaxLag == 0 {
		c.PromoteMaxLag = DefaultPromoteMaxLag
	}
	setDur(&c.HealthyLastContact, DefaultHealthyLastContact)
	c.Autopilot = c.Autopilot.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID != "" {
		if err := validateNodeID(c.NodeID); err != nil {
			errs = append(errs, err)
		}
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is required"))
	}
	if c.RaftBind == "" {
		errs = append(errs, errors.New("raft bind address is required"))
	} else if _, _, err := net.SplitHostPort(c.RaftBind); err != nil {
		errs = append(errs, fmt.Errorf("raft bind address %q: %w", c.RaftBind, err))
	}
	if c.RaftAdvertise != "" {
		if err := validateAdvertise("raft advertise address", c.RaftAdvertise); err != nil {
			errs = append(errs, err)
		}
	} else if host, _, err := net.SplitHostPort(c.RaftBind); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("raft bind address %q is a wildcard: set a raft advertise address", c.RaftBind))
		}
	}
	if c.GRPCAdvertise != "" {
		if err := validateAdvertise("gRPC advertise address", c.GRPCAdvertise); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Bootstrap && c.BootstrapExpect > 0 {
		errs = append(errs, fmt.Errorf("bootstrap and bootstrap-expect %d are mutually exclusive", c.BootstrapExpect))
	}
	if c.BootstrapExpect < 0 {
		errs = append(errs, fmt.Errorf("bootstrap-expect %d: must not be negative", c.BootstrapExpect))
	}
	if c.BootstrapExpect > 1 && len(c.Join) == 0 {
		errs = append(errs, fmt.Errorf("bootstrap-expect %d needs join addresses", c.BootstrapExpect))
	}
	if c.BootstrapExpect > 1 && c.GRPCAdvertise == "" {
		errs = append(errs, fmt.Errorf("bootstrap-expect %d needs a gRPC advertise address", c.BootstrapExpect))
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			errs = append(errs, fmt.Errorf("join address %q: %w", j, err))
		}
	}
	if c.HeartbeatTimeout < 5*time.Millisecond {
		errs = append(errs, fmt.Errorf("heartbeat timeout %s: must be at least 5ms", c.HeartbeatTimeout))
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("election timeout %s: must be at least the heartbeat timeout %s", c.ElectionTimeout, c.HeartbeatTimeout))
	}
	if c.LeaderLeaseTimeout < 5*time.Millisecond || c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("leader lease timeout %s: must be between 5ms and the heartbeat timeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout))
	}
	if c.CommitTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("commit timeout %s: must be at least 1ms", c.CommitTimeout))
	}
	if c.SnapshotInterval < 5*time.Millisecond {
		errs = append(errs, fmt.Errorf("snapshot interval %s: must be at least 5ms", c.SnapshotInterval))
	}
	if c.MaxAppendEntries < 1 || c.MaxAppendEntries > 1024 {
		errs = append(errs, fmt.Errorf("max append entries %d: must be between 1 and 1024", c.MaxAppendEntries))
	}
	if c.ApplyTimeout <= 0 || c.FormationTimeout <= 0 || c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("apply timeout %s, formation timeout %s, poll interval %s: must be positive",
			c.ApplyTimeout, c.FormationTimeout, c.PollInterval))
	}
	if c.HealthyLastContact <= 0 {
		errs = append(errs, fmt.Errorf("healthy last contact %s: must be positive", c.HealthyLastContact))
	}
	if err := c.Autopilot.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func validateAdvertise(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%s %q: must name a reachable host, not a wildcard", what, addr)
	}
	if port == "0" {
		return fmt.Errorf("%s %q: port 0 cannot be advertised", what, addr)
	}
	return nil
}
