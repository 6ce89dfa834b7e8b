package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/hashicorp/raft"
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
	// DefaultTransportTimeout bounds one Raft RPC (except snapshot installs,
	// which raft scales with the snapshot size).
	DefaultTransportTimeout = 10 * time.Second
	// DefaultTransportMaxPool is the number of pooled connections per peer.
	DefaultTransportMaxPool = 3
	// DefaultMaxSnapshotSize bounds a snapshot offered for restore (the
	// FSM's encoding, in bytes). The leader buffers the whole stream in its
	// data dir before anything changes, so the bound is also the disk a
	// restore may take. 1 GiB is far above what the default budgets let
	// the state grow to.
	DefaultMaxSnapshotSize = 1 << 30
	// DefaultSnapshotRestoreIdleTimeout is the longest pause between two
	// messages of a restore stream; a client that stalls longer is cut off
	// and its partial upload deleted.
	DefaultSnapshotRestoreIdleTimeout = 30 * time.Second
	// DefaultLogCacheBytes bounds the in-memory cache of recent log
	// entries by their size: 512 small offset commits are a few hundred KB,
	// but 512 entries near the largest command would be gigabytes.
	DefaultLogCacheBytes = 64 << 20
	// DefaultSnapshotLogBytes is how many bytes of entries written to the
	// log since the last snapshot make one due, whatever their count: a
	// stream of large entries reaches it long before SnapshotThreshold.
	DefaultSnapshotLogBytes = 256 << 20
	// DefaultReadyMaxLag is how many entries a follower's applied index
	// may trail the leader's commit index and still be ready to serve.
	DefaultReadyMaxLag = 1024
	// DefaultReadyMaxLastContact is how long a follower may go without
	// hearing from the leader and still be ready: four heartbeat timeouts,
	// as cluster.DefaultHealthyLastContact.
	DefaultReadyMaxLastContact = 2 * time.Second
	// DefaultMaxConns bounds the inbound connections to the Raft port. A
	// peer opens at most DefaultTransportMaxPool pooled connections plus
	// one for pipelined replication and one per snapshot install, so 256
	// leaves room for dozens of peers while capping the transport's
	// buffers (about 260 KiB per connection) near 65 MiB.
	DefaultMaxConns = 256
	// DefaultIdleTimeout closes an inbound Raft connection on which the
	// peer sent nothing for this long. Peers in use send at least a
	// heartbeat every HeartbeatTimeout/10; outbound connections idle for
	// half of it are re-dialled before reuse (see streamLayer).
	DefaultIdleTimeout = time.Minute
	// DefaultRaftHandshakeTimeout bounds an inbound TLS handshake on the
	// Raft port. A handshake between nodes takes milliseconds even on a
	// loaded node; 5 s leaves room for a stalled one while freeing a slot
	// held by a silent peer soon.
	DefaultRaftHandshakeTimeout = 5 * time.Second
)

// minMaxSnapshotSize is the smallest MaxSnapshotSize: an empty state's
// snapshot is a few dozen bytes; below 1 KiB no real state fits.
const minMaxSnapshotSize = 1 << 10

// Config configures a Node. Start from DefaultConfig and change what you
// need; New validates it.
type Config struct {
	// NodeID is the Raft server ID. On first start it is stored in
	// DataDir/node-id (generated when empty); on later starts an empty
	// NodeID takes the stored one and a different one is an error.
	NodeID string
	// DataDir holds node-id, the log and stable store (raft/raft.db, or
	// raft/wal/) and raft/snapshots/. Required.
	DataDir string
	// LogStore is the kind of log store of a new data dir: LogStoreBolt
	// (also when empty), or LogStoreWAL, which is refused while withdrawn
	// (logstore.go, walUsable). An existing data dir keeps the kind it
	// holds; naming the other kind explicitly is an error.
	LogStore string
	// RaftBind is the TCP address the Raft transport listens on. Required.
	RaftBind string
	// RaftAdvertise is the address other nodes reach the Raft transport on.
	// Empty means RaftBind's actual address; required when RaftBind is a
	// wildcard address (0.0.0.0, [::]).
	RaftAdvertise string

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

	// ApplyTimeout bounds Apply (and the other waits on raft) when the
	// caller's context has no deadline.
	ApplyTimeout time.Duration

	// MaxSnapshotSize is the largest snapshot (bytes of the FSM's encoding)
	// a restore accepts.
	MaxSnapshotSize int64
	// SnapshotRestoreIdleTimeout is the longest wait for the next message
	// of a restore stream.
	SnapshotRestoreIdleTimeout time.Duration
	// LogCacheBytes bounds the cache of recent log entries by the bytes
	// it holds (it also holds at most logCacheEntries entries).
	LogCacheBytes int64
	// SnapshotLogBytes: once this many bytes of entries were written to
	// the log since the last snapshot, the node takes one, keeping fewer
	// trailing entries when they are large (health.go).
	SnapshotLogBytes int64
	// ReadyMaxLag is how many entries a follower may be behind the
	// leader's commit index before it stops being fit to serve (Fault).
	ReadyMaxLag uint64
	// ReadyMaxLastContact is how long a follower may go without hearing
	// from a leader before it stops being fit to serve (Fault).
	ReadyMaxLastContact time.Duration

	// WrapLogStore, when set, wraps the log store before the node's
	// own layers (fault tracking, the cache): a test hook to inject write
	// failures such as ENOSPC. Nil in production.
	WrapLogStore func(raft.LogStore) raft.LogStore
	// OnHalt is called when the node meets a log entry it cannot apply (one
	// written under command rules newer than its binary knows): it stops
	// applying, reports the error as a Fault, and calls OnHalt, which
	// should end the process (cohortd exits) so that a newer binary takes
	// over. Nil leaves the node halted.
	OnHalt func(error)
	// MaxConns bounds the inbound connections to the Raft port; more are
	// closed as soon as they are accepted.
	MaxConns int
	// IdleTimeout closes an inbound Raft connection that received nothing
	// for this long. At least 10× the heartbeat timeout, so a connection
	// in use is never cut.
	IdleTimeout time.Duration
	// TLS, when set, makes the Raft transport mutual TLS 1.3: both ends
	// present a certificate that chains to TLS's CA bundle, and a peer
	// is accepted only as a node of the Raft configuration (any node
	// while the configuration is empty, as on a fresh node waiting to be
	// added); a dialled server must be the node the configuration has at
	// that address. The certificate must name this node's principal,
	// node/<NodeID>. Rotated files take effect for new connections. Nil:
	// plaintext TCP, on which anyone who reaches the Raft port can forge
	// RPCs. All nodes of a cluster must agree.
	TLS *auth.Credentials
	// TLSPermissive, with TLS, is the mode of the one rolling restart that
	// moves a plaintext cluster to TLS: the Raft port also accepts
	// plaintext connections (their first byte is not a TLS record), and a
	// dial whose TLS handshake fails is made again in plaintext, so nodes
	// not yet restarted with TLS keep talking to this one and it to them.
	// Plaintext peers are not authenticated: leave it once every node runs
	// with TLS (docs/security.md, Migration).
	TLSPermissive bool
	// RaftHandshakeTimeout bounds an inbound TLS handshake from accept to
	// its end; a connection holds one of the MaxConns slots meanwhile.
	// (Outbound handshakes are bounded by the transport's dial timeout.)
	RaftHandshakeTimeout time.Duration

	// Logger receives the node's and raft's logs.
	Logger *slog.Logger
}

// DefaultConfig is the configuration cohortd starts from: the defaults
// above, logging to slog.Default(). DataDir and RaftBind must be set.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   DefaultHeartbeatTimeout,
		ElectionTimeout:    DefaultElectionTimeout,
		LeaderLeaseTimeout: DefaultLeaderLeaseTimeout,
		CommitTimeout:      DefaultCommitTimeout,
		SnapshotInterval:   DefaultSnapshotInterval,
		SnapshotThreshold:  DefaultSnapshotThreshold,
		TrailingLogs:       DefaultTrailingLogs,
		MaxAppendEntries:   DefaultMaxAppendEntries,
		ApplyTimeout:       DefaultApplyTimeout,
		MaxSnapshotSize:    DefaultMaxSnapshotSize,

		SnapshotRestoreIdleTimeout: DefaultSnapshotRestoreIdleTimeout,

		LogCacheBytes:       DefaultLogCacheBytes,
		SnapshotLogBytes:    DefaultSnapshotLogBytes,
		ReadyMaxLag:         DefaultReadyMaxLag,
		ReadyMaxLastContact: DefaultReadyMaxLastContact,

		MaxConns:             DefaultMaxConns,
		IdleTimeout:          DefaultIdleTimeout,
		RaftHandshakeTimeout: DefaultRaftHandshakeTimeout,

		Logger: slog.Default(),
	}
}

// Validate reports every invalid field, naming it and its value. It
// changes nothing: a zero duration is an error, not a default.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID != "" {
		if err := ValidateNodeID(c.NodeID); err != nil {
			errs = append(errs, err)
		}
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is required"))
	}
	if err := ValidateLogStore(c.LogStore); err != nil {
		errs = append(errs, err)
	}
	if c.RaftBind == "" {
		errs = append(errs, errors.New("raft bind address is required"))
	} else if _, _, err := net.SplitHostPort(c.RaftBind); err != nil {
		errs = append(errs, fmt.Errorf("raft bind address %q: %w", c.RaftBind, err))
	}
	if c.RaftAdvertise != "" {
		if err := ValidateAdvertise("raft advertise address", c.RaftAdvertise); err != nil {
			errs = append(errs, err)
		}
	} else if host, _, err := net.SplitHostPort(c.RaftBind); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("raft bind address %q is a wildcard: set a raft advertise address", c.RaftBind))
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
	if c.SnapshotThreshold == 0 || c.TrailingLogs == 0 {
		errs = append(errs, fmt.Errorf("snapshot threshold %d, trailing logs %d: must be positive", c.SnapshotThreshold, c.TrailingLogs))
	}
	if c.MaxAppendEntries < 1 || c.MaxAppendEntries > 1024 {
		errs = append(errs, fmt.Errorf("max append entries %d: must be between 1 and 1024", c.MaxAppendEntries))
	}
	if c.ApplyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("apply timeout %s: must be positive", c.ApplyTimeout))
	}
	if c.MaxSnapshotSize < minMaxSnapshotSize {
		errs = append(errs, fmt.Errorf("max snapshot size %d bytes: must be at least %d", c.MaxSnapshotSize, minMaxSnapshotSize))
	}
	if c.SnapshotRestoreIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("snapshot restore idle timeout %s: must be positive", c.SnapshotRestoreIdleTimeout))
	}
	if c.LogCacheBytes < minLogCacheBytes {
		errs = append(errs, fmt.Errorf("raft log cache bytes %d: must be at least %d", c.LogCacheBytes, minLogCacheBytes))
	}
	if c.SnapshotLogBytes < minSnapshotLogBytes {
		errs = append(errs, fmt.Errorf("raft snapshot log bytes %d: must be at least %d", c.SnapshotLogBytes, minSnapshotLogBytes))
	}
	if c.ReadyMaxLag == 0 {
		errs = append(errs, errors.New("ready max lag 0: must be positive"))
	}
	if c.ReadyMaxLastContact < c.HeartbeatTimeout {
		// Below it, the pauses between the leader's heartbeats (a tenth
		// of the timeout, randomised) would make a healthy follower flap.
		errs = append(errs, fmt.Errorf("ready max last contact %s: must be at least the heartbeat timeout %s", c.ReadyMaxLastContact, c.HeartbeatTimeout))
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("raft max conns %d: must be at least 1", c.MaxConns))
	}
	if c.IdleTimeout < 10*c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("raft idle timeout %s: must be at least 10× the heartbeat timeout %s (%s)", c.IdleTimeout, c.HeartbeatTimeout, 10*c.HeartbeatTimeout))
	}
	if c.RaftHandshakeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("raft handshake timeout %s: must be positive", c.RaftHandshakeTimeout))
	}
	if c.TLS != nil {
		if err := checkOwnCertificate(c.TLS, c.NodeID); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("logger is required"))
	}
	return errors.Join(errs...)
}

// checkOwnCertificate checks that creds hold a certificate naming the
// node id (any node when id is empty: it is not known yet). Peers check
// that name against the Raft configuration, so a node with another one
// would be refused by every peer; better to fail at start.
func checkOwnCertificate(creds *auth.Credentials, id string) error {
	if creds.Leaf() == nil {
		return fmt.Errorf("raft TLS (%s): no certificate of the node's own, only a CA bundle", creds.Name())
	}
	p := creds.Principal()
	if p.Role != auth.RoleNode || (id != "" && p.Name != id) {
		want := "node/" + id
		if id == "" {
			want = "node/<node id>"
		}
		return fmt.Errorf("raft TLS (%s): the certificate names %s, want %s", creds.Name(), p, want)
	}
	return nil
}

// Lower bounds of the byte limits: below them the cache holds nothing
// useful, and snapshots would follow one another.
const (
	minLogCacheBytes    = 64 << 10
	minSnapshotLogBytes = 64 << 10
)

// ValidateAdvertise checks an address other nodes are to reach: a host
// (not a wildcard) and a port other than 0. what names it in the error.
func ValidateAdvertise(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, addr, err)
	}
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		return fmt.Errorf("%s %q: must name a reachable host, not a wildcard", what, addr)
	case ip == nil && !validHostName(host):
		return fmt.Errorf("%s %q: %q is neither an IP address nor a host name", what, addr, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s %q: port %q is not in 1..65535", what, addr, port)
	}
	return nil
}

// validHostName reports whether h is a DNS host name: dot-separated labels
// of letters, digits and inner hyphens, at most 63 bytes each and 253 in
// all, and not all digits (that would be a malformed IP address such as
// 999.999.999.999).
func validHostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	digitsOnly := true
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			switch {
			case r >= '0' && r <= '9':
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-':
				digitsOnly = false
			default:
				return false
			}
		}
	}
	return !digitsOnly
}
