package raftnode

import (
	"context"
	"errors"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
)

// Removed is closed when this node finds itself no longer in the cluster's
// Raft configuration after having been in it: an operator (or autopilot)
// removed it. cohortd stops the node then, instead of letting it linger.
func (n *Node) Removed() <-chan struct{} { return n.removed }

// watchRemoval closes removed once the node, having been part of a
// configuration, is absent from two consecutive reads of it (the entry
// that removed it might otherwise still be rolled back).
func (n *Node) watchRemoval() {
	defer n.bgWG.Done()
	tick := time.NewTicker(n.cfg.PollInterval)
	defer tick.Stop()
	member, misses := false, 0
	for {
		select {
		case <-n.bg.Done():
			return
		case <-tick.C:
		}
		c, err := n.Configuration()
		if err != nil || len(c.Servers) == 0 {
			continue
		}
		if _, ok := findServer(c, n.id); ok {
			member, misses = true, 0
			continue
		}
		if !member && !n.hadState {
			continue // a joining node is not in the configuration yet
		}
		if misses++; misses >= 2 {
			n.removedOnce.Do(func() {
				n.log.Warn("this node was removed from the raft configuration; stopping (wipe its data dir to join again)",
					"servers", describeServers(c.Servers))
				close(n.removed)
			})
			return
		}
	}
}

// adminPeer is the part of GRPCPeerClient a joining node needs.
type adminPeer interface {
	AddNonvoter(ctx context.Context, addr string, req *cohortv1.AddNonvoterRequest) (*cohortv1.AddNonvoterResponse, error)
	Promote(ctx context.Context, addr string, req *cohortv1.PromoteRequest) (*cohortv1.PromoteResponse, error)
}

// runJoin joins a running cluster when the node was started with Join and
// without BootstrapExpect: it asks (through any join address) to be added
// as a non-voter, and, unless JoinAsNonvoter or the leader runs autopilot
// (which promotes it after the stabilisation time), asks for its promotion
// until the leader finds it caught up. A node that already has a
// configuration only finishes a promotion it had not got yet; a node whose
// configuration no longer contains it was removed and never re-adds itself.
func (n *Node) runJoin() {
	defer n.bgWG.Done()
	if len(n.cfg.Join) == 0 || n.cfg.BootstrapExpect > 0 || n.cfg.Bootstrap {
		return
	}
	ap, ok := n.peers.(adminPeer)
	if !ok {
		return
	}
	tick := time.NewTicker(n.cfg.PollInterval)
	defer tick.Stop()
	autopilot := false
	var lastErr string
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-n.bg.Done():
				return
			case <-tick.C:
			}
		}
		c, err := n.Configuration()
		if err != nil {
			continue
		}
		self, inConfig := findServer(c, n.id)
		switch {
		case len(c.Servers) > 0 && !inConfig:
			if n.hadState {
				return // removed: watchRemoval stops the node
			}
			continue // our own add is being replicated to us
		case inConfig && self.Suffrage == raft.Voter:
			n.log.Info("joined the cluster as a voter")
			return
		case inConfig && (n.cfg.JoinAsNonvoter || autopilot):
			n.log.Info("joined the cluster as a non-voter", "autopilot_promotes", autopilot && !n.cfg.JoinAsNonvoter)
			return
		}
		err = n.joinStep(n.bg, ap, inConfig, &autopilot)
		if err != nil && err.Error() != lastErr && n.bg.Err() == nil {
			lastErr = err.Error()
			n.log.Info("joining the cluster: not done yet; retrying", "join", n.cfg.Join, "err", err)
		}
	}
}

func (n *Node) joinStep(ctx context.Context, ap adminPeer, inConfig bool, autopilot *bool) error {
	var errs []error
	for _, addr := range n.cfg.Join {
		cctx, cancel := context.WithTimeout(ctx, 2*peerCallTimeout)
		var err error
		if !inConfig {
			var resp *cohortv1.AddNonvoterResponse
			resp, err = ap.AddNonvoter(cctx, addr, &cohortv1.AddNonvoterRequest{
				NodeId: n.id, RaftAddress: n.cfg.RaftAdvertise, GrpcAddress: n.cfg.GRPCAdvertise,
			})
			if err == nil {
				*autopilot = resp.GetAutopilotEnabled()
				n.log.Info("asked the cluster to add this node as a non-voter", "via", addr, "answer", resp.GetMessage())
			}
		} else {
			_, err = ap.Promote(cctx, addr, &cohortv1.PromoteRequest{NodeId: n.id})
			if err == nil {
				n.log.Info("promoted to voter", "via", addr)
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
