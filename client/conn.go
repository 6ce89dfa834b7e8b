package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/flowcontrol"
)

// LeaderHeader is the response metadata key naming the Raft leader's gRPC
// address.
const LeaderHeader = "cohort-leader"

// MaxRecvMsgSize is the largest answer a Conn accepts: the largest a node
// sends (cohortd --grpc-max-send-bytes, 1 GiB by default). gRPC's own
// default, 4 MiB, is below answers the replicated budgets allow (a
// JoinGroup answer carries up to 8 MiB of member metadata). DialOptions
// given in the config are applied after it and may lower it.
const MaxRecvMsgSize = 1 << 30

// Conn is a gRPC connection to a Cohort cluster over a list of endpoints.
// It implements grpc.ClientConnInterface, so the generated clients work on
// it directly (Conn.Groups, Conn.Topics), and every call through it:
//
//   - goes to the leader the cluster last named in its `cohort-leader`
//     header, or to the current endpoint while none is known;
//   - on Unavailable (node down, NOT_LEADER) or COORDINATOR_NOT_AVAILABLE,
//     or when one attempt exceeds its timeout, is sent again unchanged to
//     the named leader or the next endpoint, with exponential backoff and
//     jitter, until it succeeds, fails for another reason, or ctx ends;
//   - while one attempt has been outstanding longer than
//     LeaderCheckInterval, asks the other nodes every interval which
//     leader they know (NodeInfo), and when they name another node than
//     the attempt's (the newest Raft term wins), abandons the attempt and
//     sends the request to that leader at once: a frozen leader keeps its
//     connections open, so its calls would otherwise wait out the timeout.
//
// Sending the same request again is what keeps a member's ID and
// generation across a failover; the server makes the retries idempotent.
// A Conn is safe for concurrent use.
type Conn struct {
	cfg     ConnConfig
	dial    []grpc.DialOption
	backoff backoff
	log     *slog.Logger

	mu       sync.Mutex
	closed   bool
	conns    map[string]*grpc.ClientConn
	target   string // address to use next; "" means endpoints[next]
	next     int
	leader   string               // last leader the cluster named
	failedAt map[string]time.Time // last retryable failure per address
	// checkedTerm is the highest Raft term a leader check heard a leader
	// named in (leadercheck.go).
	checkedTerm uint64
}

var _ grpc.ClientConnInterface = (*Conn)(nil)

// Dial returns a Conn over cfg.Endpoints. It does not connect yet: the
// first call does.
func Dial(cfg ConnConfig) (*Conn, error) {
	cfg = cfg.withDefaults()
	if err := validateConnConfig(cfg); err != nil {
		return nil, fmt.Errorf("cohort: invalid connection config: %w", err)
	}
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	dial := append(cfg.Credentials.DialOptions(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvMsgSize)))
	dial = append(dial, flowcontrol.DialOptions()...)
	dial = append(dial, cfg.DialOptions...)
	return &Conn{
		cfg:      cfg,
		dial:     dial,
		backoff:  newBackoff(cfg.RetryBackoffMin, cfg.RetryBackoffMax),
		log:      cfg.Logger,
		conns:    map[string]*grpc.ClientConn{},
		failedAt: map[string]time.Time{},
	}, nil
}

// Groups returns the GroupCoordinator client over this Conn.
func (c *Conn) Groups() cohortv1.GroupCoordinatorClient {
	return cohortv1.NewGroupCoordinatorClient(c)
}

// Topics returns the Topics client over this Conn.
func (c *Conn) Topics() cohortv1.TopicsClient { return cohortv1.NewTopicsClient(c) }

// Leader returns the leader address the cluster last named ("" if none yet).
func (c *Conn) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// Close closes every underlying connection. Calls after Close fail with
// ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

type attemptTimeout struct {
	grpc.EmptyCallOption
	d time.Duration
}

// AttemptTimeout overrides the Conn's RequestTimeout for each attempt of
// one call (JoinGroup and SyncGroup wait at a barrier, so they need more).
// Zero means no per-attempt limit beyond ctx.
func AttemptTimeout(d time.Duration) grpc.CallOption { return attemptTimeout{d: d} }

// Invoke sends one unary call with the retry rules described on Conn.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	timeout, checkEvery := c.cfg.RequestTimeout, c.cfg.LeaderCheckInterval
	callOpts := make([]grpc.CallOption, 0, len(opts)+2)
	for _, o := range opts {
		if a, ok := o.(attemptTimeout); ok {
			// A call that waits at a barrier (JoinGroup, SyncGroup) is
			// slow by design: checked as often, every member parked in a
			// large rebalance would probe the cluster several times a
			// second. It is checked barrierCheckFactor times less often.
			timeout, checkEvery = a.d, checkEvery*barrierCheckFactor
			continue
		}
		callOpts = append(callOpts, o)
	}
	var lastErr error
	retries, hops := 0, 0
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return giveUp(method, attempt-1, err, lastErr)
		}
		addr, cc, err := c.pick()
		if errors.Is(err, ErrClosed) {
			return err
		}
		var hint string
		if err == nil {
			var hdr, trl metadata.MD
			// The attempt's own context, also when it has no timeout: the
			// leader check cancels it to abandon the attempt.
			var actx context.Context
			var cancel context.CancelFunc
			if timeout > 0 {
				actx, cancel = context.WithTimeout(ctx, timeout)
			} else {
				actx, cancel = context.WithCancel(ctx)
			}
			check := c.checkLeader(actx, addr, cancel, checkEvery)
			err = cc.Invoke(actx, method, args, reply, append(callOpts, grpc.Header(&hdr), grpc.Trailer(&trl))...)
			cancel()
			claim, abandoned := check.stop()
			hint = leaderHint(hdr, trl)
			if err == nil {
				c.succeeded(addr, hint)
				return nil
			}
			if abandoned && ctx.Err() == nil && status.Code(err) == codes.Canceled {
				// The check cancelled the attempt: go where it points.
				c.log.Info("cohort request abandoned: another node names a new leader",
					"method", method, "endpoint", addr, "leader", claim.leader, "term", claim.term, "named_by", claim.by)
				err = status.Errorf(codes.Unavailable, "cohort: attempt on %s abandoned: %s names %s leader in term %d", addr, claim.by, claim.leader, claim.term)
				hint = claim.leader
			} else {
				err = fromStatus(err)
				if !retryable(err) {
					c.follow(hint)
					return err
				}
				if cerr := ctx.Err(); cerr != nil {
					// An attempt cut off by ctx says less than the one before it.
					if c := status.Code(err); lastErr == nil || (c != codes.DeadlineExceeded && c != codes.Canceled) {
						lastErr = err
					}
					return giveUp(method, attempt, cerr, lastErr)
				}
			}
		}
		lastErr = err
		jump := c.failed(addr, hint)
		c.log.Debug("cohort request failed, retrying", "method", method, "endpoint", addr, "attempt", attempt, "err", err)
		if jump && hops < len(c.cfg.Endpoints) {
			hops++
			retries = 0 // a new leader was named: the wait starts over
			continue
		}
		hops = 0
		if werr := c.backoff.wait(ctx, retries); werr != nil {
			return giveUp(method, attempt, werr, lastErr)
		}
		retries++
	}
}

// NewStream opens a stream on the current endpoint, without retries (the
// Cohort API has no streaming methods).
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	_, cc, err := c.pick()
	if err != nil {
		return nil, err
	}
	return cc.NewStream(ctx, desc, method, opts...)
}

func giveUp(method string, attempts int, ctxErr, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("cohort: %s: %w", method, ctxErr)
	}
	return fmt.Errorf("cohort: %s: gave up after %d attempt(s): %w; last error: %w", method, attempts, ctxErr, lastErr)
}

// retryable reports whether a failed attempt may be sent again unchanged.
// A protocol refusal is, exactly when its code is retriable (errcode: a
// leadership change in transit); a refusal this client has no code for is
// not. Without a protocol code, the gRPC transport decides: the node could
// not be reached or did not answer in time, which says nothing about the
// request, so another node may take it.
func retryable(err error) bool {
	if c := errcode.Of(err); c != errcode.Unknown {
		return c.Retriable()
	}
	if errorInfoReason(err) != "" {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.DeadlineExceeded:
		// If ctx is alive, the attempt's own timeout fired: the node may be
		// hung or partitioned away; try another.
		return true
	}
	return false
}

func leaderHint(hdr, trl metadata.MD) string {
	for _, md := range []metadata.MD{hdr, trl} {
		if v := md.Get(LeaderHeader); len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// pick returns the address and connection for the next attempt.
func (c *Conn) pick() (string, *grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", nil, ErrClosed
	}
	addr := c.target
	if addr == "" {
		addr = c.cfg.Endpoints[c.next]
	}
	cc, err := c.connLocked(addr)
	return addr, cc, err
}

// connTo returns the connection to addr, made with the Conn's own dial
// options (credentials included) on first use.
func (c *Conn) connTo(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	return c.connLocked(addr)
}

func (c *Conn) connLocked(addr string) (*grpc.ClientConn, error) {
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.dial...)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "cohort: connect to %s: %v", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// succeeded sticks to addr, or moves to the leader the answer named.
func (c *Conn) succeeded(addr, hint string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failedAt, addr)
	if hint == "" {
		c.target = addr
		return
	}
	c.setLeaderLocked(hint)
}

// follow moves to the leader named in a refused call's answer.
func (c *Conn) follow(hint string) {
	if hint == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLeaderLocked(hint)
}

func (c *Conn) setLeaderLocked(hint string) {
	if hint != c.leader {
		c.log.Info("cohort leader changed", "leader", hint, "previous", c.leader)
	}
	c.leader = hint
	c.target = hint
}

// failed records a retryable failure of addr and chooses the next target:
// the leader the answer named, if it differs and has not just failed
// (reported as jump, to be tried at once), else the next endpoint.
func (c *Conn) failed(addr, hint string) (jump bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.failedAt[addr] = now
	if hint != "" && hint != addr {
		if at, ok := c.failedAt[hint]; !ok || now.Sub(at) > c.cfg.RetryBackoffMax {
			c.leader = hint
			c.target = hint
			return true
		}
	}
	if c.target == addr {
		c.target = ""
	}
	if c.cfg.Endpoints[c.next] == addr {
		c.next = (c.next + 1) % len(c.cfg.Endpoints)
	}
	return false
}
