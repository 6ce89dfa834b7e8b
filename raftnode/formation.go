package raftnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"time"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/hashicorp/raft"
)

// peerCallTimeout bounds one NodeInfo or RegisterNode call to a peer.
const peerCallTimeout = 2 * time.Second

// runFormation bootstraps the cluster when the node was asked to and has
// no Raft state. A node with state never bootstraps again.
func (n *Node) runFormation() {
	defer n.bgWG.Done()
	defer close(n.formDone)
	switch {
	case n.hadState:
		if n.cfg.Bootstrap || n.cfg.BootstrapExpect > 0 {
			n.log.Info("raft state found in data dir: not bootstrapping again")
		}
	case n.cfg.Bootstrap || n.cfg.BootstrapExpect == 1:
		n.bootstrap([]raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.cfg.RaftAdvertise)}})
	case n.cfg.BootstrapExpect > 1:
		ctx, cancel := context.WithTimeout(n.bg, n.cfg.FormationTimeout)
		defer cancel()
		servers, err := n.awaitExpectedPeers(ctx)
		if err != nil {
			if n.bg.Err() == nil {
				n.log.Error("cluster formation gave up", "bootstrap_expect", n.cfg.BootstrapExpect, "join", n.cfg.Join, "err", err)
			}
			return
		}
		if servers != nil {
			n.bootstrap(servers)
		}
	case len(n.cfg.Join) > 0:
		// runJoin asks the cluster to add this node (membership.go).
		n.log.Info("joining a running cluster", "join", n.cfg.Join)
	}
}

func (n *Node) bootstrap(servers []raft.Server) {
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	switch {
	case err == nil:
		n.log.Info("bootstrapped raft cluster", "servers", describeServers(servers))
	case errors.Is(err, raft.ErrCantBootstrap):
		n.log.Info("not bootstrapping: raft already has state")
	default:
		n.log.Error("bootstrap raft cluster failed", "servers", describeServers(servers), "err", err)
	}
}

func describeServers(servers []raft.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = fmt.Sprintf("%s@%s", s.ID, s.Address)
	}
	return out
}

// awaitExpectedPeers polls the join addresses until exactly
// BootstrapExpect distinct nodes (this one included) answer, none with
// Raft state, and returns them sorted by ID, so that every node bootstraps
// the identical configuration (the Consul approach). It returns nil
// servers when the node must not bootstrap: a peer already belongs to a
// cluster, or this node received a configuration from a peer that
// bootstrapped first.
func (n *Node) awaitExpectedPeers(ctx context.Context) ([]raft.Server, error) {
	want := n.cfg.BootstrapExpect
	n.log.Info("waiting for peers to bootstrap", "bootstrap_expect", want, "join", n.cfg.Join)
	ticker := time.NewTicker(n.cfg.PollInterval)
	defer ticker.Stop()
	lastLog := time.Time{}
	for {
		if n.hasConfiguration() {
			n.log.Info("received a raft configuration from a peer: not bootstrapping")
			return nil, nil
		}
		found := map[string]raft.Server{n.id: {Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.cfg.RaftAdvertise)}}
		addrs, problems := expandJoin(ctx, net.DefaultResolver.LookupHost, n.cfg.Join)
		for _, addr := range addrs {
			cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
			info, err := n.peers.NodeInfo(cctx, addr)
			cancel()
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if info.GetHasState() {
				n.log.Info("peer already belongs to a raft cluster: not bootstrapping; waiting to be contacted by its leader (start without --bootstrap-expect to join a running cluster)",
					"peer", info.GetNodeId(), "peer_address", addr, "leader", info.GetLeaderId())
				return nil, nil
			}
			if e := info.GetBootstrapExpect(); e != 0 && int(e) != want {
				return nil, fmt.Errorf("peer %s at %s expects %d nodes, this node %d: fix --bootstrap-expect", info.GetNodeId(), addr, e, want)
			}
			if info.GetNodeId() == "" || info.GetRaftAddress() == "" {
				problems = append(problems, fmt.Sprintf("peer at %s reported no node id or raft address", addr))
				continue
			}
			if prev, ok := found[info.GetNodeId()]; ok && string(prev.Address) != info.GetRaftAddress() {
				return nil, fmt.Errorf("two nodes claim id %q: raft addresses %s and %s", info.GetNodeId(), prev.Address, info.GetRaftAddress())
			}
			found[info.GetNodeId()] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(info.GetNodeId()), Address: raft.ServerAddress(info.GetRaftAddress())}
		}
		switch {
		case len(found) == want:
			servers := make([]raft.Server, 0, len(found))
			for _, s := range found {
				servers = append(servers, s)
			}
			sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
			return servers, nil
		case len(found) > want:
			return nil, fmt.Errorf("found %d nodes but bootstrap-expect is %d: refusing to pick a subset", len(found), want)
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			n.log.Info("still waiting for peers", "found", len(found), "bootstrap_expect", want, "problems", problems)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d nodes at %v (found %d): %w", want, n.cfg.Join, len(found), ctx.Err())
		case <-ticker.C:
		}
	}
}

// expandJoin turns join entries into the addresses to poll: an entry whose
// host is a name becomes one address per record the name resolves to now,
// so that a headless service (one name, an A record per pod) reaches every
// node rather than the one a dialler would pick. IP literals pass through;
// a name that does not resolve (yet) is a problem for this round only, as
// records appear while pods start. Duplicates are dropped, order is kept.
func expandJoin(ctx context.Context, lookup func(ctx context.Context, host string) ([]string, error), join []string) (addrs, problems []string) {
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, entry := range join {
		host, port, err := net.SplitHostPort(entry)
		if err != nil || net.ParseIP(host) != nil {
			add(entry) // validated at start; an IP needs no lookup
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
		ips, err := lookup(lctx, host)
		cancel()
		if err != nil {
			problems = append(problems, fmt.Sprintf("resolve join address %s: %v", entry, err))
			continue
		}
		if len(ips) == 0 {
			problems = append(problems, fmt.Sprintf("resolve join address %s: no addresses", entry))
			continue
		}
		sort.Strings(ips)
		for _, ip := range ips {
			add(net.JoinHostPort(ip, port))
		}
	}
	return addrs, problems
}

// hasConfiguration reports whether raft holds any configuration, i.e. this
// node is part of a cluster (bootstrapped itself or contacted by a leader).
func (n *Node) hasConfiguration() bool {
	c, err := n.Configuration()
	return err == nil && len(c.Servers) > 0
}

// runRegistration makes sure the FSM's node registry holds this node's
// current addresses, so that followers can forward to the leader. It
// retries until done or until the node shuts down.
func (n *Node) runRegistration() {
	defer n.bgWG.Done()
	if n.cfg.GRPCAdvertise == "" {
		return // nothing to register (in-process use without gRPC)
	}
	ticker := time.NewTicker(n.cfg.PollInterval)
	defer ticker.Stop()
	var lastErr string
	for {
		done, err := n.registerOnce(n.bg)
		if done {
			n.log.Info("node registered", "grpc_address", n.cfg.GRPCAdvertise, "raft_address", n.cfg.RaftAdvertise)
			close(n.regDone)
			return
		}
		if err != nil && err.Error() != lastErr && n.bg.Err() == nil {
			lastErr = err.Error()
			n.log.Debug("node registration not done yet; retrying", "err", err)
		}
		select {
		case <-n.bg.Done():
			return
		case <-ticker.C:
		}
	}
}

func (n *Node) registered() bool {
	for _, node := range n.fsm.Nodes() {
		if node.ID == n.id {
			return node.GRPCAddress == n.cfg.GRPCAdvertise && node.RaftAddress == n.cfg.RaftAdvertise
		}
	}
	return false
}

func (n *Node) registerOnce(ctx context.Context) (bool, error) {
	if n.registered() {
		return true, nil
	}
	cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	leaderID, _ := n.Leader()
	if leaderID == "" {
		// A node whose raft address changed (a pod recreated with a new
		// IP) hears from no leader until the leader learns the new
		// address: ask the join addresses who leads and register there.
		addr := n.leaderGRPCFromPeers(cctx)
		if addr == "" {
			return false, errors.New("no leader yet")
		}
		if _, err := n.peers.RegisterNode(cctx, addr, &cohortv1.RegisterNodeRequest{
			NodeId: n.id, GrpcAddress: n.cfg.GRPCAdvertise, RaftAddress: n.cfg.RaftAdvertise,
		}); err != nil {
			return false, err
		}
		return n.registered(), nil
	}
	if leaderID == n.id {
		res, err := n.Apply(cctx, n.registerCommand())
		if err != nil {
			return false, err
		}
		if res.Err != nil {
			return false, fmt.Errorf("register node %q: %w", n.id, res.Err)
		}
		return n.registered(), nil
	}
	addr := n.LeaderGRPCAddress()
	if addr == "" {
		addr = n.leaderGRPCFromPeers(cctx)
	}
	if addr == "" {
		return false, fmt.Errorf("leader %q has no known gRPC address yet", leaderID)
	}
	_, err := n.peers.RegisterNode(cctx, addr, &cohortv1.RegisterNodeRequest{
		NodeId: n.id, GrpcAddress: n.cfg.GRPCAdvertise, RaftAddress: n.cfg.RaftAdvertise,
	})
	if err != nil {
		return false, err
	}
	// The leader answered after applying; our FSM sees it once replicated.
	return n.registered(), nil
}

func (n *Node) registerCommand() *fsmv1.Command {
	return &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
		NodeId: n.id, GrpcAddress: n.cfg.GRPCAdvertise, RaftAddress: n.cfg.RaftAdvertise,
	}}}
}

// leaderGRPCFromPeers asks the join addresses which gRPC address the
// leader has, for when this node's registry does not know it yet.
func (n *Node) leaderGRPCFromPeers(ctx context.Context) string {
	for _, addr := range n.cfg.Join {
		info, err := n.peers.NodeInfo(ctx, addr)
		if err != nil {
			continue
		}
		if info.GetLeaderGrpcAddress() != "" {
			return info.GetLeaderGrpcAddress()
		}
		if info.GetState() == cohortv1.RaftState_RAFT_STATE_LEADER {
			return addr
		}
	}
	return ""
}
