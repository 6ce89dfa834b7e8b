package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/rpc"
)

// newConnServer is a listener whose serveConn a test drives over
// net.Pipe: enough of a Server to read, refuse and close requests.
func newConnServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	m := newMetadataServer(t, rpc.Security{})
	cfg.FSM, cfg.Cluster = m.fsm, m.brokers
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &Server{cfg: cfg, authz: m.s.authz, log: cfg.Logger, m: newMetrics(), ctx: ctx, cancel: cancel}
}

// pipeConn serves one end of a pipe and returns the other; the server's
// end is closed when the test ends.
func pipeConn(t *testing.T, s *Server) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer server.Close()
		s.serveConn(server)
	}()
	t.Cleanup(func() {
		client.Close()
		<-done
	})
	return client
}

// TestHostile_StalledRequestCostsWhatItSent: a request's 4-byte size is
// a claim, not a payment. Connections that announce the largest request
// allowed (16 MiB) and send one byte of it cost the node about what they
// sent, not 16 MiB each up front: before, a few hundred such connections
// (of the 10,000 allowed) held gigabytes.
func TestHostile_StalledRequestCostsWhatItSent(t *testing.T) {
	s := newConnServer(t, Config{})
	const conns = 8
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range conns {
		c := pipeConn(t, s)
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		// A pipe's write returns once the server has read it: after the
		// second byte the server has sized its buffer for the request.
		if _, err := c.Write(binary.BigEndian.AppendUint32(nil, uint32(DefaultMaxRequestBytes))); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := c.Write([]byte{0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > conns<<20 {
		t.Fatalf("%d connections that each sent 2 bytes of a 16 MiB request made the node allocate %d MiB; want under 1 MiB each", conns, grew>>20)
	}
}

// TestHostile_StalledRequestIsClosed: a client that sends part of a
// request and stalls (slowloris) is closed after the request timeout, not
// after the idle timeout meant for connections between requests.
func TestHostile_StalledRequestIsClosed(t *testing.T) {
	s := newConnServer(t, Config{IdleTimeout: time.Hour, RequestTimeout: 200 * time.Millisecond})
	c := pipeConn(t, s)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, 100), 0, 18, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("a request stalled after 4 of its 100 bytes: read %d bytes, %v; want the connection closed within the request timeout", n, err)
	}
}

// TestHostile_FetchAndListOffsetsNeedTheRightToListTopics: on a node that
// authorizes, an anonymous caller learns nothing of the topics from Fetch
// or ListOffsets (which partitions exist), as from Metadata: every
// partition is TOPIC_AUTHORIZATION_FAILED. A client is answered.
func TestHostile_FetchAndListOffsetsNeedTheRightToListTopics(t *testing.T) {
	tokens, err := auth.NewTokens("", map[string]auth.Principal{"client-token-0123456789": {Role: auth.RoleClient, Name: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	m := newMetadataServer(t, rpc.Security{Tokens: tokens})
	m.createTopic("orders", 2)
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(12)
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "orders"
	for _, p := range []int32{1, 5} {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition = p
		ft.Partitions = append(ft.Partitions, fp)
	}
	fetch.Topics = []kmsg.FetchRequestTopic{ft}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(7)
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "orders"
	for _, p := range []int32{1, 5} {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition = p
		lt.Partitions = append(lt.Partitions, lp)
	}
	lo.Topics = []kmsg.ListOffsetsRequestTopic{lt}

	for _, tc := range []struct {
		who       auth.Principal
		want1     int16 // partition 1, which exists
		wantOther int16 // partition 5, which does not
	}{
		{auth.Principal{}, kerr.TopicAuthorizationFailed.Code, kerr.TopicAuthorizationFailed.Code},
		{auth.Principal{Role: auth.RoleClient, Name: "app"}, 0, kerr.UnknownTopicOrPartition.Code},
	} {
		c := &call{s: m.s, c: &conn{principal: tc.who}}
		fp := c.fetch(fetch).(*kmsg.FetchResponse).Topics[0].Partitions
		lp := c.listOffsets(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions
		if fp[0].ErrorCode != tc.want1 || fp[1].ErrorCode != tc.wantOther || lp[0].ErrorCode != tc.want1 || lp[1].ErrorCode != tc.wantOther {
			t.Fatalf("caller %s: Fetch errors %d %d, ListOffsets errors %d %d; want %d %d",
				tc.who, fp[0].ErrorCode, fp[1].ErrorCode, lp[0].ErrorCode, lp[1].ErrorCode, tc.want1, tc.wantOther)
		}
	}
}
