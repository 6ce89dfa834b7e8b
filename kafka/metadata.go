package kafka

import (
	"crypto/sha256"
	"encoding/binary"
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
		topicNamesByID.Store(id, name)
	}
	return id
}

// The topic ID cache, both ways, bounded by the topic budget's default (a
// name no longer in the registry keeps its entry; past the bound IDs are
// computed each time).
var (
	topicIDs          sync.Map // name → ID
	topicNamesByID    sync.Map // ID → name
	topicIDCount      atomic.Int64
	maxCachedTopicIDs = int64(fsm.DefaultBudgets().Topics)
)

// topicResolver names the topics one request gives by ID (Metadata and
// OffsetCommit and OffsetFetch v10, DeleteTopics v6,
// ConsumerGroupHeartbeat): first from
// the IDs already computed (every Metadata answer computes its topics'),
// checked against the registry; an ID not found there costs one scan of
// the registry, once per request. A request of many unknown IDs so costs
// one scan, not one per ID.
type topicResolver struct {
	s       *Server
	scanned map[[16]byte]string
}

func (r *topicResolver) name(id [16]byte) (string, bool) {
	if r.scanned == nil {
		if v, ok := topicNamesByID.Load(id); ok && r.s.hasTopic(v.(string)) {
			return v.(string), true
		}
		r.scanned = r.s.topicNames()
	}
	name, ok := r.scanned[id]
	return name, ok
}

// hasTopic reports whether the registry has the topic.
func (s *Server) hasTopic(name string) (ok bool) {
	s.cfg.FSM.Read(func(st *fsm.State) { _, ok = st.Partitions(name) })
	return ok
}

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
// UNKNOWN_TOPIC_OR_PARTITION, as with auto-creation off. The encoded
// answer is kept (metadataCache): after every rebalance each consumer of
// a group asks for the same topics, and building the answer of a topic of
// a thousand partitions costs a thousand times one of a single partition.
func (c *call) metadata(r *kmsg.MetadataRequest) kmsg.Response {
	s := c.s
	brokers, controller := s.brokers()
	allowed := c.authorize(cohortv1.Topics_ListTopics_FullMethodName, &cohortv1.ListTopicsRequest{}) == nil
	all := r.Topics == nil || (r.GetVersion() == 0 && len(r.Topics) == 0)
	var known []fsm.TopicPartitionCount
	var byID []kmsg.MetadataResponseTopic // topics asked for by an ID no name answers
	// Topics asked for by ID (v10+, as clients resolve the IDs of
	// OffsetFetch v10 answers) are named only to a caller that may list
	// topics.
	var idNames map[[16]byte]string
	if allowed && !all {
		ids := topicResolver{s: s}
		for _, t := range r.Topics {
			if t.Topic == nil && t.TopicID != ([16]byte{}) {
				if name, ok := ids.name(t.TopicID); ok {
					if idNames == nil {
						idNames = make(map[[16]byte]string)
					}
					idNames[t.TopicID] = name
				}
			}
		}
	}
	s.cfg.FSM.Read(func(st *fsm.State) {
		if all {
			if allowed {
				known = st.Topics()
			}
			return
		}
		seen := make(map[string]bool, len(r.Topics))
		for _, t := range r.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			} else if t.TopicID != ([16]byte{}) {
				var ok bool
				if name, ok = idNames[t.TopicID]; !ok {
					byID = append(byID, unknownTopicID(t.TopicID, allowed))
					continue
				}
			}
			if seen[name] {
				continue // answered once, as Kafka does
			}
			seen[name] = true
			n, _ := st.Partitions(name)
			known = append(known, fsm.TopicPartitionCount{Name: name, Partitions: n})
		}
	})
	if len(byID) > 0 { // rare: not kept
		resp := buildMetadata(brokers, controller, allowed, known)
		resp.Topics = append(resp.Topics, byID...)
		resp.SetVersion(r.GetVersion())
		return resp
	}
	key := metadataKey(r.GetVersion(), allowed, controller, brokers, known)
	body, ok := s.meta.get(key)
	if !ok {
		resp := buildMetadata(brokers, controller, allowed, known)
		resp.SetVersion(r.GetVersion())
		body = resp.AppendTo(nil)
		s.meta.put(key, body)
	}
	return &encodedMetadata{MetadataResponse: kmsg.NewPtrMetadataResponse(), body: body}
}

// unknownTopicID is the answer for a topic asked for by an ID that no
// topic has, or that the caller may not resolve: the ID, no name.
func unknownTopicID(id [16]byte, allowed bool) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.TopicID, mt.ErrorCode = id, kerr.UnknownTopicID.Code
	if !allowed {
		mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
	}
	return mt
}

// buildMetadata is the answer naming brokers, controller and known topics
// (each with its partition count; 0: unknown) to a caller that may list
// topics or not.
func buildMetadata(brokers []broker, controller int32, allowed bool, known []fsm.TopicPartitionCount) *kmsg.MetadataResponse {
	resp := kmsg.NewPtrMetadataResponse()
	rot := rotations(brokers)
	for _, b := range brokers {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = b.id, b.host, b.port
		resp.Brokers = append(resp.Brokers, mb)
	}
	clusterID := ClusterID
	resp.ClusterID, resp.ControllerID = &clusterID, controller
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

// encodedMetadata is a Metadata answer already encoded at the request's
// version: AppendTo copies body.
type encodedMetadata struct {
	*kmsg.MetadataResponse
	body []byte
}

func (e *encodedMetadata) AppendTo(dst []byte) []byte { return append(dst, e.body...) }

// metadataKey is everything a Metadata answer depends on, in an
// unambiguous encoding (every string length-prefixed): the request's
// version, whether the caller may list topics, the controller, the
// brokers named and the topics with their partition counts. Partition
// leaders follow from the brokers (partitionReplicas), topic IDs from
// names. An answer kept under a key is therefore the answer to any
// request with that key, whatever changed since: a registry or broker
// change makes a new key, never a stale answer.
func metadataKey(version int16, allowed bool, controller int32, brokers []broker, topics []fsm.TopicPartitionCount) string {
	b := make([]byte, 0, 64+16*len(brokers)+24*len(topics))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	if allowed {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(controller))
	b = binary.AppendUvarint(b, uint64(len(brokers)))
	for _, br := range brokers {
		b = binary.BigEndian.AppendUint32(b, uint32(br.id))
		b = binary.BigEndian.AppendUint32(b, uint32(br.port))
		b = binary.AppendUvarint(b, uint64(len(br.host)))
		b = append(b, br.host...)
	}
	for _, t := range topics {
		b = binary.AppendUvarint(b, uint64(len(t.Name)))
		b = append(b, t.Name...)
		b = binary.BigEndian.AppendUint32(b, uint32(t.Partitions))
	}
	return string(b)
}

// Bounds of the kept Metadata answers: all of them together, and one
// (a larger answer is built for every request).
const (
	maxMetadataCacheBytes  = 16 << 20
	maxMetadataAnswerBytes = 4 << 20
)

// metadataCache holds encoded Metadata answers by metadataKey, at most
// maxMetadataCacheBytes of answers and keys: when the next one would not
// fit, every kept answer is dropped (keys that no longer occur, after a
// topic or broker change, go with them).
type metadataCache struct {
	mu      sync.Mutex
	answers map[string][]byte
	bytes   int
	hits    int // answers served from the cache (tests)
}

func (m *metadataCache) get(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	body, ok := m.answers[key]
	if ok {
		m.hits++
	}
	return body, ok
}

func (m *metadataCache) put(key string, body []byte) {
	size := len(key) + len(body)
	if len(body) > maxMetadataAnswerBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.answers[key]; ok {
		return
	}
	if m.answers == nil || m.bytes+size > maxMetadataCacheBytes {
		m.answers, m.bytes = map[string][]byte{}, 0
	}
	m.answers[key] = body
	m.bytes += size
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
