package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/hashicorp/raft"
)

// runFormation bootstraps the cluster when the node was asked to and has
// no Raft state. A node with state never bootstraps again.
func (cl *Cluster) runFormation() {
	defer cl.bgWG.Done()
	defer close(cl.formDone)
	switch {
	case cl.hadState:
		if cl.cfg.Bootstrap || cl.cfg.BootstrapExpect > 0 {
			cl.log.Info("raft state found in data dir: not bootstrapping again")
		}
	case cl.cfg.Bootstrap || cl.cfg.BootstrapExpect == 1:
		cl.bootstrap([]raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cl.id), Address: raft.ServerAddress(cl.raftAddr)}})
	case cl.cfg.BootstrapExpect > 1:
		ctx, cancel := context.WithTimeout(cl.bg, cl.cfg.FormationTimeout)
		defer cancel()
		servers, err := cl.awaitExpectedPeers(ctx)
		if err != nil {
			if cl.bg.Err() == nil {
				cl.log.Error("cluster formation gave up", "bootstrap_expect", cl.cfg.BootstrapExpect, "join", cl.cfg.Join, "err", err)
			}
			return
		}
		if servers != nil {
			cl.bootstrap(servers)
		}
	case len(cl.cfg.Join) > 0:
		// runJoin asks the cluster to add this node (membership.go).
		cl.log.Info("joining a running cluster", "join", cl.cfg.Join)
	}
}

func (cl *Cluster) bootstrap(servers []raft.Server) {
	err := cl.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	switch {
	case err == nil:
		cl.log.Info("bootstrapped raft cluster", "servers", describeServers(servers))
	case errors.Is(err, raft.ErrCantBootstrap):
		cl.log.Info("not bootstrapping: raft already has state")
	default:
		cl.log.Error("bootstrap raft cluster failed", "servers", describeServers(servers), "err", err)
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
func (cl *Cluster) awaitExpectedPeers(ctx context.Context) ([]raft.Server, error) {
	want := cl.cfg.BootstrapExpect
	cl.log.Info("waiting for peers to bootstrap", "bootstrap_expect", want, "join", cl.cfg.Join)
	ticker := time.NewTicker(cl.cfg.PollInterval)
	defer ticker.Stop()
	lastLog := time.Time{}
	for {
		if cl.node.HasConfiguration() {
			cl.log.Info("received a raft configuration from a peer: not bootstrapping")
			return nil, nil
		}
		found := map[string]raft.Server{cl.id: {Suffrage: raft.Voter, ID: raft.ServerID(cl.id), Address: raft.ServerAddress(cl.raftAddr)}}
		addrs, problems := expandJoin(ctx, net.DefaultResolver.LookupHost, cl.cfg.Join)
		for _, addr := range addrs {
			cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
			info, err := cl.peers.NodeInfo(cctx, addr)
			cancel()
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if info.HasState {
				cl.log.Info("peer already belongs to a raft cluster: not bootstrapping; waiting to be contacted by its leader (start without --bootstrap-expect to join a running cluster)",
					"peer", info.NodeID, "peer_address", addr, "leader", info.LeaderID)
				return nil, nil
			}
			if e := info.BootstrapExpect; e != 0 && e != want {
				return nil, fmt.Errorf("peer %s at %s expects %d nodes, this node %d: fix --bootstrap-expect", info.NodeID, addr, e, want)
			}
			if info.NodeID == "" || info.RaftAddress == "" {
				problems = append(problems, fmt.Sprintf("peer at %s reported no node id or raft address", addr))
				continue
			}
			if prev, ok := found[info.NodeID]; ok && string(prev.Address) != info.RaftAddress {
				return nil, fmt.Errorf("two nodes claim id %q: raft addresses %s and %s", info.NodeID, prev.Address, info.RaftAddress)
			}
			found[info.NodeID] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(info.NodeID), Address: raft.ServerAddress(info.RaftAddress)}
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
		if time.Since(lastLog) > waitingLogEvery {
			lastLog = time.Now()
			cl.log.Info("still waiting for peers", "found", len(found), "bootstrap_expect", want, "problems", problems)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d nodes at %v (found %d): %w", want, cl.cfg.Join, len(found), ctx.Err())
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
