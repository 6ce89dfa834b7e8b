package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// recordingRaft applies nothing: it records the size of every entry
// proposed, once released.
type recordingRaft struct {
	fakeRaft
	release chan struct{}
	mu      sync.Mutex
	sizes   []int
	commits int
}

func (r *recordingRaft) Apply(_ context.Context, cmd *fsmv1.Command) (*fsm.ApplyResult, error) {
	r.mu.Lock()
	r.sizes = append(r.sizes, proto.Size(cmd))
	res := &fsm.ApplyResult{}
	if b := cmd.GetBatch(); b != nil {
		r.commits += len(b.GetCommands())
		res.Batch = make([]*fsm.ApplyResult, len(b.GetCommands()))
		for i := range res.Batch {
			res.Batch[i] = &fsm.ApplyResult{}
		}
	} else {
		r.commits++
	}
	r.mu.Unlock()
	<-r.release
	return res, nil
}

// Commits waiting together are batched into entries of at most
// maxCommitBatchBytes: a queue of large commits becomes several entries,
// not one that every replica must write and apply at once.
func TestCommitter_BatchesAreBoundedByBytes(t *testing.T) {
	r := &recordingRaft{release: make(chan struct{})}
	e, err := New(DefaultConfig(), r, fsm.New())
	if err != nil {
		t.Fatal(err)
	}
	meta := strings.Repeat("m", 4000)
	commit := func(i int) *fsmv1.Command {
		c := &fsmv1.CommitOffsets{GroupId: "g", Generation: -1}
		for p := range int32(100) { // ~400 KB
			c.Offsets = append(c.Offsets, &fsmv1.OffsetCommit{Topic: "t", Partition: p, Offset: int64(i), Metadata: meta})
		}
		return &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: c}}
	}
	const n = 60 // ~24 MB in all
	// The commits are queued before any proposer runs, as they are when
	// every proposer is busy.
	reqs := make([]*commitRequest, n)
	for i := range reqs {
		cmd := commit(i)
		reqs[i] = &commitRequest{ctx: t.Context(), cmd: cmd, size: proto.Size(cmd), done: make(chan commitResult, 1)}
		e.commits.queue <- reqs[i]
	}
	e.commits.start()
	close(r.release)
	for _, req := range reqs {
		if res := <-req.done; res.err != nil {
			t.Fatal(res.err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.commits != n {
		t.Fatalf("%d commits proposed, want %d", r.commits, n)
	}
	one := proto.Size(commit(0))
	batched := 0
	for _, s := range r.sizes {
		if s > maxCommitBatchBytes+one { // a lone commit may exceed the bound
			t.Fatalf("an entry of %d bytes; the bound is %d", s, maxCommitBatchBytes)
		}
		if s > one+16 {
			batched++
		}
	}
	if batched == 0 {
		t.Fatalf("no commits were batched: entry sizes %v", r.sizes)
	}
	t.Logf("%d commits of %d bytes in %d entries", n, one, len(r.sizes))
}

// Coalescing's promise: commits that arrive while every proposer has an
// entry in flight wait together and go out together, so N concurrent
// commits cost a handful of entries, not N. Raft holds every entry until
// all N commits have reached a proposer or the queue; then at most one
// entry per proposer is in flight and one more per proposer drains the
// queue.
func TestCommitter_ConcurrentCommitsShareEntries(t *testing.T) {
	r := &recordingRaft{release: make(chan struct{})}
	e, err := New(DefaultConfig(), r, fsm.New())
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	results := make(chan error, n)
	for i := range n {
		go func() {
			cmd := &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{GroupId: fmt.Sprintf("solo-%d", i), Generation: -1,
				Offsets: []*fsmv1.OffsetCommit{{Topic: "t", Partition: 0, Offset: int64(i)}}}}}
			_, err := e.commits.submit(t.Context(), cmd)
			results <- err
		}()
	}
	pollUntil(t, "every commit to be proposed or queued", func() (bool, string) {
		r.mu.Lock()
		proposed := r.commits
		r.mu.Unlock()
		queued := len(e.commits.queue)
		return proposed+queued == n, fmt.Sprintf("%d proposed, %d queued of %d", proposed, queued, n)
	})
	close(r.release)
	for range n {
		if err := <-results; err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.commits != n {
		t.Fatalf("%d commits proposed, want %d", r.commits, n)
	}
	if bound := 2 * commitProposers; len(r.sizes) > bound {
		t.Fatalf("%d concurrent commits took %d entries; with %d proposers they must share at most %d", n, len(r.sizes), commitProposers, bound)
	}
	t.Logf("%d concurrent commits in %d entries", n, len(r.sizes))
}
