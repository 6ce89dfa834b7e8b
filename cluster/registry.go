package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"

	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/raftnode"
	"github.com/hashicorp/raft"
)

// updateRaftAddress moves a server of the configuration to a new Raft
// address, keeping its suffrage. A node whose address changed under it (a
// Kubernetes pod recreated with a new IP, a host renumbered) registers its
// new address with the leader; without this the leader would go on sending
// to the old one and the node would never hear from the cluster again.
// Raft's AddVoter/AddNonvoter on a known ID updates its address in place.
func (cl *Cluster) updateRaftAddress(ctx context.Context, id, addr string) (bool, error) {
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return false, err
	}
	s, ok := findServer(c, id)
	if !ok || string(s.Address) == addr || addr == "" {
		return false, nil
	}
	err = cl.node.WaitFuture(ctx, "update raft address", func(timeout time.Duration) raft.Future {
		if s.Suffrage == raft.Voter {
			return cl.raft.AddVoter(s.ID, raft.ServerAddress(addr), 0, timeout)
		}
		return cl.raft.AddNonvoter(s.ID, raft.ServerAddress(addr), 0, timeout)
	})
	if err != nil {
		return false, fmt.Errorf("move server %s from %s to %s: %w", id, s.Address, addr, err)
	}
	cl.log.Info("server's raft address updated", "server", id, "old_address", string(s.Address), "new_address", addr)
	return true, nil
}

// registryGRPC is a server's gRPC address from the node registry.
func (cl *Cluster) registryGRPC(id raft.ServerID) string {
	if string(id) == cl.id {
		return cl.cfg.GRPCAdvertise
	}
	for _, node := range cl.node.FSM().Nodes() {
		if node.ID == string(id) {
			return node.GRPCAddress
		}
	}
	return ""
}

// LeaderGRPCAddress returns the leader's gRPC address from the replicated
// node registry ("" when no leader is known or it has not registered).
func (cl *Cluster) LeaderGRPCAddress() string {
	id, _ := cl.node.Leader()
	if id == "" {
		return ""
	}
	return cl.registryGRPC(raft.ServerID(id))
}

// runRegistration makes sure the FSM's node registry holds this node's
// current addresses, so that followers can forward to the leader and every
// node can name the Kafka brokers. It keeps checking until the node shuts
// down, not only until the first success: the command rules can move to 5
// after this node registered (the last server of a rolling upgrade
// registers), and only then does the registry record its Kafka address.
func (cl *Cluster) runRegistration() {
	defer cl.bgWG.Done()
	if cl.cfg.GRPCAdvertise == "" {
		return // nothing to register (in-process use without gRPC)
	}
	ticker := time.NewTicker(cl.cfg.PollInterval)
	defer ticker.Stop()
	var lastErr string
	wasDone := false
	for {
		done, err := cl.registerOnce(cl.bg)
		switch {
		case done && !isClosed(cl.regDone):
			cl.log.Info("node registered", "grpc_address", cl.cfg.GRPCAdvertise, "raft_address", cl.raftAddr, "kafka_address", cl.cfg.KafkaAdvertise)
			close(cl.regDone)
		case done && !wasDone:
			cl.log.Info("node registration renewed", "grpc_address", cl.cfg.GRPCAdvertise, "raft_address", cl.raftAddr,
				"kafka_address", cl.cfg.KafkaAdvertise, "command_rules", cl.node.CommandRules())
		}
		wasDone = done
		if done {
			lastErr = ""
		} else if err != nil && err.Error() != lastErr && cl.bg.Err() == nil {
			lastErr = err.Error()
			cl.log.Debug("node registration not done yet; retrying", "err", err)
		}
		select {
		case <-cl.bg.Done():
			return
		case <-ticker.C:
		}
	}
}

// registered reports whether the registry holds this node's current
// entry. The Kafka address counts only under command rules 5 and later:
// before, the registry records none, and re-registering would not help.
func (cl *Cluster) registered() bool {
	for _, node := range cl.node.FSM().Nodes() {
		if node.ID == cl.id {
			if cl.node.CommandRules() >= 5 && node.KafkaAddress != cl.cfg.KafkaAdvertise {
				return false
			}
			return node.GRPCAddress == cl.cfg.GRPCAdvertise && node.RaftAddress == cl.raftAddr &&
				node.MaxCommandVersion == cl.node.MaxCommandRules()
		}
	}
	return false
}

func (cl *Cluster) registerOnce(ctx context.Context) (bool, error) {
	if cl.registered() {
		return true, nil
	}
	cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	leaderID, _ := cl.node.Leader()
	// Once registered, this node renews its entry only through the leader
	// its own Raft follows: never through the join addresses, which, long
	// after formation, may belong to another cluster (ports reused), whose
	// leader would take this node for its own namesake.
	renewing := isClosed(cl.regDone)
	if leaderID == "" && renewing {
		return false, errors.New("no leader known to renew the registration with")
	}
	if leaderID == "" {
		// A node whose raft address changed (a pod recreated with a new
		// IP) hears from no leader until the leader learns the new
		// address: ask the join addresses who leads and register there.
		addr := cl.leaderGRPCFromPeers(cctx)
		if addr == "" {
			return false, errors.New("no leader yet")
		}
		if err := cl.peers.RegisterNode(cctx, addr, cl.self()); err != nil {
			return false, err
		}
		return cl.registered(), nil
	}
	if leaderID == cl.id {
		res, err := cl.node.Apply(cctx, registerCommand(cl.self()))
		if err != nil {
			return false, err
		}
		if res.Err != nil {
			return false, fmt.Errorf("register node %q: %w", cl.id, res.Err)
		}
		return cl.registered(), nil
	}
	addr := cl.LeaderGRPCAddress()
	if addr == "" && !renewing {
		addr = cl.leaderGRPCFromPeers(cctx)
	}
	if addr == "" {
		return false, fmt.Errorf("leader %q has no known gRPC address yet", leaderID)
	}
	if err := cl.peers.RegisterNode(cctx, addr, cl.self()); err != nil {
		return false, err
	}
	// The leader answered after applying; our FSM sees it once replicated.
	return cl.registered(), nil
}

// registrationCheckTimeout bounds the call that checks a new address.
const registrationCheckTimeout = 5 * time.Second

// verifyRegistration refuses to move a server of the configuration to
// addresses where that server does not answer: before the leader sends
// it entries or forwards calls there, the new gRPC address must answer
// NodeInfo as the same node (over TLS, with a certificate naming it) and
// name the same Raft address. This node's own entry must be its own
// addresses. A registration that changes nothing, or names a node outside
// the configuration (whose entry nobody dials until an admin adds it with
// its addresses), is not checked.
func (cl *Cluster) verifyRegistration(ctx context.Context, reg Registration) error {
	if reg.NodeID == cl.id {
		if self := cl.self(); reg.GRPCAddress != self.GRPCAddress || reg.RaftAddress != self.RaftAddress {
			return errcode.Errorf(errcode.InvalidArgument, "node %q is this node, at gRPC %s and Raft %s, not %s and %s", reg.NodeID, self.GRPCAddress, self.RaftAddress, reg.GRPCAddress, reg.RaftAddress)
		} else if reg.KafkaAddress != self.KafkaAddress {
			return errcode.Errorf(errcode.InvalidArgument, "node %q is this node, with Kafka address %q, not %q", reg.NodeID, self.KafkaAddress, reg.KafkaAddress)
		}
		return nil
	}
	c, err := cl.node.LeaderConfiguration()
	if err != nil {
		return err
	}
	s, ok := findServer(c, reg.NodeID)
	if !ok || (string(s.Address) == reg.RaftAddress && cl.registryGRPC(s.ID) == reg.GRPCAddress) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, registrationCheckTimeout)
	defer cancel()
	info, err := cl.peers.NodeInfo(cctx, reg.GRPCAddress)
	switch {
	case err != nil:
		return errcode.Errorf(errcode.InvalidArgument, "register node %q: its new gRPC address %s does not answer: %v", reg.NodeID, reg.GRPCAddress, err)
	case info.NodeID != reg.NodeID:
		return errcode.Errorf(errcode.InvalidArgument, "register node %q: %s answers as node %q", reg.NodeID, reg.GRPCAddress, info.NodeID)
	case info.RaftAddress != reg.RaftAddress:
		return errcode.Errorf(errcode.InvalidArgument, "register node %q: the node at %s says its Raft address is %s, not %s", reg.NodeID, reg.GRPCAddress, info.RaftAddress, reg.RaftAddress)
	}
	return nil
}

// self is this node's registry entry.
func (cl *Cluster) self() Registration {
	return Registration{NodeID: cl.id, GRPCAddress: cl.cfg.GRPCAdvertise, RaftAddress: cl.raftAddr,
		MaxCommandVersion: cl.node.MaxCommandRules(), KafkaAddress: cl.cfg.KafkaAdvertise}
}

// registerCommand is the FSM command recording reg in the node registry.
func registerCommand(reg Registration) *fsmv1.Command {
	return &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
		NodeId: reg.NodeID, GrpcAddress: reg.GRPCAddress, RaftAddress: reg.RaftAddress, MaxCommandVersion: reg.MaxCommandVersion,
		KafkaAddress: reg.KafkaAddress,
	}}}
}

// leaderGRPCFromPeers asks the join addresses which gRPC address the
// leader has, for when this node's registry does not know it yet.
func (cl *Cluster) leaderGRPCFromPeers(ctx context.Context) string {
	for _, addr := range cl.cfg.Join {
		info, err := cl.peers.NodeInfo(ctx, addr)
		if err != nil {
			continue
		}
		if info.LeaderGRPCAddress != "" {
			return info.LeaderGRPCAddress
		}
		if info.State == raft.Leader {
			return addr
		}
	}
	return ""
}

// Register records reg in the node registry and, when the server's Raft
// address changed, moves it in the configuration (RegisterNode; leader
// only: raftnode.ErrNotLeader otherwise). It returns the index of the
// registry entry.
func (cl *Cluster) Register(ctx context.Context, reg Registration) (uint64, error) {
	switch {
	case reg.NodeID == "":
		return 0, errcode.Errorf(errcode.InvalidArgument, "node_id is required")
	case reg.GRPCAddress == "":
		return 0, errcode.Errorf(errcode.InvalidArgument, "grpc_address is required")
	case reg.RaftAddress == "":
		return 0, errcode.Errorf(errcode.InvalidArgument, "raft_address is required")
	}
	if err := validateAddresses(reg.NodeID, reg.RaftAddress, reg.GRPCAddress); err != nil {
		return 0, err
	}
	if reg.KafkaAddress != "" {
		if err := raftnode.ValidateAdvertise("Kafka address", reg.KafkaAddress); err != nil {
			return 0, errcode.Errorf(errcode.InvalidArgument, "register node %q: %v", reg.NodeID, err)
		}
	}
	if err := cl.verifyRegistration(ctx, reg); err != nil {
		return 0, err
	}
	res, err := cl.node.Apply(ctx, registerCommand(reg))
	if err != nil {
		return 0, fmt.Errorf("register node %q: %w", reg.NodeID, err)
	}
	if res.Err != nil {
		return 0, errcode.Errorf(errcode.InvalidArgument, "register node %q: %v", reg.NodeID, res.Err)
	}
	if _, err := cl.updateRaftAddress(ctx, reg.NodeID, reg.RaftAddress); err != nil {
		return 0, fmt.Errorf("register node %q: %w", reg.NodeID, err)
	}
	return res.Index, nil
}
