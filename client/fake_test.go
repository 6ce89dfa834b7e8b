package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/internal/proc"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// fakeCall is one request a fake node received.
type fakeCall struct {
	node   string
	method string
	req    proto.Message
}

// fakeCluster is a scripted stand-in for a Cohort cluster: one group with
// a single-member coordinator (join without ID → MEMBER_ID_REQUIRED; a join
// with an ID opens a new generation led by that member), behind any number
// of in-process gRPC nodes on 127.0.0.1. Tests queue errors per method and
// per node to script failures.
type fakeCluster struct {
	t *testing.T

	mu         sync.Mutex
	calls      []fakeCall
	nextID     int
	generation int32
	topics     map[string]int32
	members    []*cohortv1.JoinGroupMember // returned to the group leader as is, if set
	plan       map[string]*cohortv1.Assignment
	queued     map[string][]error // method → errors to answer, in order
	commit     func(*cohortv1.OffsetCommitRequest) *cohortv1.OffsetCommitResponse
	// watch, when set, serves WatchGroup: after a first NONE message for
	// the request's generation, every message sent on it (nil: Unimplemented,
	// as a server without the method).
	watch chan *cohortv1.WatchGroupResponse
}

func newFakeCluster(t *testing.T) *fakeCluster {
	return &fakeCluster{t: t, topics: map[string]int32{"orders": 3}, queued: map[string][]error{}}
}

// fail queues errs as the next answers of method (any node).
func (c *fakeCluster) fail(method string, errs ...error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queued[method] = append(c.queued[method], errs...)
}

// callsOf returns the requests of method, in arrival order.
func (c *fakeCluster) callsOf(method string) []fakeCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []fakeCall
	for _, call := range c.calls {
		if call.method == method {
			out = append(out, call)
		}
	}
	return out
}

func (c *fakeCluster) count(method string) int { return len(c.callsOf(method)) }

// fakeNode is one gRPC endpoint of a fakeCluster.
type fakeNode struct {
	cohortv1.UnimplementedGroupCoordinatorServer
	cohortv1.UnimplementedTopicsServer
	c    *fakeCluster
	addr string
	srv  *grpc.Server

	mu     sync.Mutex
	leader string             // sent as cohort-leader on every answer
	refuse map[string][]error // method → errors this node answers first
}

// node starts a fake node on a fresh loopback port.
func (c *fakeCluster) node() *fakeNode {
	c.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatalf("listen: %v", err)
	}
	n := &fakeNode{c: c, addr: lis.Addr().String(), srv: grpc.NewServer(), refuse: map[string][]error{}}
	cohortv1.RegisterGroupCoordinatorServer(n.srv, n)
	cohortv1.RegisterTopicsServer(n.srv, n)
	go func() { _ = n.srv.Serve(lis) }()
	c.t.Cleanup(n.srv.Stop)
	return n
}

func (n *fakeNode) setLeader(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leader = addr
}

// refuseNext makes this node answer the next calls of method with errs.
func (n *fakeNode) refuseNext(method string, errs ...error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.refuse[method] = append(n.refuse[method], errs...)
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// protoErr builds the status the server sends for a protocol error.
func protoErr(code codes.Code, reason string, md map[string]string) error {
	st, err := status.New(code, reason+": scripted").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "cohort.v1", Metadata: md})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

var (
	errNotLeader      = protoErr(codes.Unavailable, "NOT_LEADER", nil)
	errRebalance      = protoErr(codes.FailedPrecondition, "REBALANCE_IN_PROGRESS", nil)
	errUnknownMember  = protoErr(codes.FailedPrecondition, "UNKNOWN_MEMBER_ID", nil)
	errIllegalGen     = protoErr(codes.FailedPrecondition, "ILLEGAL_GENERATION", nil)
	errFenced         = protoErr(codes.FailedPrecondition, "FENCED_INSTANCE_ID", nil)
	errInvalidArg     = status.Error(codes.InvalidArgument, "group_id: empty")
	errNodeDown       = status.Error(codes.Unavailable, "connection refused")
	errCoordNotAvail  = protoErr(codes.Unavailable, "COORDINATOR_NOT_AVAILABLE", nil)
	errInconsistent   = protoErr(codes.FailedPrecondition, "INCONSISTENT_GROUP_PROTOCOL", nil)
	errInvalidSession = protoErr(codes.InvalidArgument, "INVALID_SESSION_TIMEOUT", nil)
	// errHang makes a node hold the call until the caller gives up.
	errHang = errors.New("hang")
)

// serve records the call, applies scripted refusals, then runs the group
// logic, and stamps the leader header.
func (n *fakeNode) serve(ctx context.Context, method string, req proto.Message, logic func() (proto.Message, error)) (proto.Message, error) {
	n.mu.Lock()
	leader := n.leader
	var refusal error
	if q := n.refuse[method]; len(q) > 0 {
		refusal, n.refuse[method] = q[0], q[1:]
	}
	n.mu.Unlock()
	if leader != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(LeaderHeader, leader))
	}
	c := n.c
	c.mu.Lock()
	c.calls = append(c.calls, fakeCall{node: n.addr, method: method, req: proto.Clone(req)})
	if refusal == nil {
		if q := c.queued[method]; len(q) > 0 {
			refusal, c.queued[method] = q[0], q[1:]
		}
	}
	c.mu.Unlock()
	if refusal == errHang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if refusal != nil {
		return nil, refusal
	}
	return logic()
}

func (n *fakeNode) JoinGroup(ctx context.Context, r *cohortv1.JoinGroupRequest) (*cohortv1.JoinGroupResponse, error) {
	resp, err := n.serve(ctx, "JoinGroup", r, func() (proto.Message, error) {
		c := n.c
		c.mu.Lock()
		defer c.mu.Unlock()
		if r.GetMemberId() == "" {
			c.nextID++
			return nil, protoErr(codes.FailedPrecondition, "MEMBER_ID_REQUIRED", map[string]string{"member_id": fmt.Sprintf("member-%d", c.nextID)})
		}
		c.generation++
		resp := &cohortv1.JoinGroupResponse{
			Generation: c.generation, Protocol: r.GetProtocols()[0].GetName(),
			LeaderId: r.GetMemberId(), MemberId: r.GetMemberId(),
		}
		// Scripted members, with the caller's entry carrying the metadata
		// it really sent (its owned partitions change every generation).
		for _, jm := range c.members {
			jm = proto.Clone(jm).(*cohortv1.JoinGroupMember)
			if jm.GetMemberId() == r.GetMemberId() {
				jm.Metadata = r.GetProtocols()[0].GetMetadata()
			}
			resp.Members = append(resp.Members, jm)
		}
		if resp.Members == nil {
			resp.Members = []*cohortv1.JoinGroupMember{{MemberId: r.GetMemberId(), Metadata: r.GetProtocols()[0].GetMetadata(), Topics: r.GetTopics()}}
		}
		for _, t := range r.GetTopics() {
			if p, ok := c.topics[t]; ok {
				resp.Topics = append(resp.Topics, &cohortv1.TopicPartitionCount{Topic: t, Partitions: p})
			}
		}
		return resp, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*cohortv1.JoinGroupResponse), nil
}

func (n *fakeNode) SyncGroup(ctx context.Context, r *cohortv1.SyncGroupRequest) (*cohortv1.SyncGroupResponse, error) {
	resp, err := n.serve(ctx, "SyncGroup", r, func() (proto.Message, error) {
		c := n.c
		c.mu.Lock()
		defer c.mu.Unlock()
		if r.GetGeneration() != c.generation {
			return nil, errIllegalGen
		}
		if len(r.GetAssignments()) > 0 {
			c.plan = map[string]*cohortv1.Assignment{}
			for _, a := range r.GetAssignments() {
				c.plan[a.GetMemberId()] = a.GetAssignment()
			}
		}
		return &cohortv1.SyncGroupResponse{Assignment: c.plan[r.GetMemberId()], Protocol: "roundrobin"}, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*cohortv1.SyncGroupResponse), nil
}

func (n *fakeNode) WatchGroup(r *cohortv1.WatchGroupRequest, stream cohortv1.GroupCoordinator_WatchGroupServer) error {
	c := n.c
	c.mu.Lock()
	c.calls = append(c.calls, fakeCall{node: n.addr, method: "WatchGroup", req: proto.Clone(r)})
	msgs := c.watch
	c.mu.Unlock()
	if msgs == nil {
		return status.Error(codes.Unimplemented, "method WatchGroup not implemented")
	}
	if err := stream.Send(&cohortv1.WatchGroupResponse{Generation: r.GetGeneration()}); err != nil {
		return err
	}
	for {
		select {
		case m := <-msgs:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (n *fakeNode) Heartbeat(ctx context.Context, r *cohortv1.HeartbeatRequest) (*cohortv1.HeartbeatResponse, error) {
	_, err := n.serve(ctx, "Heartbeat", r, func() (proto.Message, error) { return &cohortv1.HeartbeatResponse{}, nil })
	if err != nil {
		return nil, err
	}
	return &cohortv1.HeartbeatResponse{}, nil
}

func (n *fakeNode) LeaveGroup(ctx context.Context, r *cohortv1.LeaveGroupRequest) (*cohortv1.LeaveGroupResponse, error) {
	_, err := n.serve(ctx, "LeaveGroup", r, func() (proto.Message, error) { return nil, nil })
	if err != nil {
		return nil, err
	}
	resp := &cohortv1.LeaveGroupResponse{}
	for _, m := range r.GetMembers() {
		resp.Members = append(resp.Members, &cohortv1.LeaveMemberResult{MemberId: m.GetMemberId(), InstanceId: m.GetInstanceId()})
	}
	return resp, nil
}

func (n *fakeNode) OffsetCommit(ctx context.Context, r *cohortv1.OffsetCommitRequest) (*cohortv1.OffsetCommitResponse, error) {
	resp, err := n.serve(ctx, "OffsetCommit", r, func() (proto.Message, error) {
		c := n.c
		c.mu.Lock()
		commit := c.commit
		c.mu.Unlock()
		if commit != nil {
			return commit(r), nil
		}
		resp := &cohortv1.OffsetCommitResponse{}
		for _, o := range r.GetOffsets() {
			resp.Partitions = append(resp.Partitions, &cohortv1.OffsetCommitPartitionResult{Topic: o.GetTopic(), Partition: o.GetPartition()})
		}
		return resp, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*cohortv1.OffsetCommitResponse), nil
}

func (n *fakeNode) CreateTopic(ctx context.Context, r *cohortv1.CreateTopicRequest) (*cohortv1.CreateTopicResponse, error) {
	_, err := n.serve(ctx, "CreateTopic", r, func() (proto.Message, error) {
		n.c.mu.Lock()
		defer n.c.mu.Unlock()
		n.c.topics[r.GetName()] = r.GetPartitions()
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return &cohortv1.CreateTopicResponse{}, nil
}

// recorder collects callback events in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// notOwnerAnswer answers an OffsetCommit: every partition stored but
// refused, which gets NOT_OWNER.
func notOwnerAnswer(r *cohortv1.OffsetCommitRequest, refused int32) *cohortv1.OffsetCommitResponse {
	resp := &cohortv1.OffsetCommitResponse{}
	for _, o := range r.GetOffsets() {
		res := &cohortv1.OffsetCommitPartitionResult{Topic: o.GetTopic(), Partition: o.GetPartition()}
		if o.GetPartition() == refused {
			res.Error, res.ErrorMessage = cohortv1.ErrorCode_ERROR_CODE_NOT_OWNER, fmt.Sprintf("%s/%d is not yours", o.GetTopic(), refused)
		}
		resp.Partitions = append(resp.Partitions, res)
	}
	return resp
}

// testConfig is a fast Config against endpoints, recording callbacks.
func testConfig(rec *recorder, endpoints ...string) Config {
	return Config{
		Endpoints:         endpoints,
		GroupID:           "g1",
		ClientID:          "test",
		Topics:            []string{"orders"},
		SessionTimeout:    time.Second,
		HeartbeatInterval: 20 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		RetryBackoffMin:   2 * time.Millisecond,
		RetryBackoffMax:   20 * time.Millisecond,
		RequestTimeout:    2 * time.Second,
		OnAssigned: func(_ context.Context, gen int32, a []TopicPartition) {
			rec.add("assigned g%d %v", gen, a)
		},
		OnRevoked: func(_ context.Context, p []TopicPartition) {
			rec.add("revoked %v", p)
		},
	}
}

// startMember runs a Member in the background; Cleanup closes it.
func startMember(t *testing.T, cfg Config) (*Member, <-chan error) {
	t.Helper()
	m, err := NewMember(cfg)
	if err != nil {
		t.Fatalf("NewMember: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m, done
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proc.WaitFor(t, 10*time.Second, what, func() (bool, string) { return cond(), "" })
}
