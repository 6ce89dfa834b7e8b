package raftnode

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/internal/lograte"
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
//
// With TLS (creds not nil) both sides authenticate with TLS 1.3, because
// on plaintext anyone who reaches the port can forge AppendEntries:
//
//   - Inbound, a loop accepts raw connections and handshakes each in its
//     own goroutine, so a peer that connects and stalls delays nobody
//     else. A connection holds one of the maxConns slots from accept, so
//     stalled handshakes cannot exceed the bound either, and each has
//     handshakeTimeout to finish. Only finished, authorised connections
//     reach raft's Accept. The client must present a certificate of the
//     CA naming a node that is a server of the current Raft
//     configuration (any node while the configuration is empty: a fresh
//     node waits for a leader it cannot know yet).
//   - Outbound, Dial handshakes within raft's dial timeout and checks the
//     server's principal against the configuration (checkServer). The
//     idle re-dial goes through the same dial.
type streamLayer struct {
	lis         net.Listener
	advertise   net.Addr
	maxConns    int
	idleTimeout time.Duration
	log         *slog.Logger

	// TLS only (creds nil: plaintext).
	creds            *auth.Credentials
	handshakeTimeout time.Duration
	serverTLS        *tls.Config
	config           atomic.Pointer[configSource]
	// inboundConns are the connections raft has not closed yet.
	inboundMu    sync.Mutex
	inboundConns map[*inboundConn]struct{}

	// permissive (Config.TLSPermissive): plaintext accepted inbound and
	// dialled when a TLS handshake fails.
	permissive bool
	accepted   chan acceptResult // handshaken conns (or accept errors) for Accept

	// ctx is cancelled by Close: it stops the accept loop and the
	// handshakes in flight, which wg waits for.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	open              atomic.Int64 // inbound connections open (with TLS, handshaking ones too)
	refused           atomic.Uint64
	refusedHandshakes atomic.Uint64
	idleClosed        atomic.Uint64
	refusedWarn       lograte.Limiter
	handshakeWarn     lograte.Limiter
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// configSource reads raft's latest configuration: what peers are checked
// against. It is set once raft exists, which is after the stream layer.
type configSource func() (raft.Configuration, error)

type acceptResult struct {
	conn net.Conn
	err  error
}

// newStreamLayer listens on bind for plaintext TCP. advertise, when not
// nil, is the address reported to raft (and so to other nodes).
func newStreamLayer(bind string, advertise net.Addr, maxConns int, idleTimeout time.Duration, log *slog.Logger) (*streamLayer, error) {
	return listenStream(bind, advertise, maxConns, idleTimeout, log, nil, 0)
}

// newTLSStreamLayer listens on bind for mutual TLS with creds (which must
// hold the node's certificate); an inbound handshake must finish within
// handshakeTimeout. Peers are refused until setConfigSource is called.
func newTLSStreamLayer(bind string, advertise net.Addr, maxConns int, idleTimeout time.Duration, log *slog.Logger,
	creds *auth.Credentials, handshakeTimeout time.Duration) (*streamLayer, error) {
	if creds == nil || creds.Leaf() == nil {
		return nil, errors.New("raft TLS needs credentials with the node's own certificate")
	}
	return listenStream(bind, advertise, maxConns, idleTimeout, log, creds, handshakeTimeout)
}

func listenStream(bind string, advertise net.Addr, maxConns int, idleTimeout time.Duration, log *slog.Logger,
	creds *auth.Credentials, handshakeTimeout time.Duration) (*streamLayer, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	s := &streamLayer{lis: lis, advertise: advertise, maxConns: maxConns, idleTimeout: idleTimeout, log: log,
		creds: creds, handshakeTimeout: handshakeTimeout}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		_ = lis.Close()
		return nil, fmt.Errorf("raft address %s is not an advertisable TCP address", s.Addr())
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if creds != nil {
		s.serverTLS = creds.ServerTLS(true, s.checkClient)
		s.accepted = make(chan acceptResult)
		s.wg.Add(1)
		go s.acceptLoop()
	}
	return s, nil
}

// setConfigSource gives the stream layer raft's configuration to check
// TLS peers against.
func (s *streamLayer) setConfigSource(f configSource) { s.config.Store(&f) }

// configuration is raft's latest configuration, or an error before raft
// exists: then no peer can be checked, and refusing is the safe answer
// (raft retries within a heartbeat).
func (s *streamLayer) configuration() (raft.Configuration, error) {
	f := s.config.Load()
	if f == nil {
		return raft.Configuration{}, errors.New("raft has not started: no configuration to check the peer against yet")
	}
	return (*f)()
}

// Accept returns the next inbound connection within the bound; those
// beyond it are closed here and never reach raft. With TLS, it returns
// connections whose handshake finished and whose peer is authorised.
func (s *streamLayer) Accept() (net.Conn, error) {
	if s.creds != nil {
		select {
		case r := <-s.accepted:
			return r.conn, r.err
		case <-s.ctx.Done():
			return nil, fmt.Errorf("raft stream layer on %s: %w", s.lis.Addr(), net.ErrClosed)
		}
	}
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return nil, err
		}
		if !s.admit(c) {
			continue
		}
		return s.inbound(c), nil
	}
}

// admit takes a slot for c, or closes c when all maxConns are taken.
func (s *streamLayer) admit(c net.Conn) bool {
	if s.open.Add(1) > int64(s.maxConns) {
		s.open.Add(-1)
		// Counted before the peer can see the close.
		s.noteRefused(c.RemoteAddr())
		_ = c.Close()
		return false
	}
	return true
}

// acceptLoop accepts raw TLS-port connections and starts a handshake for
// each admitted one. It never waits on a handshake.
func (s *streamLayer) acceptLoop() {
	defer s.wg.Done()
	const baseDelay, maxDelay = 5 * time.Millisecond, time.Second
	var delay time.Duration
	for {
		c, err := s.lis.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			// Raft logs the error. Back off as raft does, or a persistent
			// error (out of file descriptors) would spin this loop.
			select {
			case s.accepted <- acceptResult{err: err}:
			case <-s.ctx.Done():
				return
			}
			delay = min(max(2*delay, baseDelay), maxDelay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		if !s.admit(c) {
			continue
		}
		s.wg.Add(1)
		go s.handshake(c)
	}
}

// handshake runs the server side of raw's TLS handshake within
// handshakeTimeout and hands the connection to Accept, or closes it and
// gives its slot back.
func (s *streamLayer) handshake(raw net.Conn) {
	defer s.wg.Done()
	err := raw.SetDeadline(time.Now().Add(s.handshakeTimeout))
	if s.permissive && err == nil {
		var plain bool
		raw, plain, err = sniffPlaintext(raw)
		if err == nil && plain {
			err = raw.SetDeadline(time.Time{})
		}
		if err == nil && plain {
			s.deliver(s.inbound(raw))
			return
		}
	}
	tc := tls.Server(raw, s.serverTLS)
	if err == nil {
		err = tc.HandshakeContext(s.ctx)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("no complete handshake within %s: %w", s.handshakeTimeout, err)
		}
	}
	if err == nil {
		// Raft sets no deadlines on inbound connections; the idle
		// timeout's read deadline is set by every Read.
		err = raw.SetDeadline(time.Time{})
	}
	if err != nil {
		if s.ctx.Err() == nil { // not our own shutdown
			s.noteRefusedHandshake(raw.RemoteAddr(), err)
		}
		_ = raw.Close()
		s.open.Add(-1)
		return
	}
	s.deliver(s.inbound(tc))
}

// deliver hands an admitted connection to Accept.
func (s *streamLayer) deliver(c *inboundConn) {
	select {
	case s.accepted <- acceptResult{conn: c}:
	case <-s.ctx.Done():
		_ = c.Close()
	}
}

// tlsHandshakeRecord is the first byte of every TLS connection (a
// handshake record). Raft's RPC types are small numbers, so the first
// byte tells a plaintext raft peer from a TLS one.
const tlsHandshakeRecord = 0x16

// sniffPlaintext reads raw's first byte and returns a connection that
// still yields it, and whether it is not the start of TLS.
func sniffPlaintext(raw net.Conn) (net.Conn, bool, error) {
	br := bufio.NewReader(raw)
	b, err := br.Peek(1)
	if err != nil {
		return raw, false, err
	}
	return &peekedConn{Conn: raw, r: br}, b[0] != tlsHandshakeRecord, nil
}

// peekedConn reads through the buffer that holds the sniffed byte.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// checkClient authorises an inbound peer whose certificate chains to the
// CA: a node of the configuration, or any node while it is empty.
func (s *streamLayer) checkClient(p auth.Principal) error {
	if p.Role != auth.RoleNode {
		return fmt.Errorf("client certificate names %s: only nodes may connect to the raft port", p)
	}
	cfg, err := s.configuration()
	if err != nil {
		return fmt.Errorf("client %s: %w", p, err)
	}
	if len(cfg.Servers) == 0 {
		return nil // a fresh node: the leader that will add it is not known yet
	}
	for _, srv := range cfg.Servers {
		if string(srv.ID) == p.Name {
			return nil
		}
	}
	return fmt.Errorf("client certificate names %s, not a server of the raft configuration %v", p, serverIDs(cfg))
}

// checkServer returns the check of the principal of the server dialled at
// address: the node the configuration has at that address; when it has
// none there (a peer being discovered), any node of the configuration, or
// any node at all while it is empty.
func (s *streamLayer) checkServer(address raft.ServerAddress) func(auth.Principal) error {
	return func(p auth.Principal) error {
		if p.Role != auth.RoleNode {
			return fmt.Errorf("server %s presents %s, not a node", address, p)
		}
		cfg, err := s.configuration()
		if err != nil {
			return fmt.Errorf("server %s (%s): %w", address, p, err)
		}
		var want []raft.ServerID
		for _, srv := range cfg.Servers {
			if srv.Address == address {
				if string(srv.ID) == p.Name {
					return nil
				}
				want = append(want, srv.ID)
			}
		}
		if len(want) > 0 {
			return fmt.Errorf("server %s presents %s, but the raft configuration has node %v at that address", address, p, want)
		}
		if len(cfg.Servers) == 0 {
			return nil
		}
		for _, srv := range cfg.Servers {
			if string(srv.ID) == p.Name {
				return nil
			}
		}
		return fmt.Errorf("server %s presents %s, not a server of the raft configuration %v", address, p, serverIDs(cfg))
	}
}

func serverIDs(cfg raft.Configuration) []raft.ServerID {
	ids := make([]raft.ServerID, len(cfg.Servers))
	for i, srv := range cfg.Servers {
		ids[i] = srv.ID
	}
	return ids
}

func (s *streamLayer) noteRefused(from net.Addr) {
	n := s.refused.Add(1)
	if s.refusedWarn.Allow() {
		s.log.Warn("raft connection refused: too many open connections (--raft-max-conns)",
			"remote_address", from.String(), "max_conns", s.maxConns, "refused_total", n)
	}
}

func (s *streamLayer) noteRefusedHandshake(from net.Addr, reason error) {
	n := s.refusedHandshakes.Add(1)
	if s.handshakeWarn.Allow() {
		s.log.Warn("raft connection refused: TLS handshake failed",
			"remote_address", from.String(), "reason", reason.Error(), "refused_handshakes_total", n)
	}
}

// Close stops accepting and the handshakes in flight; connections handed
// to raft are closed by raft.
func (s *streamLayer) Close() error {
	s.cancel()
	err := s.lis.Close()
	s.wg.Wait()
	return err
}

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
	c, err := s.dial(string(address), timeout)
	if err != nil {
		return nil, err
	}
	o := &outboundConn{addr: string(address), dialTimeout: timeout, stale: s.idleTimeout / 2, conn: c, dial: s.dial}
	o.lastUsed.Store(time.Now().UnixNano())
	return o, nil
}

// dial connects to addr: plain TCP, or with TLS a finished handshake
// (both within timeout) with a server checkServer accepts.
func (s *streamLayer) dial(addr string, timeout time.Duration) (net.Conn, error) {
	if s.creds == nil {
		return net.DialTimeout("tcp", addr, timeout)
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raft TLS dial %s: %w", addr, err)
	}
	tc := tls.Client(raw, s.creds.ClientTLS(s.checkServer(raft.ServerAddress(addr))))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		if s.permissive && ctx.Err() == nil {
			// A peer not yet on TLS closes on the handshake's first byte.
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
		return nil, fmt.Errorf("raft TLS dial %s: %w", addr, err)
	}
	return tc, nil
}

// OpenConns is the number of inbound connections open now (with TLS,
// including those still handshaking).
func (s *streamLayer) OpenConns() int { return int(s.open.Load()) }

// RefusedConns is the number of inbound connections refused so far.
func (s *streamLayer) RefusedConns() uint64 { return s.refused.Load() }

// RefusedHandshakes is the number of inbound TLS connections closed so
// far because their handshake failed, timed out, or the peer was not an
// authorised node.
func (s *streamLayer) RefusedHandshakes() uint64 { return s.refusedHandshakes.Load() }

// IdleClosedConns is the number of inbound connections that timed out idle.
func (s *streamLayer) IdleClosedConns() uint64 { return s.idleClosed.Load() }

// inbound wraps an admitted connection and keeps track of it until raft
// closes it (drainInbound).
func (s *streamLayer) inbound(c net.Conn) *inboundConn {
	ic := &inboundConn{Conn: c, idle: s.idleTimeout, open: &s.open, idleClosed: &s.idleClosed, layer: s}
	s.inboundMu.Lock()
	if s.inboundConns == nil {
		s.inboundConns = map[*inboundConn]struct{}{}
	}
	s.inboundConns[ic] = struct{}{}
	s.inboundMu.Unlock()
	return ic
}

// drainInbound cuts every inbound connection's socket and waits, at most
// timeout, until raft has closed each: raft closes a connection only once
// its handler returned, so after this no RPC handler of this node is still
// running. hashicorp/raft answers heartbeats on the transport's goroutine,
// outside its own shutdown; a heartbeat handled after the log store was
// closed panics ("failed to save current term: database not open").
func (s *streamLayer) drainInbound(timeout time.Duration) error {
	s.inboundMu.Lock()
	conns := make([]*inboundConn, 0, len(s.inboundConns))
	for c := range s.inboundConns {
		conns = append(conns, c)
	}
	s.inboundMu.Unlock()
	for _, c := range conns {
		// The socket only (raft's handler closes the wrapper), without
		// waiting on a peer that does not read (TLS writes an alert).
		_ = c.Conn.SetDeadline(time.Now())
		_ = c.Conn.Close()
	}
	deadline := time.Now().Add(timeout)
	for {
		s.inboundMu.Lock()
		left := len(s.inboundConns)
		s.inboundMu.Unlock()
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d inbound raft connections still handled %s after their sockets were closed", left, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inboundConn closes itself after idle without a byte from the peer and
// gives its slot back when closed.
type inboundConn struct {
	net.Conn
	idle       time.Duration
	open       *atomic.Int64
	idleClosed *atomic.Uint64
	closed     sync.Once
	layer      *streamLayer
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
	c.closed.Do(func() {
		c.open.Add(-1)
		if l := c.layer; l != nil {
			l.inboundMu.Lock()
			delete(l.inboundConns, c)
			l.inboundMu.Unlock()
		}
	})
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
	dial        func(addr string, timeout time.Duration) (net.Conn, error) // the stream layer's

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
	c, err := o.dial(o.addr, o.dialTimeout)
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
