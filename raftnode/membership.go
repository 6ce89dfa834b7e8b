package raftnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
func (n *Node) Removed() <-chan struct{} { return n.removed }

// watchRemoval closes removed once the leader confirms that its
// configuration lacks this node.
func (n *Node) watchRemoval() {
	defer n.bgWG.Done()
	tick := time.NewTicker(n.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.bg.Done():
			return
		case <-tick.C:
		}
		c, err := n.Configuration()
		if err != nil || len(c.Servers) == 0 {
			continue // not part of any cluster yet
		}
		// Suspect a removal when the latest configuration lacks this node
		// (a node only gets one once a leader added it, so this is either a
		// removal or an old configuration being replayed), or when a leader
		// went silent: it may have stopped replicating to a removed server
		// before the entry that removes it arrived. The leader decides.
		if _, in := findServer(c, n.id); in && !n.leaderSilent() {
			continue
		}
		if !n.leaderLacksMe(n.bg) {
			continue
		}
		n.removedOnce.Do(func() {
			n.log.Warn("this node was removed from the raft configuration; stopping (wipe its data dir to join again)",
				"servers", describeServers(c.Servers))
			close(n.removed)
		})
		return
	}
}

// leaderSilent reports whether this follower has not heard from a leader
// for longer than a few heartbeat timeouts.
func (n *Node) leaderSilent() bool {
	if n.raft.State() == raft.Leader {
		return false
	}
	last := n.raft.LastContact()
	return !last.IsZero() && time.Since(last) > 4*n.cfg.HeartbeatTimeout
}

// statusPeer is the part of GRPCPeerClient removal detection needs.
type statusPeer interface {
	Status(ctx context.Context, addr string) (*cohortv1.StatusResponse, error)
}

// leaderLacksMe asks the cluster (the leader, through any node it can
// name) whether its configuration lacks this node. No answer is no.
func (n *Node) leaderLacksMe(ctx context.Context) bool {
	sp, ok := n.peers.(statusPeer)
	if !ok {
		return false
	}
	var addrs []string
	seen := map[string]bool{n.cfg.GRPCAdvertise: true}
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	add(n.LeaderGRPCAddress())
	for _, node := range n.fsm.Nodes() {
		add(node.GRPCAddress)
	}
	for _, a := range n.cfg.Join {
		add(a)
	}
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, 2*peerCallTimeout)
		st, err := sp.Status(cctx, addr)
		cancel()
		if err != nil {
			continue
		}
		for _, s := range st.GetServers() {
			if s.GetNodeId() == n.id {
				return false
			}
		}
		return true
	}
	return false
}

// adminPeer is the part of GRPCPeerClient a joining node needs.
type adminPeer interface {
	AddNonvoter(ctx context.Context, addr string, req *cohortv1.AddNonvoterRequest) (*cohortv1.AddNonvoterResponse, error)
	Promote(ctx context.Context, addr string, req *cohortv1.PromoteRequest) (*cohortv1.PromoteResponse, error)
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
func (n *Node) runJoin() {
	defer n.bgWG.Done()
	if len(n.cfg.Join) == 0 || n.cfg.BootstrapExpect > 0 || n.cfg.Bootstrap {
		return
	}
	ap, ok := n.peers.(adminPeer)
	if !ok {
		return
	}
	promote := func(ctx context.Context, addr string) error {
		resp, err := ap.Promote(ctx, addr, &cohortv1.PromoteRequest{NodeId: n.id})
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("%w: the cluster no longer has this node: %v", errGiveUp, err)
		}
		if err == nil {
			n.log.Info("promoted to voter", "via", addr, "answer", resp.GetMessage())
		}
		return err
	}
	if n.hadState {
		c, err := n.Configuration()
		if s, in := findServer(c, n.id); err != nil || !in || s.Suffrage == raft.Voter || n.cfg.JoinAsNonvoter {
			return
		}
		if n.retryJoin("promote", promote) {
			n.log.Info("joined the cluster as a voter")
		}
		return
	}
	autopilot := false
	added := n.retryJoin("add as non-voter", func(ctx context.Context, addr string) error {
		resp, err := ap.AddNonvoter(ctx, addr, &cohortv1.AddNonvoterRequest{
			NodeId: n.id, RaftAddress: n.cfg.RaftAdvertise, GrpcAddress: n.cfg.GRPCAdvertise,
		})
		if err == nil {
			autopilot = resp.GetAutopilotEnabled()
			n.log.Info("asked the cluster to add this node as a non-voter", "via", addr, "answer", resp.GetMessage())
		}
		return err
	})
	switch {
	case !added:
		return
	case n.cfg.JoinAsNonvoter || autopilot:
		n.log.Info("joined the cluster as a non-voter", "autopilot_promotes", autopilot && !n.cfg.JoinAsNonvoter)
		return
	}
	if n.retryJoin("promote", promote) {
		n.log.Info("joined the cluster as a voter")
	}
}

// retryJoin runs step against the join addresses, one after the other,
// every PollInterval, until one succeeds (true), the step gives up or the
// node shuts down (false).
func (n *Node) retryJoin(what string, step func(ctx context.Context, addr string) error) bool {
	tick := time.NewTicker(n.cfg.PollInterval)
	defer tick.Stop()
	var lastErr string
	for {
		var errs []error
		for _, addr := range n.cfg.Join {
			ctx, cancel := context.WithTimeout(n.bg, 2*peerCallTimeout)
			err := step(ctx, addr)
			cancel()
			if err == nil {
				return true
			}
			if errors.Is(err, errGiveUp) {
				n.log.Warn("joining the cluster: "+what+" abandoned", "err", err)
				return false
			}
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err.Error() != lastErr && n.bg.Err() == nil {
			lastErr = err.Error()
			n.log.Info("joining the cluster: "+what+" not done yet; retrying", "join", n.cfg.Join, "err", err)
		}
		select {
		case <-n.bg.Done():
			return false
		case <-tick.C:
		}
	}
}
