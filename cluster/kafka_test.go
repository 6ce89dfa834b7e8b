package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// kafkaAddr is node i's advertised Kafka address: nothing listens there,
// the registry only carries it.
func kafkaAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", 19092+i) }

// waitKafkaBrokers waits until every node's registry holds every node's
// Kafka address (a node names itself from its configuration), every node
// names them all as brokers, and the current leader as the leader's.
func waitKafkaBrokers(t *testing.T, c *testcluster.Cluster, what string) {
	t.Helper()
	var want []cluster.KafkaBroker
	for i, n := range c.Nodes {
		want = append(want, cluster.KafkaBroker{NodeID: n.ID, Address: kafkaAddr(i)})
	}
	waitFor(t, 30*time.Second, what, func() (bool, string) {
		l := c.Leader()
		if l < 0 {
			return false, "no leader"
		}
		for _, n := range c.Nodes {
			reg := n.FSM.Nodes()
			if len(reg) != len(c.Nodes) {
				return false, fmt.Sprintf("%s's registry: %+v", n.ID, reg)
			}
			for i, e := range reg {
				if e.KafkaAddress != kafkaAddr(i) {
					return false, fmt.Sprintf("%s's registry entry %+v, want Kafka address %s", n.ID, e, kafkaAddr(i))
				}
			}
			if got := n.Cluster.KafkaBrokers(); !slices.Equal(got, want) {
				return false, fmt.Sprintf("%s names brokers %+v, want %+v", n.ID, got, want)
			}
			if got, ok := n.Cluster.LeaderKafkaBroker(); !ok || got != want[l] {
				return false, fmt.Sprintf("%s names leader broker %+v (%v), want %+v", n.ID, got, ok, want[l])
			}
		}
		return true, ""
	})
}

// A fresh cluster writes under rules 1 until every node registered, so the
// first registrations record no Kafka address: each node registers again
// once the rules reach 5, as the last server of a rolling upgrade makes
// them. Then every node names every broker from the registry.
func TestMultiNode_KafkaAdvertise_EveryNodeNamesEveryBrokerAndTheLeader(t *testing.T) {
	c := start(t, 3, func(i int, cc *cluster.Config) { cc.KafkaAdvertise = kafkaAddr(i) })
	waitKafkaBrokers(t, c, "every node to name the three brokers")

	// A registration without the Kafka address (an admin's) drops it from
	// the registry; the node sees that and registers it again.
	l := c.Leader()
	f := follower(c, l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Nodes[l].Node.Apply(ctx, &fsmv1.Command{Kind: &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{
		NodeId: c.Nodes[f].ID, GrpcAddress: c.Addr(f), RaftAddress: c.Nodes[f].Node.RaftAddress(), MaxCommandVersion: fsm.CommandVersion,
	}}})
	if err != nil || res.Err != nil {
		t.Fatalf("register %s without a Kafka address: %v, %v", c.Nodes[f].ID, err, res.Err)
	}
	waitKafkaBrokers(t, c, c.Nodes[f].ID+" to register its Kafka address again")
}

// A node without a Kafka listener is no broker; the others still are.
func TestMultiNode_KafkaAdvertise_ANodeWithoutOneIsNoBroker(t *testing.T) {
	c := start(t, 3, func(i int, cc *cluster.Config) {
		if i != 1 {
			cc.KafkaAdvertise = kafkaAddr(i)
		}
	})
	want := []cluster.KafkaBroker{{NodeID: "n1", Address: kafkaAddr(0)}, {NodeID: "n3", Address: kafkaAddr(2)}}
	waitFor(t, 30*time.Second, "every node to name n1 and n3 only, and the leader if it is one", func() (bool, string) {
		l := c.Leader()
		if l < 0 {
			return false, "no leader"
		}
		for _, n := range c.Nodes {
			if got := n.Cluster.KafkaBrokers(); !slices.Equal(got, want) {
				return false, fmt.Sprintf("%s names brokers %+v, want %+v", n.ID, got, want)
			}
			got, ok := n.Cluster.LeaderKafkaBroker()
			if wantOK := l != 1; ok != wantOK || (ok && got != (cluster.KafkaBroker{NodeID: c.Nodes[l].ID, Address: kafkaAddr(l)})) {
				return false, fmt.Sprintf("%s names leader broker %+v (%v) while %s leads", n.ID, got, ok, c.Nodes[l].ID)
			}
		}
		return true, ""
	})
}
