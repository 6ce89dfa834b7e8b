package raftnode

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// updateRaftAddress moves a server of the configuration to a new Raft
// address, keeping its suffrage. A node whose address changed under it (a
// Kubernetes pod recreated with a new IP, a host renumbered) registers its
// new address with the leader; without this the leader would go on sending
// to the old one and the node would never hear from the cluster again.
// Raft's AddVoter/AddNonvoter on a known ID updates its address in place.
func (n *Node) updateRaftAddress(ctx context.Context, id, addr string) (bool, error) {
	c, err := n.leaderConfig()
	if err != nil {
		return false, err
	}
	s, ok := findServer(c, id)
	if !ok || string(s.Address) == addr || addr == "" {
		return false, nil
	}
	err = n.waitFuture(ctx, "update raft address", func(timeout time.Duration) raft.Future {
		if s.Suffrage == raft.Voter {
			return n.raft.AddVoter(s.ID, raft.ServerAddress(addr), 0, timeout)
		}
		return n.raft.AddNonvoter(s.ID, raft.ServerAddress(addr), 0, timeout)
	})
	if err != nil {
		return false, fmt.Errorf("move server %s from %s to %s: %w", id, s.Address, addr, err)
	}
	n.log.Info("server's raft address updated", "server", id, "old_address", string(s.Address), "new_address", addr)
	return true, nil
}
