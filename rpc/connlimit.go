package rpc

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohortlabs/cohort/internal/lograte"
)

// ConnLimiter is the gRPC port's listener with a bound on the connections
// open at once: one more is closed as soon as it is accepted, before its
// handshake, so that no stranger can hold more than the bound of
// goroutines and buffers (the Raft port and the Kafka listener have the
// same bound). A connection keeps its slot until gRPC closes it.
//
// gRPC sets TCP_USER_TIMEOUT (data unacknowledged for its keepalive
// timeout closes the connection) only on a bare *net.TCPConn, which these
// wrapped connections are not; the limiter sets it on each connection it
// accepts instead, to Limits.KeepaliveTimeout as gRPC would.
type ConnLimiter struct {
	net.Listener
	max         int64
	userTimeout time.Duration
	open        atomic.Int64
	refused     atomic.Int64
	warn        lograte.Limiter
	log         *slog.Logger
	metrics     []prometheus.Collector
}

// LimitConnections wraps lis so that at most limits.MaxConnections
// connections are open, each with TCP_USER_TIMEOUT set to
// limits.KeepaliveTimeout.
func LimitConnections(lis net.Listener, limits Limits, log *slog.Logger) *ConnLimiter {
	l := &ConnLimiter{Listener: lis, max: int64(limits.MaxConnections), userTimeout: limits.KeepaliveTimeout, log: log}
	l.metrics = []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cohort_grpc_connections_refused_total",
			Help: "Connections to the gRPC port closed as soon as accepted: --grpc-max-conns were open.",
		}, func() float64 { return float64(l.refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cohort_grpc_connections",
			Help: "Connections open on the gRPC port (at most --grpc-max-conns).",
		}, func() float64 { return float64(l.open.Load()) }),
	}
	return l
}

// Accept returns the next connection that fits the bound.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			n := l.refused.Add(1) // counted before the peer sees the close
			_ = c.Close()
			if l.warn.Allow() {
				l.log.Warn("grpc connection refused: too many open connections (--grpc-max-conns)",
					"remote_address", c.RemoteAddr().String(), "max_conns", l.max, "refused_total", n)
			}
			continue
		}
		if err := setUserTimeout(c, l.userTimeout); err != nil {
			// As gRPC does when it cannot set the option: the connection
			// is not served.
			l.open.Add(-1)
			_ = c.Close()
			l.log.Warn("grpc connection closed: cannot set TCP_USER_TIMEOUT", "remote_address", c.RemoteAddr().String(), "error", err)
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// Open is the number of connections holding a slot.
func (l *ConnLimiter) Open() int { return int(l.open.Load()) }

// Refused is the number of connections closed for want of a slot.
func (l *ConnLimiter) Refused() int64 { return l.refused.Load() }

// Collectors are the listener's metrics: open connections and refusals.
func (l *ConnLimiter) Collectors() []prometheus.Collector { return l.metrics }

// limitedConn gives its slot back when closed, once.
type limitedConn struct {
	net.Conn
	l    *ConnLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
