package raftnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
)

// Membership operations run on the leader only. They are safe by default:
// a server enters as a non-voter and becomes a voter only once its log has
// caught up; a change that would leave fewer healthy voters than a quorum
// needs force; the last voter is never removed; the leader hands
// leadership over before it is removed or demoted. Every operation is
// idempotent: asking for the configuration the cluster already has
// succeeds with Changed false.

const (
	// DefaultPromoteMaxLag is the largest log lag (entries) at which a
	// non-voter is promoted: Consul's MaxTrailingLogs default.
	DefaultPromoteMaxLag = 250
	// DefaultHealthyLastContact is how long a server may go without
	// hearing from the leader and still count as healthy: four times the
	// default heartbeat timeout, so one slow heartbeat is not a failure.
	DefaultHealthyLastContact = 2 * time.Second
	// probeTimeout bounds the leader's NodeInfo call to one server.
	probeTimeout = time.Second
	// leaderWait bounds the wait for a new leader after a transfer.
	leaderWait = 10 * time.Second
)

// Sentinel errors of the membership operations; test with errors.Is.
var (
	// ErrUnknownServer: the server ID is not in the Raft configuration.
	ErrUnknownServer = errors.New("unknown server")
	// ErrLagging: the server's log is too far behind the leader's.
	ErrLagging = errors.New("server is lagging")
	// ErrQuorumAtRisk: the change would leave fewer (healthy) voters than
	// a quorum; it needs force.
	ErrQuorumAtRisk = errors.New("change would leave the cluster without a healthy quorum")
	// ErrLastVoter: the last voter can never be removed or demoted.
	ErrLastVoter = errors.New("the last voter cannot be removed or demoted")
	// ErrConflict: the request contradicts the configuration (same ID with
	// another address, or a non-voter named as leadership target).
	ErrConflict = errors.New("conflicts with the raft configuration")
	// ErrLeadershipMoved: this node was the target of the change, so it
	// handed leadership over first; the change must be sent to the new
	// leader. The service layer does that.
	ErrLeadershipMoved = errors.New("leadership moved before the change")
	// ErrAutopilotManaged: autopilot would undo the change.
	ErrAutopilotManaged = errors.New("autopilot manages suffrage")
	// ErrInvalidArgument: a required field is missing or malformed.
	ErrInvalidArgument = errors.New("invalid argument")
)

// ChangeResult says what a membership operation did.
type ChangeResult struct {
	// Changed is false when the cluster already was as asked.
	Changed bool
	// Message says what happened, for the operator.
	Message string
}

// probeRecord is the leader's latest knowledge of one server, from its
// NodeInfo answers.
type probeRecord struct {
	info   *cohortv1.NodeInfoResponse // last successful answer
	infoAt time.Time
	err    error // last failure, when it is newer than info
	errAt  time.Time
	// firstSeen is when this leader first probed the server, so that a
	// new leader does not declare everyone dead at once.
	firstSeen time.Time
}

// failing reports whether the latest probe failed.
func (p probeRecord) failing() bool { return p.err != nil && !p.errAt.Before(p.infoAt) }

// probes holds the leader's probe records.
type probes struct {
	mu   sync.Mutex
	recs map[raft.ServerID]probeRecord
}

func (p *probes) get(id raft.ServerID) probeRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.recs[id]
}

func (p *probes) record(id raft.ServerID, info *cohortv1.NodeInfoResponse, err error, at time.Time) probeRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recs == nil {
		p.recs = map[raft.ServerID]probeRecord{}
	}
	r := p.recs[id]
	if r.firstSeen.IsZero() {
		r.firstSeen = at
	}
	if err != nil {
		r.err, r.errAt = err, at
	} else {
		r.info, r.infoAt, r.err = info, at, nil
	}
	p.recs[id] = r
	return r
}

func (p *probes) forget(id raft.ServerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.recs, id)
}

// nodeInfo describes this node.
func (n *Node) nodeInfo() *cohortv1.NodeInfoResponse {
	leaderID, leaderAddr := n.Leader()
	lc := int64(-1)
	switch {
	case n.raft.State() == raft.Leader:
		lc = 0
	case !n.raft.LastContact().IsZero():
		lc = time.Since(n.raft.LastContact()).Milliseconds()
	}
	return &cohortv1.NodeInfoResponse{
		NodeId:            n.id,
		RaftAddress:       n.cfg.RaftAdvertise,
		GrpcAddress:       n.cfg.GRPCAdvertise,
		HasState:          n.hadState || n.hasConfiguration(),
		State:             raftStateProto(n.raft.State()),
		Term:              n.raft.CurrentTerm(),
		LeaderId:          leaderID,
		LeaderRaftAddress: leaderAddr,
		LeaderGrpcAddress: n.LeaderGRPCAddress(),
		LastIndex:         n.raft.LastIndex(),
		CommitIndex:       n.raft.CommitIndex(),
		AppliedIndex:      n.raft.AppliedIndex(),
		BootstrapExpect:   int32(n.cfg.BootstrapExpect),
		LastContactMs:     lc,
		AutopilotEnabled:  n.cfg.Autopilot.Enabled,
	}
}

// registryGRPC is a server's gRPC address from the node registry.
func (n *Node) registryGRPC(id raft.ServerID) string {
	if string(id) == n.id {
		return n.cfg.GRPCAdvertise
	}
	for _, node := range n.fsm.Nodes() {
		if node.ID == string(id) {
			return node.GRPCAddress
		}
	}
	return ""
}

// probe asks one server to describe itself and records the answer.
func (n *Node) probe(ctx context.Context, s raft.Server) probeRecord {
	now := time.Now()
	if string(s.ID) == n.id {
		return n.probes.record(s.ID, n.nodeInfo(), nil, now)
	}
	addr := n.registryGRPC(s.ID)
	if addr == "" {
		return n.probes.record(s.ID, nil, errors.New("no gRPC address registered"), now)
	}
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	info, err := n.peers.NodeInfo(cctx, addr)
	if err == nil && info.GetNodeId() != string(s.ID) {
		err = fmt.Errorf("%s answers as node %q", addr, info.GetNodeId())
	}
	return n.probes.record(s.ID, info, err, time.Now())
}

// probeAll probes every server concurrently.
func (n *Node) probeAll(ctx context.Context, servers []raft.Server) map[raft.ServerID]probeRecord {
	out := make(map[raft.ServerID]probeRecord, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			r := n.probe(ctx, s)
			mu.Lock()
			out[s.ID] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// serverHealth judges one server from its probe record, as seen by a
// leader at leaderLast in term. It returns the lag (from the last answer)
// and why the server is unhealthy ("" when healthy).
func (n *Node) serverHealth(p probeRecord, leaderLast, term uint64, now time.Time) (lag uint64, reason string) {
	if p.info == nil {
		if p.err != nil {
			return 0, fmt.Sprintf("has never answered: %v", p.err)
		}
		return 0, "not probed yet"
	}
	if last := p.info.GetLastIndex(); last < leaderLast {
		lag = leaderLast - last
	}
	switch {
	case p.failing():
		return lag, fmt.Sprintf("does not answer (last answer %s ago): %v", now.Sub(p.infoAt).Round(time.Millisecond), p.err)
	case p.info.GetState() == cohortv1.RaftState_RAFT_STATE_LEADER:
		return lag, ""
	case p.info.GetTerm() != term:
		return lag, fmt.Sprintf("in term %d, the leader in term %d", p.info.GetTerm(), term)
	case p.info.GetLastContactMs() < 0:
		return lag, "has never heard from the leader"
	case time.Duration(p.info.GetLastContactMs())*time.Millisecond > n.cfg.HealthyLastContact:
		return lag, fmt.Sprintf("last heard from the leader %dms ago (limit %s)", p.info.GetLastContactMs(), n.cfg.HealthyLastContact)
	case lag > n.cfg.PromoteMaxLag:
		return lag, fmt.Sprintf("%d entries behind the leader (limit %d)", lag, n.cfg.PromoteMaxLag)
	}
	return lag, ""
}

// leaderConfig checks that this node leads and returns the configuration.
func (n *Node) leaderConfig() (raft.Configuration, error) {
	if n.raft.State() != raft.Leader {
		id, _ := n.Leader()
		return raft.Configuration{}, fmt.Errorf("%w (leader %q)", ErrNotLeader, id)
	}
	return n.Configuration()
}

func findServer(c raft.Configuration, id string) (raft.Server, bool) {
	for _, s := range c.Servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

func configVoters(c raft.Configuration) []raft.ServerID {
	var v []raft.ServerID
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			v = append(v, s.ID)
		}
	}
	return v
}

func suffrageName(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "non-voter"
}

// CheckVoterLoss decides whether target may lose its vote (be removed or
// demoted). The last voter never may. Otherwise the change needs force
// when it leaves fewer voters than a quorum of the current configuration,
// or fewer healthy voters than a quorum of the new one: the cluster could
// no longer commit.
func CheckVoterLoss(voterIDs []raft.ServerID, healthy map[raft.ServerID]bool, target raft.ServerID, force bool) error {
	if !slices.Contains(voterIDs, target) {
		return nil
	}
	if len(voterIDs) == 1 {
		return fmt.Errorf("%w: %s is the only voter", ErrLastVoter, target)
	}
	if force {
		return nil
	}
	remaining := slices.DeleteFunc(slices.Clone(voterIDs), func(id raft.ServerID) bool { return id == target })
	if q := len(voterIDs)/2 + 1; len(remaining) < q {
		return fmt.Errorf("%w: %d voters would remain, fewer than the quorum of %d of the current %d voters; use force if you mean it",
			ErrQuorumAtRisk, len(remaining), q, len(voterIDs))
	}
	var ok []string
	for _, id := range remaining {
		if healthy[id] {
			ok = append(ok, string(id))
		}
	}
	if need := len(remaining)/2 + 1; len(ok) < need {
		return fmt.Errorf("%w: of the %d voters that would remain only %d are healthy (%v), and a quorum needs %d; "+
			"remove or repair the unhealthy servers first, or use force if you mean it",
			ErrQuorumAtRisk, len(remaining), len(ok), ok, need)
	}
	return nil
}

// voterLossSettle is how long a refusal for lack of healthy voters is
// re-checked before it is final. Right after an election or a leadership
// transfer (removing the leader hands leadership over first, and the
// caller retries on the new leader) the other voters have not yet heard
// from the new leader in its term, and would look unhealthy for a moment.
const voterLossSettle = 2 * time.Second

// checkVoterLoss is CheckVoterLoss on fresh probes, re-probing for up to
// voterLossSettle while the answer is a refusal.
func (n *Node) checkVoterLoss(ctx context.Context, c raft.Configuration, target raft.ServerID, force bool) error {
	allHealthy := map[raft.ServerID]bool{}
	for _, id := range configVoters(c) {
		allHealthy[id] = true
	}
	if err := CheckVoterLoss(configVoters(c), allHealthy, target, force); err != nil {
		return err // refused whatever the servers' health: no point re-probing
	}
	deadline := time.Now().Add(voterLossSettle)
	for {
		err := CheckVoterLoss(configVoters(c), n.healthyVoters(ctx, c), target, force)
		if err == nil || !errors.Is(err, ErrQuorumAtRisk) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// healthyVoters probes the voters and says which are healthy.
func (n *Node) healthyVoters(ctx context.Context, c raft.Configuration) map[raft.ServerID]bool {
	var vs []raft.Server
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			vs = append(vs, s)
		}
	}
	recs := n.probeAll(ctx, vs)
	last, term, now := n.raft.LastIndex(), n.raft.CurrentTerm(), time.Now()
	out := map[raft.ServerID]bool{}
	for id, r := range recs {
		_, reason := n.serverHealth(r, last, term, now)
		out[id] = reason == ""
	}
	return out
}

func timeoutOf(ctx context.Context, def time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return def
}

// AddNonvoter adds a server that replicates the log without voting, and
// records its gRPC address in the node registry when given.
func (n *Node) AddNonvoter(ctx context.Context, id, raftAddr, grpcAddr string) (ChangeResult, error) {
	if err := validateNodeID(id); err != nil {
		return ChangeResult{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if raftAddr == "" {
		return ChangeResult{}, fmt.Errorf("%w: raft address of %q is required", ErrInvalidArgument, id)
	}
	c, err := n.leaderConfig()
	if err != nil {
		return ChangeResult{}, err
	}
	if s, ok := findServer(c, id); ok {
		if string(s.Address) != raftAddr {
			return ChangeResult{}, fmt.Errorf("%w: server %s is already in the configuration at %s, not %s; remove it first",
				ErrConflict, id, s.Address, raftAddr)
		}
		if err := n.registerPeer(ctx, id, grpcAddr, raftAddr); err != nil {
			return ChangeResult{}, err
		}
		return ChangeResult{Message: fmt.Sprintf("server %s at %s is already a %s", id, raftAddr, suffrageName(s.Suffrage))}, nil
	}
	for _, s := range c.Servers {
		if string(s.Address) == raftAddr {
			return ChangeResult{}, fmt.Errorf("%w: raft address %s already belongs to server %s", ErrConflict, raftAddr, s.ID)
		}
	}
	if err := n.registerPeer(ctx, id, grpcAddr, raftAddr); err != nil {
		return ChangeResult{}, err
	}
	err = n.waitFuture(ctx, "add non-voter", func(t time.Duration) raft.Future {
		return n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, t)
	})
	if err != nil {
		return ChangeResult{}, err
	}
	n.log.Info("added non-voter", "server", id, "raft_address", raftAddr, "grpc_address", grpcAddr)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("added %s at %s as a non-voter", id, raftAddr)}, nil
}

// registerPeer records a server's gRPC address in the node registry, so
// that the leader can probe it before it registers itself.
func (n *Node) registerPeer(ctx context.Context, id, grpcAddr, raftAddr string) error {
	if grpcAddr == "" || n.registryGRPC(raft.ServerID(id)) == grpcAddr {
		return nil
	}
	res, err := n.Apply(ctx, &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
		NodeId: id, GrpcAddress: grpcAddr, RaftAddress: raftAddr,
	}}})
	if err != nil {
		return fmt.Errorf("register %s's gRPC address: %w", id, err)
	}
	if res.Err != nil {
		return fmt.Errorf("%w: register %s's gRPC address %q: %v", ErrInvalidArgument, id, grpcAddr, res.Err)
	}
	return nil
}

// Promote makes a non-voter a voter, if its log is within PromoteMaxLag
// entries of the leader's.
func (n *Node) Promote(ctx context.Context, id string) (ChangeResult, error) {
	c, err := n.leaderConfig()
	if err != nil {
		return ChangeResult{}, err
	}
	s, ok := findServer(c, id)
	if !ok {
		return ChangeResult{}, fmt.Errorf("%w: %q is not in the raft configuration", ErrUnknownServer, id)
	}
	if s.Suffrage == raft.Voter {
		return ChangeResult{Message: fmt.Sprintf("server %s is already a voter", id)}, nil
	}
	if err := n.checkCaughtUp(ctx, s); err != nil {
		return ChangeResult{}, err
	}
	err = n.waitFuture(ctx, "promote", func(t time.Duration) raft.Future {
		return n.raft.AddVoter(s.ID, s.Address, 0, t)
	})
	if err != nil {
		return ChangeResult{}, err
	}
	n.log.Info("promoted non-voter", "server", id)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("promoted %s to voter", id)}, nil
}

// checkCaughtUp refuses a server whose log is more than PromoteMaxLag
// entries behind, or whose position is unknown.
func (n *Node) checkCaughtUp(ctx context.Context, s raft.Server) error {
	r := n.probe(ctx, s)
	leaderLast := n.raft.LastIndex()
	if r.info == nil {
		return fmt.Errorf("%w: %s has not reported its log index to the leader (%v); is it running?", ErrLagging, s.ID, r.err)
	}
	var lag uint64
	if l := r.info.GetLastIndex(); l < leaderLast {
		lag = leaderLast - l
	}
	if r.failing() {
		return fmt.Errorf("%w: %s does not answer (%v); when it last did, %s ago, it was %d entries behind the leader (its last index %d, the leader's now %d)",
			ErrLagging, s.ID, r.err, time.Since(r.infoAt).Round(time.Millisecond), lag, r.info.GetLastIndex(), leaderLast)
	}
	if lag > n.cfg.PromoteMaxLag {
		return fmt.Errorf("%w: %s is %d entries behind the leader (its last index %d, the leader's %d); promotion needs a lag of at most %d: wait for it to catch up",
			ErrLagging, s.ID, lag, r.info.GetLastIndex(), leaderLast, n.cfg.PromoteMaxLag)
	}
	return nil
}

// AddVoter adds a server as a non-voter, waits (bounded by ctx) until it
// has caught up, and promotes it. One that does not catch up in time stays
// a non-voter and the error says how far behind it is.
func (n *Node) AddVoter(ctx context.Context, id, raftAddr, grpcAddr string) (ChangeResult, error) {
	c, err := n.leaderConfig()
	if err != nil {
		return ChangeResult{}, err
	}
	if s, ok := findServer(c, id); ok && s.Suffrage == raft.Voter {
		if string(s.Address) != raftAddr && raftAddr != "" {
			return ChangeResult{}, fmt.Errorf("%w: server %s is already a voter at %s, not %s", ErrConflict, id, s.Address, raftAddr)
		}
		return ChangeResult{Message: fmt.Sprintf("server %s at %s is already a voter", id, s.Address)}, nil
	}
	if _, err := n.AddNonvoter(ctx, id, raftAddr, grpcAddr); err != nil {
		return ChangeResult{}, err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := n.Promote(ctx, id)
		if err == nil {
			res.Message = fmt.Sprintf("added %s at %s: non-voter until caught up, then promoted to voter", id, raftAddr)
			return res, nil
		}
		if !errors.Is(err, ErrLagging) {
			return ChangeResult{}, err
		}
		select {
		case <-ctx.Done():
			return ChangeResult{}, fmt.Errorf("%w; %s stays a non-voter (promote it when it has caught up)", err, id)
		case <-tick.C:
		}
	}
}

// Demote makes a voter a non-voter. Demoting this node (the leader) hands
// leadership over first and returns ErrLeadershipMoved.
func (n *Node) Demote(ctx context.Context, id string, force bool) (ChangeResult, error) {
	c, err := n.leaderConfig()
	if err != nil {
		return ChangeResult{}, err
	}
	s, ok := findServer(c, id)
	if !ok {
		return ChangeResult{}, fmt.Errorf("%w: %q is not in the raft configuration", ErrUnknownServer, id)
	}
	if s.Suffrage != raft.Voter {
		return ChangeResult{Message: fmt.Sprintf("server %s is already a non-voter", id)}, nil
	}
	if n.cfg.Autopilot.Enabled {
		return ChangeResult{}, fmt.Errorf("%w: autopilot promotes every healthy non-voter again after %s; disable autopilot to keep %s a non-voter",
			ErrAutopilotManaged, n.cfg.Autopilot.ServerStabilizationTime, id)
	}
	if err := n.checkVoterLoss(ctx, c, s.ID, force); err != nil {
		return ChangeResult{}, fmt.Errorf("demote %s: %w", id, err)
	}
	if id == n.id {
		return ChangeResult{}, n.transferAway(ctx, c)
	}
	err = n.waitFuture(ctx, "demote", func(t time.Duration) raft.Future { return n.raft.DemoteVoter(s.ID, 0, t) })
	if err != nil {
		return ChangeResult{}, err
	}
	n.log.Info("demoted voter", "server", id, "force", force)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("demoted %s to non-voter", id)}, nil
}

// RemoveServer removes a server from the configuration. Removing this node
// (the leader) hands leadership over first and returns ErrLeadershipMoved.
func (n *Node) RemoveServer(ctx context.Context, id string, force bool) (ChangeResult, error) {
	c, err := n.leaderConfig()
	if err != nil {
		return ChangeResult{}, err
	}
	s, ok := findServer(c, id)
	if !ok {
		if n.registryGRPC(raft.ServerID(id)) != "" {
			return ChangeResult{Message: fmt.Sprintf("server %s is not in the raft configuration (already removed)", id)}, nil
		}
		return ChangeResult{}, fmt.Errorf("%w: %q is not in the raft configuration and has never registered", ErrUnknownServer, id)
	}
	if s.Suffrage == raft.Voter {
		if err := n.checkVoterLoss(ctx, c, s.ID, force); err != nil {
			return ChangeResult{}, fmt.Errorf("remove %s: %w", id, err)
		}
	}
	if id == n.id {
		return ChangeResult{}, n.transferAway(ctx, c)
	}
	err = n.waitFuture(ctx, "remove server", func(t time.Duration) raft.Future { return n.raft.RemoveServer(s.ID, 0, t) })
	if err != nil {
		return ChangeResult{}, err
	}
	n.probes.forget(s.ID)
	n.log.Info("removed server", "server", id, "suffrage", suffrageName(s.Suffrage), "force", force)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("removed %s (%s at %s)", id, suffrageName(s.Suffrage), s.Address)}, nil
}

// transferAway hands leadership to the healthiest, most up-to-date other
// voter and returns ErrLeadershipMoved naming the new leader.
func (n *Node) transferAway(ctx context.Context, c raft.Configuration) error {
	var best *raft.Server
	var bestIndex uint64
	last, term, now := n.raft.LastIndex(), n.raft.CurrentTerm(), time.Now()
	for i, s := range c.Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.id {
			continue
		}
		r := n.probe(ctx, s)
		if _, reason := n.serverHealth(r, last, term, now); reason != "" {
			continue
		}
		if best == nil || r.info.GetLastIndex() > bestIndex {
			best, bestIndex = &c.Servers[i], r.info.GetLastIndex()
		}
	}
	var err error
	if best != nil {
		err = n.waitFuture(ctx, "leadership transfer", func(time.Duration) raft.Future {
			return n.raft.LeadershipTransferToServer(best.ID, best.Address)
		})
	} else {
		err = n.waitFuture(ctx, "leadership transfer", func(time.Duration) raft.Future { return n.raft.LeadershipTransfer() })
	}
	if err != nil {
		return fmt.Errorf("hand leadership over before changing this node: %w", err)
	}
	id, _ := n.Leader()
	n.log.Info("leadership handed over before changing this node", "new_leader", id)
	return fmt.Errorf("%w: %s handed leadership over (new leader %q)", ErrLeadershipMoved, n.id, id)
}

// TransferLeadership hands leadership to the named voter, or to the most
// up-to-date voter when id is empty, and returns the new leader's ID.
func (n *Node) TransferLeadership(ctx context.Context, id string) (ChangeResult, string, error) {
	c, err := n.leaderConfig()
	if err != nil {
		return ChangeResult{}, "", err
	}
	if id == n.id {
		return ChangeResult{Message: fmt.Sprintf("%s is already the leader", id)}, id, nil
	}
	var f func(time.Duration) raft.Future
	if id == "" {
		if len(configVoters(c)) < 2 {
			return ChangeResult{}, "", fmt.Errorf("%w: %s is the only voter; there is nobody to hand leadership to", ErrConflict, n.id)
		}
		f = func(time.Duration) raft.Future { return n.raft.LeadershipTransfer() }
	} else {
		s, ok := findServer(c, id)
		if !ok {
			return ChangeResult{}, "", fmt.Errorf("%w: %q is not in the raft configuration", ErrUnknownServer, id)
		}
		if s.Suffrage != raft.Voter {
			return ChangeResult{}, "", fmt.Errorf("%w: %s is a non-voter and cannot lead; promote it first", ErrConflict, id)
		}
		f = func(time.Duration) raft.Future { return n.raft.LeadershipTransferToServer(s.ID, s.Address) }
	}
	if err := n.waitFuture(ctx, "leadership transfer", f); err != nil {
		return ChangeResult{}, "", err
	}
	leader := n.awaitOtherLeader(ctx)
	n.log.Info("leadership transferred", "new_leader", leader, "requested", id)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("leadership moved from %s to %s", n.id, leader)}, leader, nil
}

// awaitOtherLeader waits (bounded) until this node knows a leader other
// than itself and returns its ID ("" when none appeared in time).
func (n *Node) awaitOtherLeader(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for {
		if id, _ := n.Leader(); id != "" && id != n.id {
			return id
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(20 * time.Millisecond):
		}
	}
}
