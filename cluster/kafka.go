package cluster

import (
	"cmp"
	"slices"

	"github.com/hashicorp/raft"
)

// The Kafka listener answers Metadata and FindCoordinator with brokers:
// the servers of the Raft configuration that registered a Kafka address
// (command rules 5 and later record it; under older rules no other node
// has one), and this node's own from its configuration, so that it names
// itself before its registration is applied.

// KafkaBroker is a server with a Kafka listener.
type KafkaBroker struct {
	// NodeID is the server's Raft ID.
	NodeID string
	// Address is its Kafka listener address as clients reach it.
	Address string
}

// KafkaAddress is this node's advertised Kafka address ("" when it has no
// Kafka listener).
func (cl *Cluster) KafkaAddress() string { return cl.cfg.KafkaAdvertise }

// KafkaBrokers lists the servers of the node's latest Raft configuration
// that have a Kafka address, sorted by node ID; nil when the configuration
// cannot be read (no cluster yet, or shutting down).
func (cl *Cluster) KafkaBrokers() []KafkaBroker {
	c, err := cl.node.Configuration()
	if err != nil {
		return nil
	}
	registry := cl.registryKafka()
	var brokers []KafkaBroker
	for _, s := range c.Servers {
		if addr := registry[s.ID]; addr != "" {
			brokers = append(brokers, KafkaBroker{NodeID: string(s.ID), Address: addr})
		}
	}
	slices.SortFunc(brokers, func(a, b KafkaBroker) int { return cmp.Compare(a.NodeID, b.NodeID) })
	return brokers
}

// LeaderKafkaBroker is the current Raft leader as a Kafka broker; false
// when no leader is known or the leader has no Kafka address.
func (cl *Cluster) LeaderKafkaBroker() (KafkaBroker, bool) {
	id, _ := cl.node.Leader()
	if id == "" {
		return KafkaBroker{}, false
	}
	addr := cl.registryKafka()[raft.ServerID(id)]
	if addr == "" {
		return KafkaBroker{}, false
	}
	return KafkaBroker{NodeID: id, Address: addr}, true
}

// registryKafka maps each server to its Kafka address from the node
// registry, this node to its own configured one.
func (cl *Cluster) registryKafka() map[raft.ServerID]string {
	m := map[raft.ServerID]string{}
	for _, node := range cl.node.FSM().Nodes() {
		m[raft.ServerID(node.ID)] = node.KafkaAddress
	}
	m[raft.ServerID(cl.id)] = cl.cfg.KafkaAdvertise
	return m
}
