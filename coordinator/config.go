package coordinator

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults for Config, following Kafka's broker defaults where Kafka has one.
const (
	// DefaultInitialRebalanceDelay is Kafka's group.initial.rebalance.delay.ms.
	DefaultInitialRebalanceDelay = 3 * time.Second
	// DefaultMinSessionTimeout and DefaultMaxSessionTimeout are Kafka's
	// group.min.session.timeout.ms and group.max.session.timeout.ms.
	DefaultMinSessionTimeout = 6 * time.Second
	DefaultMaxSessionTimeout = 30 * time.Minute
	// DefaultTick is how often deadlines are checked: the precision of
	// session expiry and rebalance timeouts.
	DefaultTick = 50 * time.Millisecond
	// DefaultBarrierTimeout bounds one attempt at the leadership barrier.
	DefaultBarrierTimeout = 30 * time.Second
	// DefaultOffsetsRetention and DefaultOffsetsRetentionCheckInterval are
	// Kafka's offsets.retention.minutes (7 days) and
	// offsets.retention.check.interval.ms (10 minutes).
	DefaultOffsetsRetention              = 7 * 24 * time.Hour
	DefaultOffsetsRetentionCheckInterval = 10 * time.Minute
)

// Limits bound what one request may carry; each is checked before anything
// is proposed, and a violation is InvalidArgument naming the field and the
// limit. Zero fields take the defaults of DefaultLimits.
type Limits struct {
	MaxGroupIDBytes        int
	MaxMemberIDBytes       int
	MaxInstanceIDBytes     int
	MaxClientIDBytes       int
	MaxProtocols           int
	MaxMetadataBytes       int
	MaxAssignmentBytes     int
	MaxMembersPerGroup     int
	MaxTopicsPerMember     int
	MaxTopicNameBytes      int
	MaxPartitionsPerTopic  int32
	MaxOffsetsPerCommit    int
	MaxOffsetMetadataBytes int
}

// DefaultLimits are generous for real consumers and small enough that one
// request cannot make the replicated state unreasonable.
var DefaultLimits = Limits{
	MaxGroupIDBytes:        255,
	MaxMemberIDBytes:       255,
	MaxInstanceIDBytes:     255,
	MaxClientIDBytes:       255,
	MaxProtocols:           16,
	MaxMetadataBytes:       64 << 10,
	MaxAssignmentBytes:     1 << 20,
	MaxMembersPerGroup:     10000,
	MaxTopicsPerMember:     10000,
	MaxTopicNameBytes:      249, // Kafka's limit
	MaxPartitionsPerTopic:  1 << 16,
	MaxOffsetsPerCommit:    100000,
	MaxOffsetMetadataBytes: 4096, // Kafka's offset.metadata.max.bytes
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	l.MaxGroupIDBytes = pick(l.MaxGroupIDBytes, d.MaxGroupIDBytes)
	l.MaxMemberIDBytes = pick(l.MaxMemberIDBytes, d.MaxMemberIDBytes)
	l.MaxInstanceIDBytes = pick(l.MaxInstanceIDBytes, d.MaxInstanceIDBytes)
	l.MaxClientIDBytes = pick(l.MaxClientIDBytes, d.MaxClientIDBytes)
	l.MaxProtocols = pick(l.MaxProtocols, d.MaxProtocols)
	l.MaxMetadataBytes = pick(l.MaxMetadataBytes, d.MaxMetadataBytes)
	l.MaxAssignmentBytes = pick(l.MaxAssignmentBytes, d.MaxAssignmentBytes)
	l.MaxMembersPerGroup = pick(l.MaxMembersPerGroup, d.MaxMembersPerGroup)
	l.MaxTopicsPerMember = pick(l.MaxTopicsPerMember, d.MaxTopicsPerMember)
	l.MaxTopicNameBytes = pick(l.MaxTopicNameBytes, d.MaxTopicNameBytes)
	l.MaxOffsetsPerCommit = pick(l.MaxOffsetsPerCommit, d.MaxOffsetsPerCommit)
	l.MaxOffsetMetadataBytes = pick(l.MaxOffsetMetadataBytes, d.MaxOffsetMetadataBytes)
	if l.MaxPartitionsPerTopic <= 0 {
		l.MaxPartitionsPerTopic = d.MaxPartitionsPerTopic
	}
	return l
}

// Config configures an Engine. Zero fields take the defaults above.
type Config struct {
	// InitialRebalanceDelay holds the first rebalance of an empty group open
	// for more members (Kafka's group.initial.rebalance.delay.ms). Set
	// NoInitialDelay to turn it off.
	InitialRebalanceDelay time.Duration
	NoInitialDelay        bool
	MinSessionTimeout     time.Duration
	MaxSessionTimeout     time.Duration
	Tick                  time.Duration
	BarrierTimeout        time.Duration
	// OffsetsRetention is how long the offsets of a group without members
	// are kept (after the later of the commit and the group becoming
	// empty); the leader sweeps every OffsetsRetentionCheckInterval.
	OffsetsRetention              time.Duration
	OffsetsRetentionCheckInterval time.Duration
	Limits                        Limits
	Logger                        *slog.Logger
	// Now is the clock (tests may replace it); defaults to time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.InitialRebalanceDelay == 0 && !c.NoInitialDelay {
		c.InitialRebalanceDelay = DefaultInitialRebalanceDelay
	}
	if c.NoInitialDelay {
		c.InitialRebalanceDelay = 0
	}
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.BarrierTimeout == 0 {
		c.BarrierTimeout = DefaultBarrierTimeout
	}
	if c.OffsetsRetention == 0 {
		c.OffsetsRetention = DefaultOffsetsRetention
	}
	if c.OffsetsRetentionCheckInterval == 0 {
		c.OffsetsRetentionCheckInterval = DefaultOffsetsRetentionCheckInterval
	}
	c.Limits = c.Limits.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks the configuration once at start.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.InitialRebalanceDelay < 0:
		return fmt.Errorf("coordinator: initial rebalance delay %v is negative", c.InitialRebalanceDelay)
	case c.MinSessionTimeout <= 0 || c.MaxSessionTimeout < c.MinSessionTimeout:
		return fmt.Errorf("coordinator: session timeout bounds [%v, %v] are not a valid range", c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.Tick <= 0:
		return fmt.Errorf("coordinator: tick %v must be positive", c.Tick)
	case c.OffsetsRetention < time.Millisecond || c.OffsetsRetentionCheckInterval <= 0:
		return fmt.Errorf("coordinator: offsets retention %v (checked every %v) must be at least 1ms and the interval positive", c.OffsetsRetention, c.OffsetsRetentionCheckInterval)
	}
	return nil
}
