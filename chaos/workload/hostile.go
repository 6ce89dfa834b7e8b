package workload

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
type Hostile struct {
	Endpoints []string
	Log       *slog.Logger
	Seed      uint64
	// Pause between requests (default 250 ms: the hostile client must not
	// starve the others, whose histories the checkers judge); Timeout of one
	// (default 2 s).
	Pause, Timeout time.Duration

	mu         sync.Mutex
	sent       map[string]int
	refused    map[string]int
	violations []string
}

// HostileBudgetFlags are the cohortd flags of a run with the hostile
// workload: budgets the hostile floods reach in seconds and the other
// workloads (2 topics, groups of at most 4 members) never do.
var HostileBudgetFlags = []string{"--budget-topics", "24", "--max-group-size", "16"}

// hostileTopics is how many topics the flood tries to create: more than
// the budget.
const hostileTopics = 40

// probe is one kind of hostile request: send makes it, and want are the
// protocol codes it may be refused with.
type probe struct {
	name string
	want []errcode.Code
	// accept: success is an allowed answer too (a flood below its budget).
	accept bool
	send   func(ctx context.Context, h *hostileConn, rng *rand.Rand) error
}

type hostileConn struct {
	conn   *grpc.ClientConn
	groups cohortv1.GroupCoordinatorClient
	topics cohortv1.TopicsClient
	flood  *int // topics the flood asked for, over every connection
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

func hostileProbes() []probe {
	return []probe{
		{name: "oversized member metadata", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			r := hostileJoin("hostile-big", "")
			r.Protocols[0].Metadata = make([]byte, 128<<10)
			_, err := h.groups.JoinGroup(ctx, r)
			return err
		}},
		{name: "oversized group ID", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "hostile-" + strings.Repeat("g", 1000), Generation: -1,
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: GroupsTopic, Partition: 0, Offset: 1}}})
			return err
		}},
		{name: "oversized offset metadata", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.groups.OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "hostile-c", Generation: -1,
				Offsets: []*cohortv1.OffsetCommitPartition{{Topic: GroupsTopic, Partition: 0, Offset: 1, Metadata: strings.Repeat("m", 8<<10)}}})
			return err
		}},
		{name: "too many offsets in one commit", want: []errcode.Code{errcode.InvalidArgument}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			r := &cohortv1.OffsetCommitRequest{GroupId: "hostile-c", Generation: -1}
			for p := range int32(100_001) {
				r.Offsets = append(r.Offsets, &cohortv1.OffsetCommitPartition{Topic: "hostile-none", Partition: p})
			}
			_, err := h.groups.OffsetCommit(ctx, r)
			return err
		}},
		{name: "topic over the partitions-per-topic budget", want: []errcode.Code{errcode.BudgetExceeded}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
			_, err := h.topics.CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "hostile-huge", Partitions: 100_000})
			return err
		}},
		{name: "topic flood", accept: true, want: []errcode.Code{errcode.BudgetExceeded, errcode.TopicAlreadyExists}, send: func(ctx context.Context, h *hostileConn, _ *rand.Rand) error {
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
}

func hostileJoin(group, member string) *cohortv1.JoinGroupRequest {
	return &cohortv1.JoinGroupRequest{
		GroupId: group, MemberId: member, ProtocolType: "consumer", SessionTimeoutMs: 6000, RebalanceTimeoutMs: 6000, ClientId: "hostile",
		Protocols: []*cohortv1.ProtocolMetadata{{Name: "range", Metadata: []byte("x")}}, Topics: []string{GroupsTopic},
	}
}

// Run sends hostile requests to every node in turn until ctx ends.
func (w *Hostile) Run(ctx context.Context) {
	if w.Pause == 0 {
		w.Pause = 250 * time.Millisecond
	}
	if w.Timeout == 0 {
		w.Timeout = 2 * time.Second
	}
	w.mu.Lock()
	w.sent, w.refused = map[string]int{}, map[string]int{}
	w.mu.Unlock()
	var conns []*hostileConn
	flood := 0
	for _, ep := range w.Endpoints {
		cc, err := grpc.NewClient(ep, append(dialOptions(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))...)
		if err != nil {
			w.Log.Error("hostile client", "endpoint", ep, "err", err)
			return
		}
		defer cc.Close()
		conns = append(conns, &hostileConn{conn: cc, flood: &flood, groups: cohortv1.NewGroupCoordinatorClient(cc), topics: cohortv1.NewTopicsClient(cc)})
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x4057))
	probes := hostileProbes()
	for i := 0; ctx.Err() == nil; i++ {
		p := probes[rng.IntN(len(probes))]
		cctx, cancel := context.WithTimeout(ctx, w.Timeout)
		err := p.send(cctx, conns[i%len(conns)], rng)
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
	case err == nil && p.accept:
	case err == nil:
		w.violation("%s was accepted", p.name)
	case slices.Contains(p.want, code):
		w.refused[p.name]++
	case faultAnswer(err, code):
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

// Verdict says what the workload saw: a summary, and the broken promises
// (none in a valid run).
func (w *Hostile) Verdict() (summary string, violations []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, p := range hostileProbes() {
		parts = append(parts, fmt.Sprintf("%s %d/%d", p.name, w.refused[p.name], w.sent[p.name]))
	}
	return "hostile requests refused as promised / sent: " + strings.Join(parts, ", "), slices.Clone(w.violations)
}
