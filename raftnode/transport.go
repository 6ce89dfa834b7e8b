package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is the Raft transport's TCP layer with limits: hashicorp's
// TCPStreamLayer accepts every connection and keeps it until the peer
// closes it, so anyone who reaches the Raft port could hold memory (about
// 260 KiB of buffers per connection) without bound.
//
//   - At most maxConns inbound connections are open at once; one more is
//     accepted and closed at once, so the peer sees EOF rather than a
//     connection that hangs in the backlog.
//   - An inbound connection whose peer sends nothing for idleTimeout is
//     closed: every Read pushes the read deadline forward. Raft's own
//     connections are never that quiet while in use (heartbeats every
//     HeartbeatTimeout/10), and a request being processed is not a read.
//   - An outbound connection (pooled by raft per peer) that sat unused for
//     half the idle timeout is re-dialled before its next request, so the
//     peer's idle close never fails an RPC. This assumes every node runs
//     with an idle timeout of at least half of this node's.
type streamLayer struct {
	lis         net.Listener
	advertise   net.Addr
	maxConns    int
	idleTimeout time.Duration
	log         *slog.Logger

	open       atomic.Int64 // inbound connections open
	refused    atomic.Uint64
	idleClosed atomic.Uint64
	lastWarnM  sync.Mutex
	lastWarn   time.Time
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// refusedLogInterval spaces the warnings about refused connections: a
// flood must not become a flood of log lines.
const refusedLogInterval = 10 * time.Second

// newStreamLayer listens on bind. advertise, when not nil, is the address
// reported to raft (and so to other nodes).
func newStreamLayer(bind string, advertise net.Addr, maxConns int, idleTimeout time.Duration, log *slog.Logger) (*streamLayer, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	s := &streamLayer{lis: lis, advertise: advertise, maxConns: maxConns, idleTimeout: idleTimeout, log: log}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		_ = lis.Close()
		return nil, fmt.Errorf("raft address %s is not an advertisable TCP address", s.Addr())
	}
	return s, nil
}

// Accept returns the next inbound connection within the bound; those
// beyond it are closed here and never reach raft.
func (s *streamLayer) Accept() (net.Conn, error) {
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return nil, err
		}
		if s.open.Add(1) > int64(s.maxConns) {
			s.open.Add(-1)
			_ = c.Close()
			s.noteRefused(c.RemoteAddr())
			continue
		}
		return &inboundConn{Conn: c, idle: s.idleTimeout, open: &s.open, idleClosed: &s.idleClosed}, nil
	}
}

func (s *streamLayer) noteRefused(from net.Addr) {
	n := s.refused.Add(1)
	s.lastWarnM.Lock()
	defer s.lastWarnM.Unlock()
	if now := time.Now(); now.Sub(s.lastWarn) >= refusedLogInterval {
		s.lastWarn = now
		s.log.Warn("raft connection refused: too many open connections (--raft-max-conns)",
			"remote_address", from.String(), "max_conns", s.maxConns, "refused_total", n)
	}
}

// Close stops accepting; open connections are closed by raft.
func (s *streamLayer) Close() error { return s.lis.Close() }

// Addr is the advertised address, or the listener's.
func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.lis.Addr()
}

// Dial opens an outbound connection that re-dials itself when it was left
// idle long enough for the peer to have closed it.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	o := &outboundConn{addr: string(address), dialTimeout: timeout, stale: s.idleTimeout / 2, conn: c}
	o.lastUsed.Store(time.Now().UnixNano())
	return o, nil
}

// OpenConns is the number of inbound connections open now.
func (s *streamLayer) OpenConns() int { return int(s.open.Load()) }

// RefusedConns is the number of inbound connections refused so far.
func (s *streamLayer) RefusedConns() uint64 { return s.refused.Load() }

// IdleClosedConns is the number of inbound connections that timed out idle.
func (s *streamLayer) IdleClosedConns() uint64 { return s.idleClosed.Load() }

// inboundConn closes itself after idle without a byte from the peer and
// gives its slot back when closed.
type inboundConn struct {
	net.Conn
	idle       time.Duration
	open       *atomic.Int64
	idleClosed *atomic.Uint64
	closed     sync.Once
}

// Read fails with os.ErrDeadlineExceeded once the peer was silent for the
// idle timeout; raft then closes the connection.
func (c *inboundConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.idleClosed.Add(1)
	}
	return n, err
}

// SetDeadline and SetReadDeadline are not used by raft on inbound
// connections; the idle deadline set on every Read would override them.
func (c *inboundConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() { c.open.Add(-1) })
	return err
}

// outboundConn is a connection to a peer that replaces its socket, before
// a write, when nothing was sent or received on it for stale: raft's
// request/response framing keeps no state between requests, so a fresh
// socket at a request's start is the same conversation.
type outboundConn struct {
	addr        string
	dialTimeout time.Duration
	stale       time.Duration

	mu       sync.Mutex
	conn     net.Conn
	readDL   time.Time
	writeDL  time.Time
	lastUsed atomic.Int64 // unix nanoseconds of the last read or write
	reading  atomic.Int32
}

func (o *outboundConn) current() net.Conn {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.conn
}

func (o *outboundConn) touch() { o.lastUsed.Store(time.Now().UnixNano()) }

func (o *outboundConn) Read(p []byte) (int, error) {
	o.reading.Add(1)
	defer o.reading.Add(-1)
	n, err := o.current().Read(p)
	o.touch()
	return n, err
}

func (o *outboundConn) Write(p []byte) (int, error) {
	c, err := o.freshen()
	if err != nil {
		return 0, err
	}
	n, err := c.Write(p)
	o.touch()
	return n, err
}

// freshen returns the socket to write on, re-dialled when the old one was
// idle past stale and no response is being read from it.
func (o *outboundConn) freshen() (net.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	idle := time.Since(time.Unix(0, o.lastUsed.Load()))
	if o.stale <= 0 || idle < o.stale || o.reading.Load() > 0 {
		return o.conn, nil
	}
	c, err := net.DialTimeout("tcp", o.addr, o.dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("re-dial idle raft connection to %s: %w", o.addr, err)
	}
	var errs []error
	if !o.readDL.IsZero() {
		errs = append(errs, c.SetReadDeadline(o.readDL))
	}
	if !o.writeDL.IsZero() {
		errs = append(errs, c.SetWriteDeadline(o.writeDL))
	}
	if err := errors.Join(errs...); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = o.conn.Close()
	o.conn = c
	o.touch()
	return c, nil
}

func (o *outboundConn) Close() error         { return o.current().Close() }
func (o *outboundConn) LocalAddr() net.Addr  { return o.current().LocalAddr() }
func (o *outboundConn) RemoteAddr() net.Addr { return o.current().RemoteAddr() }
func (o *outboundConn) SetDeadline(t time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.readDL, o.writeDL = t, t
	return o.conn.SetDeadline(t)
}

func (o *outboundConn) SetReadDeadline(t time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.readDL = t
	return o.conn.SetReadDeadline(t)
}

func (o *outboundConn) SetWriteDeadline(t time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writeDL = t
	return o.conn.SetWriteDeadline(t)
}
