package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/raftnode"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// Autopilot defaults (Consul's, except where a comment says otherwise).
const (
	// DefaultDeadServerThreshold is how long a server may fail the
	// leader's probes before autopilot removes it.
	DefaultDeadServerThreshold = 30 * time.Second
	// DefaultServerStabilizationTime is how long a non-voter must be
	// healthy before autopilot promotes it.
	DefaultServerStabilizationTime = 10 * time.Second
	// DefaultAutopilotInterval paces autopilot's health checks and
	// reconciliation (raft-autopilot's defaults are 2 s and 10 s).
	DefaultAutopilotInterval = time.Second
)

// AutopilotConfig configures the leader's autopilot (hashicorp/raft-autopilot).
type AutopilotConfig struct {
	// Enabled starts autopilot on whichever node leads.
	Enabled bool
	// CleanupDeadServers removes servers that failed the leader's probes
	// for DeadServerThreshold (never below MinQuorum voters, never more
	// than keeps a healthy quorum).
	CleanupDeadServers  bool
	DeadServerThreshold time.Duration
	// ServerStabilizationTime is how long a non-voter must be healthy
	// before it is promoted.
	ServerStabilizationTime time.Duration
	// MinQuorum is the number of voters autopilot never removes below.
	MinQuorum uint
	// MaxTrailingLogs is the lag (entries) beyond which a server is
	// unhealthy.
	MaxTrailingLogs uint64
	// Interval paces health checks and reconciliation.
	Interval time.Duration
}

// DefaultAutopilotConfig is autopilot's configuration when enabled:
// Consul's defaults, MaxTrailingLogs the promotion lag.
func DefaultAutopilotConfig() AutopilotConfig {
	return AutopilotConfig{
		DeadServerThreshold:     DefaultDeadServerThreshold,
		ServerStabilizationTime: DefaultServerStabilizationTime,
		MaxTrailingLogs:         DefaultPromoteMaxLag,
		Interval:                DefaultAutopilotInterval,
	}
}

func (a AutopilotConfig) validate() error {
	var errs []error
	if a.DeadServerThreshold <= 0 || a.ServerStabilizationTime < 0 || a.Interval <= 0 {
		errs = append(errs, fmt.Errorf("autopilot dead-server threshold %s, stabilization time %s, interval %s: must be positive (the stabilization time may be 0)",
			a.DeadServerThreshold, a.ServerStabilizationTime, a.Interval))
	}
	return errors.Join(errs...)
}

// autopilotRunner runs raft-autopilot while this node leads: started on
// gaining leadership, stopped on losing it. Server health comes from the
// leader's NodeInfo probes (Node.probe): a server that has not answered
// for DeadServerThreshold is failed, which is the signal Consul takes from
// Serf.
type autopilotRunner struct {
	cl  *Cluster
	cfg AutopilotConfig

	mu    sync.Mutex
	ap    *autopilot.Autopilot
	state *autopilot.State
}

func newAutopilotRunner(cl *Cluster) *autopilotRunner {
	return &autopilotRunner{cl: cl, cfg: cl.cfg.Autopilot}
}

func (r *autopilotRunner) run() {
	defer r.cl.bgWG.Done()
	sub := r.cl.node.SubscribeLeadership()
	defer sub.Close()
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		select {
		case <-r.cl.bg.Done():
			return
		case ev, ok := <-sub.C():
			if !ok {
				return
			}
			switch {
			case ev.IsLeader && stop == nil:
				stop = r.start()
			case !ev.IsLeader && stop != nil:
				stop()
				stop = nil
			}
		}
	}
}

// start runs autopilot until the returned function is called.
func (r *autopilotRunner) start() func() {
	ctx, cancel := context.WithCancel(r.cl.bg)
	ap := autopilot.New(r.cl.raft, r,
		autopilot.WithLogger(raftnode.HCLogger(r.cl.log, "autopilot")),
		autopilot.WithUpdateInterval(r.cfg.Interval),
		autopilot.WithReconcileInterval(r.cfg.Interval))
	r.mu.Lock()
	r.ap = ap
	r.mu.Unlock()
	ap.Start(ctx)
	r.cl.log.Info("autopilot started", "cleanup_dead_servers", r.cfg.CleanupDeadServers,
		"dead_server_threshold", r.cfg.DeadServerThreshold, "server_stabilization_time", r.cfg.ServerStabilizationTime,
		"min_quorum", r.cfg.MinQuorum)
	return func() {
		cancel()
		<-ap.Stop()
		r.mu.Lock()
		r.ap, r.state = nil, nil
		r.mu.Unlock()
		r.cl.log.Info("autopilot stopped")
	}
}

// State is autopilot's latest view, or nil when it is not running here.
func (r *autopilotRunner) State() *autopilot.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// AutopilotConfig implements autopilot.ApplicationIntegration.
func (r *autopilotRunner) AutopilotConfig() *autopilot.Config {
	return &autopilot.Config{
		CleanupDeadServers:      r.cfg.CleanupDeadServers,
		LastContactThreshold:    r.cl.cfg.HealthyLastContact,
		MaxTrailingLogs:         r.cfg.MaxTrailingLogs,
		MinQuorum:               r.cfg.MinQuorum,
		ServerStabilizationTime: r.cfg.ServerStabilizationTime,
	}
}

// NotifyState implements autopilot.ApplicationIntegration.
func (r *autopilotRunner) NotifyState(s *autopilot.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ap != nil {
		r.state = s
	}
}

// FetchServerStats implements autopilot.ApplicationIntegration with the
// leader's NodeInfo probes.
func (r *autopilotRunner) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	list := make([]raft.Server, 0, len(servers))
	for id, s := range servers {
		list = append(list, raft.Server{ID: id, Address: s.Address})
	}
	out := map[raft.ServerID]*autopilot.ServerStats{}
	for id, rec := range r.cl.probeAll(ctx, list) {
		if rec.info == nil || rec.failing() {
			continue
		}
		lc := time.Duration(rec.info.LastContactMs) * time.Millisecond
		if rec.info.LastContactMs < 0 {
			lc = -1
		}
		out[id] = &autopilot.ServerStats{LastContact: lc, LastTerm: rec.info.Term, LastIndex: rec.info.LastIndex}
	}
	return out
}

// KnownServers implements autopilot.ApplicationIntegration: every server of
// the configuration (a server missing here would be removed as stale),
// failed when the leader's probes have not reached it for
// DeadServerThreshold.
func (r *autopilotRunner) KnownServers() map[raft.ServerID]*autopilot.Server {
	c, err := r.cl.node.Configuration()
	if err != nil {
		return nil
	}
	leader, _ := r.cl.node.Leader()
	now := time.Now()
	out := map[raft.ServerID]*autopilot.Server{}
	for _, s := range c.Servers {
		status := autopilot.NodeAlive
		rec := r.cl.probes.get(s.ID)
		lastOK := rec.infoAt
		if lastOK.IsZero() {
			lastOK = rec.firstSeen
		}
		if string(s.ID) != r.cl.id && !lastOK.IsZero() && now.Sub(lastOK) > r.cfg.DeadServerThreshold {
			status = autopilot.NodeFailed
		}
		out[s.ID] = &autopilot.Server{
			ID: s.ID, Name: string(s.ID), Address: s.Address, NodeStatus: status,
			RaftVersion: raft.ProtocolVersionMax, IsLeader: string(s.ID) == leader, NodeType: autopilot.NodeVoter,
		}
	}
	return out
}

// RemoveFailedServer implements autopilot.ApplicationIntegration. It must
// not block autopilot, so the removal runs in the background.
func (r *autopilotRunner) RemoveFailedServer(s *autopilot.Server) {
	go func() {
		ctx, cancel := context.WithTimeout(r.cl.bg, removeFailedTimeout)
		defer cancel()
		err := r.cl.node.WaitFuture(ctx, "autopilot remove failed server", func(t time.Duration) raft.Future {
			return r.cl.raft.RemoveServer(s.ID, 0, t)
		})
		if err != nil {
			r.cl.log.Warn("autopilot could not remove a failed server", "server", s.ID, "err", err)
			return
		}
		r.cl.probes.forget(s.ID)
		r.cl.log.Warn("autopilot removed a failed server", "server", s.ID, "dead_server_threshold", r.cfg.DeadServerThreshold)
	}()
}

// autopilotState is autopilot's latest view on this node, nil when it is
// disabled or not running (this node does not lead).
func (cl *Cluster) autopilotState() *autopilot.State {
	if cl.autopilot == nil {
		return nil
	}
	return cl.autopilot.State()
}
