package kafka

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/cluster"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/rpc"
)

// brokerSet is a Cluster of brokers the test may change, the first one
// leading.
type brokerSet struct{ b []cluster.KafkaBroker }

func (s *brokerSet) KafkaBrokers() []cluster.KafkaBroker { return s.b }
func (s *brokerSet) LeaderKafkaBroker() (cluster.KafkaBroker, bool) {
	if len(s.b) == 0 {
		return cluster.KafkaBroker{}, false
	}
	return s.b[0], true
}
func (s *brokerSet) KafkaAddress() string { return s.b[0].Address }

// metadataServer is just enough of a Server to answer Metadata: an FSM
// that applies commands as the test gives them, and brokers it can change.
type metadataServer struct {
	t       testing.TB
	s       *Server
	fsm     *fsm.FSM
	index   uint64
	brokers *brokerSet
}

func newMetadataServer(t testing.TB, sec rpc.Security) *metadataServer {
	t.Helper()
	m := &metadataServer{t: t, fsm: fsm.New(), brokers: &brokerSet{b: []cluster.KafkaBroker{
		{NodeID: "node1", Address: "127.0.0.1:9092"},
		{NodeID: "node2", Address: "127.0.0.1:9093"},
		{NodeID: "node3", Address: "127.0.0.1:9094"},
	}}}
	m.s = &Server{cfg: Config{FSM: m.fsm, Cluster: m.brokers}, authz: rpc.NewAuthorizer(sec)}
	return m
}

func (m *metadataServer) apply(cmd *fsmv1.Command) {
	m.t.Helper()
	m.index++
	if res := m.fsm.Apply(m.index, cmd); res.Err != nil {
		m.t.Fatalf("apply %v: %v", cmd, res.Err)
	}
}

func (m *metadataServer) createTopic(name string, partitions int32) {
	m.apply(&fsmv1.Command{Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: name, Partitions: partitions}}})
}

func (m *metadataServer) addPartitions(name string, partitions int32) {
	m.apply(&fsmv1.Command{Kind: &fsmv1.Command_AddPartitions{AddPartitions: &fsmv1.AddPartitions{Name: name, Partitions: partitions}}})
}

// ask answers a Metadata request of version v for topics (nil: all) as
// principal p, returning the encoded body and its decoding.
func (m *metadataServer) ask(p auth.Principal, v int16, topics []string) ([]byte, *kmsg.MetadataResponse) {
	m.t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(v)
	if topics != nil {
		req.Topics = []kmsg.MetadataRequestTopic{}
		for _, name := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, rt)
		}
	}
	c := &call{s: m.s, c: &conn{principal: p}}
	body := c.metadata(req).AppendTo(nil)
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(v)
	if err := resp.ReadFrom(body); err != nil {
		m.t.Fatalf("Metadata v%d answer does not decode: %v", v, err)
	}
	return body, resp
}

// partitionCounts is each answered topic's partition count, or its error.
func partitionCounts(resp *kmsg.MetadataResponse) map[string]string {
	out := map[string]string{}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			out[*t.Topic] = err.Error()
		} else {
			out[*t.Topic] = fmt.Sprint(len(t.Partitions))
		}
	}
	return out
}

// A kept Metadata answer is byte for byte the one built afresh, at every
// version served; a repeated request is answered from the cache; and any
// change the answer depends on (partitions added, a topic created, a
// broker gone) is answered anew, never from a stale entry.
func TestMetadata_KeptAnswersAreExactAndNeverStale(t *testing.T) {
	m := newMetadataServer(t, rpc.Security{})
	m.createTopic("orders", 8)
	for v := int16(0); v <= apis[kmsg.Metadata.Int16()].max; v++ {
		for _, topics := range [][]string{{"orders"}, {"orders", "missing"}, nil} {
			if v == 0 && topics == nil {
				topics = []string{} // v0 asks for all topics with an empty list
			}
			first, resp := m.ask(auth.Principal{}, v, topics)
			hits := m.s.meta.hits
			brokers, controller := m.s.brokers()
			fresh := buildMetadata(brokers, controller, true, knownOf(m, topics))
			fresh.SetVersion(v)
			if want := fresh.AppendTo(nil); !bytes.Equal(first, want) {
				t.Fatalf("v%d %v: the answer differs from one built afresh", v, topics)
			}
			again, _ := m.ask(auth.Principal{}, v, topics)
			if !bytes.Equal(again, first) || m.s.meta.hits != hits+1 {
				t.Fatalf("v%d %v: a repeated request: equal %v, cache hits %d → %d; want the same bytes from the cache",
					v, topics, bytes.Equal(again, first), hits, m.s.meta.hits)
			}
			if got := partitionCounts(resp); got["orders"] != "8" || len(resp.Brokers) != 3 {
				t.Fatalf("v%d %v: topics %v, %d brokers; want orders with 8 partitions and 3 brokers", v, topics, got, len(resp.Brokers))
			}
		}
	}

	m.addPartitions("orders", 12)
	if _, resp := m.ask(auth.Principal{}, 12, []string{"orders"}); partitionCounts(resp)["orders"] != "12" {
		t.Fatalf("after adding partitions: %v, want orders with 12", partitionCounts(resp))
	}
	m.createTopic("missing", 2)
	if _, resp := m.ask(auth.Principal{}, 12, []string{"orders", "missing"}); partitionCounts(resp)["missing"] != "2" {
		t.Fatalf("after creating the topic: %v, want missing with 2", partitionCounts(resp))
	}
	if _, resp := m.ask(auth.Principal{}, 12, nil); len(resp.Topics) != 2 {
		t.Fatalf("all topics after creating one: %v, want both", partitionCounts(resp))
	}
	m.brokers.b = m.brokers.b[:2]
	_, resp := m.ask(auth.Principal{}, 12, []string{"orders"})
	if len(resp.Brokers) != 2 {
		t.Fatalf("after a broker left the registry: %d brokers named, want 2", len(resp.Brokers))
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.Leader == BrokerID("node3") {
			t.Fatalf("partition %d still led by the broker that left", p.Partition)
		}
	}
}

// knownOf is what metadata reads from the registry for topics (nil or
// empty: all).
func knownOf(m *metadataServer, topics []string) []fsm.TopicPartitionCount {
	var known []fsm.TopicPartitionCount
	m.fsm.Read(func(st *fsm.State) {
		if len(topics) == 0 {
			known = st.Topics()
			return
		}
		for _, name := range topics {
			n, _ := st.Partitions(name)
			known = append(known, fsm.TopicPartitionCount{Name: name, Partitions: n})
		}
	})
	return known
}

// A caller who may not list topics is never given a kept answer of one who
// may, and the other way round: the caller's right is part of the key.
func TestMetadata_KeptAnswersFollowTheCallersRight(t *testing.T) {
	tokens := appTokens(t)
	m := newMetadataServer(t, rpc.Security{Tokens: tokens})
	m.createTopic("orders", 4)
	client := auth.Principal{Role: auth.RoleClient, Name: "app"}
	for range 2 {
		if _, resp := m.ask(client, 12, []string{"orders"}); partitionCounts(resp)["orders"] != "4" {
			t.Fatalf("a client: %v, want orders with 4 partitions", partitionCounts(resp))
		}
		_, resp := m.ask(auth.Principal{}, 12, []string{"orders"})
		if got := partitionCounts(resp)["orders"]; got != kerr.TopicAuthorizationFailed.Error() {
			t.Fatalf("an anonymous caller: orders %q, want TOPIC_AUTHORIZATION_FAILED", got)
		}
		if _, resp := m.ask(auth.Principal{}, 12, nil); len(resp.Topics) != 0 || len(resp.Brokers) != 3 {
			t.Fatalf("an anonymous caller listing all: %v and %d brokers, want no topics and every broker", partitionCounts(resp), len(resp.Brokers))
		}
	}
}

// A topic asked for by ID is named only to a caller that may list topics:
// anyone else gets TOPIC_AUTHORIZATION_FAILED and the ID alone, not the
// name an ID would otherwise reveal.
func TestMetadata_TopicByIDNamedOnlyToCallersWhoMayList(t *testing.T) {
	m := newMetadataServer(t, rpc.Security{Tokens: appTokens(t)})
	m.createTopic("orders", 4)
	askByID := func(p auth.Principal) kmsg.MetadataResponseTopic {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(12)
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = TopicID("orders")
		req.Topics = []kmsg.MetadataRequestTopic{rt}
		c := &call{s: m.s, c: &conn{principal: p}}
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(12)
		if err := resp.ReadFrom(c.metadata(req).AppendTo(nil)); err != nil || len(resp.Topics) != 1 {
			t.Fatalf("Metadata by ID: %v, %d topics", err, len(resp.Topics))
		}
		return resp.Topics[0]
	}
	if mt := askByID(auth.Principal{Role: auth.RoleClient, Name: "app"}); mt.Topic == nil || *mt.Topic != "orders" || len(mt.Partitions) != 4 {
		t.Errorf("a client asking by orders' ID: %+v, want orders with 4 partitions", mt)
	}
	if mt := askByID(auth.Principal{}); mt.Topic != nil || mt.ErrorCode != kerr.TopicAuthorizationFailed.Code || mt.TopicID != TopicID("orders") {
		t.Errorf("an anonymous caller asking by orders' ID: %+v, want TOPIC_AUTHORIZATION_FAILED, the ID, no name", mt)
	}
}

// A topic ID names its topic while the topic exists, whether its ID was
// computed before (the cache) or not: a deleted topic's ID names nothing,
// and the ID of a topic created again names it again.
func TestTopicResolver_FollowsTheRegistry(t *testing.T) {
	m := newMetadataServer(t, rpc.Security{})
	m.createTopic("orders", 4)
	id := TopicID("orders")
	fresh := [16]byte{0xff, 1, 2, 3} // an ID no name was seen with
	r := topicResolver{s: m.s}
	if name, ok := r.name(id); !ok || name != "orders" {
		t.Fatalf("orders' ID names %q (%v), want orders", name, ok)
	}
	if name, ok := r.name(fresh); ok {
		t.Fatalf("an unknown ID names %q", name)
	}
	m.apply(&fsmv1.Command{Kind: &fsmv1.Command_DeleteTopic{DeleteTopic: &fsmv1.DeleteTopic{Name: "orders"}}})
	if name, ok := (&topicResolver{s: m.s}).name(id); ok {
		t.Fatalf("a deleted topic's ID names %q", name)
	}
	m.createTopic("orders", 2)
	if name, ok := (&topicResolver{s: m.s}).name(id); !ok || name != "orders" {
		t.Fatalf("orders created again: its ID names %q (%v), want orders", name, ok)
	}
}

// OffsetFetch v10 of topic IDs no topic has, from a caller that may not
// read the group's offsets: GROUP_AUTHORIZATION_FAILED, not which IDs
// name nothing.
func TestOffsetFetch_ByUnknownIDAuthorizedFirst(t *testing.T) {
	m := newMetadataServer(t, rpc.Security{Tokens: appTokens(t)})
	req := kmsg.NewPtrOffsetFetchRequest()
	req.SetVersion(10)
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = "g"
	ft := kmsg.NewOffsetFetchRequestGroupTopic()
	ft.TopicID, ft.Partitions = [16]byte{0xff, 1}, []int32{0}
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{ft}
	req.Groups = []kmsg.OffsetFetchRequestGroup{g}
	c := &call{s: m.s, c: &conn{}}
	gs := c.offsetFetch(context.Background(), req).(*kmsg.OffsetFetchResponse).Groups
	if len(gs) != 1 || gs[0].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Errorf("an anonymous OffsetFetch v10 of an unknown ID: %+v, want GROUP_AUTHORIZATION_FAILED", gs)
	}
}

// DeleteTopics v6 by ID from a caller that may not delete topics: refused,
// with the ID alone (the name is not revealed), and nothing deleted.
func TestDeleteTopics_ByIDRefusedWithoutTheName(t *testing.T) {
	m := newMetadataServer(t, rpc.Security{Tokens: appTokens(t)})
	m.createTopic("orders", 4)
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.SetVersion(6)
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.TopicID = TopicID("orders")
	req.Topics = []kmsg.DeleteTopicsRequestTopic{dt}
	for _, p := range []auth.Principal{{}, {Role: auth.RoleClient, Name: "app"}} {
		c := &call{s: m.s, c: &conn{principal: p}}
		ts := c.deleteTopics(context.Background(), req).(*kmsg.DeleteTopicsResponse).Topics
		if len(ts) != 1 || ts[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || ts[0].Topic != nil || ts[0].TopicID != TopicID("orders") {
			t.Errorf("%v deleting orders by ID: %+v, want TOPIC_AUTHORIZATION_FAILED with the ID alone", p, ts)
		}
	}
	var n int32
	m.fsm.Read(func(s *fsm.State) { n, _ = s.Partitions("orders") })
	if n != 4 {
		t.Errorf("orders has %d partitions after refused deletes, want 4", n)
	}
}

// Building the Metadata answer of a 1,000-partition topic against
// serving it from the cache, as a thousand consumers ask after a
// rebalance.
func BenchmarkMetadata(b *testing.B) {
	for _, partitions := range []int32{10, 1000, 10000} {
		m := newMetadataServer(b, rpc.Security{})
		m.createTopic("orders", partitions)
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(12)
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("orders")
		req.Topics = []kmsg.MetadataRequestTopic{rt}
		c := &call{s: m.s, c: &conn{}}
		b.Run(fmt.Sprintf("partitions=%d/built", partitions), func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				brokers, controller := m.s.brokers()
				resp := buildMetadata(brokers, controller, true, knownOf(m, []string{"orders"}))
				resp.SetVersion(12)
				buf = resp.AppendTo(buf[:0])
			}
		})
		b.Run(fmt.Sprintf("partitions=%d/cached", partitions), func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf = c.metadata(req).AppendTo(buf[:0])
			}
		})
	}
}

// appTokens accept one bearer token, appToken, as the client "app".
func appTokens(t testing.TB) *auth.Tokens {
	t.Helper()
	tokens, err := auth.NewTokens("", map[string]auth.Principal{appToken: {Role: auth.RoleClient, Name: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

const appToken = "client-token-0123456789"
