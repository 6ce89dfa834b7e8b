package coordinator

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// readBarrier makes reads linearizable without a log entry (a read index):
// a read notes the commit index when it arrives, waits for a VerifyLeader
// round that started after it arrived, then for the FSM to apply up to the
// noted index. Rounds are shared: every read arriving while one round is in
// flight waits for the next round, which starts as soon as the current one
// ends; a round that started before a read arrived cannot vouch for it (a
// newer leader may have committed in between).
//
// A round lasts as long as some read waits for it: each read bounds its own
// wait with its context, and the round's VerifyLeader is cancelled once the
// last of its reads has given up.
type readBarrier struct {
	raft     Raft
	mu       sync.Mutex
	inflight *verifyRound
	next     *verifyRound
	rounds   uint64
}

type verifyRound struct {
	done chan struct{}
	err  error
	// ctx carries the reads' wait to VerifyLeader; cancel ends it when
	// waiting, the number of reads still waiting, drops to zero.
	ctx     context.Context
	cancel  context.CancelFunc
	waiting int
}

// newVerifyRound makes a round for the read whose context is ctx; it keeps
// ctx's values, not its cancellation, since later reads share it.
func newVerifyRound(ctx context.Context) *verifyRound {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &verifyRound{done: make(chan struct{}), ctx: rctx, cancel: cancel}
}

// wait returns once a read arriving now may be served from the local FSM.
func (b *readBarrier) wait(ctx context.Context) error {
	readIndex := b.raft.CommitIndex()
	b.mu.Lock()
	var r *verifyRound
	switch {
	case b.inflight == nil:
		r = newVerifyRound(ctx)
		b.inflight = r
		go b.run(r)
	case b.next == nil || b.next.waiting == 0: // none yet, or every read gave up on it
		b.next = newVerifyRound(ctx)
		r = b.next
	default:
		r = b.next
	}
	r.waiting++
	b.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		b.leave(r)
		return errcode.Errorf(errcode.NotLeader, "confirming leadership for a linearizable read: %v", ctx.Err())
	}
	if r.err != nil {
		return errcode.Errorf(errcode.NotLeader, "this node could not confirm it still leads: %v", r.err)
	}
	for b.raft.AppliedIndex() < readIndex {
		select {
		case <-ctx.Done():
			return errcode.Errorf(errcode.NotLeader, "waiting to apply index %d for a read: %v", readIndex, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// leave records that a read stopped waiting for r; the last one out ends it.
func (b *readBarrier) leave(r *verifyRound) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.waiting--
	if r.waiting == 0 {
		r.cancel()
	}
}

func (b *readBarrier) run(r *verifyRound) {
	for r != nil {
		r.err = b.raft.VerifyLeader(r.ctx)
		r.cancel()
		close(r.done)
		b.mu.Lock()
		b.rounds++
		if b.next != nil && b.next.waiting == 0 {
			b.next = nil // every read waiting for it gave up
		}
		b.inflight, b.next = b.next, nil
		r = b.inflight
		b.mu.Unlock()
	}
}

// VerifyRounds is the number of VerifyLeader rounds reads have used.
func (e *Engine) VerifyRounds() uint64 {
	e.reads.mu.Lock()
	defer e.reads.mu.Unlock()
	return e.reads.rounds
}

// beforeRead makes a read linearizable unless the caller accepts a stale one.
func (e *Engine) beforeRead(ctx context.Context, allowStale bool) error {
	if allowStale {
		return nil
	}
	if err := e.awaitServing(ctx); err != nil {
		return err
	}
	return e.reads.wait(ctx)
}

// OffsetFetch reads committed offsets; -1 for a partition without one.
func (e *Engine) OffsetFetch(ctx context.Context, r *cohortv1.OffsetFetchRequest) (*cohortv1.OffsetFetchResponse, error) {
	if err := e.cfg.Limits.checkGroupID(r.GetGroupId()); err != nil {
		return nil, err
	}
	for _, tp := range r.GetPartitions() {
		if err := e.cfg.Limits.checkTopic("partitions[].topic", tp.GetTopic()); err != nil {
			return nil, err
		}
		for _, p := range tp.GetPartitions() {
			if p < 0 {
				return nil, invalid("partition %d of topic %q is negative", p, tp.GetTopic())
			}
		}
	}
	if err := e.beforeRead(ctx, AllowsStaleRead(r)); err != nil {
		return nil, err
	}
	resp := &cohortv1.OffsetFetchResponse{}
	e.fsm.Read(func(s *fsm.State) {
		if len(r.GetPartitions()) == 0 {
			for _, o := range s.Offsets(r.GetGroupId()) {
				resp.Partitions = append(resp.Partitions, &cohortv1.OffsetFetchPartition{
					Topic: o.Key.Topic, Partition: o.Key.Partition, Offset: o.Value.Offset,
					Metadata: o.Value.Metadata, CommitTimestampMs: o.Value.CommitTimestampMs,
				})
			}
			return
		}
		for _, tp := range r.GetPartitions() {
			for _, p := range tp.GetPartitions() {
				out := &cohortv1.OffsetFetchPartition{Topic: tp.GetTopic(), Partition: p, Offset: -1}
				if v, ok := s.Offset(r.GetGroupId(), tp.GetTopic(), p); ok {
					out.Offset, out.Metadata, out.CommitTimestampMs = v.Offset, v.Metadata, v.CommitTimestampMs
				}
				resp.Partitions = append(resp.Partitions, out)
			}
		}
	})
	return resp, nil
}

// DescribeGroups describes groups; an unknown group is Dead.
func (e *Engine) DescribeGroups(ctx context.Context, r *cohortv1.DescribeGroupsRequest) (*cohortv1.DescribeGroupsResponse, error) {
	for _, id := range r.GetGroupIds() {
		if err := e.cfg.Limits.checkGroupID(id); err != nil {
			return nil, err
		}
	}
	if err := e.beforeRead(ctx, AllowsStaleRead(r)); err != nil {
		return nil, err
	}
	resp := &cohortv1.DescribeGroupsResponse{}
	for _, id := range r.GetGroupIds() {
		g, ok := e.fsm.Group(id)
		if !ok {
			resp.Groups = append(resp.Groups, &cohortv1.GroupDescription{GroupId: id, State: fsm.Dead.String()})
			continue
		}
		d := &cohortv1.GroupDescription{
			GroupId: g.ID, State: g.State.String(), ProtocolType: g.ProtocolType, Protocol: g.Protocol,
			Generation: g.Generation, LeaderId: g.LeaderID,
		}
		for _, m := range g.Members {
			d.Members = append(d.Members, &cohortv1.GroupMemberDescription{
				MemberId: m.ID, InstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost,
				Topics: m.Topics, Assignment: assignmentToAPI(m.Assignment),
			})
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp, nil
}

// ListGroups lists groups, optionally only those in the given states.
func (e *Engine) ListGroups(ctx context.Context, r *cohortv1.ListGroupsRequest) (*cohortv1.ListGroupsResponse, error) {
	for _, st := range r.GetStates() {
		if !slices.Contains([]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"}, st) {
			return nil, invalid("states has %q; the states are Empty, PreparingRebalance, CompletingRebalance and Stable", st)
		}
	}
	if err := e.beforeRead(ctx, AllowsStaleRead(r)); err != nil {
		return nil, err
	}
	resp := &cohortv1.ListGroupsResponse{}
	e.fsm.Read(func(s *fsm.State) {
		for _, g := range s.Groups() {
			if len(r.GetStates()) > 0 && !slices.Contains(r.GetStates(), g.State.String()) {
				continue
			}
			resp.Groups = append(resp.Groups, &cohortv1.ListedGroup{
				GroupId: g.ID, State: g.State.String(), ProtocolType: g.ProtocolType,
				Generation: g.Generation, Members: int32(len(g.Members)), Protocol: g.Protocol,
			})
		}
	})
	return resp, nil
}

// ListTopics lists topics with their partition counts.
func (e *Engine) ListTopics(ctx context.Context, allowStale bool) (*cohortv1.ListTopicsResponse, error) {
	if err := e.beforeRead(ctx, allowStale); err != nil {
		return nil, err
	}
	resp := &cohortv1.ListTopicsResponse{}
	e.fsm.Read(func(s *fsm.State) {
		for _, t := range s.Topics() {
			resp.Topics = append(resp.Topics, &cohortv1.TopicPartitionCount{Topic: t.Name, Partitions: t.Partitions})
		}
	})
	return resp, nil
}
