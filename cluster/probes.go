package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// probeRecord is the leader's latest knowledge of one server, from its
// NodeInfo answers.
type probeRecord struct {
	info   *NodeInfo // last successful answer
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

func (p *probes) record(id raft.ServerID, info *NodeInfo, err error, at time.Time) probeRecord {
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

// LocalInfo describes this node, as NodeInfo answers for it.
func (cl *Cluster) LocalInfo() NodeInfo {
	leaderID, leaderAddr := cl.node.Leader()
	lc := int64(-1)
	switch {
	case cl.raft.State() == raft.Leader:
		lc = 0
	case !cl.node.LastContact().IsZero():
		lc = time.Since(cl.node.LastContact()).Milliseconds()
	}
	return NodeInfo{
		NodeID:            cl.id,
		RaftAddress:       cl.raftAddr,
		GRPCAddress:       cl.cfg.GRPCAdvertise,
		HasState:          cl.hadState || cl.node.HasConfiguration(),
		State:             cl.raft.State(),
		Term:              cl.raft.CurrentTerm(),
		LeaderID:          leaderID,
		LeaderRaftAddress: leaderAddr,
		LeaderGRPCAddress: cl.LeaderGRPCAddress(),
		LastIndex:         cl.raft.LastIndex(),
		CommitIndex:       cl.raft.CommitIndex(),
		AppliedIndex:      cl.raft.AppliedIndex(),
		BootstrapExpect:   cl.cfg.BootstrapExpect,
		LastContactMs:     lc,
		AutopilotEnabled:  cl.cfg.Autopilot.Enabled,
	}
}

// probe asks one server to describe itself and records the answer.
func (cl *Cluster) probe(ctx context.Context, s raft.Server) probeRecord {
	now := time.Now()
	if string(s.ID) == cl.id {
		info := cl.LocalInfo()
		return cl.probes.record(s.ID, &info, nil, now)
	}
	addr := cl.registryGRPC(s.ID)
	if addr == "" {
		return cl.probes.record(s.ID, nil, errors.New("no gRPC address registered"), now)
	}
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	info, err := cl.peers.NodeInfo(cctx, addr)
	if err == nil && info.NodeID != string(s.ID) {
		err = fmt.Errorf("%s answers as node %q", addr, info.NodeID)
	}
	return cl.probes.record(s.ID, &info, err, time.Now())
}

// probeAll probes every server concurrently.
func (cl *Cluster) probeAll(ctx context.Context, servers []raft.Server) map[raft.ServerID]probeRecord {
	out := make(map[raft.ServerID]probeRecord, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			r := cl.probe(ctx, s)
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
func (cl *Cluster) serverHealth(p probeRecord, leaderLast, term uint64, now time.Time) (lag uint64, reason string) {
	if p.info == nil {
		if p.err != nil {
			return 0, fmt.Sprintf("has never answered: %v", p.err)
		}
		return 0, "not probed yet"
	}
	if last := p.info.LastIndex; last < leaderLast {
		lag = leaderLast - last
	}
	switch {
	case p.failing():
		return lag, fmt.Sprintf("does not answer (last answer %s ago): %v", now.Sub(p.infoAt).Round(time.Millisecond), p.err)
	case p.info.State == raft.Leader:
		return lag, ""
	case p.info.Term != term:
		return lag, fmt.Sprintf("in term %d, the leader in term %d", p.info.Term, term)
	case p.info.LastContactMs < 0:
		return lag, "has never heard from the leader"
	case time.Duration(p.info.LastContactMs)*time.Millisecond > cl.cfg.HealthyLastContact:
		return lag, fmt.Sprintf("last heard from the leader %dms ago (limit %s)", p.info.LastContactMs, cl.cfg.HealthyLastContact)
	case lag > cl.cfg.PromoteMaxLag:
		return lag, fmt.Sprintf("%d entries behind the leader (limit %d)", lag, cl.cfg.PromoteMaxLag)
	}
	return lag, ""
}
