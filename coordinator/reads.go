package coordinator

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/offsets"
)

// readBarrier makes reads linearizable without a log entry (a read index):
// a read notes the commit index when it arrives, waits for a VerifyLeader
// round that started after it arrived, then for the FSM to apply up to the
// noted index. All of it happens in the term the engine serves in (whose
// leadership barrier committed an entry, so the commit index covers every
// write acknowledged before): a read that finds the node in another term,
// when it arrives or after its round, is answered NOT_LEADER. (A node can
// lose leadership and win it again before the engine hears of either;
// its commit index may then lag the new term's.)
//
// Rounds are shared: every read arriving while one round is in flight
// waits for the next round, which starts as soon as the current one ends;
// a round that started before a read arrived cannot vouch for it (a newer
// leader may have committed in between).
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

// wait returns once a read arriving now may be served from the local FSM,
// the engine serving in term.
func (b *readBarrier) wait(ctx context.Context, term uint64) error {
	readIndex := b.raft.CommitIndex()
	if err := b.checkTerm(term); err != nil {
		return err
	}
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
	if err := b.checkTerm(term); err != nil {
		return err
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

// checkTerm refuses a read once the node's term is not the serving one.
func (b *readBarrier) checkTerm(term uint64) error {
	if now := b.raft.Term(); now != term {
		return errcode.Errorf(errcode.NotLeader, "the raft term moved from %d (served) to %d; retry", term, now)
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
	term, err := e.awaitServingTerm(ctx)
	if err != nil {
		return err
	}
	return e.reads.wait(ctx, term)
}

// OffsetFetch reads committed offsets, a page at a time: all of the
// group's in (topic, partition) order, or the partitions asked for in the
// order asked (each once), -1 for one without an offset.
func (e *Engine) OffsetFetch(ctx context.Context, r *cohortv1.OffsetFetchRequest) (*cohortv1.OffsetFetchResponse, error) {
	if err := e.cfg.Limits.checkGroupID(r.GetGroupId()); err != nil {
		return nil, err
	}
	asked, err := e.cfg.Limits.partitionsAsked(r.GetPartitions())
	if err != nil {
		return nil, err
	}
	pg, err := e.cfg.Pages.newPage(r.GetPageSize())
	if err != nil {
		return nil, err
	}
	from, resume, err := decodeOffsetKey(r.GetPageToken())
	if err != nil {
		return nil, err
	}
	if resume && len(asked) > 0 {
		i := slices.Index(asked, from)
		if i < 0 {
			return nil, invalid("page_token resumes after %s/%d, which this request does not ask for", from.topic, from.partition)
		}
		asked = asked[i+1:]
	}
	if err := e.beforeRead(ctx, AllowsStaleRead(r)); err != nil {
		return nil, err
	}
	resp := &cohortv1.OffsetFetchResponse{}
	e.fsm.Read(func(s *fsm.State) {
		var last offsetKey
		if len(asked) == 0 {
			all := s.Offsets(r.GetGroupId())
			start := 0
			if resume {
				start = after(all, from, func(o offsets.Entry, k offsetKey) int {
					return compareOffsetKeys(offsetKey{o.Key.Topic, o.Key.Partition}, k)
				})
			}
			for _, o := range all[start:] {
				if pg.full() {
					resp.NextPageToken = encodeToken(tokenOffsets, last.encode())
					return
				}
				out := &cohortv1.OffsetFetchPartition{
					Topic: o.Key.Topic, Partition: o.Key.Partition, Offset: o.Value.Offset,
					Metadata: o.Value.Metadata, CommitTimestampMs: o.Value.CommitTimestampMs,
				}
				resp.Partitions = append(resp.Partitions, out)
				pg.add(out)
				last = offsetKey{o.Key.Topic, o.Key.Partition}
			}
			return
		}
		for _, k := range asked {
			if pg.full() {
				resp.NextPageToken = encodeToken(tokenOffsets, last.encode())
				return
			}
			out := &cohortv1.OffsetFetchPartition{Topic: k.topic, Partition: k.partition, Offset: -1}
			if v, ok := s.Offset(r.GetGroupId(), k.topic, k.partition); ok {
				out.Offset, out.Metadata, out.CommitTimestampMs = v.Offset, v.Metadata, v.CommitTimestampMs
			}
			resp.Partitions = append(resp.Partitions, out)
			pg.add(out)
			last = k
		}
	})
	return resp, nil
}

// DescribeGroups describes the groups asked for, a page at a time in the
// order asked (each once); an unknown group is Dead.
func (e *Engine) DescribeGroups(ctx context.Context, r *cohortv1.DescribeGroupsRequest) (*cohortv1.DescribeGroupsResponse, error) {
	for _, id := range r.GetGroupIds() {
		if err := e.cfg.Limits.checkGroupID(id); err != nil {
			return nil, err
		}
	}
	pg, err := e.cfg.Pages.newPage(r.GetPageSize())
	if err != nil {
		return nil, err
	}
	from, resume, err := decodeNameToken(tokenDescribe, r.GetPageToken())
	if err != nil {
		return nil, err
	}
	if err := e.beforeRead(ctx, AllowsStaleRead(r)); err != nil {
		return nil, err
	}
	var ids []string
	seen := map[string]bool{}
	for _, id := range r.GetGroupIds() {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if resume {
		i := slices.Index(ids, from)
		if i < 0 {
			return nil, invalid("page_token resumes after group %q, which this request does not ask for", shorten(from))
		}
		ids = ids[i+1:]
	}
	resp := &cohortv1.DescribeGroupsResponse{}
	for i, id := range ids {
		if pg.full() {
			resp.NextPageToken = nameToken(tokenDescribe, ids[i-1])
			break
		}
		d := describeGroup(e.fsm, id)
		e.mu.Lock()
		if r, ok := e.refusedPlans[id]; ok && r.generation == d.GetGeneration() {
			d.AssignmentError = r.err
		}
		e.mu.Unlock()
		resp.Groups = append(resp.Groups, d)
		pg.add(d)
	}
	return resp, nil
}

func describeGroup(f *fsm.FSM, id string) *cohortv1.GroupDescription {
	g, ok := f.Group(id)
	if !ok {
		var cg *fsm.ConsumerGroup
		f.Read(func(s *fsm.State) { cg, _ = s.ConsumerGroup(id) })
		if cg != nil {
			return describeConsumerGroup(cg)
		}
		return &cohortv1.GroupDescription{GroupId: id, State: fsm.Dead.String()}
	}
	d := &cohortv1.GroupDescription{
		GroupId: g.ID, State: g.State.String(), ProtocolType: g.ProtocolType, Protocol: g.Protocol,
		Generation: g.Generation, LeaderId: g.LeaderID,
	}
	for _, m := range g.Members.All() {
		d.Members = append(d.Members, &cohortv1.GroupMemberDescription{
			MemberId: m.ID, InstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost,
			Topics: m.Topics, Assignment: assignmentToAPI(m.Assignment),
		})
	}
	return d
}

// describeConsumerGroup describes a consumer group (Kafka's KIP-848) in
// the classic groups' terms: protocol type ConsumerGroupType, the assignor
// as protocol, the group epoch as generation, and each member's current
// assignment.
func describeConsumerGroup(g *fsm.ConsumerGroup) *cohortv1.GroupDescription {
	d := &cohortv1.GroupDescription{
		GroupId: g.ID, State: g.State(), ProtocolType: fsm.ConsumerGroupType, Protocol: g.Assignor, Generation: g.Epoch,
	}
	for _, m := range g.Members.All() {
		d.Members = append(d.Members, &cohortv1.GroupMemberDescription{
			MemberId: m.ID, InstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost,
			Topics: m.Topics, Assignment: assignmentToAPI(m.Assigned),
		})
	}
	return d
}

// listedGroups are every group, classic and consumer (KIP-848), in ID
// order, as ListGroups answers them.
func listedGroups(s *fsm.State) []*cohortv1.ListedGroup {
	groups, consumers := s.Groups(), s.ConsumerGroups()
	out := make([]*cohortv1.ListedGroup, 0, len(groups)+len(consumers))
	for _, g := range groups {
		out = append(out, &cohortv1.ListedGroup{
			GroupId: g.ID, State: g.State.String(), ProtocolType: g.ProtocolType,
			Generation: g.Generation, Members: int32(g.Members.Len()), Protocol: g.Protocol,
		})
	}
	for _, g := range consumers {
		out = append(out, &cohortv1.ListedGroup{
			GroupId: g.ID, State: g.State(), ProtocolType: fsm.ConsumerGroupType,
			Generation: g.Epoch, Members: int32(g.Members.Len()), Protocol: g.Assignor,
		})
	}
	slices.SortFunc(out, func(a, b *cohortv1.ListedGroup) int { return strings.Compare(a.GetGroupId(), b.GetGroupId()) })
	return out
}

// GroupStates are the states ListGroups reports and filters on: a classic
// group's four and a consumer group's Reconciling (its others share the
// classic names).
var GroupStates = []string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", fsm.ConsumerReconciling}

// ListGroups lists groups, optionally only those in the given states, a
// page at a time in group ID order.
func (e *Engine) ListGroups(ctx context.Context, r *cohortv1.ListGroupsRequest) (*cohortv1.ListGroupsResponse, error) {
	if len(r.GetStates()) > len(GroupStates) {
		// Each group is matched against the filter under the state's read
		// lock: a filter of a million repeats would hold it that long.
		return nil, invalid("states names %d states; there are %d", len(r.GetStates()), len(GroupStates))
	}
	for _, st := range r.GetStates() {
		if !slices.Contains(GroupStates, st) {
			return nil, invalid("states has %q; the states are Empty, PreparingRebalance, CompletingRebalance, Stable and (consumer groups) Reconciling", st)
		}
	}
	pg, err := e.cfg.Pages.newPage(r.GetPageSize())
	if err != nil {
		return nil, err
	}
	from, resume, err := decodeNameToken(tokenGroups, r.GetPageToken())
	if err != nil {
		return nil, err
	}
	if err := e.beforeRead(ctx, AllowsStaleRead(r)); err != nil {
		return nil, err
	}
	resp := &cohortv1.ListGroupsResponse{}
	e.fsm.Read(func(s *fsm.State) {
		groups := listedGroups(s)
		if resume {
			groups = groups[after(groups, from, func(g *cohortv1.ListedGroup, id string) int { return strings.Compare(g.GetGroupId(), id) }):]
		}
		last := ""
		for _, out := range groups {
			if len(r.GetStates()) > 0 && !slices.Contains(r.GetStates(), out.GetState()) {
				continue
			}
			if pg.full() {
				resp.NextPageToken = nameToken(tokenGroups, last)
				return
			}
			resp.Groups = append(resp.Groups, out)
			pg.add(out)
			last = out.GetGroupId()
		}
	})
	return resp, nil
}

// ListTopics lists topics with their partition counts, a page at a time
// in name order.
func (e *Engine) ListTopics(ctx context.Context, r *cohortv1.ListTopicsRequest) (*cohortv1.ListTopicsResponse, error) {
	pg, err := e.cfg.Pages.newPage(r.GetPageSize())
	if err != nil {
		return nil, err
	}
	from, resume, err := decodeNameToken(tokenTopics, r.GetPageToken())
	if err != nil {
		return nil, err
	}
	if err := e.beforeRead(ctx, r.GetAllowStale()); err != nil {
		return nil, err
	}
	resp := &cohortv1.ListTopicsResponse{}
	e.fsm.Read(func(s *fsm.State) {
		topics := s.Topics()
		if resume {
			topics = topics[after(topics, from, func(t fsm.TopicPartitionCount, name string) int { return strings.Compare(t.Name, name) }):]
		}
		for i, t := range topics {
			if pg.full() {
				resp.NextPageToken = nameToken(tokenTopics, topics[i-1].Name)
				return
			}
			out := &cohortv1.TopicPartitionCount{Topic: t.Name, Partitions: t.Partitions}
			resp.Topics = append(resp.Topics, out)
			pg.add(out)
		}
	})
	return resp, nil
}
