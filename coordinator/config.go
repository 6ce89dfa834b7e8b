package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cohortlabs/cohort/fsm"
)

// Limits bound what one request may carry; each is checked before anything
// is proposed, and a violation is InvalidArgument naming the field and the
// limit. Every limit must be positive: start from DefaultLimits.
type Limits struct {
	MaxGroupIDBytes        int
	MaxMemberIDBytes       int
	MaxInstanceIDBytes     int
	MaxClientIDBytes       int
	MaxProtocols           int
	MaxMetadataBytes       int
	MaxAssignmentBytes     int
	MaxTopicsPerMember     int
	MaxTopicNameBytes      int
	MaxOffsetsPerCommit    int
	MaxOffsetMetadataBytes int
}

// DefaultLimits are generous for real consumers and small enough that one
// request cannot make the replicated state unreasonable.
func DefaultLimits() Limits {
	return Limits{
		MaxGroupIDBytes:        255,
		MaxMemberIDBytes:       255,
		MaxInstanceIDBytes:     255,
		MaxClientIDBytes:       255,
		MaxProtocols:           16,
		MaxMetadataBytes:       64 << 10,
		MaxAssignmentBytes:     1 << 20,
		MaxTopicsPerMember:     10000,
		MaxTopicNameBytes:      249, // Kafka's limit
		MaxOffsetsPerCommit:    100000,
		MaxOffsetMetadataBytes: 4096, // Kafka's offset.metadata.max.bytes
	}
}

// Validate checks that every limit is positive.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxGroupIDBytes", l.MaxGroupIDBytes},
		{"MaxMemberIDBytes", l.MaxMemberIDBytes},
		{"MaxInstanceIDBytes", l.MaxInstanceIDBytes},
		{"MaxClientIDBytes", l.MaxClientIDBytes},
		{"MaxProtocols", l.MaxProtocols},
		{"MaxMetadataBytes", l.MaxMetadataBytes},
		{"MaxAssignmentBytes", l.MaxAssignmentBytes},
		{"MaxTopicsPerMember", l.MaxTopicsPerMember},
		{"MaxTopicNameBytes", l.MaxTopicNameBytes},
		{"MaxOffsetsPerCommit", l.MaxOffsetsPerCommit},
		{"MaxOffsetMetadataBytes", l.MaxOffsetMetadataBytes},
	} {
		if f.v <= 0 {
			return fmt.Errorf("coordinator: limit %s is %d; it must be positive (start from DefaultLimits)", f.name, f.v)
		}
	}
	if l.MaxMemberIDBytes < minMemberIDBytes {
		return fmt.Errorf("coordinator: limit MaxMemberIDBytes is %d; generated member IDs need at least %d", l.MaxMemberIDBytes, minMemberIDBytes)
	}
	return nil
}

// minMemberIDBytes is the shortest member ID limit generated IDs fit in: a
// one-byte client ID prefix, a dash and 32 hex digits.
const minMemberIDBytes = 1 + 1 + 32

// Config configures an Engine. Start from DefaultConfig and change what
// differs: no field has a zero-means-default meaning, and Validate refuses
// what is not usable.
type Config struct {
	// InitialRebalanceDelay holds the first rebalance of an empty group open
	// for more members (Kafka's group.initial.rebalance.delay.ms; default
	// 3 s). Zero means no delay.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (Kafka's group.min.session.timeout.ms and
	// group.max.session.timeout.ms; default 6 s and 30 min).
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// Tick is how often deadlines are checked: the precision of session
	// expiry and rebalance timeouts (default 50 ms).
	Tick time.Duration
	// JoinHold is the longest a known member's rejoin into a rebalancing
	// group is held before it goes to the log, so that a round's rejoins
	// share a few entries (coalesce.go; default 25 ms). Zero holds none.
	JoinHold time.Duration
	// BarrierTimeout bounds one attempt at the leadership barrier, and each
	// command the engine proposes on its own (expiry, join completion,
	// retention sweep) (default 30 s).
	BarrierTimeout time.Duration
	// OffsetsRetention is how long the offsets of a group without members
	// are kept, after the later of the commit and the group becoming empty
	// (Kafka's offsets.retention.minutes; default 7 days); the leader sweeps
	// every OffsetsRetentionCheckInterval (Kafka's
	// offsets.retention.check.interval.ms; default 10 min).
	OffsetsRetention              time.Duration
	OffsetsRetentionCheckInterval time.Duration
	// Limits bound one request (default DefaultLimits).
	Limits Limits
	// Pages bound one page of a paged read (default DefaultPages).
	Pages Pages
	// Budgets bound the replicated state (default fsm.DefaultBudgets). They
	// are replicated: a leader whose budgets differ from the state's
	// proposes its own when it takes office, and every replica enforces
	// the state's.
	Budgets fsm.Budgets
	// ConsumerSessionTimeout is how long a consumer group member (Kafka's
	// KIP-848 protocol) may go without a heartbeat before it is removed,
	// and ConsumerHeartbeatInterval the interval its answers ask it to
	// heartbeat at (Kafka's group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms; default 45 s and 5 s).
	ConsumerSessionTimeout    time.Duration
	ConsumerHeartbeatInterval time.Duration
	// MaxPendingMembers bounds the member IDs handed out by
	// MEMBER_ID_REQUIRED and not yet used to join, over all groups (default
	// 100,000; each costs about 200 bytes of the leader's memory until the
	// member joins or its session timeout passes). Past it a new dynamic
	// member is answered COORDINATOR_NOT_AVAILABLE, which clients retry.
	MaxPendingMembers int
	// Logger receives the engine's events (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now; tests may replace it).
	Now func() time.Time
}

// DefaultConfig is the engine's configuration with every default filled,
// following Kafka's broker defaults where Kafka has one.
func DefaultConfig() Config {
	return Config{
		InitialRebalanceDelay:         3 * time.Second,
		MinSessionTimeout:             6 * time.Second,
		MaxSessionTimeout:             30 * time.Minute,
		Tick:                          50 * time.Millisecond,
		JoinHold:                      25 * time.Millisecond,
		BarrierTimeout:                30 * time.Second,
		OffsetsRetention:              7 * 24 * time.Hour,
		OffsetsRetentionCheckInterval: 10 * time.Minute,
		Limits:                        DefaultLimits(),
		Pages:                         DefaultPages(),
		Budgets:                       fsm.DefaultBudgets(),
		ConsumerSessionTimeout:        45 * time.Second,
		ConsumerHeartbeatInterval:     5 * time.Second,
		MaxPendingMembers:             100_000,
		Logger:                        slog.Default(),
		Now:                           time.Now,
	}
}

// Validate checks the configuration once at start. It changes nothing.
func (c Config) Validate() error {
	switch {
	case c.InitialRebalanceDelay < 0:
		return fmt.Errorf("coordinator: initial rebalance delay %v is negative", c.InitialRebalanceDelay)
	case c.MinSessionTimeout <= 0 || c.MaxSessionTimeout < c.MinSessionTimeout:
		return fmt.Errorf("coordinator: session timeout bounds [%v, %v] are not a valid range", c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.Tick <= 0:
		return fmt.Errorf("coordinator: tick %v must be positive", c.Tick)
	case c.JoinHold < 0:
		return fmt.Errorf("coordinator: join hold %v is negative", c.JoinHold)
	case c.BarrierTimeout <= 0:
		return fmt.Errorf("coordinator: barrier timeout %v must be positive", c.BarrierTimeout)
	case c.OffsetsRetention < time.Millisecond || c.OffsetsRetentionCheckInterval <= 0:
		return fmt.Errorf("coordinator: offsets retention %v (checked every %v) must be at least 1ms and the interval positive", c.OffsetsRetention, c.OffsetsRetentionCheckInterval)
	case c.Logger == nil:
		return errors.New("coordinator: Logger is nil (start from DefaultConfig)")
	case c.Now == nil:
		return errors.New("coordinator: Now is nil (start from DefaultConfig)")
	case c.ConsumerHeartbeatInterval <= 0 || c.ConsumerSessionTimeout <= c.ConsumerHeartbeatInterval:
		return fmt.Errorf("coordinator: consumer group heartbeat interval %v must be positive and below the session timeout %v", c.ConsumerHeartbeatInterval, c.ConsumerSessionTimeout)
	case c.MaxPendingMembers <= 0:
		return fmt.Errorf("coordinator: MaxPendingMembers %d must be positive", c.MaxPendingMembers)
	}
	if err := c.Budgets.Validate(); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if err := c.Pages.Validate(); err != nil {
		return err
	}
	return c.Limits.Validate()
}
