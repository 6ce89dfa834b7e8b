package rpc

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/cohortlabs/cohort/internal/flowcontrol"
)

// Defaults for Limits. gRPC's own receive limit (4 MiB) is smaller than
// answers the replicated budgets allow (fsm.DefaultBudgets): a group's
// member metadata alone may reach 8 MiB, and the leader's JoinGroup answer
// carries all of it. So the limits are set on purpose, on both sides:
//
//   - A node receives at most 16 MiB in one message: twice the largest
//     JoinGroup or SyncGroup content the budgets admit (8 MiB of member
//     metadata per group), four times a committer batch (4 MiB).
//   - A node sends at most 1 GiB in one message; paged reads (OffsetFetch,
//     DescribeGroups, ListGroups, ListTopics) keep their answers far below
//     it, and the unpaged ones (JoinGroup, SyncGroup) are bounded by the
//     budgets. Clients and the forwarding path receive up to the same 1 GiB,
//     so any answer a node sends is one its receiver accepts.
const (
	DefaultMaxRecvBytes = 16 << 20
	DefaultMaxSendBytes = 1 << 30
	// DefaultMaxConcurrentStreams bounds the calls in flight on one
	// connection (gRPC's default is no bound).
	DefaultMaxConcurrentStreams = 65_536
	// DefaultKeepaliveTime is how long a connection may be quiet before
	// the server pings it; DefaultKeepaliveTimeout how long the server waits
	// for the ack before closing it. A client that vanished (a killed host,
	// a partition) stops holding its streams within their sum.
	DefaultKeepaliveTime    = time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	// DefaultMaxConnections bounds the connections open on the gRPC port at
	// once, as the Kafka listener's (kafka.DefaultMaxConnections): a member
	// or a cohortctl holds one, a node one to the leader.
	DefaultMaxConnections = 10_000
	// DefaultHandshakeTimeout is how long a new connection has to finish
	// its TLS handshake and HTTP/2 preface (gRPC's own default is 2
	// minutes, during which the connection holds a slot).
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxConnectionIdle closes a connection with no call in flight
	// for this long (Kafka's connections.max.idle.ms): a client's
	// connection comes back at its next call. A member is never idle: it
	// heartbeats or watches.
	DefaultMaxConnectionIdle = 10 * time.Minute
)

// MaxClientRecvBytes is the receive limit of every client of a node that
// Cohort creates (the forwarding path, peers, cohortctl's default, the Go
// client's): the largest answer a node sends.
const MaxClientRecvBytes = DefaultMaxSendBytes

// Limits are a node's gRPC server limits: message sizes, streams per
// connection and the keepalive policy. Start from DefaultLimits.
type Limits struct {
	// MaxRecvBytes is the largest request message accepted; a larger one is
	// refused with ResourceExhausted before it is decoded.
	MaxRecvBytes int
	// MaxSendBytes is the largest answer sent; answering a larger one fails
	// with ResourceExhausted.
	MaxSendBytes int
	// MaxConcurrentStreams bounds the calls in flight per connection.
	MaxConcurrentStreams uint32
	// KeepaliveTime and KeepaliveTimeout: the server pings a connection
	// quiet for KeepaliveTime and closes it when no ack comes within
	// KeepaliveTimeout.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the most often a client may ping; more often is
	// answered with GOAWAY. Pings are allowed without calls in flight (the
	// forwarding path's connections are idle most of the time).
	KeepaliveMinTime time.Duration
	// MaxConnections bounds the connections open at once; one more is
	// closed as soon as it is accepted (LimitConnections).
	MaxConnections int
	// HandshakeTimeout: a connection that has not finished its TLS
	// handshake and HTTP/2 preface within it is closed.
	HandshakeTimeout time.Duration
	// MaxConnectionIdle: a connection with no call in flight for this long
	// is sent GOAWAY and closed.
	MaxConnectionIdle time.Duration
}

// DefaultLimits are the limits cohortd starts from.
func DefaultLimits() Limits {
	return Limits{
		MaxRecvBytes:         DefaultMaxRecvBytes,
		MaxSendBytes:         DefaultMaxSendBytes,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams,
		KeepaliveTime:        DefaultKeepaliveTime,
		KeepaliveTimeout:     DefaultKeepaliveTimeout,
		KeepaliveMinTime:     forwardPingInterval / 2,
		MaxConnections:       DefaultMaxConnections,
		HandshakeTimeout:     DefaultHandshakeTimeout,
		MaxConnectionIdle:    DefaultMaxConnectionIdle,
	}
}

// Validate reports every field out of range, with its value.
func (l Limits) Validate() error {
	var errs []error
	// gRPC frames a message with a 32-bit length.
	if l.MaxRecvBytes < 1<<20 || l.MaxRecvBytes > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("grpc max recv bytes %d: must be between 1 MiB (%d) and %d", l.MaxRecvBytes, 1<<20, math.MaxInt32))
	}
	if l.MaxSendBytes < 1<<20 || l.MaxSendBytes > MaxClientRecvBytes {
		errs = append(errs, fmt.Errorf("grpc max send bytes %d: must be between 1 MiB (%d) and %d, what clients receive", l.MaxSendBytes, 1<<20, MaxClientRecvBytes))
	}
	if l.MaxConcurrentStreams == 0 {
		errs = append(errs, errors.New("grpc max concurrent streams 0: must be positive"))
	}
	if l.KeepaliveTime <= 0 || l.KeepaliveTimeout <= 0 {
		errs = append(errs, fmt.Errorf("grpc keepalive time %s, timeout %s: must be positive", l.KeepaliveTime, l.KeepaliveTimeout))
	}
	if l.KeepaliveMinTime <= 0 || l.KeepaliveMinTime > forwardPingInterval {
		errs = append(errs, fmt.Errorf("grpc keepalive min time %s: must be positive and at most the forwarding ping interval %s", l.KeepaliveMinTime, forwardPingInterval))
	}
	if l.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("grpc max conns %d: must be at least 1", l.MaxConnections))
	}
	if l.HandshakeTimeout <= 0 || l.MaxConnectionIdle <= 0 {
		errs = append(errs, fmt.Errorf("grpc handshake timeout %s, max conn idle %s: must be positive", l.HandshakeTimeout, l.MaxConnectionIdle))
	}
	return errors.Join(errs...)
}

// ServerOptions are the grpc.ServerOptions that apply the limits, and the
// flow-control windows every Cohort connection has.
func (l Limits) ServerOptions() []grpc.ServerOption {
	return append(flowcontrol.ServerOptions(),
		grpc.MaxRecvMsgSize(l.MaxRecvBytes),
		grpc.MaxSendMsgSize(l.MaxSendBytes),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: l.KeepaliveTime, Timeout: l.KeepaliveTimeout, MaxConnectionIdle: l.MaxConnectionIdle}),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
	)
}

// clientOptions raise a node's own clients' receive limit to what a node
// may send (gRPC's default is 4 MiB), let them send what a node receives,
// and set the flow-control windows every Cohort connection has.
func clientOptions() []grpc.DialOption {
	return append(flowcontrol.DialOptions(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxClientRecvBytes), grpc.MaxCallSendMsgSize(math.MaxInt32)))
}
