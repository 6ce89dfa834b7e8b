package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cohortlabs/cohort/raftnode"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/hashicorp/raft"
)

// Membership operations run on the leader only. They are safe by default:
// a server enters as a non-voter and becomes a voter only once its log has
// caught up; a change that would leave fewer healthy voters than a quorum
// needs force; the last voter is never removed; the leader hands
// leadership over before it is removed or demoted. Every operation is
// idempotent: asking for the configuration the cluster already has
// succeeds with Changed false.

// ErrLeadershipMoved: this node was the target of the change, so it
// handed leadership over first; the change must be sent to the new leader
// (the rpc package does that).
var ErrLeadershipMoved = errors.New("leadership moved before the change")

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
		return errcode.Errorf(errcode.LastVoter, "%s is the only voter", target)
	}
	if force {
		return nil
	}
	remaining := slices.DeleteFunc(slices.Clone(voterIDs), func(id raft.ServerID) bool { return id == target })
	if q := len(voterIDs)/2 + 1; len(remaining) < q {
		return errcode.Errorf(errcode.QuorumAtRisk, "%d voters would remain, fewer than the quorum of %d of the current %d voters; use force if you mean it", len(remaining), q, len(voterIDs))
	}
	var ok []string
	for _, id := range remaining {
		if healthy[id] {
			ok = append(ok, string(id))
		}
	}
	if need := len(remaining)/2 + 1; len(ok) < need {
		return errcode.Errorf(errcode.QuorumAtRisk, "of the %d voters that would remain only %d are healthy (%v), and a quorum needs %d; "+
			"remove or repair the unhealthy servers first, or use force if you mean it",
			len(remaining), len(ok), ok, need)
	}
	return nil
}

// checkVoterLoss is CheckVoterLoss on fresh probes, re-probing for up to
// voterLossSettle while the answer is a refusal.
func (cl *Cluster) checkVoterLoss(ctx context.Context, c raft.Configuration, target raft.ServerID, force bool) error {
	allHealthy := map[raft.ServerID]bool{}
	for _, id := range configVoters(c) {
		allHealthy[id] = true
	}
	if err := CheckVoterLoss(configVoters(c), allHealthy, target, force); err != nil {
		return err // refused whatever the servers' health: no point re-probing
	}
	deadline := time.Now().Add(voterLossSettle)
	for {
		err := CheckVoterLoss(configVoters(c), cl.healthyVoters(ctx, c), target, force)
		if err == nil || !errors.Is(err, errcode.ErrQuorumAtRisk) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(voterLossPoll):
		}
	}
}

// healthyVoters probes the voters and says which are healthy.
func (cl *Cluster) healthyVoters(ctx context.Context, c raft.Configuration) map[raft.ServerID]bool {
	var vs []raft.Server
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			vs = append(vs, s)
		}
	}
	recs := cl.probeAll(ctx, vs)
	last, term, now := cl.raft.LastIndex(), cl.raft.CurrentTerm(), time.Now()
	out := map[raft.ServerID]bool{}
	for id, r := range recs {
		_, reason := cl.serverHealth(r, last, term, now)
		out[id] = reason == ""
	}
	return out
}

// AddNonvoter adds a server that replicates the log without voting, and
// records its gRPC address in the node registry when given.
func (cl *Cluster) AddNonvoter(ctx context.Context, id, raftAddr, grpcAddr string) (ChangeResult, error) {
	if err := raftnode.ValidateNodeID(id); err != nil {
		return ChangeResult{}, errcode.Errorf(errcode.InvalidArgument, "%v", err)
	}
	if err := validateAddresses(id, raftAddr, grpcAddr); err != nil {
		return ChangeResult{}, err
	}
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return ChangeResult{}, err
	}
	if s, ok := findServer(c, id); ok {
		if string(s.Address) != raftAddr {
			return ChangeResult{}, errcode.Errorf(errcode.ConfigurationConflict, "server %s is already in the configuration at %s, not %s; remove it first", id, s.Address, raftAddr)
		}
		if err := cl.registerPeer(ctx, id, grpcAddr, raftAddr); err != nil {
			return ChangeResult{}, err
		}
		return ChangeResult{Message: fmt.Sprintf("server %s at %s is already a %s", id, raftAddr, suffrageName(s.Suffrage))}, nil
	}
	for _, s := range c.Servers {
		if string(s.Address) == raftAddr {
			return ChangeResult{}, errcode.Errorf(errcode.ConfigurationConflict, "raft address %s already belongs to server %s", raftAddr, s.ID)
		}
	}
	if err := cl.registerPeer(ctx, id, grpcAddr, raftAddr); err != nil {
		return ChangeResult{}, err
	}
	err = cl.node.WaitFuture(ctx, "add non-voter", func(t time.Duration) raft.Future {
		return cl.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, t)
	})
	if err != nil {
		return ChangeResult{}, err
	}
	cl.log.Info("added non-voter", "server", id, "raft_address", raftAddr, "grpc_address", grpcAddr)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("added %s at %s as a non-voter", id, raftAddr)}, nil
}

// validateAddresses checks the addresses a membership change or a
// registration would put into the configuration or the node registry:
// a server at an address nobody can reach would stay there.
func validateAddresses(id, raftAddr, grpcAddr string) error {
	if raftAddr == "" {
		return errcode.Errorf(errcode.InvalidArgument, "raft address of %q is required", id)
	}
	if err := raftnode.ValidateAdvertise("raft address", raftAddr); err != nil {
		return errcode.Errorf(errcode.InvalidArgument, "%v", err)
	}
	if grpcAddr != "" {
		if err := raftnode.ValidateAdvertise("gRPC address", grpcAddr); err != nil {
			return errcode.Errorf(errcode.InvalidArgument, "%v", err)
		}
	}
	return nil
}

// registerPeer records a server's gRPC address in the node registry, so
// that the leader can probe it before it registers itself. A Kafka address
// the registry holds for it is kept: the server registers its own.
func (cl *Cluster) registerPeer(ctx context.Context, id, grpcAddr, raftAddr string) error {
	if grpcAddr == "" || cl.registryGRPC(raft.ServerID(id)) == grpcAddr {
		return nil
	}
	res, err := cl.node.Apply(ctx, registerCommand(Registration{NodeID: id, GRPCAddress: grpcAddr, RaftAddress: raftAddr,
		KafkaAddress: cl.registryKafka()[raft.ServerID(id)]}))
	if err != nil {
		return fmt.Errorf("register %s's gRPC address: %w", id, err)
	}
	if res.Err != nil {
		return errcode.Errorf(errcode.InvalidArgument, "register %s's gRPC address %q: %v", id, grpcAddr, res.Err)
	}
	return nil
}

// Promote makes a non-voter a voter, if its log is within PromoteMaxLag
// entries of the leader's.
func (cl *Cluster) Promote(ctx context.Context, id string) (ChangeResult, error) {
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return ChangeResult{}, err
	}
	s, ok := findServer(c, id)
	if !ok {
		return ChangeResult{}, errcode.Errorf(errcode.UnknownServer, "%q is not in the raft configuration", id)
	}
	if s.Suffrage == raft.Voter {
		return ChangeResult{Message: fmt.Sprintf("server %s is already a voter", id)}, nil
	}
	if err := cl.checkCaughtUp(ctx, s); err != nil {
		return ChangeResult{}, err
	}
	err = cl.node.WaitFuture(ctx, "promote", func(t time.Duration) raft.Future {
		return cl.raft.AddVoter(s.ID, s.Address, 0, t)
	})
	if err != nil {
		return ChangeResult{}, err
	}
	cl.log.Info("promoted non-voter", "server", id)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("promoted %s to voter", id)}, nil
}

// checkCaughtUp refuses a server whose log is more than PromoteMaxLag
// entries behind, or whose position is unknown.
func (cl *Cluster) checkCaughtUp(ctx context.Context, s raft.Server) error {
	r := cl.probe(ctx, s)
	leaderLast := cl.raft.LastIndex()
	if r.info == nil {
		return errcode.Errorf(errcode.ServerLagging, "%s has not reported its log index to the leader (%v); is it running?", s.ID, r.err)
	}
	var lag uint64
	if l := r.info.LastIndex; l < leaderLast {
		lag = leaderLast - l
	}
	if r.failing() {
		return errcode.Errorf(errcode.ServerLagging, "%s does not answer (%v); when it last did, %s ago, it was %d entries behind the leader (its last index %d, the leader's now %d)", s.ID, r.err, time.Since(r.infoAt).Round(time.Millisecond), lag, r.info.LastIndex, leaderLast)
	}
	if lag > cl.cfg.PromoteMaxLag {
		return errcode.Errorf(errcode.ServerLagging, "%s is %d entries behind the leader (its last index %d, the leader's %d); promotion needs a lag of at most %d: wait for it to catch up", s.ID, lag, r.info.LastIndex, leaderLast, cl.cfg.PromoteMaxLag)
	}
	return nil
}

// AddVoter adds a server as a non-voter, waits (bounded by ctx) until it
// has caught up, and promotes it. A server this call added that does not
// catch up in time is removed again, so a failed AddVoter leaves the
// configuration as it was; the error says how far behind it was.
func (cl *Cluster) AddVoter(ctx context.Context, id, raftAddr, grpcAddr string) (ChangeResult, error) {
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return ChangeResult{}, err
	}
	s, existed := findServer(c, id)
	if existed && s.Suffrage == raft.Voter {
		if string(s.Address) != raftAddr && raftAddr != "" {
			return ChangeResult{}, errcode.Errorf(errcode.ConfigurationConflict, "server %s is already a voter at %s, not %s", id, s.Address, raftAddr)
		}
		return ChangeResult{Message: fmt.Sprintf("server %s at %s is already a voter", id, s.Address)}, nil
	}
	if _, err := cl.AddNonvoter(ctx, id, raftAddr, grpcAddr); err != nil {
		return ChangeResult{}, err
	}
	// Stop waiting early enough to undo the add and answer before the
	// caller's deadline.
	wait, stop := catchUpContext(ctx)
	defer stop()
	tick := time.NewTicker(addVoterPoll)
	defer tick.Stop()
	for {
		res, err := cl.Promote(wait, id)
		if err == nil {
			res.Message = fmt.Sprintf("added %s at %s: non-voter until caught up, then promoted to voter", id, raftAddr)
			return res, nil
		}
		if !errors.Is(err, errcode.ErrServerLagging) {
			return ChangeResult{}, err
		}
		select {
		case <-wait.Done():
			if existed || ctx.Err() == context.Canceled {
				return ChangeResult{}, lagging(err, "%s stays a non-voter (promote it when it has caught up)", id)
			}
			return ChangeResult{}, cl.undoAdd(ctx, id, err)
		case <-tick.C:
		}
	}
}

// catchUpContext is how long AddVoter waits for a server to catch up: up
// to the caller's deadline less a reserve (a quarter of the time, at most
// undoAddTimeout) for removing it again and answering.
func catchUpContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	reserve := min(time.Until(dl)/4, undoAddTimeout)
	return context.WithDeadline(ctx, dl.Add(-reserve))
}

// undoAdd removes a non-voter AddVoter added that did not catch up (why),
// within the caller's deadline if it has one, else undoAddTimeout.
func (cl *Cluster) undoAdd(parent context.Context, id string, why error) error {
	dl, ok := parent.Deadline()
	if !ok {
		dl = time.Now().Add(undoAddTimeout)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(parent), dl)
	defer cancel()
	if _, err := cl.RemoveServer(ctx, id, false); err != nil {
		return lagging(why, "removing %s again failed, it stays a non-voter: %v", id, err)
	}
	cl.log.Info("removed a server add-voter added that did not catch up", "server", id)
	return lagging(why, "%s did not catch up before the call's deadline and was removed again: the configuration is as it was", id)
}

// lagging is the SERVER_LAGGING refusal why, with what became of the server
// added to its message (the message is what reaches the caller).
func lagging(why error, format string, args ...any) error {
	msg := why.Error()
	var pe *errcode.ProtocolError
	if errors.As(why, &pe) {
		msg = pe.Msg
	}
	return errcode.Errorf(errcode.ServerLagging, "%s; %s", msg, fmt.Sprintf(format, args...))
}

// undoAddTimeout bounds removing a server AddVoter added in vain.
const undoAddTimeout = 10 * time.Second

// Demote makes a voter a non-voter. Demoting this node (the leader) hands
// leadership over first and returns ErrLeadershipMoved.
func (cl *Cluster) Demote(ctx context.Context, id string, force bool) (ChangeResult, error) {
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return ChangeResult{}, err
	}
	s, ok := findServer(c, id)
	if !ok {
		return ChangeResult{}, errcode.Errorf(errcode.UnknownServer, "%q is not in the raft configuration", id)
	}
	if s.Suffrage != raft.Voter {
		return ChangeResult{Message: fmt.Sprintf("server %s is already a non-voter", id)}, nil
	}
	if cl.cfg.Autopilot.Enabled {
		return ChangeResult{}, errcode.Errorf(errcode.AutopilotManaged, "autopilot promotes every healthy non-voter again after %s; disable autopilot to keep %s a non-voter", cl.cfg.Autopilot.ServerStabilizationTime, id)
	}
	if err := cl.checkVoterLoss(ctx, c, s.ID, force); err != nil {
		return ChangeResult{}, fmt.Errorf("demote %s: %w", id, err)
	}
	if id == cl.id {
		return ChangeResult{}, cl.transferAway(ctx, c)
	}
	err = cl.node.WaitFuture(ctx, "demote", func(t time.Duration) raft.Future { return cl.raft.DemoteVoter(s.ID, 0, t) })
	if err != nil {
		return ChangeResult{}, err
	}
	cl.log.Info("demoted voter", "server", id, "force", force)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("demoted %s to non-voter", id)}, nil
}

// RemoveServer removes a server from the configuration. Removing this node
// (the leader) hands leadership over first and returns ErrLeadershipMoved.
func (cl *Cluster) RemoveServer(ctx context.Context, id string, force bool) (ChangeResult, error) {
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return ChangeResult{}, err
	}
	s, ok := findServer(c, id)
	if !ok {
		if cl.registryGRPC(raft.ServerID(id)) != "" {
			return ChangeResult{Message: fmt.Sprintf("server %s is not in the raft configuration (already removed)", id)}, nil
		}
		return ChangeResult{}, errcode.Errorf(errcode.UnknownServer, "%q is not in the raft configuration and has never registered", id)
	}
	if s.Suffrage == raft.Voter {
		if err := cl.checkVoterLoss(ctx, c, s.ID, force); err != nil {
			return ChangeResult{}, fmt.Errorf("remove %s: %w", id, err)
		}
	}
	if id == cl.id {
		return ChangeResult{}, cl.transferAway(ctx, c)
	}
	err = cl.node.WaitFuture(ctx, "remove server", func(t time.Duration) raft.Future { return cl.raft.RemoveServer(s.ID, 0, t) })
	if err != nil {
		return ChangeResult{}, err
	}
	cl.probes.forget(s.ID)
	cl.log.Info("removed server", "server", id, "suffrage", suffrageName(s.Suffrage), "force", force)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("removed %s (%s at %s)", id, suffrageName(s.Suffrage), s.Address)}, nil
}

// transferAway hands leadership to the healthiest, most up-to-date other
// voter and returns ErrLeadershipMoved naming the new leader.
func (cl *Cluster) transferAway(ctx context.Context, c raft.Configuration) error {
	var best *raft.Server
	var bestIndex uint64
	last, term, now := cl.raft.LastIndex(), cl.raft.CurrentTerm(), time.Now()
	for i, s := range c.Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == cl.id {
			continue
		}
		r := cl.probe(ctx, s)
		if _, reason := cl.serverHealth(r, last, term, now); reason != "" {
			continue
		}
		if best == nil || r.info.LastIndex > bestIndex {
			best, bestIndex = &c.Servers[i], r.info.LastIndex
		}
	}
	var err error
	if best != nil {
		err = cl.node.WaitFuture(ctx, "leadership transfer", func(time.Duration) raft.Future {
			return cl.raft.LeadershipTransferToServer(best.ID, best.Address)
		})
	} else {
		err = cl.node.WaitFuture(ctx, "leadership transfer", func(time.Duration) raft.Future { return cl.raft.LeadershipTransfer() })
	}
	if err != nil {
		return fmt.Errorf("hand leadership over before changing this node: %w", err)
	}
	id, _ := cl.node.Leader()
	cl.log.Info("leadership handed over before changing this node", "new_leader", id)
	return fmt.Errorf("%w: %s handed leadership over (new leader %q)", ErrLeadershipMoved, cl.id, id)
}

// TransferLeadership hands leadership to the named voter, or to the most
// up-to-date voter when id is empty, and returns the new leader's ID.
func (cl *Cluster) TransferLeadership(ctx context.Context, id string) (ChangeResult, string, error) {
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return ChangeResult{}, "", err
	}
	if id == cl.id {
		return ChangeResult{Message: fmt.Sprintf("%s is already the leader", id)}, id, nil
	}
	var f func(time.Duration) raft.Future
	if id == "" {
		if len(configVoters(c)) < 2 {
			return ChangeResult{}, "", errcode.Errorf(errcode.ConfigurationConflict, "%s is the only voter; there is nobody to hand leadership to", cl.id)
		}
		f = func(time.Duration) raft.Future { return cl.raft.LeadershipTransfer() }
	} else {
		s, ok := findServer(c, id)
		if !ok {
			return ChangeResult{}, "", errcode.Errorf(errcode.UnknownServer, "%q is not in the raft configuration", id)
		}
		if s.Suffrage != raft.Voter {
			return ChangeResult{}, "", errcode.Errorf(errcode.ConfigurationConflict, "%s is a non-voter and cannot lead; promote it first", id)
		}
		f = func(time.Duration) raft.Future { return cl.raft.LeadershipTransferToServer(s.ID, s.Address) }
	}
	if err := cl.node.WaitFuture(ctx, "leadership transfer", f); err != nil {
		return ChangeResult{}, "", err
	}
	leader := cl.awaitOtherLeader(ctx)
	cl.log.Info("leadership transferred", "new_leader", leader, "requested", id)
	return ChangeResult{Changed: true, Message: fmt.Sprintf("leadership moved from %s to %s", cl.id, leader)}, leader, nil
}

// awaitOtherLeader waits (bounded) until this node knows a leader other
// than itself and returns its ID ("" when none appeared in time).
func (cl *Cluster) awaitOtherLeader(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for {
		if id, _ := cl.node.Leader(); id != "" && id != cl.id {
			return id
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(leaderPoll):
		}
	}
}
