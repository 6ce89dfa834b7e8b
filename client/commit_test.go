package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

func TestMember_Commit_CommitsMadeDuringOneInFlightShareTheNextRequest(t *testing.T) {
	c := newFakeCluster(t)
	n := c.node()
	rec := &recorder{}
	m, _ := startMember(t, testConfig(rec, n.addr))
	waitFor(t, "assignment", func() bool { return len(rec.get()) == 1 })

	// The first request is held; partition 2 is refused on every request.
	release := make(chan struct{})
	c.mu.Lock()
	c.commit = func(r *cohortv1.OffsetCommitRequest) *cohortv1.OffsetCommitResponse {
		if r.GetOffsets()[0].GetPartition() == 0 {
			<-release
		}
		return notOwnerAnswer(r, 2)
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	commit := func(ctx context.Context, partition int32, offset int64) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- m.Commit(ctx, []PartitionOffset{{TopicPartition: TopicPartition{"orders", partition}, Offset: offset}})
		}()
		return done
	}
	waiting := func(want int) {
		t.Helper()
		waitFor(t, "commits waiting", func() bool {
			m.commits.mu.Lock()
			defer m.commits.mu.Unlock()
			return len(m.commits.waiting) == want
		})
	}
	first := commit(ctx, 0, 1)
	waitFor(t, "the first request", func() bool { return c.count("OffsetCommit") == 1 })
	b := commit(ctx, 1, 5)
	waiting(1)
	refused := commit(ctx, 2, 6)
	waiting(2)
	again := commit(ctx, 1, 7) // names partition 1 again, later
	waiting(3)
	gaveUpCtx, giveUp := context.WithCancel(ctx)
	gaveUp := commit(gaveUpCtx, 0, 99)
	waiting(4)
	giveUp()
	if err := await(t, gaveUp); !errors.Is(err, context.Canceled) {
		t.Fatalf("a commit whose caller gave up while it waited: got %v, want context.Canceled", err)
	}
	if got := c.count("OffsetCommit"); got != 1 {
		t.Fatalf("%d requests in flight while the first is held, want 1", got)
	}

	close(release)
	for name, done := range map[string]<-chan error{"first": first, "partition 1": b, "partition 1 again": again} {
		if err := await(t, done); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	err := await(t, refused)
	var cerr *CommitError
	if !errors.As(err, &cerr) || !errors.Is(err, ErrNotOwner) || len(cerr.Partitions) != 1 || cerr.Partitions[TopicPartition{"orders", 2}] == nil {
		t.Fatalf("the commit of partition 2: want a CommitError with NOT_OWNER for orders/2 alone, got %v", err)
	}
	calls := c.callsOf("OffsetCommit")
	if len(calls) != 2 {
		t.Fatalf("the three waiting commits took %d requests after the first, want 1", len(calls)-1)
	}
	r := commitReq(calls[1])
	if r.GetGeneration() != 1 || r.GetMemberId() == "" || len(r.GetOffsets()) != 2 ||
		r.GetOffsets()[0].GetPartition() != 1 || r.GetOffsets()[0].GetOffset() != 7 ||
		r.GetOffsets()[1].GetPartition() != 2 || r.GetOffsets()[1].GetOffset() != 6 {
		t.Fatalf("the shared request: want orders/1 at 7 (the later commit) and orders/2 at 6, nothing of the one given up; got %v", r)
	}

	// With nothing in flight a commit goes at once, in a request of its own.
	if err := m.Commit(ctx, []PartitionOffset{{TopicPartition: TopicPartition{"orders", 1}, Offset: 8}}); err != nil {
		t.Fatal(err)
	}
	if calls := c.callsOf("OffsetCommit"); len(calls) != 3 || len(commitReq(calls[2]).GetOffsets()) != 1 {
		t.Fatalf("a lone commit: %d requests, want 3 with the last carrying it alone", len(calls))
	}
}

func TestCommitQueue_Next_OneGenerationAndMemberPerRequestWithinTheLimits(t *testing.T) {
	ctx := context.Background()
	gone, cancel := context.WithCancel(ctx)
	cancel()
	offsets := func(n, metadata int) []PartitionOffset {
		out := make([]PartitionOffset, n)
		for i := range out {
			out[i] = PartitionOffset{TopicPartition: TopicPartition{"t", int32(i)}, Metadata: string(make([]byte, metadata))}
		}
		return out
	}
	p := func(ctx context.Context, gen int32, id string, offs []PartitionOffset) *pendingCommit {
		return &pendingCommit{ctx: ctx, gen: gen, id: id, offsets: offs}
	}
	a := p(gone, 1, "m", offsets(1, 0))    // its caller gave up: dropped
	b := p(ctx, 1, "m", offsets(1, 0))     // the oldest left: heads the request
	c := p(ctx, 2, "m", offsets(1, 0))     // another generation
	d := p(ctx, 1, "m", offsets(1, 0))     // joins b
	e := p(ctx, 1, "other", offsets(1, 0)) // another member ID
	f := p(ctx, 1, "m", offsets(maxBatchOffsets, 0))
	g := p(ctx, 1, "m", offsets(1, maxBatchBytes)) // alone over the byte limit
	q := &commitQueue{sending: true, waiting: []*pendingCommit{a, b, c, d, e, f, g}}

	want := [][]*pendingCommit{{b, d}, {c}, {e}, {f}, {g}}
	for i, w := range want {
		got := q.next()
		if len(got) != len(w) {
			t.Fatalf("request %d: %d commits, want %d", i, len(got), len(w))
		}
		for j := range w {
			if got[j] != w[j] {
				t.Fatalf("request %d: commit %d is not the expected one", i, j)
			}
		}
		if !q.sending {
			t.Fatalf("request %d: the queue is idle while it sends", i)
		}
	}
	if got := q.next(); got != nil || q.sending || len(q.waiting) != 0 {
		t.Fatalf("an empty queue: next = %v, sending = %v, %d waiting; want nil, false, 0", got, q.sending, len(q.waiting))
	}
}

// TestCommitQueue_NextAfter_CallersThatCommitAgainAtOnceJoinTheNextRequest
// answers a request of three callers that each commit again as soon as they
// are answered. Taking the next request after a yield carries their new
// commits with the one that waited; taken at once (without the yield) it
// would carry the waiting one alone, and the callers would wait a whole
// request behind it. On one processor the yield runs the callers it woke
// first, except when the scheduler takes its periodic turn at the global
// queue (one schedule in 61), so the test asks this of one of ten tries.
func TestCommitQueue_NextAfter_CallersThatCommitAgainAtOnceJoinTheNextRequest(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	commit := func() *pendingCommit {
		return &pendingCommit{ctx: ctx, gen: 1, id: "m", offsets: []PartitionOffset{{TopicPartition: TopicPartition{"t", 0}, Offset: 1}}, done: make(chan struct{})}
	}
	best := 0
	for try := 0; try < 10 && best < 4; try++ {
		waited := commit()
		q := &commitQueue{sending: true, waiting: []*pendingCommit{waited}}
		answered := []*pendingCommit{commit(), commit(), commit()}
		var again sync.WaitGroup
		for _, p := range answered {
			again.Add(1)
			go func() {
				defer again.Done()
				<-p.done
				q.mu.Lock()
				q.waiting = append(q.waiting, commit())
				q.mu.Unlock()
			}()
		}
		runtime.Gosched() // let the callers park on their answers
		for _, p := range answered {
			close(p.done)
		}
		batch := q.nextAfter(answered)
		again.Wait()
		if batch[0] != waited {
			t.Fatalf("try %d: the commit that waited does not head the next request", try)
		}
		best = max(best, len(batch))
	}
	if best != 4 {
		t.Fatalf("the next request carried at most %d commits in ten tries, want 4: the waiting one and the three callers' new ones", best)
	}
}

// TestRealCluster_ConcurrentCommitsOfOneMember_EveryAcknowledgedOffsetStored
// commits from many goroutines of one member against a three-node cluster:
// each goroutine owns a partition and commits it round after round, so its
// last acknowledged offset is what the group must hold; the commits share
// requests.
func TestRealCluster_ConcurrentCommitsOfOneMember_EveryAcknowledgedOffsetStored(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const partitions, rounds = 32, 20
	topic := createTopic(t, ctx, c.Addrs(), partitions)
	conn := dialCluster(t, c.Addrs())
	var requests atomic.Int64
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := req.(*cohortv1.OffsetCommitRequest); ok {
			requests.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	m, _ := startMember(t, Config{
		Endpoints: c.Addrs(), GroupID: topic, Topics: []string{topic}, DialOptions: []grpc.DialOption{count},
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 200 * time.Millisecond, RebalanceTimeout: 10 * time.Second,
	})
	waitFor(t, "the member holding every partition", func() bool { return len(m.Assignment()) == partitions })

	var wg sync.WaitGroup
	errs := make(chan error, partitions)
	for p := range int32(partitions) {
		wg.Go(func() {
			for round := int64(1); round <= rounds; round++ {
				if err := m.Commit(ctx, []PartitionOffset{{TopicPartition: TopicPartition{topic, p}, Offset: round*100 + int64(p)}}); err != nil {
					errs <- fmt.Errorf("partition %d, round %d: %w", p, round, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	fetched, err := conn.Groups().OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: topic})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]int64{}
	for _, p := range fetched.GetPartitions() {
		got[p.GetPartition()] = p.GetOffset()
	}
	for p := range int32(partitions) {
		if want := int64(rounds*100) + int64(p); got[p] != want {
			t.Errorf("partition %d holds %d, want the last acknowledged commit's %d", p, got[p], want)
		}
	}
	// 32 goroutines that each wait a Raft round per commit overlap all the
	// time, so most requests carry several commits.
	if n := requests.Load(); n > partitions*rounds/2 {
		t.Errorf("%d commits took %d requests; want at most half as many: concurrent commits share requests", partitions*rounds, n)
	}
	t.Logf("%d commits in %d requests", partitions*rounds, requests.Load())
}
