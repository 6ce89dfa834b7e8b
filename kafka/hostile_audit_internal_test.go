package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	s := newServer(cfg)
	t.Cleanup(s.cancel)
	return s
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
	tokens := appTokens(t)
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

// pipeAsk writes req on c as the corr'th request and decodes the answer
// into resp (non-flexible versions: the answer's header is its
// correlation ID alone).
func pipeAsk(t *testing.T, c net.Conn, corr int32, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	if _, err := c.Write(pipeFrame(req, corr)); err != nil {
		t.Fatalf("write %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	pipeAnswer(t, c, corr, req, resp)
}

// pipeFrame is req framed as the corr'th request.
func pipeFrame(req kmsg.Request, corr int32) []byte {
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("audit")).AppendRequest(nil, req, corr)
}

// pipeAnswer reads the answer to req, sent as the corr'th request, into
// resp.
func pipeAnswer(t *testing.T, c net.Conn, corr int32, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("read the answer to %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatalf("read the answer to %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		t.Fatalf("answer to %s has correlation ID %d, want %d", kmsg.NameForKey(req.Key()), got, corr)
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body[4:]); err != nil {
		t.Fatalf("decode the answer to %s: %v", kmsg.NameForKey(req.Key()), err)
	}
}

// TestHostile_FailedSASLAuthenticationClosesTheConnection: a wrong token
// is answered SASL_AUTHENTICATION_FAILED and the connection closed, as
// Kafka's brokers do, so each guess at a token costs a new connection. A
// right one leaves the connection serving as the token's principal.
func TestHostile_FailedSASLAuthenticationClosesTheConnection(t *testing.T) {
	tokens := appTokens(t)
	sec := rpc.Security{Tokens: tokens}
	s := newConnServer(t, Config{Security: sec})
	s.authz = rpc.NewAuthorizer(sec)
	login := func(token string) (net.Conn, int16) {
		c := pipeConn(t, s)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(1)
		hs.Mechanism = mechPlain
		hsResp := kmsg.NewPtrSASLHandshakeResponse()
		pipeAsk(t, c, 1, hs, hsResp)
		if hsResp.ErrorCode != 0 {
			t.Fatalf("SASL handshake: %v", kerr.ErrorForCode(hsResp.ErrorCode))
		}
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.SetVersion(1)
		au.SASLAuthBytes = []byte("\x00app\x00" + token)
		auResp := kmsg.NewPtrSASLAuthenticateResponse()
		pipeAsk(t, c, 2, au, auResp)
		return c, auResp.ErrorCode
	}

	c, code := login("a-guess-at-the-token-000")
	if code != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("a wrong token: %v, want SASL_AUTHENTICATION_FAILED", kerr.ErrorForCode(code))
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after a failed authentication: read %d bytes, %v; want the connection closed", n, err)
	}

	c, code = login(appToken)
	if code != 0 {
		t.Fatalf("the right token: %v, want no error", kerr.ErrorForCode(code))
	}
	pipeServing(t, c, 3, "after authenticating")
}

// TestReadFrame_EveryByteOfLargeRequests: a body read in growing chunks is
// the body sent, at every size around the chunk boundaries (a SyncGroup
// carrying a thousand members' assignments is hundreds of kilobytes), and
// a body cut short is an error, not a frame padded with zeros. Every byte
// past the first chunk is asked for before it is allocated, and a refusal
// ends the read.
func TestReadFrame_EveryByteOfLargeRequests(t *testing.T) {
	for _, n := range []int{8, frameChunk - 1, frameChunk, frameChunk + 1, 3*frameChunk + 5, 1 << 20} {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i%251 + 1) // never 0: a byte left unread shows
		}
		taken := 0
		got, err := readFrame(bytes.NewReader(body), n, func(more int) bool { taken += more; return true })
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("a body of %d bytes: read %d bytes (equal: %v), %v", n, len(got), bytes.Equal(got, body), err)
		}
		if want := n - min(n, frameChunk); taken != want {
			t.Fatalf("a body of %d bytes took %d in-flight bytes, want the %d past the first chunk", n, taken, want)
		}
		if _, err := readFrame(bytes.NewReader(body[:n-1]), n, func(int) bool { return true }); !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Fatalf("a body of %d bytes cut one short: %v, want an EOF error", n, err)
		}
		_, err = readFrame(bytes.NewReader(body), n, func(int) bool { return false })
		if n > frameChunk && !errors.Is(err, errNoRoom) || n <= frameChunk && err != nil {
			t.Fatalf("a body of %d bytes with no room past the first chunk: %v", n, err)
		}
	}
}

// TestHostile_LargeRequestIsServed: a request over the first read chunk
// is answered whole, and the connection goes on serving the next one.
func TestHostile_LargeRequestIsServed(t *testing.T) {
	s := newConnServer(t, Config{})
	c := pipeConn(t, s)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	const topics = 4000 // 4,000 names of 24 bytes or more: over 100 KiB
	md := metadataOf(topics, "a-topic-of-a-large-ask-%05d")
	if size := len(kmsg.NewRequestFormatter().AppendRequest(nil, md, 1)); size <= frameChunk {
		t.Fatalf("the request is %d bytes, not over the %d-byte chunk", size, frameChunk)
	}
	resp := kmsg.NewPtrMetadataResponse()
	pipeAsk(t, c, 1, md, resp)
	if len(resp.Topics) != topics || *resp.Topics[topics-1].Topic != "a-topic-of-a-large-ask-03999" {
		t.Fatalf("Metadata of %d topics answered %d", topics, len(resp.Topics))
	}
	pipeServing(t, c, 2, "after the large request")
}

// TestHostile_RequestBytesInFlightAreBounded: the large requests of all
// connections together hold at most MaxInFlightBytes past their first
// chunks. A request that needs more than is left is not read further
// until others finish, and is refused, its connection closed, when no
// room comes within the request timeout. Small requests (every heartbeat,
// commit and join) never wait.
func TestHostile_RequestBytesInFlightAreBounded(t *testing.T) {
	const limit = 1 << 20
	s := newConnServer(t, Config{MaxRequestBytes: limit, MaxInFlightBytes: limit, RequestTimeout: 10 * time.Second})
	inFlight := func() int { return int(testutil.ToFloat64(s.m.inFlightBytes)) }
	waitInFlight := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); inFlight() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("request bytes in flight: %d, want %d", inFlight(), want)
			}
			time.Sleep(time.Millisecond) // time passes: the server's goroutine takes or releases the bytes
		}
	}

	// a announces 1 MiB and stalls after half of it: it holds what its
	// buffer grew to past the first chunk (4 + 8 + ... + 256 KiB), and the
	// 512 KiB it asks for next.
	a := pipeConn(t, s)
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.Write(append(binary.BigEndian.AppendUint32(nil, limit), make([]byte, limit/2)...)); err != nil {
		t.Fatal(err)
	}
	aHolds := limit - frameChunk
	waitInFlight(aHolds)

	// b's small request is answered.
	b := pipeConn(t, s)
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	pipeServing(t, b, 1, "beside a large request")

	// c's large one needs more than the chunk left: it is not answered
	// while a holds its bytes, and is once a's connection goes.
	md := metadataOf(3000, "%070d")
	if n := len(pipeFrame(md, 1)); n < 3*frameChunk || n > limit {
		t.Fatalf("Metadata is %d bytes, want between 3 chunks and 1 MiB", n)
	}
	c := pipeConn(t, s)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = c.Write(pipeFrame(md, 1)) }() // returns once the server has read it all
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a request needing more than the bytes left was answered (%d bytes, %v) while another held them", n, err)
	}
	if got := inFlight(); got != limit {
		t.Fatalf("request bytes in flight while c waits: %d, want a's %d and c's first %d", got, aHolds, frameChunk)
	}
	a.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	mdResp := kmsg.NewPtrMetadataResponse()
	pipeAnswer(t, c, 1, md, mdResp)
	if len(mdResp.Topics) != len(md.Topics) {
		t.Fatalf("Metadata of %d topics answered %d", len(md.Topics), len(mdResp.Topics))
	}
	waitInFlight(0)

	// With every byte held for longer than the request timeout, a large
	// request is refused and its connection closed; a small one is served.
	s2 := newConnServer(t, Config{MaxRequestBytes: limit, MaxInFlightBytes: limit, RequestTimeout: 200 * time.Millisecond})
	if !s2.inFlight.TryAcquire(limit) {
		t.Fatal("a new listener's in-flight bytes are taken")
	}
	d := pipeConn(t, s2)
	_ = d.SetDeadline(time.Now().Add(10 * time.Second))
	pipeServing(t, d, 1, "with no room")
	go func() { _, _ = d.Write(pipeFrame(md, 2)) }() // the server stops reading it
	if n, err := d.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("a large request with no room for the request timeout: read %d bytes, %v; want the connection closed", n, err)
	}
	if got := testutil.ToFloat64(s2.m.refusedRequests); got != 1 {
		t.Fatalf("refused requests: %v, want 1", got)
	}
}

// TestHostile_AnonymousRequestsFitTheFirstChunk: on a node that enforces
// authorization, a connection that has not authenticated may send
// requests of at most the first chunk (4 KiB), what ApiVersions, a SASL
// exchange and the brokers' Metadata need. A larger one is refused from
// its 4-byte size, before any of its body is read (before, it was read
// whole, up to 16 MiB, and decoded up to 24 times larger), and the
// connection closed. The same request is served once the connection has
// authenticated, and on an open node.
func TestHostile_AnonymousRequestsFitTheFirstChunk(t *testing.T) {
	large := metadataOf(400, "a-topic-of-a-large-ask-%05d")
	frame := pipeFrame(large, 9)
	if len(frame)-4 <= frameChunk {
		t.Fatalf("the request is %d bytes, not over the %d-byte chunk", len(frame)-4, frameChunk)
	}

	sec := rpc.Security{Tokens: appTokens(t)}
	s := newConnServer(t, Config{Security: sec})
	s.authz = rpc.NewAuthorizer(sec)

	t.Run("anonymous", func(t *testing.T) {
		before := testutil.ToFloat64(s.m.refusedRequests)
		c := pipeConn(t, s)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		pipeServing(t, c, 1, "unauthenticated")
		// Only the size: the node must decide without the body.
		if _, err := c.Write(frame[:4]); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("after announcing %d bytes unauthenticated: read %d bytes, %v; want the connection closed at once", len(frame)-4, n, err)
		}
		if got := testutil.ToFloat64(s.m.refusedRequests) - before; got != 1 {
			t.Fatalf("refused requests counted %v, want 1", got)
		}
	})
	t.Run("authenticated", func(t *testing.T) {
		c := pipeConn(t, s)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(1)
		hs.Mechanism = mechOAuthBearer
		pipeAsk(t, c, 1, hs, kmsg.NewPtrSASLHandshakeResponse())
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.SetVersion(1)
		au.SASLAuthBytes = []byte("n,,\x01auth=Bearer " + appToken + "\x01\x01")
		auResp := kmsg.NewPtrSASLAuthenticateResponse()
		pipeAsk(t, c, 2, au, auResp)
		if auResp.ErrorCode != 0 {
			t.Fatalf("OAUTHBEARER: %v", kerr.ErrorForCode(auResp.ErrorCode))
		}
		resp := kmsg.NewPtrMetadataResponse()
		pipeAsk(t, c, 3, large, resp)
		if len(resp.Topics) != len(large.Topics) {
			t.Fatalf("authenticated: Metadata of %d topics answered %d", len(large.Topics), len(resp.Topics))
		}
		pipeServing(t, c, 4, "after the large request")
	})
	t.Run("open node", func(t *testing.T) {
		c := pipeConn(t, newConnServer(t, Config{}))
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		resp := kmsg.NewPtrMetadataResponse()
		pipeAsk(t, c, 1, large, resp)
		if len(resp.Topics) != len(large.Topics) {
			t.Fatalf("open node: Metadata of %d topics answered %d", len(large.Topics), len(resp.Topics))
		}
	})
}

// metadataOf is a Metadata v4 request of n topics, named by format from
// their number: a request as large as a test needs.
func metadataOf(n int, format string) *kmsg.MetadataRequest {
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(4)
	for i := range n {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(fmt.Sprintf(format, i))
		md.Topics = append(md.Topics, rt)
	}
	return md
}

// pipeServing asks ApiVersions on c and fails the test unless it is
// answered: the connection serves.
func pipeServing(t *testing.T, c net.Conn, corr int32, when string) {
	t.Helper()
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(0)
	resp := kmsg.NewPtrApiVersionsResponse()
	pipeAsk(t, c, corr, av, resp)
	if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("ApiVersions %s: error %d, %d APIs; want the connection serving", when, resp.ErrorCode, len(resp.ApiKeys))
	}
}
