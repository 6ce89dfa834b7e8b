package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/assign"
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// NoGeneration is Generation's value before the member's first join.
const NoGeneration int32 = -1

// Member is one member of a consumer group. Run drives its life; Commit,
// Assignment, Generation and MemberID may be called from any goroutine.
type Member struct {
	cfg       Config
	conn      *Conn
	groups    cohortv1.GroupCoordinatorClient
	log       *slog.Logger
	backoff   backoff
	assignors map[string]assignor
	// cooperative: the member keeps its partitions through a rebalance
	// (KIP-429); serverSide: the coordinator assigns.
	cooperative, serverSide bool

	// heartbeatNow asks the heartbeat loop to check the member's standing
	// at once (a commit was refused as from a stale generation).
	heartbeatNow chan struct{}
	done         chan struct{}
	// watcher is the member's WatchGroup stream (the loop goroutine's).
	watcher *watcher
	// ownConn: the member dialled conn and closes it (not a Config.Conn).
	ownConn bool

	mu         sync.Mutex
	state      runState
	cancel     context.CancelFunc
	closeCtx   context.Context
	memberID   string
	generation int32
	leaderID   string
	protocol   string
	assignment []TopicPartition
	assigned   bool // OnAssigned called and OnRevoked not yet
	// owned and ownedGen are the last assignment and its generation, kept
	// past revocation for the subscription metadata of the next join.
	owned    []TopicPartition
	ownedGen int32

	// commits queues the commits that wait for the one in flight.
	commits commitQueue
}

type runState int

const (
	idle runState = iota
	running
	closing
	stopped
)

// NewMember validates cfg, applies its defaults and returns a Member that
// has not contacted the cluster yet.
func NewMember(cfg Config) (*Member, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Topics = slices.Clone(cfg.Topics)
	cfg.Protocols = slices.Clone(cfg.Protocols)
	conn, ownConn := cfg.Conn, false
	if conn == nil {
		var err error
		if conn, err = Dial(cfg.connConfig()); err != nil {
			return nil, err
		}
		ownConn = true
	}
	m := &Member{
		ownConn:      ownConn,
		cfg:          cfg,
		conn:         conn,
		groups:       conn.Groups(),
		log:          cfg.Logger.With("group", cfg.GroupID),
		backoff:      newBackoff(cfg.RetryBackoffMin, cfg.RetryBackoffMax),
		assignors:    map[string]assignor{},
		heartbeatNow: make(chan struct{}, 1),
		done:         make(chan struct{}),
		generation:   NoGeneration,
		ownedGen:     NoGeneration,
		cooperative:  slices.Equal(cfg.Protocols, []string{assign.NameCooperativeSticky}),
		serverSide:   cfg.ServerSideAssignor != "",
	}
	if cfg.InstanceID != "" {
		m.log = m.log.With("instance", cfg.InstanceID)
	}
	for _, name := range cfg.Protocols {
		a, err := lookupAssignor(name)
		if err != nil {
			return nil, fmt.Errorf("cohort: group %q: %w", cfg.GroupID, err)
		}
		m.assignors[name] = a
	}
	return m, nil
}

// Conn returns the member's connection, for admin calls (topics, offset
// fetches, group descriptions) that share its endpoints and leader.
func (m *Member) Conn() *Conn { return m.conn }

// MemberID returns the member ID the coordinator gave ("" before that).
func (m *Member) MemberID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.memberID
}

// Generation returns the generation of the member's last successful join
// (NoGeneration before that).
func (m *Member) Generation() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.generation
}

// Assignment returns the partitions the member holds, or nil while it holds
// none (before the first sync, and between a revocation and the next sync).
func (m *Member) Assignment() []TopicPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.assignment)
}

// IsLeader reports whether the member is the group leader of its current
// generation.
func (m *Member) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.memberID != "" && m.memberID == m.leaderID
}

// Run joins the group and keeps the member in it until ctx ends, Close is
// called, or a fatal error occurs: FENCED_INSTANCE_ID (another instance
// took over this static member), INCONSISTENT_GROUP_PROTOCOL,
// INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, INVALID_ARGUMENT, or a
// refusal the client cannot retry (e.g. PermissionDenied). Before it
// returns it revokes the member's partitions (OnRevoked) and, for a dynamic
// member or with LeaveStaticOnClose, leaves the group, then closes the
// Conn. It returns nil after Close, the context's error when ctx ended, and
// the fatal error otherwise. Run may be called once.
func (m *Member) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.state != idle {
		m.mu.Unlock()
		if m.state == running {
			return ErrAlreadyRunning
		}
		return ErrClosed
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.state, m.cancel = running, cancel
	m.mu.Unlock()
	defer close(m.done)

	err := m.loop(runCtx)

	m.mu.Lock()
	closeCtx := m.closeCtx
	closedByUser := m.state == closing
	m.state = stopped
	m.mu.Unlock()
	if closeCtx == nil {
		var stop context.CancelFunc
		closeCtx, stop = context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RequestTimeout)
		defer stop()
	}
	m.shutdown(closeCtx, !errors.Is(err, ErrFencedInstanceID))
	if m.ownConn {
		if cerr := m.conn.Close(); cerr != nil {
			m.log.Warn("cohort close connections", "err", cerr)
		}
	}
	switch {
	case closedByUser:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	m.log.Error("cohort member stopped", "member", m.MemberID(), "err", err)
	return err
}

// Close stops Run, revokes the member's partitions, leaves the group
// (dynamic members, or static ones with LeaveStaticOnClose) using ctx, and
// waits for Run to return, at most until ctx ends. Closing a member that
// never ran just closes its Conn.
func (m *Member) Close(ctx context.Context) error {
	m.mu.Lock()
	switch m.state {
	case idle:
		m.state = stopped
		m.mu.Unlock()
		close(m.done)
		if !m.ownConn {
			return nil
		}
		return m.conn.Close()
	case running:
		m.state, m.closeCtx = closing, ctx
		m.cancel()
	}
	m.mu.Unlock()
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cohort: close member of group %q: %w", m.cfg.GroupID, ctx.Err())
	}
}

// loop alternates joining (with sync) and heartbeating until a fatal error
// or ctx ends. The eager protocol revokes everything before each rejoin;
// the cooperative one only when the membership was lost.
func (m *Member) loop(ctx context.Context) error {
	defer m.stopWatch()
	for {
		followUp, err := m.joinAndSync(ctx)
		if err != nil {
			return err
		}
		lost := false
		if followUp {
			// cooperative-sticky's first round took partitions from this
			// member (now revoked) and withheld them: rejoin at once, so the
			// second round hands them out.
			m.log.Info("cohort rejoining for the cooperative follow-up rebalance", "member", m.MemberID(), "generation", m.Generation())
		} else if lost, err = m.heartbeatUntilRebalance(ctx); err != nil {
			return err
		}
		if !m.cooperative || lost {
			m.revoke(ctx)
		}
	}
}

// joinAndSync runs rebalance rounds until one ends with an assignment, and
// reports whether the member must rejoin at once (cooperative follow-up).
func (m *Member) joinAndSync(ctx context.Context) (bool, error) {
	for failures := 0; ; {
		retry := func() error {
			if err := m.backoff.wait(ctx, failures); err != nil {
				return err
			}
			failures++
			return nil
		}
		resp, err := m.join(ctx)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return false, ctx.Err()
			case errors.Is(err, ErrUnknownMemberID):
				// Our ID is gone (expired, or a pending ID the old leader
				// handed out): start again as a new member.
				m.log.Info("cohort member ID unknown, joining as new member", "member", m.MemberID())
				m.setMemberID("")
				m.revokeLost(ctx)
				continue
			case fatal(err):
				return false, err
			}
			m.log.Warn("cohort join failed, retrying", "err", err)
			if err := retry(); err != nil {
				return false, err
			}
			continue
		}
		gen := resp.GetGeneration()
		m.log.Info("cohort joined group", "member", resp.GetMemberId(), "generation", gen,
			"leader", resp.GetLeaderId(), "protocol", resp.GetProtocol())

		var plan []*cohortv1.MemberAssignment
		if resp.GetLeaderId() == resp.GetMemberId() && !m.serverSide {
			if plan, err = m.plan(resp); err != nil {
				// Cannot happen with a protocol every member offered; rejoin
				// rather than stall the group.
				m.log.Error("cohort compute assignment", "generation", gen, "err", err)
				if err := retry(); err != nil {
					return false, err
				}
				continue
			}
		}
		assignment, err := m.sync(ctx, gen, plan)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return false, ctx.Err()
			case errors.Is(err, ErrRebalanceInProgress), errors.Is(err, ErrIllegalGeneration):
				m.log.Info("cohort sync refused, rejoining", "generation", gen, "reason", Reason(err))
				if errors.Is(err, ErrIllegalGeneration) {
					m.revokeLost(ctx)
				}
				continue
			case errors.Is(err, ErrUnknownMemberID):
				m.forgetMemberID()
				m.revokeLost(ctx)
				continue
			case fatal(err):
				return false, err
			}
			// INVALID_ASSIGNMENT (topics changed under us) or a transient
			// failure: rejoin after a pause, with fresh metadata.
			m.log.Warn("cohort sync failed, rejoining", "generation", gen, "err", err)
			if err := retry(); err != nil {
				return false, err
			}
			continue
		}
		m.mu.Lock()
		held, claimed := m.assignment, m.owned
		m.mu.Unlock()
		// What this member claimed in its metadata and did not get: with
		// cooperative-sticky the plan withheld it, so the member rejoins
		// (once it has stopped it) for the round that hands it out.
		followUp := resp.GetProtocol() == assign.NameCooperativeSticky && len(diffPartitions(claimed, assignment)) > 0
		added := assignment
		if m.cooperative {
			// Incremental: stop only what was taken away, then start only
			// what is new; everything else never stops.
			if revoked := diffPartitions(held, assignment); len(revoked) > 0 && m.cfg.OnRevoked != nil {
				m.callback(ctx, func() { m.cfg.OnRevoked(ctx, revoked) })
			}
			added = diffPartitions(assignment, held)
		}
		m.mu.Lock()
		m.assignment = assignment
		m.assigned = true
		m.owned, m.ownedGen = assignment, gen
		m.mu.Unlock()
		m.log.Info("cohort assigned", "member", resp.GetMemberId(), "generation", gen, "partitions", len(assignment), "added", len(added))
		if m.cfg.OnAssigned != nil {
			m.callback(ctx, func() { m.cfg.OnAssigned(ctx, gen, slices.Clone(added)) })
		}
		return followUp, nil
	}
}

// join sends JoinGroup until it has an answer, taking the member ID a
// MEMBER_ID_REQUIRED answer hands out.
func (m *Member) join(ctx context.Context) (*cohortv1.JoinGroupResponse, error) {
	protocols, err := m.protocols()
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		req := &cohortv1.JoinGroupRequest{
			GroupId:            m.cfg.GroupID,
			MemberId:           m.MemberID(),
			InstanceId:         m.cfg.InstanceID,
			ProtocolType:       m.cfg.ProtocolType,
			Protocols:          protocols,
			Topics:             m.cfg.Topics,
			SessionTimeoutMs:   int32(m.cfg.SessionTimeout / time.Millisecond),
			RebalanceTimeoutMs: int32(m.cfg.RebalanceTimeout / time.Millisecond),
			ClientId:           m.cfg.ClientID,
		}
		resp, err := m.groups.JoinGroup(ctx, req, AttemptTimeout(m.cfg.RebalanceTimeout+m.cfg.RequestTimeout))
		if err == nil {
			m.mu.Lock()
			m.memberID = resp.GetMemberId()
			m.generation = resp.GetGeneration()
			m.leaderID = resp.GetLeaderId()
			m.protocol = resp.GetProtocol()
			m.mu.Unlock()
			return resp, nil
		}
		var perr *Error
		if !errors.As(err, &perr) || perr.Code != errcode.MemberIDRequired {
			return nil, fmt.Errorf("cohort: join group %q as %q: %w", m.cfg.GroupID, req.MemberId, err)
		}
		id := perr.Metadata["member_id"]
		if id == "" {
			return nil, fmt.Errorf("cohort: join group %q: MEMBER_ID_REQUIRED without a member_id: %w", m.cfg.GroupID, err)
		}
		m.log.Debug("cohort member ID assigned", "member", id)
		m.setMemberID(id)
		if attempt > 0 {
			if err := m.backoff.wait(ctx, attempt-1); err != nil {
				return nil, err
			}
		}
	}
}

// protocols returns the member's protocols, in preference order, with
// their metadata for this join.
func (m *Member) protocols() ([]*cohortv1.ProtocolMetadata, error) {
	m.mu.Lock()
	owned, gen := m.owned, m.ownedGen
	m.mu.Unlock()
	out := make([]*cohortv1.ProtocolMetadata, 0, len(m.cfg.Protocols))
	for _, name := range m.cfg.Protocols {
		md, err := m.assignors[name].metadata(m.cfg.Topics, owned, gen)
		if err != nil {
			return nil, fmt.Errorf("cohort: encode %s subscription for group %q: %w", name, m.cfg.GroupID, err)
		}
		out = append(out, &cohortv1.ProtocolMetadata{Name: name, Metadata: md})
	}
	return out, nil
}

// plan computes the group leader's assignment for every member.
func (m *Member) plan(resp *cohortv1.JoinGroupResponse) ([]*cohortv1.MemberAssignment, error) {
	a, ok := m.assignors[resp.GetProtocol()]
	if !ok {
		return nil, fmt.Errorf("coordinator chose protocol %q, which this member did not offer", resp.GetProtocol())
	}
	members := make([]subscription, 0, len(resp.GetMembers()))
	for _, jm := range resp.GetMembers() {
		members = append(members, subscription{
			MemberID: jm.GetMemberId(), InstanceID: jm.GetInstanceId(),
			Topics: jm.GetTopics(), Metadata: jm.GetMetadata(),
		})
	}
	partitions := make(map[string]int32, len(resp.GetTopics()))
	for _, t := range resp.GetTopics() {
		partitions[t.GetTopic()] = t.GetPartitions()
	}
	byMember, err := a.assign(members, partitions)
	if err != nil {
		return nil, fmt.Errorf("assignor %q: %w", resp.GetProtocol(), err)
	}
	ids := make([]string, 0, len(byMember))
	for id := range byMember {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	plan := make([]*cohortv1.MemberAssignment, 0, len(ids))
	for _, id := range ids {
		plan = append(plan, &cohortv1.MemberAssignment{MemberId: id, Assignment: toProto(byMember[id])})
	}
	return plan, nil
}

// sync sends SyncGroup for generation gen and returns the member's share.
func (m *Member) sync(ctx context.Context, gen int32, plan []*cohortv1.MemberAssignment) ([]TopicPartition, error) {
	req := &cohortv1.SyncGroupRequest{
		GroupId:     m.cfg.GroupID,
		Generation:  gen,
		MemberId:    m.MemberID(),
		InstanceId:  m.cfg.InstanceID,
		Assignments: plan,
	}
	resp, err := m.groups.SyncGroup(ctx, req, AttemptTimeout(m.cfg.RebalanceTimeout+m.cfg.RequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("cohort: sync group %q generation %d as %q: %w", m.cfg.GroupID, gen, req.MemberId, err)
	}
	return fromProto(resp.GetAssignment()), nil
}

// heartbeatUntilRebalance heartbeats every HeartbeatInterval, and watches
// the group meanwhile, until the member must rejoin (lost: its membership
// or generation is gone, so its partitions may already belong to others),
// or a fatal error.
func (m *Member) heartbeatUntilRebalance(ctx context.Context) (lost bool, err error) {
	t := time.NewTicker(m.cfg.HeartbeatInterval)
	defer t.Stop()
	var pushed <-chan watchChange
	if !m.cfg.DisableWatch {
		pushed = m.ensureWatch(ctx)
	}
	for {
		req := m.heartbeatRequest()
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case c := <-pushed:
			if c.generation < req.Generation {
				continue // about a generation this member has already left
			}
			err = c.err
			m.log.Debug("cohort watch says rebalance", "member", req.MemberId, "generation", req.Generation)
		case <-t.C:
			err = nil
		case <-m.heartbeatNow:
		}
		if err == nil {
			_, err = m.groups.Heartbeat(ctx, req)
		}
		if done, lost, err := m.standingChanged(ctx, req, err); done {
			return lost, err
		}
	}
}

// standingChanged decides what a heartbeat's answer (or the watch's) means:
// done when the member must rejoin (lost: it lost its membership or
// generation) or stop (err: fatal).
func (m *Member) standingChanged(ctx context.Context, req *cohortv1.HeartbeatRequest, err error) (done, lost bool, _ error) {
	switch {
	case err == nil:
		return false, false, nil
	case ctx.Err() != nil:
		return true, false, ctx.Err()
	case errors.Is(err, ErrRebalanceInProgress), errors.Is(err, ErrIllegalGeneration):
		m.log.Info("cohort rebalance", "member", req.MemberId, "generation", req.Generation, "reason", Reason(err))
		return true, errors.Is(err, ErrIllegalGeneration), nil
	case errors.Is(err, ErrUnknownMemberID):
		m.log.Info("cohort rebalance", "member", req.MemberId, "generation", req.Generation, "reason", Reason(err))
		m.forgetMemberID()
		return true, true, nil
	case fatal(err):
		return true, false, fmt.Errorf("cohort: heartbeat group %q generation %d as %q: %w", m.cfg.GroupID, req.Generation, req.MemberId, err)
	}
	m.log.Warn("cohort heartbeat failed", "member", req.MemberId, "generation", req.Generation, "err", err)
	return false, false, nil
}

// watcher is the member's WatchGroup stream. It stays open across
// generations: the coordinator tells it of every change of the member's
// standing (a rebalance starting, the member removed) and re-arms it by
// itself once the member is current again, so a rebalance costs the member
// one message, not a new stream. Only the loop goroutine starts and stops
// it.
type watcher struct {
	member string
	stop   context.CancelFunc
	done   chan struct{}
	// pushed holds the latest change not yet taken (capacity 1).
	pushed chan watchChange
}

// watchChange is one change of standing the watch delivered: the error a
// heartbeat would get, and the generation the member was current at until
// then (a change about an older generation than the member's is stale).
type watchChange struct {
	err        error
	generation int32
}

// ensureWatch returns the changes of the member's watch, starting one when
// none runs for the member's current ID (the first time, after the ID
// changed, or after the stream ended).
func (m *Member) ensureWatch(ctx context.Context) <-chan watchChange {
	id := m.MemberID()
	if w := m.watcher; w != nil {
		select {
		case <-w.done:
		default:
			if w.member == id {
				return w.pushed
			}
		}
		m.stopWatch()
	}
	wctx, stop := context.WithCancel(ctx)
	w := &watcher{member: id, stop: stop, done: make(chan struct{}), pushed: make(chan watchChange, 1)}
	m.watcher = w
	go func() {
		defer close(w.done)
		m.watch(wctx, w)
	}()
	return w.pushed
}

// stopWatch ends the member's watch, if one runs, and waits for it.
func (m *Member) stopWatch() {
	if w := m.watcher; w != nil {
		w.stop()
		<-w.done
		m.watcher = nil
	}
}

// watch keeps the member's WatchGroup open until ctx ends, the coordinator
// ends it (the member left the group; a coordinator that ends the stream
// after each change is watched again by the next heartbeat phase) or the
// member's ID changes. A stream broken otherwise (the leader changed, the
// node went away) is opened again after a backoff, for the member's
// generation then; the new leader answers from the replicated state, so
// nothing that happened in between is missed. Against a server without
// WatchGroup it stops: heartbeats alone still find every rebalance.
func (m *Member) watch(ctx context.Context, w *watcher) {
	for failures := 0; ; failures++ {
		hb := m.heartbeatRequest()
		if hb.MemberId != w.member {
			return
		}
		req := &cohortv1.WatchGroupRequest{GroupId: hb.GroupId, Generation: hb.Generation, MemberId: hb.MemberId, InstanceId: hb.InstanceId}
		answered, err := m.watchOnce(ctx, req, w.pushed)
		if answered {
			failures = 0 // a stream that worked: the next break is a new one
		}
		switch {
		case err == nil || ctx.Err() != nil:
			return
		case status.Code(err) == codes.Unimplemented:
			m.log.Info("cohort: the coordinator does not offer WatchGroup; relying on heartbeats", "member", req.MemberId)
			return
		case fatal(err):
			m.log.Warn("cohort watch refused; relying on heartbeats", "member", req.MemberId, "err", err)
			return
		}
		m.log.Debug("cohort watch ended, watching again", "member", req.MemberId, "err", err)
		if m.backoff.wait(ctx, min(failures, 8)) != nil {
			return
		}
	}
}

// watchOnce runs one WatchGroup stream, delivering each change of standing
// to pushed (the latest replacing one not yet taken). It returns nil when
// the coordinator ended the stream, the stream's error otherwise, and
// whether the coordinator answered at all.
func (m *Member) watchOnce(ctx context.Context, req *cohortv1.WatchGroupRequest, pushed chan watchChange) (answered bool, _ error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := m.groups.WatchGroup(sctx, req)
	if err != nil {
		return false, fromStatus(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return answered, nil
			}
			return answered, fromStatus(err)
		}
		answered = true
		if perr := fromCode(resp.GetError(), resp.GetErrorMessage()); perr != nil {
			offerLatest(pushed, watchChange{err: perr, generation: resp.GetGeneration()})
		}
	}
}

// offerLatest puts c in ch (capacity 1) without blocking, replacing a
// value not yet taken: only the latest change of standing matters.
func offerLatest(ch chan watchChange, c watchChange) {
	for {
		select {
		case ch <- c:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// revoke calls OnRevoked for the partitions handed out by the last sync.
func (m *Member) revoke(ctx context.Context) {
	m.mu.Lock()
	was, revoked := m.assigned, m.assignment
	m.assigned, m.assignment = false, nil
	m.mu.Unlock()
	if was && m.cfg.OnRevoked != nil {
		m.callback(ctx, func() { m.cfg.OnRevoked(ctx, revoked) })
	}
}

// callback runs fn, a user callback, while heartbeating every
// HeartbeatInterval, so that a callback slower than the session timeout
// (committing, flushing) does not cost the member its membership, as
// Kafka's consumer heartbeats from its own thread. A heartbeat refused
// (the group started rebalancing, say) makes the heartbeat loop ask again
// as soon as the callback is done.
func (m *Member) callback(ctx context.Context, fn func()) {
	req := m.heartbeatRequest()
	if req.MemberId == "" || req.Generation == NoGeneration {
		fn()
		return
	}
	hctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(m.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
			if _, err := m.groups.Heartbeat(hctx, req); err != nil && hctx.Err() == nil {
				m.pokeHeartbeat()
			}
		}
	}()
	fn()
	stop()
	<-done
}

// heartbeatRequest is a Heartbeat for the member's current ID and
// generation.
func (m *Member) heartbeatRequest() *cohortv1.HeartbeatRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &cohortv1.HeartbeatRequest{
		GroupId: m.cfg.GroupID, Generation: m.generation, MemberId: m.memberID, InstanceId: m.cfg.InstanceID,
	}
}

// pokeHeartbeat asks the heartbeat loop to check the member's standing at
// once (it never blocks: one pending ask is enough).
func (m *Member) pokeHeartbeat() {
	select {
	case m.heartbeatNow <- struct{}{}:
	default:
	}
}

// revokeLost revokes everything a cooperative member still holds once its
// membership or generation is gone (an eager member holds nothing here).
func (m *Member) revokeLost(ctx context.Context) {
	if m.cooperative {
		m.revoke(ctx)
	}
}

// shutdown revokes and, when the member should, leaves the group.
func (m *Member) shutdown(ctx context.Context, leave bool) {
	m.revoke(ctx)
	id := m.MemberID()
	if !leave || id == "" || (m.cfg.InstanceID != "" && !m.cfg.LeaveStaticOnClose) {
		return
	}
	resp, err := m.groups.LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{
		GroupId: m.cfg.GroupID,
		Members: []*cohortv1.LeaveMember{{MemberId: id, InstanceId: m.cfg.InstanceID}},
	})
	if err == nil {
		for _, r := range resp.GetMembers() {
			err = errors.Join(err, fromCode(r.GetError(), r.GetErrorMessage()))
		}
	}
	if err != nil {
		m.log.Warn("cohort leave group", "member", id, "err", err)
		return
	}
	m.log.Info("cohort left group", "member", id)
}

// PartitionOffset is one offset to commit.
type PartitionOffset struct {
	TopicPartition
	Offset   int64
	Metadata string
}

func (m *Member) setMemberID(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memberID = id
}

// forgetMemberID drops a dynamic member's ID after UNKNOWN_MEMBER_ID; a
// static member keeps it, since its instance ID lets the coordinator place
// it (and if the coordinator refuses the ID on join, join starts afresh).
func (m *Member) forgetMemberID() {
	if m.cfg.InstanceID == "" {
		m.setMemberID("")
	}
}

// fatal reports whether err ends the member: neither resending the request
// nor rejoining can help. A retriable protocol code never is; of the others,
// the member recovers from those about its membership or generation
// (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
// INVALID_ASSIGNMENT, ...) by rejoining, and only the codes below say its
// configuration or identity is refused for good. Without a protocol code,
// the gRPC status says whether the call itself was wrong.
func fatal(err error) bool {
	if c := ErrorCode(err); c != errcode.Unknown {
		if c.Retriable() {
			return false
		}
		switch c {
		case errcode.FencedInstanceID, errcode.InconsistentGroupProtocol, errcode.InvalidSessionTimeout,
			errcode.GroupMaxSizeReached, errcode.InvalidArgument:
			return true
		}
		return false
	}
	if errorInfoReason(err) != "" {
		return false // a refusal this client has no code for: rejoin and see
	}
	if errors.Is(err, ErrClosed) {
		return true
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Unimplemented, codes.Unauthenticated, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange:
		return true
	}
	return false
}

func toProto(tps []TopicPartition) *cohortv1.Assignment {
	a := &cohortv1.Assignment{}
	var cur *cohortv1.TopicPartitions
	sorted := slices.Clone(tps)
	sortTopicPartitions(sorted)
	for _, tp := range sorted {
		if cur == nil || cur.Topic != tp.Topic {
			cur = &cohortv1.TopicPartitions{Topic: tp.Topic}
			a.Topics = append(a.Topics, cur)
		}
		cur.Partitions = append(cur.Partitions, tp.Partition)
	}
	return a
}

func fromProto(a *cohortv1.Assignment) []TopicPartition {
	tps := []TopicPartition{}
	for _, t := range a.GetTopics() {
		for _, p := range t.GetPartitions() {
			tps = append(tps, TopicPartition{t.GetTopic(), p})
		}
	}
	sortTopicPartitions(tps)
	return tps
}
