package kafka

import (
	"crypto/sha256"
	"hash/fnv"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// ClusterID is the cluster ID Metadata and DescribeCluster answer.
const ClusterID = "cohort"

// BrokerID is a node's Kafka broker ID: Kafka numbers brokers, Cohort
// names nodes, so the ID is the FNV-1a hash of the node ID with the sign
// bit cleared. It is the same on every node and across restarts.
func BrokerID(nodeID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return int32(h.Sum32() & 0x7fff_ffff)
}

// TopicID is a topic's Kafka topic ID, derived from its name (Cohort's
// registry has none): the first 16 bytes of its SHA-256. IDs are kept once
// computed: every Metadata answer names every topic's, and a thousand
// consumers ask at once after each rebalance.
func TopicID(name string) [16]byte {
	if id, ok := topicIDs.Load(name); ok {
		return id.([16]byte)
	}
	sum := sha256.Sum256([]byte(name))
	id := [16]byte(sum[:16])
	if topicIDCount.Add(1) <= maxCachedTopicIDs {
		topicIDs.Store(name, id)
	}
	return id
}

// The topic ID cache, bounded by the topic budget's default (a name no
// longer in the registry keeps its entry; past the bound IDs are computed
// each time).
var (
	topicIDs          sync.Map
	topicIDCount      atomic.Int64
	maxCachedTopicIDs = int64(fsm.DefaultBudgets().Topics)
)

// broker is a registered broker, its address split for the wire.
type broker struct {
	id   int32
	host string
	port int32
}

func toBroker(b cluster.KafkaBroker) (broker, bool) {
	host, port, err := net.SplitHostPort(b.Address)
	if err != nil {
		return broker{}, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return broker{}, false
	}
	return broker{id: BrokerID(b.NodeID), host: host, port: int32(p)}, true
}

// brokers are the cluster's live brokers (liveness.go), sorted by node
// ID, and the controller's broker ID (the Raft leader's; -1 when none is
// known).
func (s *Server) brokers() ([]broker, int32) {
	leader, hasLeader := s.cfg.Cluster.LeaderKafkaBroker()
	self := s.cfg.Cluster.KafkaAddress()
	var out []broker
	for _, b := range s.cfg.Cluster.KafkaBrokers() {
		if b.Address != self && !(hasLeader && b.NodeID == leader.NodeID) && s.live.isDead(b.Address) {
			continue
		}
		if br, ok := toBroker(b); ok {
			out = append(out, br)
		}
	}
	controller := int32(-1)
	if hasLeader {
		controller = BrokerID(leader.NodeID)
	}
	return out, controller
}

// rotations are the broker IDs in every rotation: rotation k starts at
// broker k. Partition p of a topic is led by the broker its rotation
// starts with (partitionReplicas), so partitions spread over the brokers
// and clients' fetches do too; any broker answers any partition. The
// slices are shared by every partition of one answer and never changed.
func rotations(brokers []broker) [][]int32 {
	out := make([][]int32, len(brokers))
	for k := range brokers {
		out[k] = make([]int32, len(brokers))
		for i := range brokers {
			out[k][i] = brokers[(k+i)%len(brokers)].id
		}
	}
	return out
}

// partitionReplicas is partition p of topic's leader and replicas (-1 and
// none when there is no broker).
func partitionReplicas(rot [][]int32, topic string, p int32) (int32, []int32) {
	if len(rot) == 0 {
		return -1, nil
	}
	r := rot[(int(TopicID(topic)[0])+int(p))%len(rot)]
	return r[0], r
}

// metadata answers from this node's registry (it may lag the leader's by
// replication). A topic the caller may not list is answered
// TOPIC_AUTHORIZATION_FAILED, and listing every topic lists none to it.
// Topics are never created by Metadata: an unknown topic is
// UNKNOWN_TOPIC_OR_PARTITION, as with auto-creation off.
func (c *call) metadata(r *kmsg.MetadataRequest) kmsg.Response {
	s := c.s
	resp := kmsg.NewPtrMetadataResponse()
	brokers, controller := s.brokers()
	rot := rotations(brokers)
	for _, b := range brokers {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = b.id, b.host, b.port
		resp.Brokers = append(resp.Brokers, mb)
	}
	clusterID := ClusterID
	resp.ClusterID, resp.ControllerID = &clusterID, controller

	allowed := c.authorize(cohortv1.Topics_ListTopics_FullMethodName, &cohortv1.ListTopicsRequest{}) == nil
	all := r.Topics == nil || (r.GetVersion() == 0 && len(r.Topics) == 0)
	var known []fsm.TopicPartitionCount
	s.cfg.FSM.Read(func(st *fsm.State) {
		if all {
			if allowed {
				known = st.Topics()
			}
			return
		}
		for _, t := range r.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			n, _ := st.Partitions(name)
			known = append(known, fsm.TopicPartitionCount{Name: name, Partitions: n})
		}
	})
	resp.Topics = make([]kmsg.MetadataResponseTopic, 0, len(known))
	for _, t := range known {
		mt := kmsg.NewMetadataResponseTopic()
		name := t.Name
		mt.Topic = &name
		switch {
		case !allowed:
			mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case t.Partitions == 0:
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		default:
			mt.TopicID = TopicID(name)
			mt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, t.Partitions)
			for p := range t.Partitions {
				mp := kmsg.NewMetadataResponseTopicPartition()
				mp.Partition = p
				mp.Leader, mp.Replicas = partitionReplicas(rot, name, p)
				mp.ISR = mp.Replicas
				if mp.Leader < 0 {
					mp.ErrorCode = kerr.LeaderNotAvailable.Code
				}
				mt.Partitions = append(mt.Partitions, mp)
			}
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

// findCoordinator names the Raft leader as the coordinator of every group
// (COORDINATOR_NOT_AVAILABLE, retriable, while none is known).
// Transaction coordinators are not served.
func (s *Server) findCoordinator(r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	keys := r.CoordinatorKeys
	if r.GetVersion() < 4 {
		keys = []string{r.CoordinatorKey}
	}
	var leader broker
	var err *kerr.Error
	var msg string
	switch l, ok := s.cfg.Cluster.LeaderKafkaBroker(); {
	case r.CoordinatorType != 0:
		err, msg = kerr.InvalidRequest, "Cohort coordinates consumer groups only (coordinator type 0)"
	case !ok:
		err, msg = kerr.CoordinatorNotAvailable, "no Raft leader with a Kafka address is known yet"
	default:
		if leader, ok = toBroker(l); !ok {
			err, msg = kerr.CoordinatorNotAvailable, "the leader's Kafka address "+l.Address+" is not host:port"
		}
	}
	for _, k := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = k
		if err != nil {
			c.ErrorCode, c.ErrorMessage, c.NodeID = err.Code, &msg, -1
		} else {
			c.NodeID, c.Host, c.Port = leader.id, leader.host, leader.port
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if r.GetVersion() < 4 && len(resp.Coordinators) == 1 {
		c := resp.Coordinators[0]
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.ErrorMessage, c.NodeID, c.Host, c.Port
		resp.Coordinators = nil
	}
	return resp
}

// describeCluster lists the brokers and the controller (the Raft leader).
func (s *Server) describeCluster(r *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.EndpointType = r.EndpointType
	brokers, controller := s.brokers()
	resp.ClusterID, resp.ControllerID = ClusterID, controller
	for _, b := range brokers {
		db := kmsg.NewDescribeClusterResponseBroker()
		db.NodeID, db.Host, db.Port = b.id, b.host, b.port
		resp.Brokers = append(resp.Brokers, db)
	}
	return resp
}
