package cluster

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Status is the leader's view of the cluster.
type Status struct {
	LeaderID          string
	LeaderRaftAddress string
	LeaderGRPCAddress string
	Term              uint64
	CommitIndex       uint64
	AppliedIndex      uint64
	LastIndex         uint64
	// PromoteMaxLag is the lag limit for promotion and health.
	PromoteMaxLag uint64
	Autopilot     AutopilotStatus
	// Servers is every server of the configuration, sorted by ID.
	Servers []ServerStatus
}

// ServerStatus is one server as the leader sees it.
type ServerStatus struct {
	NodeID      string
	RaftAddress string
	GRPCAddress string
	Voter       bool
	Leader      bool
	// State is the server's Raft state as it last answered; StateKnown is
	// false when its latest probe failed.
	State      raft.RaftState
	StateKnown bool
	// LastContactMs is how long ago it heard from the leader (-1: unknown).
	LastContactMs int64
	LastIndex     uint64
	Lag           uint64
	Healthy       bool
	// Reason says why it is unhealthy ("" when healthy).
	Reason string
	// AutopilotState is autopilot's view ("voter", "non-voter", ...), ""
	// when autopilot does not run.
	AutopilotState string
	// StableSinceUnixMs is when autopilot last saw it become healthy (0:
	// not healthy, or no autopilot).
	StableSinceUnixMs int64
}

// AutopilotStatus is autopilot's configuration and view.
type AutopilotStatus struct {
	Enabled                 bool
	Healthy                 bool
	FailureTolerance        int
	CleanupDeadServers      bool
	DeadServerThreshold     time.Duration
	ServerStabilizationTime time.Duration
	MinQuorum               uint
	MaxTrailingLogs         uint64
}

// Status is the leader's view of the cluster: every server of the
// configuration, probed now, with its lag and health, and autopilot's view.
// Leader only (raftnode.ErrNotLeader otherwise).
func (cl *Cluster) Status(ctx context.Context) (Status, error) {
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return Status{}, err
	}
	recs := cl.probeAll(ctx, c.Servers)
	leaderID, leaderAddr := cl.node.Leader()
	last, term, now := cl.raft.LastIndex(), cl.raft.CurrentTerm(), time.Now()
	st := Status{
		LeaderID: leaderID, LeaderRaftAddress: leaderAddr, LeaderGRPCAddress: cl.LeaderGRPCAddress(),
		Term: term, CommitIndex: cl.raft.CommitIndex(), AppliedIndex: cl.raft.AppliedIndex(), LastIndex: last,
		PromoteMaxLag: cl.cfg.PromoteMaxLag,
	}
	apState := cl.autopilotState()
	if a := cl.cfg.Autopilot; a.Enabled {
		st.Autopilot = AutopilotStatus{
			Enabled: true, CleanupDeadServers: a.CleanupDeadServers,
			DeadServerThreshold: a.DeadServerThreshold, ServerStabilizationTime: a.ServerStabilizationTime,
			MinQuorum: a.MinQuorum, MaxTrailingLogs: a.MaxTrailingLogs,
		}
		if apState != nil {
			st.Autopilot.Healthy = apState.Healthy
			st.Autopilot.FailureTolerance = apState.FailureTolerance
		}
	}
	for _, s := range c.Servers {
		r := recs[s.ID]
		lag, reason := cl.serverHealth(r, last, term, now)
		ss := ServerStatus{
			NodeID: string(s.ID), RaftAddress: string(s.Address), GRPCAddress: cl.registryGRPC(s.ID),
			Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == leaderID,
			LastContactMs: -1, Lag: lag, Healthy: reason == "", Reason: reason,
		}
		if r.info != nil {
			ss.LastIndex = r.info.LastIndex
			if !r.failing() {
				ss.State, ss.StateKnown = r.info.State, true
				ss.LastContactMs = r.info.LastContactMs
			}
		}
		if apState != nil {
			if as, ok := apState.Servers[s.ID]; ok {
				ss.AutopilotState = string(as.State)
				if as.Health.Healthy && !as.Health.StableSince.IsZero() {
					ss.StableSinceUnixMs = as.Health.StableSince.UnixMilli()
				}
			}
		}
		st.Servers = append(st.Servers, ss)
	}
	slices.SortFunc(st.Servers, func(a, b ServerStatus) int { return strings.Compare(a.NodeID, b.NodeID) })
	return st, nil
}

// Health is one node's own view of whether it can serve.
type Health struct {
	Healthy bool
	// Reason says why not ("" when healthy).
	Reason            string
	NodeID            string
	State             raft.RaftState
	LeaderID          string
	LeaderGRPCAddress string
	Term              uint64
	CommitIndex       uint64
	AppliedIndex      uint64
}

// Health answers from this node: healthy when raft runs, the node has not
// been removed, a leader is known, and the node is fit to serve
// (raftnode.Node.Fault: its log and snapshot writes succeed, and as a
// follower it is close behind the leader and in contact with it).
func (cl *Cluster) Health() Health {
	leaderID, _ := cl.node.Leader()
	h := Health{
		Healthy: true, NodeID: cl.id, State: cl.raft.State(),
		LeaderID: leaderID, LeaderGRPCAddress: cl.LeaderGRPCAddress(), Term: cl.raft.CurrentTerm(),
		CommitIndex: cl.raft.CommitIndex(), AppliedIndex: cl.raft.AppliedIndex(),
	}
	switch {
	case h.State == raft.Shutdown:
		h.Healthy, h.Reason = false, "raft is shut down"
	case isClosed(cl.removed):
		h.Healthy, h.Reason = false, "this node was removed from the cluster"
	case leaderID == "":
		h.Healthy, h.Reason = false, "no raft leader is known (election in progress, no quorum, or the node has not joined a cluster)"
	default:
		if err := cl.node.Fault(); err != nil {
			h.Healthy, h.Reason = false, "unfit to serve: "+err.Error()
		}
	}
	return h
}
