package raftnode

import (
	"context"
	"slices"
	"strings"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
)

// ClusterStatus is the leader's view of the cluster: every server of the
// configuration, probed now, with its lag and health, and autopilot's view.
func (n *Node) ClusterStatus(ctx context.Context) (*cohortv1.StatusResponse, error) {
	c, err := n.leaderConfig()
	if err != nil {
		return nil, err
	}
	recs := n.probeAll(ctx, c.Servers)
	leaderID, leaderAddr := n.Leader()
	last, term, now := n.raft.LastIndex(), n.raft.CurrentTerm(), time.Now()
	resp := &cohortv1.StatusResponse{
		LeaderId: leaderID, LeaderRaftAddress: leaderAddr, LeaderGrpcAddress: n.LeaderGRPCAddress(),
		Term: term, CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.raft.AppliedIndex(), LastIndex: last,
		PromoteMaxLag: n.cfg.PromoteMaxLag,
		Autopilot:     &cohortv1.AutopilotStatus{Enabled: n.cfg.Autopilot.Enabled},
	}
	var apState = n.autopilotState()
	if a := n.cfg.Autopilot; a.Enabled {
		resp.Autopilot = &cohortv1.AutopilotStatus{
			Enabled: true, CleanupDeadServers: a.CleanupDeadServers,
			DeadServerThresholdMs:     a.DeadServerThreshold.Milliseconds(),
			ServerStabilizationTimeMs: a.ServerStabilizationTime.Milliseconds(),
			MinQuorum:                 uint32(a.MinQuorum), MaxTrailingLogs: a.MaxTrailingLogs,
		}
		if apState != nil {
			resp.Autopilot.Healthy = apState.Healthy
			resp.Autopilot.FailureTolerance = int32(apState.FailureTolerance)
		}
	}
	for _, s := range c.Servers {
		r := recs[s.ID]
		lag, reason := n.serverHealth(r, last, term, now)
		st := &cohortv1.ServerStatus{
			NodeId: string(s.ID), RaftAddress: string(s.Address), GrpcAddress: n.registryGRPC(s.ID),
			Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == leaderID,
			LastContactMs: -1, Lag: lag, Healthy: reason == "", Reason: reason,
		}
		if r.info != nil {
			st.LastIndex = r.info.GetLastIndex()
			if !r.failing() {
				st.State = r.info.GetState()
				st.LastContactMs = r.info.GetLastContactMs()
			}
		}
		if apState != nil {
			if ss, ok := apState.Servers[s.ID]; ok {
				st.AutopilotState = string(ss.State)
				if ss.Health.Healthy && !ss.Health.StableSince.IsZero() {
					st.StableSinceUnixMs = ss.Health.StableSince.UnixMilli()
				}
			}
		}
		resp.Servers = append(resp.Servers, st)
	}
	slices.SortFunc(resp.Servers, func(a, b *cohortv1.ServerStatus) int { return strings.Compare(a.NodeId, b.NodeId) })
	return resp, nil
}
