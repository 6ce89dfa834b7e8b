package workload

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Hostile mixes oversized, near-budget and malformed requests into a run:
// what a careless or hostile client sends. It touches only groups and
// topics named hostile-*, so the other workloads' checkers judge the
// cluster as before; its own verdict is that every request was refused
// with the code the budgets and limits promise (or met a fault: no answer,
// NOT_LEADER, a node not serving yet), never accepted and never refused
// for another reason. The cluster runs with budgets low enough to reach
// (HostileBudgetFlags).
//
// Requests a consumer may make go with the client credential, so that
// they pass authorization and reach the limits behind it; the budget
// probes (topic creation) with the admin's. When the cluster runs with
// mutual TLS (Creds.Client.TLS set) it also probes authorization: a
// client calling admin RPCs and callers without a certificate of the
// cluster's CA (none at all, or an admin certificate of another CA) must
// be refused (PermissionDenied or Unauthenticated, or at the TLS
// handshake), a client must not see member IDs, and Final checks that
// none of the refused calls changed anything (Setup made what they aim at).
type Hostile struct {
	Endpoints []string
	Log       *slog.Logger
	Seed      uint64
	Creds     Credentials
	// Pause between requests (default 250 ms: the hostile client must not
	// starve the others, whose histories the checkers judge); Timeout of one
	// (default 2 s).
	Pause, Timeout time.Duration

	mu         sync.Mutex
	probes     []probe
	sent       map[string]int
	kept       map[string]int
	violations []string
	final      string // what Final found
}

// HostileBudgetFlags are the cohortd flags of a run with the hostile
// workload: budgets the hostile floods reach in seconds and the other
// workloads (3 topics, groups of at most 4 members) never do.
var HostileBudgetFlags = []string{"--budget-topics", "24", "--max-group-size", "16"}

// hostileTopics is how many topics the flood tries to create: more than
// the budget.
const hostileTopics = 40

// What the authorization probes aim at, made by Setup as admin: a topic
// and a group with one committed offset, which no refused call may change.
const (
	keptTopic  = "hostile-kept"
	keptGroup  = "hostile-kept"
	keptOffset = 42
	// deniedTopic is the topic a client asks to create: it must never exist.
	deniedTopic = "hostile-denied"
)

// caller is whose credential a probe is sent with.
type caller int

const (
	asClient caller = iota
	asAdmin
	asAnonymous // TLS without a client certificate
	asStranger  // an admin certificate of another CA
	callers
)

func (c caller) String() string {
	return [...]string{"client", "admin", "anonymous", "stranger"}[c]
}

// probe is one kind of hostile request: send makes it, and want are the
// protocol codes it may be refused with.
type probe struct {
	name string
	as   caller
	want []errcode.Code
	// denied: it must be refused by authentication or authorization
	// (PermissionDenied, Unauthenticated, or the TLS handshake).
	denied bool
	// accept: success is an allowed answer too (a flood below its budget).
	accept bool
	// promise: success is the promised answer (send checks what came back
	// and returns an error when it breaks a promise).
	promise bool
	send    func(ctx context.Context, h *hostileConn, rng *rand.Rand) error
}

// hostileConn is a connection to one node with one caller's credential.
type hostileConn struct {
	conn   *grpc.ClientConn
	groups cohortv1.GroupCoordinatorClient
	topics cohortv1.TopicsClient
	flood  *int // topics the flood asked for, over every connection
	// addr and tls are the node and the caller's TLS configuration (nil in
	// plaintext), for a handshake of its own (refusedAtHandshake).
	addr string
	tls  *tls.Config
}

func newHostileConn(cc *grpc.ClientConn, flood *int) *hostileConn {
	return &hostileConn{conn: cc, flood: flood, groups: cohortv1.NewGroupCoordinatorClient(cc), topics: cohortv1.NewTopicsClient(cc)}
}

// rawMessage is a request or answer as encoded bytes, for rawCodec.
type rawMessage []byte

// rawCodec sends rawMessage as it is, under the name of the proto codec
// (the server decodes it as a protobuf message).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*rawMessage))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMessage) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// ghost is the member ID of the hostile commits: a member ID makes them a
// consumer's, which the client credential may send (a commit without one
// is an admin's offset reset).
const ghost = "hostile-ghost"

// hostileProbes are the probes of a run; authz adds the authorization
// probes (a cluster with mutual TLS).
func hostileProbes(authz bool) []probe {
	ps := []probe{
		{name: "oversized member metadata", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			r := hostileJoin("hostile-big", "")
			r.Protocols[0].Metadata = make([]byte, 128<<10)
			_, err := h.groups.JoinGroup(ctx, r)
			return err
		}},
		{name: "oversized group ID", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "hostile-" + strings.Repeat("g", 1000), Generation: 1, MemberId: ghost,
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: GroupsTopic, Partition: 0, Offset: 1}}})
			return err
		}},
		{name: "oversized offset metadata", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "hostile-c", Generation: 1, MemberId: ghost,
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: GroupsTopic, Partition: 0, Offset: 1, Metadata: strings.Repeat("m", 8<<10)}}})
			return err
		}},
		{name: "too many offsets in one commit", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			r := &cohortv1.OffsetCommitRequest{GroupId: "hostile-c", Generation: 1, MemberId: ghost}
			for p := range int32(100_001) {
				r.Offsets = append(r.Offsets, &cohortv1.OffsetCommitPartition{Topic: "hostile-none", Partition: p})
			}
			_, err := h.groups.OffsetCommit(ctx, r)
			return err
		}},
		{name: "topic over the partitions-per-topic budget", as: asAdmin, want: []errcode.Code{errcode.BudgetExceeded}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.topics.CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "hostile-huge", Partitions: 100_000})
			return err
		}},
		{name: "topic flood", as: asAdmin, accept: true, want: []errcode.Code{errcode.BudgetExceeded, errcode.TopicAlreadyExists}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			*h.flood++
			_, err := h.topics.CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: fmt.Sprintf("hostile-t%02d", *h.flood%hostileTopics), Partitions: 4})
			return err
		}},
		{name: "member flood", want: []errcode.Code{errcode.MemberIDRequired, errcode.GroupMaxSizeReached}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.groups.JoinGroup(ctx, hostileJoin("hostile-crowd", ""))
			return err
		}},
		{name: "unknown member commits", want: []errcode.Code{errcode.UnknownMemberID, errcode.IllegalGeneration}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "hostile-crowd", Generation: 99, MemberId: "ghost",
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: GroupsTopic, Partition: 0, Offset: 1}}})
			return err
		}},
		{name: "invalid UTF-8", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			// grpc-go will not marshal invalid UTF-8: the request is
			// encoded with a placeholder, which is then overwritten.
			b, err := proto.Marshal(&cohortv1.DescribeGroupsRequest{GroupIds: []string{"hostile-@@"}})
			if err != nil {
				return err
			}
			raw := rawMessage(bytes.Replace(b, []byte("@@"), []byte{0xff, 0xfe}, 1))
			var out rawMessage
			return h.conn.Invoke(ctx, cohortv1.GroupCoordinator_DescribeGroups_FullMethodName, &raw, &out, grpc.ForceCodecV2(rawCodec{}))
		}},
	}
	if !authz {
		return ps
	}
	reset := func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
		_, err := h.groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: keptGroup, Generation: -1,
			Offsets: []*cohortv1.OffsetCommitPartition{{Topic: keptTopic, Partition: 0, Offset: 666}}})
		return err
	}
	deleteTopic := func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
		_, err := h.topics.DeleteTopic(ctx, &cohortv1.DeleteTopicRequest{Name: keptTopic})
		return err
	}
	return append(ps,
		probe{name: "client creates a topic", denied: true, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.topics.CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: deniedTopic, Partitions: 1})
			return err
		}},
		probe{name: "client deletes a topic", denied: true, send: deleteTopic},
		probe{name: "client resets offsets", denied: true, send: reset},
		probe{name: "client deletes a group", denied: true, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.groups.DeleteGroups(ctx, &cohortv1.DeleteGroupsRequest{GroupIds: []string{keptGroup}})
			return err
		}},
		probe{name: "client removes a server", denied: true, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			// A node that is not there: were the call allowed, it would be
			// refused for that instead, and nothing would change.
			_, err := cohortv1.NewClusterServiceClient(h.conn).RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: "hostile-none"})
			return err
		}},
		probe{name: "client transfers leadership", denied: true, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := cohortv1.NewClusterServiceClient(h.conn).TransferLeadership(ctx, &cohortv1.TransferLeadershipRequest{})
			return err
		}},
		probe{name: "client saves a snapshot", denied: true, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			s, err := cohortv1.NewClusterServiceClient(h.conn).SnapshotSave(ctx, &cohortv1.SnapshotSaveRequest{})
			if err != nil {
				return err
			}
			for {
				if _, err := s.Recv(); err != nil {
					if err == io.EOF {
						return nil // the whole state, to a client
					}
					return err
				}
			}
		}},
		probe{name: "client sees no member IDs", promise: true, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			ls, err := client.ListGroups(ctx, h.groups, &cohortv1.ListGroupsRequest{})
			if err != nil {
				return err
			}
			var ids []string // groups with members (the groups workload's, hostile-crowd)
			for _, g := range ls {
				if g.GetMembers() > 0 && len(ids) < 20 {
					ids = append(ids, g.GetGroupId())
				}
			}
			if len(ids) == 0 {
				return nil
			}
			gs, err := client.DescribeGroups(ctx, h.groups, &cohortv1.DescribeGroupsRequest{GroupIds: ids})
			if err != nil {
				return err
			}
			for _, g := range gs {
				for _, m := range g.GetMembers() {
					if m.GetMemberId() != "" || g.GetLeaderId() != "" {
						return fmt.Errorf("%w: group %s shows member %q (leader %q)", errBrokenPromise, g.GetGroupId(), m.GetMemberId(), g.GetLeaderId())
					}
				}
			}
			return nil
		}},
		probe{name: "anonymous caller resets offsets", as: asAnonymous, denied: true, send: refusedAtHandshake(reset)},
		probe{name: "admin certificate of another CA deletes a topic", as: asStranger, denied: true, send: refusedAtHandshake(deleteTopic)},
	)
}

// errBrokenPromise marks an answer that came back but broke a promise.
var errBrokenPromise = errors.New("promise broken")

// errHandshakeRefused: the node broke off the TLS handshake of the caller
// (it showed no certificate of the node's CA).
var errHandshakeRefused = errors.New("refused at the TLS handshake")

// refusedAtHandshake makes a call of a caller without a certificate of the
// cluster's CA and, when it fails without an answer from the node, says
// why: the node requires a client certificate at the TLS handshake, so
// gRPC reports its refusal as a connection error whose text depends on
// timing (the alert, or a broken pipe when the request was written
// first). A handshake of its own, reading the node's first answer, tells
// a refusal (a TLS alert) from a fault (no connection, no answer) and
// from a broken promise (the node took the connection).
func refusedAtHandshake(send func(context.Context, *hostileConn, *rand.Rand) error) func(context.Context, *hostileConn, *rand.Rand) error {
	return func(ctx context.Context, h *hostileConn, rng *rand.Rand) error {
		err := send(ctx, h, rng)
		if err == nil || status.Code(err) != codes.Unavailable || h.tls == nil {
			return err
		}
		switch hs := handshake(ctx, h.addr, h.tls); {
		case hs == nil:
			return fmt.Errorf("%w: the node completed a TLS handshake with the caller (the call: %v)", errBrokenPromise, err)
		case errors.Is(hs, errHandshakeRefused):
			return hs
		}
		return err // a fault: no connection or no answer
	}
}

// handshake connects to addr with cfg and reads the node's first bytes: a
// gRPC server sends its HTTP/2 settings first, so nil means the node took
// the connection. A node that refuses the client's certificate sends an
// alert instead (errHandshakeRefused); other errors are no answer.
func handshake(ctx context.Context, addr string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		defer conn.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(dl)
		}
		_, err = conn.Read(make([]byte, 1))
	}
	var op *net.OpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("%w: %v", errHandshakeRefused, err)
	}
	return err
}

func hostileJoin(group, member string) *cohortv1.JoinGroupRequest {
	return &cohortv1.JoinGroupRequest{
		GroupId: group, MemberId: member, ProtocolType: "consumer", SessionTimeoutMs: 6000, RebalanceTimeoutMs: 6000, ClientId: "hostile",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range", Metadata: []byte("x")}}, Topics: []string{GroupsTopic},
	}
}

// authz reports whether the cluster authorizes calls (mutual TLS), so
// that the authorization probes apply.
func (w *Hostile) authz() bool { return w.Creds.Client.TLS != nil }

func (w *Hostile) init() {
	if w.Pause == 0 {
		w.Pause = 250 * time.Millisecond
	}
	if w.Timeout == 0 {
		w.Timeout = 2 * time.Second
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent == nil {
		w.probes = hostileProbes(w.authz())
		w.sent, w.kept = map[string]int{}, map[string]int{}
	}
}

// Setup makes, as admin, what the authorization probes aim at: a topic
// and a group with a committed offset. Nothing without TLS.
func (w *Hostile) Setup(ctx context.Context) error {
	w.init()
	if !w.authz() {
		return nil
	}
	if err := createTopic(ctx, w.Endpoints, w.Creds.Admin, keptTopic, 1); err != nil {
		return err
	}
	conn, err := client.Dial(client.ConnConfig{Endpoints: w.Endpoints, Credentials: w.Creds.Admin, RequestTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := conn.Groups().OffsetCommit(cctx, &cohortv1.OffsetCommitRequest{GroupId: keptGroup, Generation: -1,
			Offsets: []*cohortv1.OffsetCommitPartition{{Topic: keptTopic, Partition: 0, Offset: keptOffset}}})
		if err == nil {
			return nil
		}
		if cctx.Err() != nil {
			return fmt.Errorf("hostile setup: commit to %s: %w", keptGroup, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// connector returns a function that connects to one node with a caller's
// credential (no I/O until the first call).
func (w *Hostile) connector(flood *int) (func(endpoint string, as caller) (*hostileConn, error), error) {
	creds := [callers]client.Credentials{asClient: w.Creds.Client, asAdmin: w.Creds.Admin}
	if w.authz() {
		anon := w.Creds.Client.TLS.Clone()
		anon.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
		creds[asAnonymous] = client.Credentials{TLS: anon}
		forged, err := strangerCertificate()
		if err != nil {
			return nil, err
		}
		stranger := w.Creds.Client.TLS.Clone()
		stranger.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return forged, nil }
		creds[asStranger] = client.Credentials{TLS: stranger}
	}
	return func(endpoint string, as caller) (*hostileConn, error) {
		cc, err := grpc.NewClient(endpoint, append(dialOptions(creds[as]), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))...)
		if err != nil {
			return nil, err
		}
		h := newHostileConn(cc, flood)
		h.addr, h.tls = endpoint, creds[as].TLS
		return h, nil
	}, nil
}

// strangerCertificate is an admin certificate, named like the run's
// admin, from a CA the cluster does not know.
func strangerCertificate() (*tls.Certificate, error) {
	ca, err := auth.NewCA("hostile stranger CA", time.Hour)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.Issue(auth.Principal{Role: auth.RoleAdmin, Name: "chaos-admin"}, nil, time.Hour)
	if err != nil {
		return nil, err
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	return &c, err
}

// Run sends hostile requests to every node in turn until ctx ends.
func (w *Hostile) Run(ctx context.Context) {
	w.init()
	flood := 0
	connect, err := w.connector(&flood)
	if err != nil {
		w.Log.Error("hostile client", "err", err)
		return
	}
	// conns[node][caller]
	var conns [][callers]*hostileConn
	for _, ep := range w.Endpoints {
		var byCaller [callers]*hostileConn
		for as := range callers {
			if (as == asAnonymous || as == asStranger) && !w.authz() {
				continue
			}
			h, err := connect(ep, as)
			if err != nil {
				w.Log.Error("hostile client", "endpoint", ep, "as", as, "err", err)
				return
			}
			defer h.conn.Close()
			byCaller[as] = h
		}
		conns = append(conns, byCaller)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x4057))
	for i := 0; ctx.Err() == nil; i++ {
		p := w.probes[rng.IntN(len(w.probes))]
		cctx, cancel := context.WithTimeout(ctx, w.Timeout)
		err := p.send(cctx, conns[i%len(conns)][p.as], rng)
		cancel()
		if ctx.Err() == nil {
			w.judge(p, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.Pause):
		}
	}
}

// judge records one answer.
func (w *Hostile) judge(p probe, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent[p.name]++
	code := client.ErrorCode(err)
	switch {
	case err == nil && p.promise:
		w.kept[p.name]++
	case err == nil && p.accept:
	case err == nil:
		w.violation("%s was accepted", p.name)
	case errors.Is(err, errBrokenPromise):
		w.violation("%s: %v", p.name, errString(err))
	case p.denied && deniedAnswer(err):
		w.kept[p.name]++
	case !p.denied && slices.Contains(p.want, code):
		w.kept[p.name]++
	case faultAnswer(err, code):
	case p.denied:
		w.violation("%s: %v (want it refused by authorization)", p.name, errString(err))
	default:
		w.violation("%s: %v (want %v)", p.name, errString(err), p.want)
	}
}

func (w *Hostile) violation(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	if len(w.violations) < 20 {
		w.violations = append(w.violations, v)
	}
	w.Log.Error("hostile workload: a promise broken", "what", v)
}

// deniedAnswer reports whether err is a refusal by authentication or
// authorization: PermissionDenied or Unauthenticated from the node, or a
// TLS handshake it broke off (refusedAtHandshake).
func deniedAnswer(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return errors.Is(err, errHandshakeRefused)
}

// faultAnswer reports whether err is what a fault explains: no answer, a
// node not leading or not serving yet.
func faultAnswer(err error, code errcode.Code) bool {
	switch code {
	case errcode.NotLeader, errcode.CoordinatorNotAvailable:
		return true
	case errcode.Unknown:
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			return true
		}
	}
	return false
}

// Final checks, as admin and after the faults, that no refused call of the
// authorization probes changed anything: the kept topic and the kept
// group's offset are as Setup made them, and the topic a client asked for
// does not exist. It tries until ctx ends; nothing without TLS.
func (w *Hostile) Final(ctx context.Context) {
	w.init()
	if !w.authz() {
		return
	}
	conn, err := client.Dial(client.ConnConfig{Endpoints: w.Endpoints, Credentials: w.Creds.Admin, RequestTimeout: 2 * time.Second})
	if err != nil {
		w.setFinal("not checked: " + err.Error())
		return
	}
	defer conn.Close()
	var last error
	for ctx.Err() == nil {
		broken, err := w.unchanged(ctx, conn)
		if err == nil {
			w.mu.Lock()
			for _, b := range broken {
				w.violation("a refused call changed the state: %s", b)
			}
			w.mu.Unlock()
			if len(broken) == 0 {
				w.setFinal("the refused calls changed nothing")
			} else {
				w.setFinal("the refused calls changed the state")
			}
			return
		}
		last = err
		sleep(ctx, 200*time.Millisecond)
	}
	w.setFinal("not checked: " + errString(last))
}

func (w *Hostile) setFinal(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.final = s
}

// unchanged reads the state the authorization probes aimed at and says
// what differs from Setup's.
func (w *Hostile) unchanged(ctx context.Context, conn *client.Conn) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	topics, err := client.ListTopics(cctx, conn.Topics(), &cohortv1.ListTopicsRequest{})
	if err != nil {
		return nil, err
	}
	fetched, err := client.FetchOffsets(cctx, conn.Groups(), &cohortv1.OffsetFetchRequest{GroupId: keptGroup,
		Partitions: []*cohortv1.TopicPartitions{{Topic: keptTopic, Partitions: []int32{0}}}})
	if err != nil {
		return nil, err
	}
	var broken []string
	names := map[string]bool{}
	for _, t := range topics {
		names[t.GetTopic()] = true
	}
	if !names[keptTopic] {
		broken = append(broken, "topic "+keptTopic+" is gone")
	}
	if names[deniedTopic] {
		broken = append(broken, "topic "+deniedTopic+" exists")
	}
	offset := int64(-1)
	for _, p := range fetched {
		if p.GetTopic() == keptTopic && p.GetPartition() == 0 {
			offset = p.GetOffset()
		}
	}
	if offset != keptOffset {
		broken = append(broken, fmt.Sprintf("group %s has offset %d on %s/0, want %d", keptGroup, offset, keptTopic, keptOffset))
	}
	return broken, nil
}

// Verdict says what the workload saw: a summary, and the broken promises
// (none in a valid run).
func (w *Hostile) Verdict() (summary string, violations []string) {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, p := range w.probes {
		parts = append(parts, fmt.Sprintf("%s %d/%d", p.name, w.kept[p.name], w.sent[p.name]))
	}
	summary = "hostile requests refused (or answered) as promised / sent: " + strings.Join(parts, ", ")
	if !w.authz() {
		summary += "; no authorization probes (plaintext run)"
	} else if w.final != "" {
		summary += "; final check: " + w.final
	}
	return summary, slices.Clone(w.violations)
}
