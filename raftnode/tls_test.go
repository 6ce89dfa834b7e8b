package raftnode

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/fsm"
	"github.com/cohortlabs/cohort/internal/lograte"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// testPKI is a CA in a temporary directory that issues node certificates.
type testPKI struct {
	dir string
	ca  *auth.CA
}

func newTestPKI(t testing.TB, name string) *testPKI {
	t.Helper()
	ca, err := auth.NewCA(name, time.Hour)
	if err != nil {
		t.Fatalf("new CA %s: %v", name, err)
	}
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatalf("save CA %s: %v", name, err)
	}
	return &testPKI{dir: dir, ca: ca}
}

// files issues a certificate naming node/<id>.
func (p *testPKI) files(t testing.TB, id string) auth.Files {
	t.Helper()
	f, err := p.ca.IssueFiles(p.dir, id, auth.Principal{Role: auth.RoleNode, Name: id}, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatalf("issue certificate for node %s: %v", id, err)
	}
	return f
}

func (p *testPKI) creds(t testing.TB, id string) *auth.Credentials {
	t.Helper()
	c, err := auth.LoadCredentials(p.files(t, id))
	if err != nil {
		t.Fatalf("load credentials of node %s: %v", id, err)
	}
	return c
}

// withTLS gives every node a certificate of pki naming its ID.
func withTLS(t testing.TB, pki *testPKI) clusterOpt {
	return func(_ int, c *Config) { c.TLS = pki.creds(t, c.NodeID) }
}

// forgedAppendEntries is an AppendEntries request in raft's wire format
// (the rpc type byte 0, then the request in msgpack, as NetworkTransport
// sends it) from a "leader" claiming a term 100 above target's. It
// appends after target's last entry, and commits, a CreateTopic of topic:
// what a follower that trusts it applies at once.
func forgedAppendEntries(t testing.TB, target *Node, leaderID, topic string) []byte {
	t.Helper()
	lastTerm, err := strconv.ParseUint(target.raft.Stats()["last_log_term"], 10, 64)
	if err != nil {
		t.Fatalf("last log term of %s: %v", target.ID(), err)
	}
	cmd := createTopic(topic, 1)
	cmd.Version, cmd.TimestampMs = fsm.CommandVersion, time.Now().UnixMilli()
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	term, last := target.Term()+100, target.LastIndex()
	req := raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leaderID), Addr: []byte("127.0.0.1:1")},
		Term:              term,
		PrevLogEntry:      last,
		PrevLogTerm:       lastTerm,
		Entries:           []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: last + 1,
	}
	var b bytes.Buffer
	b.WriteByte(0) // rpcAppendEntries
	if err := codec.NewEncoder(&b, &codec.MsgpackHandle{}).Encode(&req); err != nil {
		t.Fatalf("encode forged AppendEntries: %v", err)
	}
	return b.Bytes()
}

// sendForged writes req on c and reads raft's answer (an error string,
// then the response), all within 10 s.
func sendForged(c net.Conn, req []byte) (*raft.AppendEntriesResponse, error) {
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := c.Write(req); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	dec := codec.NewDecoder(bufio.NewReader(c), &codec.MsgpackHandle{})
	var rpcErr string
	if err := dec.Decode(&rpcErr); err != nil {
		return nil, fmt.Errorf("read error string: %w", err)
	}
	var resp raft.AppendEntriesResponse
	if err := dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	if rpcErr != "" {
		return &resp, fmt.Errorf("rpc error: %s", rpcErr)
	}
	return &resp, nil
}

func TestTLS_ThreeNodeCluster_FormsAndReplicates(t *testing.T) {
	pki := newTestPKI(t, "test")
	c := newTestCluster(t, 3, withTLS(t, pki))
	leader := c.leader()
	for i := range 10 {
		leader.apply(t, createTopic(fmt.Sprintf("t%d", i), 1))
	}
	waitConverged(t, leader, c.nodes...)

	// A fresh node (empty configuration) accepts the leader, whose
	// certificate it cannot check against any configuration yet; the
	// leader checks that the new address presents the new ID.
	cfg := testConfig(t, "n4")
	withTLS(t, pki)(3, &cfg)
	n4 := startTestNode(t, cfg)
	if err := leader.node.Raft().AddVoter(raft.ServerID(n4.node.ID()), raft.ServerAddress(n4.node.RaftAddress()), 0, 10*time.Second).Error(); err != nil {
		t.Fatalf("add voter n4: %v", err)
	}
	leader.apply(t, createTopic("after-join", 1))
	waitConverged(t, leader, append(c.nodes, n4)...)

	for _, tn := range append(c.nodes, n4) {
		if got := tn.node.stream.RefusedHandshakes(); got != 0 {
			t.Errorf("%s refused %d handshakes of the cluster's own nodes", tn.node.ID(), got)
		}
	}
}

// Control for the test below: the forged request does what a forgery
// would on a plaintext node (raises the term, appends and commits), so
// its refusal under TLS is the TLS layer's doing.
func TestTLS_ForgedAppendEntries_AcceptedInPlaintext(t *testing.T) {
	tn := newSingleNode(t, testConfig(t, "n1"))
	(&testCluster{t: t, nodes: []*testNode{tn}}).leader().apply(t, createTopic("before", 1))
	term := tn.node.Term()
	req := forgedAppendEntries(t, tn.node, "forger", "forged")

	resp, err := sendForged(dialRaft(t, tn.node.RaftAddress()), req)
	if err != nil || !resp.Success {
		t.Fatalf("forged AppendEntries on plaintext: resp %+v, err %v; want success", resp, err)
	}
	if got := tn.node.Term(); got < term+100 {
		t.Fatalf("term %d after the forgery, want at least %d", got, term+100)
	}
	waitFor(t, 10*time.Second, "the forged topic applied", func() (bool, string) {
		n := tn.fsm.Stats().Topics
		return n == 2, fmt.Sprintf("%d topics", n)
	})
}

func TestTLS_ForgedAppendEntries_Refused(t *testing.T) {
	pki := newTestPKI(t, "test")
	c := newTestCluster(t, 3, withTLS(t, pki))
	leader := c.leader()
	leader.apply(t, createTopic("before", 1))
	waitConverged(t, leader, c.nodes...)
	var f *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			f = tn
			break
		}
	}
	addr := f.node.RaftAddress()
	term, last, state := f.node.Term(), f.node.LastIndex(), snapshotBytes(t, f.fsm)
	req := forgedAppendEntries(t, f.node, leader.node.ID(), "forged")

	refused := f.node.stream.RefusedHandshakes()
	wantRefused := func(t *testing.T) {
		t.Helper()
		refused++
		waitFor(t, 10*time.Second, "the handshake refused", func() (bool, string) {
			n := f.node.stream.RefusedHandshakes()
			return n == refused, fmt.Sprintf("%d refused handshakes, want %d", n, refused)
		})
	}

	t.Run("plaintext", func(t *testing.T) {
		conn := dialRaft(t, addr)
		if _, err := conn.Write(req); err != nil {
			t.Fatalf("write: %v", err)
		}
		readUntilClosed(t, conn, 10*time.Second)
		wantRefused(t)
	})

	// An intruder does not verify the node's certificate: it only wants
	// its own accepted. With TLS 1.3 its handshake may finish before the
	// server has judged its certificate, so refusal shows on the read.
	forgeTLS := func(t *testing.T, cfg *tls.Config) {
		t.Helper()
		conn := tls.Client(dialRaft(t, addr), cfg)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		err := conn.Handshake()
		if err == nil {
			var resp *raft.AppendEntriesResponse
			resp, err = sendForged(conn, req)
			if err == nil {
				t.Fatalf("forged AppendEntries answered: %+v", resp)
			}
		}
		t.Logf("refused: %v", err)
		wantRefused(t)
	}

	t.Run("certificate of another CA", func(t *testing.T) {
		// Named like the leader, so only the chain can give it away.
		files := newTestPKI(t, "foreign").files(t, leader.node.ID())
		kp, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			t.Fatal(err)
		}
		forgeTLS(t, &tls.Config{
			MinVersion:         tls.VersionTLS13,
			InsecureSkipVerify: true,
			// Sent whatever CAs the server asks for (Certificates would
			// send none, as the node's CA did not sign it).
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil },
		})
	})

	t.Run("node of the CA outside the configuration", func(t *testing.T) {
		forgeTLS(t, pki.creds(t, "n9").ClientTLS(nil))
	})

	t.Run("no client certificate", func(t *testing.T) {
		forgeTLS(t, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true})
	})

	if got := f.node.Term(); got != term {
		t.Errorf("follower's term %d, was %d", got, term)
	}
	if got := f.node.LastIndex(); got != last {
		t.Errorf("follower's last index %d, was %d", got, last)
	}
	if !bytes.Equal(snapshotBytes(t, f.fsm), state) {
		t.Errorf("follower's FSM changed")
	}
	// The cluster goes on.
	c.leader().apply(t, createTopic("after", 1))
	waitConverged(t, c.leader(), c.nodes...)
}

func TestTLS_SilentConnection_HoldsSlotUntilHandshakeTimeout(t *testing.T) {
	const (
		maxConns = 3
		timeout  = 2 * time.Second
	)
	pki := newTestPKI(t, "test")
	cfg := testConfig(t, "n1")
	cfg.TLS = pki.creds(t, "n1")
	cfg.MaxConns = maxConns
	cfg.RaftHandshakeTimeout = timeout
	var logs lockedBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tn := newSingleNode(t, cfg)
	addr := tn.node.RaftAddress()

	dialed := time.Now()
	var held []net.Conn
	for range maxConns {
		held = append(held, dialRaft(t, addr))
	}
	waitFor(t, timeout, "the silent connections to hold every slot", func() (bool, string) {
		n := tn.node.stream.OpenConns()
		return n == maxConns, fmt.Sprintf("%d open", n)
	})
	// Beyond the limit: closed at once, long before any handshake timeout.
	readUntilClosed(t, dialRaft(t, addr), timeout/2)
	if got := tn.node.stream.RefusedConns(); got != 1 {
		t.Fatalf("refused connections = %d, want 1", got)
	}
	if got := tn.node.stream.OpenConns(); got != maxConns {
		t.Fatalf("open connections after the refusal = %d, want %d", got, maxConns)
	}

	for _, c := range held {
		readUntilClosed(t, c, 20*time.Second)
	}
	if took := time.Since(dialed); took < timeout {
		t.Fatalf("silent connections closed after %s, before the handshake timeout %s", took, timeout)
	}
	waitFor(t, 10*time.Second, "the slots given back and the refusal logged", func() (bool, string) {
		// The counter moves before the warning is written.
		n, r := tn.node.stream.OpenConns(), tn.node.stream.RefusedHandshakes()
		logged := strings.Contains(logs.String(), "TLS handshake failed")
		return n == 0 && r == maxConns && logged, fmt.Sprintf("%d open, %d refused handshakes, logged %v", n, r, logged)
	})
	out := logs.String()
	for _, want := range []string{
		`msg="raft connection refused: too many open connections`,
		`msg="raft connection refused: TLS handshake failed" node_id=n1 remote_address=127.0.0.1:`,
		`reason="no complete handshake within 2s: `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "TLS handshake failed"); n != 1 {
		t.Errorf("%d warnings for %d refused handshakes within %s, want 1:\n%s", n, maxConns, lograte.Interval, out)
	}
	(&testCluster{t: t, nodes: []*testNode{tn}}).leader().apply(t, createTopic("t", 1))
}

// lockedBuffer is a log destination safe for the node's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startEchoServer serves s: every accepted connection echoes what it
// reads. It counts the connections Accept returned.
func startEchoServer(t *testing.T, s *streamLayer) *atomic.Int64 {
	t.Helper()
	var accepted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = s.Close()
		<-done
	})
	return &accepted
}

func staticConfig(servers ...raft.Server) configSource {
	return func() (raft.Configuration, error) { return raft.Configuration{Servers: servers}, nil }
}

func echo(c net.Conn, b byte) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{b}); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, 1)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if got[0] != b {
		return fmt.Errorf("echo %d, want %d", got[0], b)
	}
	return nil
}

func TestTLS_Outbound_ChecksServerAgainstConfiguration(t *testing.T) {
	pki := newTestPKI(t, "test")
	server, err := newTLSStreamLayer("127.0.0.1:0", nil, 16, time.Minute, testLogger(), pki.creds(t, "impostor"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	server.setConfigSource(staticConfig()) // empty: any node of the CA may dial it
	startEchoServer(t, server)
	at := raft.ServerAddress(server.Addr().String())
	self := raft.Server{ID: "n1", Address: "127.0.0.1:1"}

	for _, tc := range []struct {
		name   string
		config configSource // nil: raft not started
		ok     bool
	}{
		{"another node at the address", staticConfig(self, raft.Server{ID: "n2", Address: at}), false},
		{"that node at the address", staticConfig(self, raft.Server{ID: "impostor", Address: at}), true},
		{"address unknown, node in the configuration", staticConfig(self, raft.Server{ID: "impostor", Address: "127.0.0.1:2"}), true},
		{"address unknown, node outside the configuration", staticConfig(self, raft.Server{ID: "n2", Address: "127.0.0.1:2"}), false},
		{"empty configuration", staticConfig(), true},
		{"raft not started", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := newTLSStreamLayer("127.0.0.1:0", nil, 16, time.Minute, testLogger(), pki.creds(t, "n1"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			if tc.config != nil {
				client.setConfigSource(tc.config)
			}
			c, err := client.Dial(at, 5*time.Second)
			if !tc.ok {
				if err == nil {
					_ = c.Close()
					t.Fatal("dial succeeded, want the server refused")
				}
				if tc.config != nil && !strings.Contains(err.Error(), "node/impostor") {
					t.Fatalf("error %q does not name the server's principal", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if err := echo(c, 1); err != nil {
				t.Fatalf("round trip: %v", err)
			}
		})
	}
}

// The idle re-dial of an outbound connection handshakes like Dial.
func TestTLS_OutboundIdlePastPeerTimeout_RedialsWithTLS(t *testing.T) {
	const idle = 300 * time.Millisecond
	pki := newTestPKI(t, "test")
	server, err := newTLSStreamLayer("127.0.0.1:0", nil, 4, idle, testLogger(), pki.creds(t, "n2"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	client, err := newTLSStreamLayer("127.0.0.1:0", nil, 4, idle, testLogger(), pki.creds(t, "n1"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	cfg := staticConfig(raft.Server{ID: "n1", Address: raft.ServerAddress(client.Addr().String())},
		raft.Server{ID: "n2", Address: raft.ServerAddress(server.Addr().String())})
	server.setConfigSource(cfg)
	client.setConfigSource(cfg)
	accepted := startEchoServer(t, server)

	c, err := client.Dial(raft.ServerAddress(server.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	o := c.(*outboundConn)
	first := o.current()
	if err := echo(c, 1); err != nil {
		t.Fatalf("first round trip: %v", err)
	}
	waitFor(t, 10*time.Second, "the server to close the idle connection", func() (bool, string) {
		n := server.IdleClosedConns()
		return n == 1 && server.OpenConns() == 0, fmt.Sprintf("%d idle-closed, %d open", n, server.OpenConns())
	})
	if err := echo(c, 2); err != nil {
		t.Fatalf("round trip after the peer's idle close: %v", err)
	}
	if now, ok := o.current().(*tls.Conn); !ok || now == first {
		t.Fatalf("connection after the re-dial is %T (same as before: %v), want a new *tls.Conn", o.current(), o.current() == first)
	}
	if got := accepted.Load(); got != 2 {
		t.Fatalf("server accepted %d TLS connections, want 2", got)
	}
	if got := server.RefusedHandshakes(); got != 0 {
		t.Fatalf("server refused %d handshakes", got)
	}
}

func TestTLS_Config_Validation(t *testing.T) {
	pki := newTestPKI(t, "test")

	cfg := testConfig(t, "n1")
	cfg.RaftHandshakeTimeout = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "raft handshake timeout") {
		t.Errorf("zero handshake timeout: err %v", err)
	}

	cfg = testConfig(t, "n1")
	cfg.TLS = pki.creds(t, "n2")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "node/n2") {
		t.Errorf("certificate of another node: err %v", err)
	}

	caOnly, err := auth.LoadCredentials(auth.Files{CA: pki.files(t, "n1").CA})
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS = caOnly
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Errorf("CA bundle only: err %v", err)
	}

	// An ID generated at start is checked once known.
	cfg = testConfig(t, "")
	cfg.TLS = pki.creds(t, "n2")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("no node ID yet: %v", err)
	}
	if n, err := New(cfg, fsm.New()); err == nil {
		_ = n.Shutdown(t.Context())
		t.Fatal("a node started with a certificate naming another node")
	} else if !strings.Contains(err.Error(), "node/n2") {
		t.Errorf("generated ID: err %v", err)
	}
}
