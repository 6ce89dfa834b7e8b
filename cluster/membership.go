package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cohortlabs/cohort/errcode"

	"github.com/hashicorp/raft"
)

// A node's own view of the configuration is not enough to decide that it
// has joined or has been removed: a node that catches up replays the
// configurations of the cluster's whole history (it was a voter once, then
// removed, then re-added...), and for a while its latest one is an old one.
// So both decisions are confirmed by the leader: a joining node is done
// when the leader answered its add (and promote), and a node that looks
// removed stops only once the leader's configuration lacks it too.

// Removed is closed when this node finds itself no longer in the cluster's
// Raft configuration after having been in it: an operator (or autopilot)
// removed it. cohortd stops the node then, instead of letting it linger.
func (cl *Cluster) Removed() <-chan struct{} { return cl.removed }

// watchRemoval closes removed once the leader confirms that its
// configuration lacks this node.
func (cl *Cluster) watchRemoval() {
	defer cl.bgWG.Done()
	tick := time.NewTicker(cl.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-cl.bg.Done():
			return
		case <-tick.C:
		}
		c, err := cl.node.Configuration()
		if err != nil || len(c.Servers) == 0 {
			continue // not part of any cluster yet
		}
		// Suspect a removal when the latest configuration lacks this node
		// (a node only gets one once a leader added it, so this is either a
		// removal or an old configuration being replayed), or when a leader
		// went silent: it may have stopped replicating to a removed server
		// before the entry that removes it arrived. The leader decides.
		if _, in := findServer(c, cl.id); in && !cl.leaderSilent() {
			continue
		}
		if !cl.leaderLacksMe(cl.bg) {
			continue
		}
		cl.removedOnce.Do(func() {
			cl.log.Warn("this node was removed from the raft configuration; stopping (wipe its data dir to join again)",
				"servers", describeServers(c.Servers))
			close(cl.removed)
		})
		return
	}
}

// leaderSilent reports whether this follower has not heard from a leader
// for longer than a few heartbeat timeouts.
func (cl *Cluster) leaderSilent() bool {
	if cl.raft.State() == raft.Leader {
		return false
	}
	last := cl.node.LastContact()
	return !last.IsZero() && time.Since(last) > silentLeaderHeartbeats*cl.node.Config().HeartbeatTimeout
}

// leaderLacksMe asks the cluster (the leader, through any node it can
// name) whether its configuration lacks this node. No answer is no.
func (cl *Cluster) leaderLacksMe(ctx context.Context) bool {
	var addrs []string
	seen := map[string]bool{cl.cfg.GRPCAdvertise: true}
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	add(cl.LeaderGRPCAddress())
	for _, node := range cl.node.FSM().Nodes() {
		add(node.GRPCAddress)
	}
	for _, a := range cl.cfg.Join {
		add(a)
	}
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, joinCallTimeout)
		st, err := cl.peers.Status(cctx, addr)
		cancel()
		if err != nil {
			continue
		}
		for _, s := range st.Servers {
			if s.NodeID == cl.id {
				return false
			}
		}
		return true
	}
	return false
}

// errGiveUp ends a join step's retries.
var errGiveUp = errors.New("giving up")

// runJoin joins a running cluster when the node was started with Join and
// without BootstrapExpect. A fresh node asks (through any join address) to
// be added as a non-voter and then, unless JoinAsNonvoter or the leader
// runs autopilot (which promotes it after the stabilisation time), asks for
// its promotion until the leader finds it caught up. Each step is done when
// the leader says so, never on the node's own (possibly replayed) view. A
// node restarting with state only finishes a promotion it had not got; it
// never adds itself again, so a removed node cannot come back by restarting.
func (cl *Cluster) runJoin() {
	defer cl.bgWG.Done()
	if len(cl.cfg.Join) == 0 || cl.cfg.BootstrapExpect > 0 || cl.cfg.Bootstrap {
		return
	}
	promote := func(ctx context.Context, addr string) error {
		msg, err := cl.peers.Promote(ctx, addr, cl.id)
		if errors.Is(err, errcode.ErrUnknownServer) {
			return fmt.Errorf("%w: the cluster no longer has this node: %v", errGiveUp, err)
		}
		if err == nil {
			cl.log.Info("promoted to voter", "via", addr, "answer", msg)
		}
		return err
	}
	if cl.hadState {
		c, err := cl.node.Configuration()
		if s, in := findServer(c, cl.id); err != nil || !in || s.Suffrage == raft.Voter || cl.cfg.JoinAsNonvoter {
			return
		}
		if cl.retryJoin("promote", promote) {
			cl.log.Info("joined the cluster as a voter")
		}
		return
	}
	autopilot := false
	added := cl.retryJoin("add as non-voter", func(ctx context.Context, addr string) error {
		ans, err := cl.peers.AddNonvoter(ctx, addr, cl.self())
		if err == nil {
			autopilot = ans.AutopilotEnabled
			cl.log.Info("asked the cluster to add this node as a non-voter", "via", addr, "answer", ans.Message)
		}
		return err
	})
	switch {
	case !added:
		return
	case cl.cfg.JoinAsNonvoter || autopilot:
		cl.log.Info("joined the cluster as a non-voter", "autopilot_promotes", autopilot && !cl.cfg.JoinAsNonvoter)
		return
	}
	if cl.retryJoin("promote", promote) {
		cl.log.Info("joined the cluster as a voter")
	}
}

// retryJoin runs step against the join addresses, one after the other,
// every PollInterval, until one succeeds (true), the step gives up or the
// node shuts down (false).
func (cl *Cluster) retryJoin(what string, step func(ctx context.Context, addr string) error) bool {
	tick := time.NewTicker(cl.cfg.PollInterval)
	defer tick.Stop()
	var lastErr string
	for {
		var errs []error
		for _, addr := range cl.cfg.Join {
			ctx, cancel := context.WithTimeout(cl.bg, joinCallTimeout)
			err := step(ctx, addr)
			cancel()
			if err == nil {
				return true
			}
			if errors.Is(err, errGiveUp) {
				cl.log.Warn("joining the cluster: "+what+" abandoned", "err", err)
				return false
			}
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err.Error() != lastErr && cl.bg.Err() == nil {
			lastErr = err.Error()
			cl.log.Info("joining the cluster: "+what+" not done yet; retrying", "join", cl.cfg.Join, "err", err)
		}
		select {
		case <-cl.bg.Done():
			return false
		case <-tick.C:
		}
	}
}
