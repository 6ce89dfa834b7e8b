package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
)

// Defaults applied by Config for fields left zero.
const (
	DefaultProtocolType     = "consumer"
	DefaultSessionTimeout   = 10 * time.Second
	DefaultRebalanceTimeout = 30 * time.Second
	DefaultRequestTimeout   = 5 * time.Second
	DefaultRetryBackoffMin  = 50 * time.Millisecond
	// DefaultRetryBackoffMax is about half the server's election timeout:
	// the commonest retry is a failover, and a client backing off past the
	// election lands its first request long after the new leader serves.
	// With a 2 s cap, commits after a kill -9 of the leader resumed at 1.2,
	// 2.4 or 3.5 s (the backoff steps); with 200 ms, at 1.1–1.35 s median
	// (docs/benchmarks.md, cohort-bench failover).
	DefaultRetryBackoffMax = 250 * time.Millisecond
	// DefaultLeaderCheckInterval is half the server's default heartbeat
	// timeout (500 ms): a frozen leader's followers elect a new one about a
	// second after it stopped answering, and checking twice as often as
	// they notice adds at most a quarter second to the switch. A healthy
	// call answers in milliseconds, so the check never runs for it.
	DefaultLeaderCheckInterval = 250 * time.Millisecond
)

// ServerSideProtocolType is the protocol type of a group whose assignment
// the coordinator computes (Config.ServerSideAssignor).
const ServerSideProtocolType = "server"

// DefaultProtocols are the assignors a member offers when Config.Protocols
// is empty, in preference order.
var DefaultProtocols = []string{"roundrobin", "range"}

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Config configures a Member. Zero fields take the documented default;
// NewMember validates the result once.
type Config struct {
	// Endpoints are the gRPC addresses of Cohort nodes (host:port). Any node
	// answers; the client moves to the leader the cluster names. Required
	// unless Conn is set.
	Endpoints []string
	// Conn, when set, is the connection the member calls through instead
	// of dialling its own: many members in one process (a load generator,
	// a worker pool) can share one. Its own ConnConfig then governs the
	// endpoints, credentials, dial options, attempts and the leader check,
	// and those fields of this Config are unused. The member never closes
	// it.
	Conn *Conn
	// GroupID is the consumer group. Required.
	GroupID string
	// InstanceID makes the member static (KIP-345): a restart within the
	// session timeout takes the old slot without a rebalance. Optional.
	InstanceID string
	// ClientID is reported in DescribeGroups. Optional.
	ClientID string
	// ProtocolType must be the same for every member of the group.
	// Default "consumer"; ServerSideProtocolType when ServerSideAssignor is
	// set.
	ProtocolType string
	// Topics the member subscribes to. Required.
	Topics []string
	// Protocols are assignor names (package assign's registry: range,
	// roundrobin, sticky, cooperative-sticky, consistent-hash) in preference
	// order; the group leader computes the plan with the chosen one.
	// Default DefaultProtocols (roundrobin, range).
	//
	// With Protocols exactly ["cooperative-sticky"] the member runs the
	// cooperative rebalance protocol (KIP-429): it keeps its partitions
	// through a rebalance, OnRevoked gets only the partitions actually taken
	// away, OnAssigned only the ones added, and a member that lost
	// partitions rejoins at once so that the group hands them out in a
	// second rebalance. With any other list it runs the eager protocol
	// (everything revoked before each rejoin), even if cooperative-sticky is
	// among them, since the group may pick an eager assignor.
	Protocols []string
	// ServerSideAssignor makes the coordinator compute the group's
	// assignment (protocol type ServerSideProtocolType): the member names
	// this assignor as its only protocol and never computes a plan, even as
	// group leader. One of range, roundrobin, sticky, consistent-hash;
	// Protocols must then be empty or name the same assignor. The member
	// runs the eager protocol. Optional.
	ServerSideAssignor string

	// SessionTimeout: the coordinator removes the member when no heartbeat
	// arrives for this long. Default 10 s.
	SessionTimeout time.Duration
	// RebalanceTimeout bounds how long the join barrier waits for this
	// member. Default 30 s.
	RebalanceTimeout time.Duration
	// HeartbeatInterval is the time between heartbeats. Default
	// SessionTimeout/3; must be below SessionTimeout. Heartbeats keep the
	// session alive; the member hears that the group is rebalancing from
	// its watch (WatchGroup) at once, not from its next heartbeat.
	HeartbeatInterval time.Duration
	// DisableWatch turns the watch off: the member learns of a rebalance
	// only from its heartbeats, up to HeartbeatInterval late (as Kafka's
	// classic clients do). For servers that predate WatchGroup the member
	// falls back to this by itself.
	DisableWatch bool

	// RetryBackoffMin and RetryBackoffMax bound the exponential backoff
	// (with jitter) between retries of a retryable failure. Defaults 50 ms
	// and 250 ms (DefaultRetryBackoffMax says why).
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// RequestTimeout bounds one attempt of a request that does not wait at
	// a barrier; JoinGroup and SyncGroup attempts get RebalanceTimeout on
	// top. Default 5 s.
	RequestTimeout time.Duration
	// LeaderCheckInterval: while one attempt has been outstanding this
	// long, the client asks the other nodes, every interval, which leader
	// they know (ClusterService NodeInfo), and abandons the attempt for the
	// leader they name when it is another node: a frozen leader (SIGSTOP,
	// a long GC or VM pause) keeps its connections open, and without the
	// check a call sent to it waits out RequestTimeout. Default 250 ms
	// (DefaultLeaderCheckInterval); negative turns the check off.
	LeaderCheckInterval time.Duration
	// Credentials authenticate the member to a cluster that authorizes
	// calls: TLS (LoadTLS) with a client certificate, or a bearer token.
	// Default: plaintext, no credential.
	Credentials Credentials
	// DialOptions are appended to the defaults (Credentials' transport),
	// so they may replace them.
	DialOptions []grpc.DialOption
	// Logger receives one structured line per event that matters to an
	// operator. Default: discard.
	Logger *slog.Logger

	// LeaveStaticOnClose makes a static member send LeaveGroup on Close.
	// By default a static member does not leave (KIP-345), so a restart
	// within the session timeout causes no rebalance. Dynamic members
	// always leave.
	LeaveStaticOnClose bool

	// OnAssigned is called after every successful sync with the
	// generation and the member's partitions (cooperative protocol: only
	// the partitions added in this generation, possibly none; Assignment
	// returns them all).
	OnAssigned func(ctx context.Context, generation int32, assignment []TopicPartition)
	// OnRevoked is called once for every OnAssigned, before the member
	// rejoins (eager protocol) or stops, with the partitions it held. It is
	// the last moment to commit offsets for them with that generation.
	//
	// Cooperative protocol: it is called only with partitions taken away —
	// after the sync of the generation that took them (the coordinator
	// fences commits by ownership, so their offsets can no longer be
	// committed: commit before, e.g. periodically), when the member lost
	// its membership (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION), and when it
	// stops.
	//
	// Both callbacks run on the member's goroutine, in order, and delay
	// heartbeats while they run: keep them well under SessionTimeout.
	OnRevoked func(ctx context.Context, revoked []TopicPartition)
}

// withDefaults returns a copy of c with every zero field defaulted.
func (c Config) withDefaults() Config {
	if c.ServerSideAssignor != "" {
		if c.ProtocolType == "" {
			c.ProtocolType = ServerSideProtocolType
		}
		if len(c.Protocols) == 0 {
			c.Protocols = []string{c.ServerSideAssignor}
		}
	}
	if c.ProtocolType == "" {
		c.ProtocolType = DefaultProtocolType
	}
	if len(c.Protocols) == 0 {
		c.Protocols = append([]string(nil), DefaultProtocols...)
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.SessionTimeout / 3
	}
	if c.RetryBackoffMin == 0 {
		c.RetryBackoffMin = DefaultRetryBackoffMin
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = max(DefaultRetryBackoffMax, c.RetryBackoffMin)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.LeaderCheckInterval == 0 {
		c.LeaderCheckInterval = DefaultLeaderCheckInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a defaulted Config.
func (c Config) validate() error {
	var errs []error
	if len(c.Endpoints) == 0 && c.Conn == nil {
		errs = append(errs, errors.New("field Endpoints: at least one endpoint is required (or a Conn)"))
	}
	for i, e := range c.Endpoints {
		if e == "" {
			errs = append(errs, fmt.Errorf("field Endpoints[%d]: empty address", i))
		}
	}
	if c.GroupID == "" {
		errs = append(errs, errors.New("field GroupID: required"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("field Topics: at least one topic is required"))
	}
	for i, t := range c.Topics {
		if t == "" {
			errs = append(errs, fmt.Errorf("field Topics[%d]: empty topic name", i))
		}
	}
	seen := map[string]bool{}
	for _, p := range c.Protocols {
		if _, err := lookupAssignor(p); err != nil {
			errs = append(errs, fmt.Errorf("field Protocols: %w", err))
		}
		if seen[p] {
			errs = append(errs, fmt.Errorf("field Protocols: %q listed twice", p))
		}
		seen[p] = true
	}
	if c.ServerSideAssignor != "" {
		if err := serverSideAssignor(c.ServerSideAssignor); err != nil {
			errs = append(errs, fmt.Errorf("field ServerSideAssignor: %w", err))
		}
		if c.ProtocolType != ServerSideProtocolType {
			errs = append(errs, fmt.Errorf("field ProtocolType: %q with ServerSideAssignor set; leave it empty or use %q", c.ProtocolType, ServerSideProtocolType))
		}
		if len(c.Protocols) != 1 || c.Protocols[0] != c.ServerSideAssignor {
			errs = append(errs, fmt.Errorf("field Protocols: %v with ServerSideAssignor %q; leave it empty", c.Protocols, c.ServerSideAssignor))
		}
	}
	if c.SessionTimeout < 0 || c.SessionTimeout > maxTimeout {
		errs = append(errs, fmt.Errorf("field SessionTimeout: %v out of range", c.SessionTimeout))
	}
	if c.RebalanceTimeout < 0 || c.RebalanceTimeout > maxTimeout {
		errs = append(errs, fmt.Errorf("field RebalanceTimeout: %v out of range", c.RebalanceTimeout))
	}
	if c.SessionTimeout < time.Millisecond || c.RebalanceTimeout < time.Millisecond {
		errs = append(errs, errors.New("field SessionTimeout and RebalanceTimeout: must be at least 1ms"))
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.SessionTimeout {
		errs = append(errs, fmt.Errorf("field HeartbeatInterval: %v must be positive and below SessionTimeout %v", c.HeartbeatInterval, c.SessionTimeout))
	}
	if c.Conn == nil { // a Conn given was checked when it was dialled
		if err := validateConnConfig(c.connConfig()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cohort: invalid client config for group %q: %w", c.GroupID, err)
	}
	return nil
}

const maxTimeout = time.Duration(1<<31-1) * time.Millisecond

func (c Config) connConfig() ConnConfig {
	return ConnConfig{
		Endpoints:           c.Endpoints,
		Credentials:         c.Credentials,
		DialOptions:         c.DialOptions,
		RequestTimeout:      c.RequestTimeout,
		RetryBackoffMin:     c.RetryBackoffMin,
		RetryBackoffMax:     c.RetryBackoffMax,
		LeaderCheckInterval: c.LeaderCheckInterval,
		Logger:              c.Logger,
	}
}

// ConnConfig configures a Conn. Zero fields take the defaults documented on
// Config.
type ConnConfig struct {
	Endpoints           []string
	Credentials         Credentials
	DialOptions         []grpc.DialOption
	RequestTimeout      time.Duration
	RetryBackoffMin     time.Duration
	RetryBackoffMax     time.Duration
	LeaderCheckInterval time.Duration
	Logger              *slog.Logger
}

func (c ConnConfig) withDefaults() ConnConfig {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RetryBackoffMin == 0 {
		c.RetryBackoffMin = DefaultRetryBackoffMin
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = max(DefaultRetryBackoffMax, c.RetryBackoffMin)
	}
	if c.LeaderCheckInterval == 0 {
		c.LeaderCheckInterval = DefaultLeaderCheckInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func validateConnConfig(c ConnConfig) error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("field Endpoints: at least one endpoint is required"))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("field RequestTimeout: %v is negative", c.RequestTimeout))
	}
	if c.RetryBackoffMin <= 0 || c.RetryBackoffMax < c.RetryBackoffMin {
		errs = append(errs, fmt.Errorf("field RetryBackoffMin/Max: need 0 < min (%v) <= max (%v)", c.RetryBackoffMin, c.RetryBackoffMax))
	}
	return errors.Join(errs...)
}
