package rpc

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cohortlabs/cohort/coordinator"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// The fuzz targets send each gRPC method of the group and topic API
// random requests, two in sequence, through a real gRPC server and the
// real engine, whose log is applied at once to three FSM replicas. After
// every input they check what the budgets promise (docs/security.md): no
// panic, every replica identical, and no single apply over the bounds
// below. Run one for five minutes with, for example:
//
//	go test ./rpc/ -run '^$' -fuzz '^FuzzJoinGroup$' -fuzztime 5m
//
// The corpora found so far are kept in testdata/fuzz and run as plain
// tests by `make test`.

// The bounds on one entry's apply in the fuzz state (a few topics and
// groups): far above what any entry needs there, far below what an
// amplification (an apply sized by something the request does not carry)
// costs.
const (
	fuzzMaxApplyAlloc = 64 << 20
	fuzzMaxApplyTime  = 2 * time.Second
)

// replicaSet is a Raft log of three replicas that commits at once: the
// engine's Raft in the fuzz targets.
type replicaSet struct {
	mu         sync.Mutex
	fsms       []*fsm.FSM
	index      uint64
	worstAlloc uint64
	worstTime  time.Duration
	worstKind  string
}

func (r *replicaSet) Apply(ctx context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", coordinator.ErrNotProposed, err)
	}
	if cmd.GetVersion() == 0 {
		cmd.Version = fsm.CommandVersion
	}
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.index++
	var res *fsm.ApplyResult
	for i, f := range r.fsms {
		if i > 0 {
			f.ApplyEntry(r.index, data)
			continue
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		res = f.ApplyEntry(r.index, data)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if a := after.TotalAlloc - before.TotalAlloc; a > r.worstAlloc {
			r.worstAlloc, r.worstKind = a, fmt.Sprintf("%T", cmd.GetKind())
		}
		r.worstTime = max(r.worstTime, took)
	}
	return res, nil
}

func (r *replicaSet) Barrier(context.Context) error      { return nil }
func (r *replicaSet) VerifyLeader(context.Context) error { return nil }
func (r *replicaSet) IsLeader() bool                     { return true }
func (r *replicaSet) Term() uint64                       { return 1 }
func (r *replicaSet) CommitIndex() uint64                { return r.AppliedIndex() }
func (r *replicaSet) AppliedIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.index
}

// fuzzNode is one leader serving the API over an in-memory connection.
type fuzzNode struct {
	log    *replicaSet
	groups cohortv1.GroupCoordinatorClient
	topics cohortv1.TopicsClient
	member string // the member of group "g" the setup formed
}

// newFuzzNode starts a node and forms the state the requests meet: topics
// "t" (8 partitions) and "u" (2), group "g" Stable with one member that
// owns all of t and committed t/0, an Empty group "e" with an offset.
func newFuzzNode(t *testing.T) *fuzzNode {
	t.Helper()
	log := &replicaSet{fsms: []*fsm.FSM{fsm.New(), fsm.New(), fsm.New()}}
	cfg := coordinator.DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	cfg.Tick = 10 * time.Millisecond
	cfg.MinSessionTimeout = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	e, err := coordinator.New(cfg, log, log.fsms[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan bool, 1)
	leading <- true
	done := make(chan struct{})
	go func() { e.Run(ctx, leading); close(done) }()

	lis := bufconn.Listen(1 << 20)
	// The node's own limits and UTF-8 check, without forwarding (this
	// node always leads).
	gs := grpc.NewServer(append(DefaultLimits().ServerOptions(), grpc.ChainUnaryInterceptor(UTF8UnaryInterceptor))...)
	cohortv1.RegisterGroupCoordinatorServer(gs, &GroupServer{e: e})
	cohortv1.RegisterTopicsServer(gs, &TopicsServer{e: e})
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///fuzz",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		cancel()
		<-done
	})
	n := &fuzzNode{log: log, groups: cohortv1.NewGroupCoordinatorClient(conn), topics: cohortv1.NewTopicsClient(conn)}

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("setup: %s: %v", what, err)
		}
	}
	_, err = n.topics.CreateTopic(sctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 8})
	must("create t", err)
	_, err = n.topics.CreateTopic(sctx, &cohortv1.CreateTopicRequest{Name: "u", Partitions: 2})
	must("create u", err)
	join := &cohortv1.JoinGroupRequest{
		GroupId: "g", ProtocolType: "consumer", SessionTimeoutMs: 60_000, RebalanceTimeoutMs: 60_000, ClientId: "fuzz",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range", Metadata: []byte("t")}}, Topics: []string{"t"},
	}
	_, err = n.groups.JoinGroup(sctx, join)
	if id := errorMemberID(err); id != "" {
		join.MemberId = id
		_, err = n.groups.JoinGroup(sctx, join)
	}
	must("join g", err)
	n.member = join.GetMemberId()
	all := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	_, err = n.groups.SyncGroup(sctx, &cohortv1.SyncGroupRequest{GroupId: "g", Generation: 1, MemberId: n.member,
		Assignments: []*cohortv1.MemberAssignment{{MemberId: n.member, Assignment: &cohortv1.Assignment{Topics: []*cohortv1.TopicPartitions{{Topic: "t", Partitions: all}}}}}})
	must("sync g", err)
	_, err = n.groups.OffsetCommit(sctx, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: 1, MemberId: n.member,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 10}}})
	must("commit g", err)
	_, err = n.groups.OffsetCommit(sctx, &cohortv1.OffsetCommitRequest{GroupId: "e", Generation: -1,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "u", Partition: 1, Offset: 3}}})
	must("commit e", err)
	return n
}

// fuzzing reports whether the test binary runs a fuzz target (-test.fuzz)
// rather than replaying the corpora.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// errorMemberID is the member ID a MEMBER_ID_REQUIRED refusal hands out.
func errorMemberID(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "MEMBER_ID_REQUIRED" {
			return info.GetMetadata()["member_id"]
		}
	}
	return ""
}

// memberPlaceholder in any string field of a request stands for the
// setup's member ID (which the engine generates), so seeds reach the
// paths a real member takes.
const memberPlaceholder = "@m"

func fillPlaceholders(m protoreflect.Message, member string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for i := range v.List().Len() {
				fillPlaceholders(v.List().Get(i).Message(), member)
			}
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			for i := range v.List().Len() {
				if v.List().Get(i).String() == memberPlaceholder {
					v.List().Set(i, protoreflect.ValueOfString(member))
				}
			}
		case fd.IsMap():
		case fd.Kind() == protoreflect.MessageKind:
			fillPlaceholders(v.Message(), member)
		case fd.Kind() == protoreflect.StringKind && v.String() == memberPlaceholder:
			m.Set(fd, protoreflect.ValueOfString(member))
		}
		return true
	})
}

// fuzzMethod fuzzes one method: call sends req (a new message of the
// method's request type) and returns its error.
func fuzzMethod[Req proto.Message](f *testing.F, call func(n *fuzzNode, ctx context.Context, req Req) error, seeds ...Req) {
	for i, a := range seeds {
		b := seeds[(i+1)%len(seeds)]
		ab, err := proto.Marshal(a)
		if err != nil {
			f.Fatal(err)
		}
		bb, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(ab, bb)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		n := newFuzzNode(t)
		for _, data := range [][]byte{a, b} {
			req := seeds[0].ProtoReflect().New().Interface().(Req)
			if proto.Unmarshal(data, req) != nil {
				continue // not a request of this method
			}
			fillPlaceholders(req.ProtoReflect(), n.member)
			// Calls that wait at a barrier are cut short: what matters is
			// what they write.
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			_ = call(n, ctx, req)
			cancel()
		}
		n.check(t)
	})
}

// check asserts the replicas are identical and no apply passed the bounds.
func (n *fuzzNode) check(t *testing.T) {
	t.Helper()
	n.log.mu.Lock()
	defer n.log.mu.Unlock()
	var first []byte
	for i, f := range n.log.fsms {
		var buf bytes.Buffer
		if _, err := f.Snapshot().WriteTo(&buf); err != nil {
			t.Fatalf("replica %d: snapshot: %v", i, err)
		}
		if i == 0 {
			first = buf.Bytes()
		} else if !bytes.Equal(buf.Bytes(), first) {
			t.Fatalf("replica %d differs from replica 0 after the same %d entries", i, n.log.index)
		}
	}
	if n.log.worstAlloc > fuzzMaxApplyAlloc {
		t.Fatalf("an apply of %s allocated %d bytes, over the bound of %d", n.log.worstKind, n.log.worstAlloc, fuzzMaxApplyAlloc)
	}
	// The time bound is checked while fuzzing only: replayed by `make test`
	// on a loaded machine, a time is no verdict.
	if fuzzing() && n.log.worstTime > fuzzMaxApplyTime {
		t.Fatalf("an apply took %v, over the bound of %v", n.log.worstTime, fuzzMaxApplyTime)
	}
}

func join(group, member string, topics ...string) *cohortv1.JoinGroupRequest {
	return &cohortv1.JoinGroupRequest{
		GroupId: group, MemberId: member, ProtocolType: "consumer", SessionTimeoutMs: 30_000, RebalanceTimeoutMs: 30_000, ClientId: "c",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range", Metadata: []byte("x")}}, Topics: topics,
	}
}

func FuzzJoinGroup(f *testing.F) {
	server := join("s", "", "t")
	server.ProtocolType = fsm.ServerProtocolType
	static := join("g", "", "t", "u")
	static.InstanceId = "i1"
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.JoinGroupRequest) error {
		_, err := n.groups.JoinGroup(ctx, r)
		return err
	}, join("g", "@m", "t"), join("g", "", "t", "u"), join("new", "", "t"), server, static)
}

func FuzzSyncGroup(f *testing.F) {
	plan := func(parts ...int32) []*cohortv1.MemberAssignment {
		return []*cohortv1.MemberAssignment{{MemberId: "@m", Assignment: &cohortv1.Assignment{Topics: []*cohortv1.TopicPartitions{{Topic: "t", Partitions: parts}}}}}
	}
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.SyncGroupRequest) error {
		_, err := n.groups.SyncGroup(ctx, r)
		return err
	}, &cohortv1.SyncGroupRequest{GroupId: "g", Generation: 1, MemberId: "@m", Assignments: plan(0, 1, 2)},
		&cohortv1.SyncGroupRequest{GroupId: "g", Generation: 2, MemberId: "@m", Assignments: plan(7, 7)},
		&cohortv1.SyncGroupRequest{GroupId: "g", Generation: 1, MemberId: "@m"})
}

func FuzzHeartbeat(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.HeartbeatRequest) error {
		_, err := n.groups.Heartbeat(ctx, r)
		return err
	}, &cohortv1.HeartbeatRequest{GroupId: "g", Generation: 1, MemberId: "@m"},
		&cohortv1.HeartbeatRequest{GroupId: "g", Generation: 5, MemberId: "x"})
}

func FuzzLeaveGroup(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.LeaveGroupRequest) error {
		_, err := n.groups.LeaveGroup(ctx, r)
		return err
	}, &cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: "@m"}}},
		&cohortv1.LeaveGroupRequest{GroupId: "g", Members: []*cohortv1.LeaveMember{{MemberId: "x"}, {InstanceId: "i"}}})
}

func FuzzOffsetCommit(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.OffsetCommitRequest) error {
		_, err := n.groups.OffsetCommit(ctx, r)
		return err
	}, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: 1, MemberId: "@m", Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 3, Offset: 5, Metadata: "m"}}},
		&cohortv1.OffsetCommitRequest{GroupId: "e", Generation: -1, Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "u", Partition: 0, Offset: 1}, {Topic: "nope", Partition: 0}}},
		&cohortv1.OffsetCommitRequest{GroupId: "g", Generation: 0, MemberId: "@m", Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Partition: 9, Offset: -1}}})
}

func FuzzOffsetFetch(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.OffsetFetchRequest) error {
		_, err := n.groups.OffsetFetch(ctx, r)
		return err
	}, &cohortv1.OffsetFetchRequest{GroupId: "g"}, &cohortv1.OffsetFetchRequest{GroupId: "g", PageSize: 1, PageToken: "x"},
		&cohortv1.OffsetFetchRequest{GroupId: "e", Partitions: []*cohortv1.TopicPartitions{{Topic: "u", Partitions: []int32{1, 5}}}})
}

func FuzzDescribeGroups(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.DescribeGroupsRequest) error {
		_, err := n.groups.DescribeGroups(ctx, r)
		return err
	}, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g", "e", "nope"}}, &cohortv1.DescribeGroupsRequest{GroupIds: []string{"g", "e"}, PageSize: 1})
}

func FuzzListGroups(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.ListGroupsRequest) error {
		_, err := n.groups.ListGroups(ctx, r)
		return err
	}, &cohortv1.ListGroupsRequest{}, &cohortv1.ListGroupsRequest{AllowStale: true, PageSize: 1}, &cohortv1.ListGroupsRequest{PageToken: "g"})
}

func FuzzDeleteGroups(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.DeleteGroupsRequest) error {
		_, err := n.groups.DeleteGroups(ctx, r)
		return err
	}, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"e"}}, &cohortv1.DeleteGroupsRequest{GroupIds: []string{"g", "nope", "e"}})
}

func FuzzCreateTopic(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.CreateTopicRequest) error {
		_, err := n.topics.CreateTopic(ctx, r)
		return err
	}, &cohortv1.CreateTopicRequest{Name: "v", Partitions: 3}, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 16384})
}

func FuzzDeleteTopic(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.DeleteTopicRequest) error {
		_, err := n.topics.DeleteTopic(ctx, r)
		return err
	}, &cohortv1.DeleteTopicRequest{Name: "t"}, &cohortv1.DeleteTopicRequest{Name: "u"})
}

func FuzzAddPartitions(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.AddPartitionsRequest) error {
		_, err := n.topics.AddPartitions(ctx, r)
		return err
	}, &cohortv1.AddPartitionsRequest{Name: "t", Partitions: 12}, &cohortv1.AddPartitionsRequest{Name: "u", Partitions: 16384})
}

func FuzzListTopics(f *testing.F) {
	fuzzMethod(f, func(n *fuzzNode, ctx context.Context, r *cohortv1.ListTopicsRequest) error {
		_, err := n.topics.ListTopics(ctx, r)
		return err
	}, &cohortv1.ListTopicsRequest{}, &cohortv1.ListTopicsRequest{AllowStale: true, PageSize: 1}, &cohortv1.ListTopicsRequest{PageSize: -1})
}
