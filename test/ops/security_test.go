package ops

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// mustFollower is a voter of st that does not lead.
func mustFollower(t *testing.T, st *cohortv1.StatusResponse) string {
	t.Helper()
	id := follower(st)
	if id == "" {
		t.Fatalf("no follower in %s", describe(st))
	}
	return id
}

// forgedAppend is an AppendEntries from a leader that does not exist:
// one term past the cluster's, one entry that would create a topic.
func forgedAppend(t *testing.T, term, lastIndex uint64) []byte {
	t.Helper()
	data, err := fsm.EncodeCommand(&fsmv1.Command{Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: "forged", Partitions: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	req := raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
		Term:              term + 1,
		PrevLogEntry:      lastIndex,
		PrevLogTerm:       term,
		Entries:           []*raft.Log{{Index: lastIndex + 1, Term: term + 1, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: lastIndex + 1,
	}
	var b strings.Builder
	b.WriteByte(0) // raft's rpcAppendEntries
	w := bufio.NewWriter(&b)
	if err := codec.NewEncoder(w, &codec.MsgpackHandle{}).Encode(&req); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return []byte(b.String())
}

// sendForged writes the forged request on conn and reads until the node
// closes it; it reports whether any byte came back (a raft answer).
func sendForged(conn net.Conn, msg []byte) (answered bool, err error) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(msg); err != nil {
		return false, nil // closed while writing: refused
	}
	n, err := io.ReadFull(conn, make([]byte, 1))
	if n > 0 {
		return true, nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
		return false, nil
	}
	return false, err
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "reset by peer") || strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "bad certificate") || strings.Contains(err.Error(), "tls:"))
}

// TestProcess_TLS_ForgedAppendEntries_Refused: the attack the Raft port
// allowed in plaintext (one forged AppendEntries with term+1 got an entry
// committed on a follower) finds no way in with mutual TLS: in plaintext
// there is no handshake, with a certificate of another CA the handshake
// fails, and with a node certificate of this CA for a server ID outside
// the configuration it fails too. The follower's term and the state stay.
func TestProcess_TLS_ForgedAppendEntries_Refused(t *testing.T) {
	c := newSecureCluster(t)
	st := c.waitVotersAfterForm(3)
	victim := mustFollower(t, st)
	term := st.GetTerm()
	var lastIndex uint64
	for _, s := range st.GetServers() {
		lastIndex = max(lastIndex, s.GetLastIndex())
	}
	msg := forgedAppend(t, term, lastIndex)
	raftAddr := c.nodes[victim].raft

	foreign, err := auth.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreignDir := t.TempDir()
	if err := foreign.Save(foreignDir); err != nil {
		t.Fatal(err)
	}
	foreignFiles, err := foreign.IssueFiles(foreignDir, victim, auth.Principal{Role: auth.RoleNode, Name: st.GetLeaderId()}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	strangerFiles, err := c.ca.IssueFiles(c.pki, "n9", auth.Principal{Role: auth.RoleNode, Name: "n9"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dialTLS := func(f auth.Files) (net.Conn, error) {
		creds, err := auth.LoadCredentials(f)
		if err != nil {
			return nil, err
		}
		cfg := creds.ClientTLS(func(auth.Principal) error { return nil })
		cfg.VerifyConnection = nil // the attacker does not care who answers
		d := &net.Dialer{Timeout: 5 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", raftAddr, cfg)
		if err != nil {
			return nil, err
		}
		return conn, nil
	}
	attempts := []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"plaintext", func() (net.Conn, error) { return net.DialTimeout("tcp", raftAddr, 5*time.Second) }},
		{"certificate of another CA", func() (net.Conn, error) { return dialTLS(foreignFiles) }},
		{"node certificate outside the configuration", func() (net.Conn, error) { return dialTLS(strangerFiles) }},
	}
	for _, a := range attempts {
		conn, err := a.dial()
		if err != nil {
			t.Logf("%s: refused at connect: %v", a.name, err)
			continue
		}
		answered, err := sendForged(conn, msg)
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		if answered {
			t.Fatalf("%s: the Raft port answered a forged AppendEntries", a.name)
		}
	}
	// The cluster is where it was: same term on every node, no forged topic,
	// and it still commits.
	after, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if after.GetTerm() != term {
		t.Fatalf("term moved from %d to %d after the forged requests", term, after.GetTerm())
	}
	c.mustCtl("topics", "create", "real", "--partitions", "1")
	out := c.mustCtl("topics", "list")
	if strings.Contains(out, "forged") || !strings.Contains(out, "real") {
		t.Fatalf("topics after the attack: %q", out)
	}
	// The victim's own state (a stale read is served by the node itself).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	proc.WaitFor(t, 10*time.Second, "the victim applied the real topic", func() (bool, string) {
		topics, err := client.ListTopics(ctx, cohortv1.NewTopicsClient(c.conn(c.nodes[victim].grpcAddr, "admin")), &cohortv1.ListTopicsRequest{AllowStale: true})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, tp := range topics {
			if tp.GetTopic() == "forged" {
				t.Fatalf("the follower applied the forged entry: %v", topics)
			}
			names = append(names, tp.GetTopic())
		}
		return strings.Contains(strings.Join(names, ","), "real"), fmt.Sprint(names)
	})
}

// waitVotersAfterForm forms an n-node cluster and returns its status.
func (c *cluster) waitVotersAfterForm(n int) *cohortv1.StatusResponse {
	c.t.Helper()
	c.form(n)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i+1)
	}
	return c.waitVoters(ids...)
}

// TestProcess_TLS_UnknownCertificate_CannotJoin: a node whose certificate
// another CA signed cannot join: its calls to the cluster fail the
// handshake, the cluster never hears of it.
func TestProcess_TLS_UnknownCertificate_CannotJoin(t *testing.T) {
	c := newSecureCluster(t)
	c.waitVotersAfterForm(3)
	intruder := c.alloc("n4")
	foreign, err := auth.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := foreign.Save(c.pki + "/foreign"); err != nil {
		t.Fatal(err)
	}
	f, err := foreign.IssueFiles(c.pki+"/foreign", "n4", auth.Principal{Role: auth.RoleNode, Name: "n4"}, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--node-id", "n4", "--data-dir", intruder.dir, "--raft-addr", intruder.raft, "--grpc-addr", intruder.grpcAddr, "--http-addr", intruder.http,
		"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA, "--join", strings.Join(c.grpcAddrs("n1", "n2", "n3"), ",")}, fastRaft...)
	intruder.proc = proc.StartT(t, proc.Spec{Name: "n4", Path: cohortdBin, Args: args, Env: cleanEnv(), Log: intruder.out})
	proc.WaitFor(t, 30*time.Second, "n4 reports its join refused", func() (bool, string) {
		tail := intruder.out.Tail(40)
		return strings.Contains(tail, "certificate") && strings.Contains(tail, "join"), tail
	})
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if s := server(st, "n4"); s != nil || len(st.GetServers()) != 3 {
		t.Fatalf("the intruder is in the configuration: %s", describe(st))
	}
}

// adminConn is a gRPC connection to addr with the certificate issued as base.
func (c *cluster) conn(addr, base string) *grpc.ClientConn {
	c.t.Helper()
	conn, err := grpc.NewClient(addr, c.creds(base).DialOptions()...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestProcess_Authz_NodeCannotRegisterAnotherNode: the attack that moved a
// voter's Raft address (RegisterNode(n2 → attacker)) is refused for a
// node's own certificate naming another node, and for a node registering
// itself at an address that does not answer as itself; the registry and
// the configuration do not change.
func TestProcess_Authz_NodeCannotRegisterAnotherNode(t *testing.T) {
	c := newSecureCluster(t)
	st := c.waitVotersAfterForm(3)
	leaderAddr := c.nodes[st.GetLeaderId()].grpcAddr
	before := describe(st)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// victim and other are the two followers: a registration for the
	// leader itself is refused by another rule (the leader knows its own
	// addresses), tested below too.
	var followers []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != st.GetLeaderId() {
			followers = append(followers, id)
		}
	}
	victim, other := followers[0], followers[1]
	otherClient := cohortv1.NewClusterServiceClient(c.conn(leaderAddr, other))
	_, err := otherClient.RegisterNode(ctx, &cohortv1.RegisterNodeRequest{NodeId: victim, GrpcAddress: "127.0.0.1:1", RaftAddress: "127.0.0.1:2"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), fmt.Sprintf("not on node %q", victim)) {
		t.Fatalf("%s registering %s: %v, want PermissionDenied naming %s", other, victim, err, victim)
	}
	// The victim's own certificate, moving itself to addresses where it is not.
	victimClient := cohortv1.NewClusterServiceClient(c.conn(leaderAddr, victim))
	_, err = victimClient.RegisterNode(ctx, &cohortv1.RegisterNodeRequest{NodeId: victim, GrpcAddress: c.nodes[other].grpcAddr, RaftAddress: "127.0.0.1:2"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprintf("answers as node %q", other)) {
		t.Fatalf("%s registering %s's address: %v, want InvalidArgument saying who answers", victim, other, err)
	}
	// The leader's own certificate, moving the leader: refused by the
	// leader, which knows where it is.
	leaderClient := cohortv1.NewClusterServiceClient(c.conn(leaderAddr, st.GetLeaderId()))
	_, err = leaderClient.RegisterNode(ctx, &cohortv1.RegisterNodeRequest{NodeId: st.GetLeaderId(), GrpcAddress: c.nodes[other].grpcAddr, RaftAddress: "127.0.0.1:2"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is this node") {
		t.Fatalf("the leader registering itself elsewhere: %v, want InvalidArgument", err)
	}
	// A client certificate may not register at all.
	cl := cohortv1.NewClusterServiceClient(c.conn(leaderAddr, "client"))
	if _, err = cl.RegisterNode(ctx, &cohortv1.RegisterNodeRequest{NodeId: "n2", GrpcAddress: "127.0.0.1:1", RaftAddress: "127.0.0.1:2"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("client registering n2: %v, want PermissionDenied", err)
	}
	after, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range after.GetServers() {
		if n := c.nodes[s.GetNodeId()]; s.GetRaftAddress() != n.raft || s.GetGrpcAddress() != n.grpcAddr {
			t.Fatalf("%s moved to %s / %s (was %s)", s.GetNodeId(), s.GetRaftAddress(), s.GetGrpcAddress(), before)
		}
	}
	// Every node still forwards to the real leader: a call through each
	// node answers.
	for _, id := range []string{"n1", "n2", "n3"} {
		r := runCtlEnv(t, append([]string{"COHORT_ENDPOINTS=" + c.nodes[id].grpcAddr}, c.tlsEnv("admin")...), "topics", "create", "via-"+id, "--partitions", "1")
		if r.code != 0 {
			t.Fatalf("create a topic through %s: %s", id, r)
		}
	}
}

// stateOf is what a refused call must not change: topics, groups, offsets
// of the test's group, the configuration and the node registry.
func (c *cluster) stateOf(ctx context.Context, addr string) string {
	c.t.Helper()
	conn := c.conn(addr, "admin")
	var b strings.Builder
	topics, err := client.ListTopics(ctx, cohortv1.NewTopicsClient(conn), &cohortv1.ListTopicsRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, tp := range topics {
		fmt.Fprintf(&b, "topic %s/%d;", tp.GetTopic(), tp.GetPartitions())
	}
	gc := cohortv1.NewGroupCoordinatorClient(conn)
	groups, err := client.DescribeGroups(ctx, gc, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "group %s %s gen %d members %d;", g.GetGroupId(), g.GetState(), g.GetGeneration(), len(g.GetMembers()))
	}
	offs, err := client.FetchOffsets(ctx, gc, &cohortv1.OffsetFetchRequest{GroupId: "g"})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, o := range offs {
		fmt.Fprintf(&b, "offset %s/%d=%d;", o.GetTopic(), o.GetPartition(), o.GetOffset())
	}
	st, err := cohortv1.NewClusterServiceClient(conn).Status(ctx, &cohortv1.StatusRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, s := range st.GetServers() {
		fmt.Fprintf(&b, "server %s %s %s voter=%t;", s.GetNodeId(), s.GetRaftAddress(), s.GetGrpcAddress(), s.GetVoter())
	}
	return b.String()
}

// TestProcess_Authz_EveryMutatingRPC_NeedsItsRole calls every mutating RPC
// without a credential (a token cluster also takes callers without
// certificates) and with a credential of the wrong role, through a
// follower and at the leader: each is refused with Unauthenticated or
// PermissionDenied naming the method, and the state does not change. The
// right role succeeds. DescribeGroups shows member IDs to admins only,
// and metadata only nodes may send (a forwarded principal, a client host)
// is ignored from anyone else.
func TestProcess_Authz_EveryMutatingRPC_NeedsItsRole(t *testing.T) {
	c := newSecureCluster(t, "--admin-token", "admin-token-0123456789")
	st := c.waitVotersAfterForm(3)
	leader := c.nodes[st.GetLeaderId()].grpcAddr
	via := c.nodes[mustFollower(t, st)].grpcAddr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A group with a member that committed, made by the client principal.
	c.mustCtl("topics", "create", "t", "--partitions", "2")
	m := runMember(t, client.Config{
		Endpoints: []string{leader}, GroupID: "g", Topics: []string{"t"}, Credentials: c.creds("client"),
		SessionTimeout: 30 * time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: time.Second,
	})
	proc.WaitFor(t, 30*time.Second, "the client member holds both partitions", func() (bool, string) {
		return len(m.Assignment()) == 2, fmt.Sprint(m.Assignment())
	})
	if err := m.Commit(ctx, []client.PartitionOffset{{TopicPartition: client.TopicPartition{Topic: "t", Partition: 0}, Offset: 7}, {TopicPartition: client.TopicPartition{Topic: "t", Partition: 1}, Offset: 9}}); err != nil {
		t.Fatalf("a client commits: %v", err)
	}
	memberID := m.MemberID()

	calls := []struct {
		name string
		want auth.Role // the least role that may
		call func(ctx context.Context, conn *grpc.ClientConn) error
	}{
		{"CreateTopic", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewTopicsClient(conn).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "huge", Partitions: 65536})
			return err
		}},
		{"DeleteTopic", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewTopicsClient(conn).DeleteTopic(ctx, &cohortv1.DeleteTopicRequest{Name: "t"})
			return err
		}},
		{"AddPartitions", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewTopicsClient(conn).AddPartitions(ctx, &cohortv1.AddPartitionsRequest{Name: "t", Partitions: 4})
			return err
		}},
		{"DeleteGroups", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewGroupCoordinatorClient(conn).DeleteGroups(ctx, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"g"}})
			return err
		}},
		{"OffsetCommit without a member (reset)", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewGroupCoordinatorClient(conn).OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: -1,
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 0}}})
			return err
		}},
		{"LeaveGroup", auth.RoleClient, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewGroupCoordinatorClient(conn).LeaveGroup(ctx, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: memberID}}})
			return err
		}},
		{"JoinGroup", auth.RoleClient, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewGroupCoordinatorClient(conn).JoinGroup(ctx, &cohortv1.JoinGroupRequest{GroupId: "g", ProtocolType: "consumer"})
			return err
		}},
		{"AddVoter", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewClusterServiceClient(conn).AddVoter(ctx, &cohortv1.AddVoterRequest{NodeId: "evil", RaftAddress: "127.0.0.1:1", GrpcAddress: "127.0.0.1:2"})
			return err
		}},
		{"RemoveServer", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewClusterServiceClient(conn).RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: "n3", Force: true})
			return err
		}},
		{"TransferLeadership", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewClusterServiceClient(conn).TransferLeadership(ctx, &cohortv1.TransferLeadershipRequest{})
			return err
		}},
		{"Demote", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cohortv1.NewClusterServiceClient(conn).Demote(ctx, &cohortv1.DemoteRequest{NodeId: "n3"})
			return err
		}},
		{"SnapshotRestore", auth.RoleAdmin, func(ctx context.Context, conn *grpc.ClientConn) error {
			s, err := cohortv1.NewClusterServiceClient(conn).SnapshotRestore(ctx)
			if err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		}},
	}
	type caller struct {
		name string
		base string // certificate; "" for none
		role auth.Role
	}
	callers := []caller{{"no credential", "", ""}, {"client certificate", "client", auth.RoleClient}, {"node certificate", "n2", auth.RoleNode}}
	before := c.stateOf(ctx, leader)
	for _, call := range calls {
		for _, who := range callers {
			if who.role == call.want || (who.role == auth.RoleAdmin) {
				continue
			}
			for _, addr := range []string{leader, via} {
				var conn *grpc.ClientConn
				if who.base == "" {
					tc, err := client.LoadTLS("", "", c.files("admin").CA)
					if err != nil {
						t.Fatal(err)
					}
					conn = c.connWith(addr, client.Credentials{TLS: tc})
				} else {
					conn = c.conn(addr, who.base)
				}
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				err := call.call(cctx, conn)
				ccancel()
				code := status.Code(err)
				if code != codes.Unauthenticated && code != codes.PermissionDenied {
					t.Fatalf("%s with %s at %s: %v, want Unauthenticated or PermissionDenied", call.name, who.name, addr, err)
				}
				if !strings.Contains(status.Convert(err).Message(), "may not call") && !strings.Contains(status.Convert(err).Message(), "needs a credential") {
					t.Fatalf("%s with %s: the refusal gives no reason: %v", call.name, who.name, err)
				}
			}
		}
	}
	if after := c.stateOf(ctx, leader); after != before {
		t.Fatalf("refused calls changed the state:\nbefore %s\nafter  %s", before, after)
	}

	// Metadata only nodes may send is ignored from a client: a claimed
	// admin principal does not make DeleteTopic pass, a claimed client
	// host is not stored.
	spoof := metadata.AppendToOutgoingContext(ctx, "cohort-principal", "admin/mallory", "cohort-forwarded", "1", "cohort-client-host", "203.0.113.9:1")
	if _, err := cohortv1.NewTopicsClient(c.conn(leader, "client")).DeleteTopic(spoof, &cohortv1.DeleteTopicRequest{Name: "t"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("DeleteTopic with a spoofed forwarded principal: %v, want PermissionDenied", err)
	}
	join := &cohortv1.JoinGroupRequest{GroupId: "spoof", ProtocolType: "consumer", Topics: []string{"t"},
		SessionTimeoutMs: 30000, RebalanceTimeoutMs: 10000, Protocols: []*cohortv1.ProtocolMetadata{{Name: "range"}}}
	gc := cohortv1.NewGroupCoordinatorClient(c.conn(leader, "client"))
	_, err := gc.JoinGroup(spoof, join)
	if join.MemberId = memberIDRequired(err); join.MemberId == "" {
		t.Fatalf("first JoinGroup: %v, want MEMBER_ID_REQUIRED with an ID", err)
	}
	if _, err := gc.JoinGroup(spoof, join); err != nil {
		t.Fatalf("JoinGroup with spoofed metadata: %v", err)
	}

	// DescribeGroups: member IDs for admins only.
	desc := func(base string) *cohortv1.GroupDescription {
		gs, err := client.DescribeGroups(ctx, cohortv1.NewGroupCoordinatorClient(c.conn(via, base)), &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
		if err != nil || len(gs) != 1 || len(gs[0].GetMembers()) != 1 {
			t.Fatalf("describe as %s: %v %v", base, gs, err)
		}
		return gs[0]
	}
	if g := desc("client"); g.GetMembers()[0].GetMemberId() != "" || g.GetLeaderId() != "" {
		t.Fatalf("a client sees member IDs: %v", g)
	}
	if g := desc("admin"); g.GetMembers()[0].GetMemberId() != memberID || g.GetLeaderId() != memberID {
		t.Fatalf("an admin does not see the member ID %s: %v", memberID, g)
	}
	spoofed, err := client.DescribeGroups(ctx, cohortv1.NewGroupCoordinatorClient(c.conn(leader, "admin")), &cohortv1.DescribeGroupsRequest{GroupIds: []string{"spoof"}})
	if err != nil || len(spoofed) != 1 || len(spoofed[0].GetMembers()) != 1 {
		t.Fatalf("describe spoof: %v %v", spoofed, err)
	}
	if host := spoofed[0].GetMembers()[0].GetClientHost(); !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("client host %q, want the caller's own loopback address, not the spoofed one", host)
	}

	// The right roles pass: an admin token (no certificate) and an admin
	// certificate, through a follower.
	tc, err := client.LoadTLS("", "", c.files("admin").CA)
	if err != nil {
		t.Fatal(err)
	}
	tokenConn := c.connWith(via, client.Credentials{TLS: tc, Token: "admin-token-0123456789"})
	if _, err := cohortv1.NewTopicsClient(tokenConn).AddPartitions(ctx, &cohortv1.AddPartitionsRequest{Name: "t", Partitions: 3}); err != nil {
		t.Fatalf("AddPartitions with the admin token through a follower: %v", err)
	}
	if _, err := cohortv1.NewGroupCoordinatorClient(c.conn(via, "admin")).DeleteGroups(ctx, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"spoof"}}); err != nil {
		t.Fatalf("DeleteGroups as admin through a follower: %v", err)
	}
	wrong := c.connWith(via, client.Credentials{TLS: tc, Token: "not-the-admin-token-000"})
	if _, err := cohortv1.NewTopicsClient(wrong).ListTopics(ctx, &cohortv1.ListTopicsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an unknown token: %v, want Unauthenticated", err)
	}
}

// memberIDRequired is the member ID a MEMBER_ID_REQUIRED refusal hands
// out ("" for any other answer).
func memberIDRequired(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == "MEMBER_ID_REQUIRED" {
			return ei.GetMetadata()["member_id"]
		}
	}
	return ""
}

// connWith is a gRPC connection to addr with creds.
func (c *cluster) connWith(addr string, creds client.Credentials) *grpc.ClientConn {
	c.t.Helper()
	conn, err := grpc.NewClient(addr, creds.DialOptions()...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// servedSerial is the serial of the certificate the node at addr serves
// to a new connection.
func (c *cluster) servedSerial(addr string) (string, error) {
	cfg := c.creds("admin").TLS.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestProcess_TLS_CertificateRotation_UnderLoad replaces every node's
// certificate and key while a group commits through the cluster: one node
// is told with SIGHUP, the others find the new files by polling. Every
// node serves its new certificate to new connections, no commit fails, no
// acknowledged commit is lost, and the group stays in its generation.
func TestProcess_TLS_CertificateRotation_UnderLoad(t *testing.T) {
	c := newSecureCluster(t, "--credentials-reload-interval", "1s")
	c.waitVotersAfterForm(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "6")
	endpoints := c.live()
	load := newGroupLoad(t, endpoints, "billing", "orders")
	load.creds, load.admin = c.creds("client"), c.creds("admin")
	for i := range 3 {
		load.add(fmt.Sprintf("m%d", i), false)
	}
	gen := load.waitStable(endpoints, 6)
	acked := func() int64 {
		load.mu.Lock()
		defer load.mu.Unlock()
		var n int64
		for _, o := range load.acked {
			n += o
		}
		return n
	}
	proc.WaitFor(t, 30*time.Second, "commits acknowledged", func() (bool, string) { return acked() > 0, "" })

	old := map[string]string{}
	for _, id := range []string{"n1", "n2", "n3"} {
		s, err := c.servedSerial(c.nodes[id].grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		old[id] = s
		if _, err := c.ca.IssueFiles(c.pki, id, auth.Principal{Role: auth.RoleNode, Name: id}, []string{"127.0.0.1"}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	c.signal("n1", syscall.SIGHUP)
	proc.WaitFor(t, 30*time.Second, "every node serves its new certificate", func() (bool, string) {
		for _, id := range []string{"n1", "n2", "n3"} {
			s, err := c.servedSerial(c.nodes[id].grpcAddr)
			if err != nil {
				return false, err.Error()
			}
			if s == old[id] {
				return false, id + " still serves serial " + s
			}
		}
		return true, ""
	})
	// New Raft connections use the new certificates too: a leadership
	// transfer needs a fresh connection only if one broke, so check the
	// cluster keeps committing after the rotation instead.
	mark := acked()
	proc.WaitFor(t, 30*time.Second, "commits go on after the rotation", func() (bool, string) {
		return acked() > mark+100, fmt.Sprintf("acked sum %d, was %d", acked(), mark)
	})
	for _, id := range []string{"n1", "n2", "n3"} {
		if tail := c.nodes[id].out.Tail(200); !strings.Contains(tail, "credentials reloaded") {
			t.Errorf("%s logged no reload:\n%s", id, tail)
		}
	}
	// Still the generation of before (checked before the members stop:
	// their leaving starts a new one).
	if now := load.waitStable(endpoints, 6); now != gen {
		t.Fatalf("generation moved from %d to %d during the rotation", gen, now)
	}
	load.pause()
	load.mu.Lock()
	errs := append([]string(nil), load.commitErrs...)
	load.mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("%d commits failed during the rotation, first: %s", len(errs), errs[0])
	}
	load.checkNoLoss(endpoints)
}

// TestProcess_TLS_MigrationFromPlaintext_RollingRestarts moves a running
// plaintext cluster to mutual TLS without downtime, as docs/security.md
// describes: every node is restarted once with --tls-permissive (TLS and
// plaintext), then clients move to TLS, then every node is restarted
// without it. After each restart the cluster has its three voters and
// commits; the group keeps its committed offsets; at the end the Raft
// port refuses plaintext.
func TestProcess_TLS_MigrationFromPlaintext_RollingRestarts(t *testing.T) {
	c := newSecureCluster(t)
	c.tlsMode, c.callerTLS = "off", false
	c.form(3)
	ids := []string{"n1", "n2", "n3"}
	c.mustCtl("topics", "create", "orders", "--partitions", "4")
	endpoints := c.grpcAddrs(ids...)
	plainLoad := newGroupLoad(t, endpoints, "billing", "orders")
	plainLoad.add("m1", true)
	plainLoad.waitStable(endpoints, 4)
	restart := func(id string) {
		t.Helper()
		c.signal(id, syscall.SIGTERM)
		c.waitExit(id, 30*time.Second)
		c.start(id)
		c.waitVoters(ids...)
		c.mustCtl("topics", "create", fmt.Sprintf("after-%s-%s", c.tlsMode, id), "--partitions", "1")
	}
	c.tlsMode = "permissive"
	for _, id := range ids {
		restart(id)
	}
	// Every node is permissive now, so a follower forwards over TLS. A
	// plaintext caller it serves as before stays served as before on the
	// leader, rather than judged as the follower's own certificate
	// (which may not create topics).
	leaderNow := c.waitVoters(ids...)
	for _, id := range ids {
		if id == leaderNow.GetLeaderId() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cohortv1.NewTopicsClient(c.conn(c.nodes[id].grpcAddr, "admin")).CreateTopic(ctx,
			&cohortv1.CreateTopicRequest{Name: "via-follower-" + id, Partitions: 1})
		cancel()
		if err != nil {
			t.Fatalf("a plaintext call through follower %s (leader %s): %v", id, leaderNow.GetLeaderId(), err)
		}
	}
	// Every node serves both now: the clients move to TLS.
	plainLoad.pause()
	plainAcked := plainLoad.acked
	c.callerTLS = true
	c.mustCtl("topics", "create", "tls-callers", "--partitions", "1")
	tlsLoad := newGroupLoad(t, endpoints, "billing", "orders")
	tlsLoad.creds, tlsLoad.admin = c.creds("client"), c.creds("admin")
	tlsLoad.next = plainLoad.next // its offsets continue above the plaintext ones
	tlsLoad.add("m1", true)
	tlsLoad.waitStable(endpoints, 4)
	c.tlsMode = "on"
	for _, id := range ids {
		restart(id)
	}
	tlsLoad.waitStable(endpoints, 4)
	tlsLoad.pause()
	tlsLoad.checkNoLoss(endpoints)
	got, err := fetchOffsets(endpoints, "billing", c.creds("admin"))
	if err != nil {
		t.Fatal(err)
	}
	for p, off := range plainAcked {
		if got[p] < off {
			t.Errorf("partition %d: offset %d acknowledged before the migration, %d after", p, off, got[p])
		}
	}
	// Plaintext is refused everywhere now: the forged request gets no answer.
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", c.nodes[mustFollower(t, st)].raft, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if answered, err := sendForged(conn, forgedAppend(t, st.GetTerm(), 1)); err != nil || answered {
		t.Fatalf("after the migration a plaintext raft request was answered (%v, %v)", answered, err)
	}
	if r := runCtl(t, endpoints[0], "topics", "list"); r.code == 0 {
		t.Fatalf("a plaintext cohortctl still works after the migration: %s", r)
	}
}
