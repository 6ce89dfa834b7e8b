package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/semaphore"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/fsm"
	"github.com/cohortlabs/cohort/internal/lograte"
	"github.com/cohortlabs/cohort/rpc"
)

// Cluster is what the listener needs to know of the cluster: the brokers
// (servers with a Kafka address) and the one that leads.
type Cluster interface {
	KafkaBrokers() []cluster.KafkaBroker
	LeaderKafkaBroker() (cluster.KafkaBroker, bool)
	// KafkaAddress is this node's advertised Kafka address.
	KafkaAddress() string
}

// Defaults for Config.
const (
	// DefaultMaxRequestBytes is the gRPC front's receive limit: the same
	// requests (a JoinGroup with its metadata, a batch of commits) fit.
	DefaultMaxRequestBytes = rpc.DefaultMaxRecvBytes
	// DefaultMaxConnections bounds the open connections of one listener.
	DefaultMaxConnections = 10_000
	// DefaultMaxInFlightBytes bounds the request bytes all of a listener's
	// connections hold at once past each request's first chunk (4 KiB):
	// sixteen of the largest requests. A consumer's requests are hundreds
	// of bytes and never take from it; without it 10,000 connections each
	// sending a 16 MiB request would hold 160 GiB.
	DefaultMaxInFlightBytes = 16 * DefaultMaxRequestBytes
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultRequestTimeout bounds every request but JoinGroup (which may
	// wait a rebalance timeout) and Fetch (its own wait): Kafka's
	// request.timeout.ms.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultMaxFetchWait caps a Fetch's max_wait_ms: an empty answer
	// comes back after at most this long.
	DefaultMaxFetchWait = 5 * time.Second
)

// Config is one node's Kafka listener.
type Config struct {
	Engine  *coordinator.Engine
	FSM     *fsm.FSM
	Cluster Cluster
	// Security is the node's: with TLS configured the listener serves TLS
	// with the node's certificate, and a client certificate's principal is
	// the caller; with tokens, SASL (OAUTHBEARER, PLAIN) authenticates a
	// connection as its token's principal (sasl.go). Either is authorized
	// by the gRPC front's method table. On a node that enforces
	// authorization a caller with neither is anonymous and may only ask
	// ApiVersions, Metadata (brokers, not topics), FindCoordinator and
	// DescribeCluster.
	Security rpc.Security
	Logger   *slog.Logger

	MaxRequestBytes int
	MaxConnections  int
	// MaxInFlightBytes bounds the bytes of the requests being read or
	// served on all connections together, past each one's first chunk
	// (Kafka's queued.max.request.bytes). A request that finds no room
	// stops being read, its bytes left in the socket, for up to the
	// request timeout; then its connection closes.
	MaxInFlightBytes int
	IdleTimeout      time.Duration
	RequestTimeout   time.Duration
	MaxFetchWait     time.Duration
}

func (c *Config) setDefaults() {
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxInFlightBytes == 0 {
		c.MaxInFlightBytes = max(DefaultMaxInFlightBytes, c.MaxRequestBytes)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxFetchWait == 0 {
		c.MaxFetchWait = DefaultMaxFetchWait
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server is a node's Kafka listener. Create it with New, start it with
// Serve, stop it with Close.
type Server struct {
	cfg     Config
	authz   *rpc.Authorizer
	log     *slog.Logger
	m       *metrics
	ctx     context.Context
	cancel  context.CancelFunc
	tlsConf *tls.Config
	live    liveness
	meta    metadataCache
	// inFlight holds MaxInFlightBytes: a request takes each growth of its
	// buffer past the first chunk before reading into it, and gives all
	// back once its answer is written.
	inFlight *semaphore.Weighted
	// refusedWarn spaces the warnings about refused connections,
	// anonWarn those about anonymous requests over the first chunk.
	refusedWarn, anonWarn lograte.Limiter

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New prepares a listener; Serve starts it.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	switch {
	case cfg.Engine == nil || cfg.FSM == nil || cfg.Cluster == nil:
		return nil, errors.New("kafka listener: the engine, the FSM and the cluster are required")
	case cfg.MaxRequestBytes < 1024:
		return nil, fmt.Errorf("kafka listener: max request bytes %d is below 1024", cfg.MaxRequestBytes)
	case cfg.MaxConnections < 1:
		return nil, fmt.Errorf("kafka listener: max connections %d must be positive", cfg.MaxConnections)
	case cfg.MaxInFlightBytes < cfg.MaxRequestBytes:
		return nil, fmt.Errorf("kafka listener: max in-flight bytes %d is below max request bytes %d: the largest request could never be read", cfg.MaxInFlightBytes, cfg.MaxRequestBytes)
	}
	s := newServer(cfg)
	if cfg.Security.TLS != nil {
		// A certificate is asked for but not required: without one the
		// caller is anonymous and authorization refuses what it may not do.
		s.tlsConf = cfg.Security.TLS.ServerTLS(false, nil)
	}
	return s, nil
}

// Serve accepts connections on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.live.run(s.ctx, s.cfg.Cluster, s.cfg.Cluster.KafkaAddress)
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("kafka listener %s: %w", ln.Addr(), err)
		}
		if !s.track(nc) {
			nc.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(nc)
			s.serveConn(nc)
		}()
	}
}

// track adds a connection unless the listener is closed or full.
func (s *Server) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if len(s.conns) >= s.cfg.MaxConnections {
		s.m.refusedConns.Inc()
		if s.refusedWarn.Allow() {
			s.log.Warn("kafka connection refused: the listener is full (a warning at most every 10 s)", "remote", nc.RemoteAddr(), "max_connections", s.cfg.MaxConnections)
		}
		return false
	}
	s.conns[nc] = struct{}{}
	s.m.conns.Inc()
	return true
}

func (s *Server) untrack(nc net.Conn) {
	nc.Close()
	s.mu.Lock()
	delete(s.conns, nc)
	s.mu.Unlock()
	s.m.conns.Dec()
}

// Close stops accepting, closes every connection (their requests in the
// engine are cancelled) and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// conn is one client connection: requests are served one at a time and
// answered in order, as a Kafka broker does.
type conn struct {
	nc        net.Conn
	principal auth.Principal
	host      string
	// mechanism is the SASL mechanism a handshake chose, until the
	// authentication that follows it (sasl.go).
	mechanism string
	// closing ends the connection once the answer in hand is written: a
	// failed SASL authentication, as Kafka's brokers do (sasl.go).
	closing bool
	// out is the last answer's buffer, reused for the next (a connection
	// serves one request at a time): a Metadata answer for a large topic
	// is tens of kilobytes, and a thousand consumers ask often.
	out []byte
}

// newServer is a listener of a checked, defaulted configuration.
func newServer(cfg Config) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg: cfg, authz: rpc.NewAuthorizer(cfg.Security), log: cfg.Logger.With("component", "kafka"), m: newMetrics(),
		ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}, inFlight: semaphore.NewWeighted(int64(cfg.MaxInFlightBytes)),
	}
}

// maxKeptAnswerBytes bounds the answer buffer a connection keeps between
// requests.
const maxKeptAnswerBytes = 1 << 20

func (s *Server) serveConn(nc net.Conn) {
	c := &conn{nc: nc}
	if host, _, err := net.SplitHostPort(nc.RemoteAddr().String()); err == nil {
		c.host = host
	}
	if s.tlsConf != nil {
		tc := tls.Server(nc, s.tlsConf)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.HandshakeContext(s.ctx); err != nil {
			s.log.Debug("kafka TLS handshake failed", "remote", nc.RemoteAddr(), "err", err)
			return
		}
		_ = tc.SetDeadline(time.Time{})
		if chains := tc.ConnectionState().VerifiedChains; len(chains) > 0 {
			p, err := auth.FromCertificate(chains[0][0])
			if err != nil {
				s.log.Warn("kafka client certificate names no usable principal; closing", "remote", nc.RemoteAddr(), "err", err)
				return
			}
			c.principal = p
		}
		c.nc = tc
	}
	r := bufio.NewReader(c.nc)
	w := bufio.NewWriter(c.nc)
	var size [4]byte
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return // closed by the client, idle, or the listener closing
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		if n < 8 || int(n) > s.cfg.MaxRequestBytes {
			s.m.refusedRequests.Inc()
			s.log.Warn("kafka request refused: its size is out of range; closing the connection", "remote", nc.RemoteAddr(), "size", n, "max", s.cfg.MaxRequestBytes)
			return
		}
		if int(n) > frameChunk && s.cfg.Security.Enforced() && c.principal.Anonymous() {
			s.m.refusedRequests.Inc()
			if s.anonWarn.Allow() {
				s.log.Warn("kafka request refused: larger than an unauthenticated connection may send; the client must log in with SASL or present a client certificate first; closing the connection (a warning at most every 10 s)",
					"remote", nc.RemoteAddr(), "size", n, "max_unauthenticated", frameChunk)
			}
			return
		}
		if !s.serveRequest(c, r, w, int(n)) {
			return
		}
	}
}

// serveRequest reads a request body of n bytes, serves it and writes the
// answer; false closes the connection.
func (s *Server) serveRequest(c *conn, r *bufio.Reader, w *bufio.Writer, n int) bool {
	// The body must follow within the request timeout: the idle timeout
	// is for the quiet between requests, not a stalled one.
	_ = c.nc.SetReadDeadline(time.Now().Add(s.cfg.RequestTimeout))
	var held int64
	defer func() { s.release(held) }()
	frame, err := readFrame(r, n, func(more int) bool {
		if !s.acquire(int64(more)) {
			return false
		}
		held += int64(more)
		return true
	})
	if errors.Is(err, errNoRoom) && s.ctx.Err() == nil { // not the listener closing
		s.m.refusedRequests.Inc()
		s.log.Warn("kafka request refused: the listener's in-flight request bytes stayed spent for the request timeout; closing the connection",
			"remote", c.nc.RemoteAddr(), "size", n, "max_in_flight_bytes", s.cfg.MaxInFlightBytes, "request_timeout", s.cfg.RequestTimeout)
	}
	if err != nil {
		return false
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	out, err := s.handle(c, frame)
	if err != nil {
		s.m.refusedRequests.Inc()
		s.log.Warn("kafka request refused; closing the connection", "remote", c.nc.RemoteAddr(), "client", c.principal, "err", err)
		return false
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(s.cfg.RequestTimeout))
	if _, err := w.Write(out); err != nil {
		return false
	}
	if err := w.Flush(); err != nil {
		return false
	}
	if c.closing {
		return false
	}
	if c.out = out[:0]; cap(c.out) > maxKeptAnswerBytes {
		c.out = nil
	}
	return true
}

// acquire takes n of the listener's in-flight request bytes, waiting up to
// the request timeout (or the listener's closing) while other
// connections' requests hold them.
func (s *Server) acquire(n int64) bool {
	if !s.inFlight.TryAcquire(n) {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
		defer cancel()
		if s.inFlight.Acquire(ctx, n) != nil {
			return false
		}
	}
	s.m.inFlightBytes.Add(float64(n))
	return true
}

func (s *Server) release(n int64) {
	if n > 0 {
		s.m.inFlightBytes.Sub(float64(n))
		s.inFlight.Release(n)
	}
}

// frameChunk is the buffer a request's body starts in; it doubles as the
// body arrives. It is the part of a request that takes nothing from the
// listener's in-flight bytes: a consumer's heartbeats, commits, joins and
// followers' syncs are hundreds of bytes, while 10,000 connections' first
// chunks, decoded (up to 24 times larger, docs/kafka.md), stay under 1 GiB.
//
// It is also the largest request of a connection that has not
// authenticated, on a node that enforces authorization (as Kafka bounds
// requests before SASL with sasl.server.max.receive.size): what an
// anonymous caller may ask (ApiVersions, a SASL exchange, the brokers,
// a coordinator) fits in it, and a larger request is refused from its
// size alone. So strangers never take from the in-flight bytes, which
// decoded would be up to 24 times larger (16 requests of 16 MiB: 6 GiB).
const frameChunk = 4 << 10

// errNoRoom ends the read of a request that found no room in the
// listener's in-flight bytes within the request timeout.
var errNoRoom = errors.New("no room in the listener's in-flight request bytes")

// readFrame reads a request body of n bytes. The size is the client's
// claim: the buffer grows as the bytes arrive, so a client that announces
// the largest request and sends little of it holds about what it sent.
// The first chunk is free; each growth past it is asked of take first
// (the listener's in-flight bytes), so the requests of every heartbeat,
// commit and join, far under a chunk, never wait for room.
func readFrame(r io.Reader, n int, take func(int) bool) ([]byte, error) {
	frame := make([]byte, min(n, frameChunk))
	for got := 0; ; {
		if _, err := io.ReadFull(r, frame[got:]); err != nil {
			return nil, err
		}
		if got = len(frame); got == n {
			return frame, nil
		}
		more := min(n-got, got)
		if !take(more) {
			return nil, errNoRoom
		}
		grown := make([]byte, got+more)
		copy(grown, frame)
		frame = grown
	}
}

// header is a request header (v1, or v2 for flexible versions).
type header struct {
	key, version int16
	correlation  int32
	clientID     string
}

// parseHeader splits a frame into its header and body. The header's
// client ID is a nullable int16-length string in every version; a
// flexible header then has tagged fields, which are skipped.
func parseHeader(frame []byte) (header, []byte, error) {
	var h header
	if len(frame) < 10 {
		return h, nil, fmt.Errorf("request of %d bytes is shorter than a header", len(frame))
	}
	h.key = int16(binary.BigEndian.Uint16(frame[0:]))
	h.version = int16(binary.BigEndian.Uint16(frame[2:]))
	h.correlation = int32(binary.BigEndian.Uint32(frame[4:]))
	n := int16(binary.BigEndian.Uint16(frame[8:]))
	rest := frame[10:]
	if n > 0 {
		if int(n) > len(rest) {
			return h, nil, fmt.Errorf("client_id of %d bytes overruns the request", n)
		}
		h.clientID, rest = string(rest[:n]), rest[n:]
	}
	return h, rest, nil
}

// skipTags skips a tagged-field section.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errors.New("truncated tagged fields in the request header")
	}
	b = b[n:]
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errors.New("truncated tag in the request header")
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, errors.New("truncated tag in the request header")
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// handle decodes one request, serves it and encodes the answer, framed.
// An error closes the connection: Kafka's answer to a request it cannot
// parse or whose version it does not serve (except ApiVersions, which is
// answered so that the client can pick versions).
func (s *Server) handle(c *conn, frame []byte) ([]byte, error) {
	h, body, err := parseHeader(frame)
	if err != nil {
		return nil, err
	}
	api, ok := apis[h.key]
	if !ok {
		return nil, fmt.Errorf("API key %d (%s) is not served", h.key, kmsg.NameForKey(h.key))
	}
	if h.version < api.min || h.version > api.max {
		if h.key == kmsg.ApiVersions.Int16() {
			return frameResponse(c.out, h, unsupportedAPIVersions(), false), nil
		}
		return nil, fmt.Errorf("%s v%d is not served (v%d to v%d are)", kmsg.NameForKey(h.key), h.version, api.min, api.max)
	}
	req := kmsg.RequestForKey(h.key)
	req.SetVersion(h.version)
	if req.IsFlexible() {
		if body, err = skipTags(body); err != nil {
			return nil, err
		}
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s v%d: malformed: %v", kmsg.NameForKey(h.key), h.version, err)
	}
	if err := s.overLimit(req); err != nil {
		return nil, err
	}
	start := time.Now()
	resp := s.serve(c, h, req)
	resp.SetVersion(h.version)
	s.m.observe(kmsg.NameForKey(h.key), time.Since(start))
	return frameResponse(c.out, h, resp, req.IsFlexible()), nil
}

// frameResponse is the size, the response header (the correlation ID,
// and empty tagged fields on a flexible version but ApiVersions', whose
// header is always v0) and the body, in dst's storage (reused).
func frameResponse(dst []byte, h header, resp kmsg.Response, flexible bool) []byte {
	out := append(dst[:0], 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(out[4:], uint32(h.correlation))
	if flexible && h.key != kmsg.ApiVersions.Int16() {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// serve answers one decoded request.
func (s *Server) serve(c *conn, h header, req kmsg.Request) kmsg.Response {
	timeout := s.cfg.RequestTimeout
	if r, ok := req.(*kmsg.JoinGroupRequest); ok {
		timeout = max(timeout, time.Duration(rebalanceTimeout(r))*time.Millisecond+timeout)
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	cl := &call{s: s, c: c, h: h}
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return apiVersions(r)
	case *kmsg.SASLHandshakeRequest:
		return cl.saslHandshake(r)
	case *kmsg.SASLAuthenticateRequest:
		return cl.saslAuthenticate(r)
	case *kmsg.MetadataRequest:
		return cl.metadata(r)
	case *kmsg.FindCoordinatorRequest:
		return s.findCoordinator(r)
	case *kmsg.DescribeClusterRequest:
		return s.describeCluster(r)
	case *kmsg.JoinGroupRequest:
		return cl.joinGroup(ctx, r)
	case *kmsg.SyncGroupRequest:
		return cl.syncGroup(ctx, r)
	case *kmsg.HeartbeatRequest:
		return cl.heartbeat(ctx, r)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return cl.consumerGroupHeartbeat(ctx, r)
	case *kmsg.ConsumerGroupDescribeRequest:
		return cl.consumerGroupDescribe(ctx, r)
	case *kmsg.LeaveGroupRequest:
		return cl.leaveGroup(ctx, r)
	case *kmsg.OffsetCommitRequest:
		return cl.offsetCommit(ctx, r)
	case *kmsg.OffsetFetchRequest:
		return cl.offsetFetch(ctx, r)
	case *kmsg.OffsetDeleteRequest:
		return cl.offsetDelete(ctx, r)
	case *kmsg.DescribeGroupsRequest:
		return cl.describeGroups(ctx, r)
	case *kmsg.ListGroupsRequest:
		return cl.listGroups(ctx, r)
	case *kmsg.DeleteGroupsRequest:
		return cl.deleteGroups(ctx, r)
	case *kmsg.CreateTopicsRequest:
		return cl.createTopics(ctx, r)
	case *kmsg.DeleteTopicsRequest:
		return cl.deleteTopics(ctx, r)
	case *kmsg.CreatePartitionsRequest:
		return cl.createPartitions(ctx, r)
	case *kmsg.FetchRequest:
		return cl.fetch(r)
	case *kmsg.ListOffsetsRequest:
		return cl.listOffsets(r)
	}
	panic(fmt.Sprintf("kafka: API %s is in the table but has no handler", kmsg.NameForKey(h.key)))
}

// call is one request in flight: the connection's caller and the header.
type call struct {
	s *Server
	c *conn
	h header
}
