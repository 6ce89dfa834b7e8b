package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Offsets is the registers workload.
type Offsets struct {
	Endpoints []string
	Rec       *history.Recorder
	Log       *slog.Logger
	Seed      uint64
	// Creds: the writes are standalone commits (no member), which need the
	// admin credential; the reads are a client's.
	Creds Credentials
	// ProcsPerNode clients are bound to each node (default 2).
	ProcsPerNode int
	// Groups × Partitions keys are live at a time (defaults 2 × 3). Every
	// KeyEpoch (default 10 s) the workload moves to fresh keys, which keeps
	// each key's history short enough for the linearizability search (30 s
	// epochs of a leader schedule, many writes of unknown outcome, left
	// porcupine undecided on a loaded machine).
	Groups, Partitions int
	KeyEpoch           time.Duration
	// Timeout of one operation (default 1 s); Pause between a client's
	// operations (default 20 ms).
	Timeout, Pause time.Duration

	next   atomic.Int64
	mu     sync.Mutex
	used   map[history.Key]bool
	lastOK map[int]time.Time
	start  time.Time
	// The chaser's clients per endpoint (writer, reader); conns only
	// touched by the chaser's one goroutine.
	chasers map[string][2]cohortv1.GroupCoordinatorClient
	conns   []*grpc.ClientConn
}

func (w *Offsets) defaults() {
	if w.ProcsPerNode == 0 {
		w.ProcsPerNode = 2
	}
	if w.Groups == 0 {
		w.Groups = 2
	}
	if w.Partitions == 0 {
		w.Partitions = 3
	}
	if w.KeyEpoch == 0 {
		w.KeyEpoch = 10 * time.Second
	}
	if w.Timeout == 0 {
		w.Timeout = time.Second
	}
	if w.Pause == 0 {
		w.Pause = 20 * time.Millisecond
	}
	if w.used == nil {
		w.used = map[history.Key]bool{}
		w.lastOK = map[int]time.Time{}
	}
}

// Setup creates the topic.
func (w *Offsets) Setup(ctx context.Context) error {
	w.defaults()
	return createTopic(ctx, w.Endpoints, w.Creds.Admin, OffsetsTopic, int32(w.Partitions))
}

// createTopic creates a topic as admin (creds).
func createTopic(ctx context.Context, endpoints []string, creds client.Credentials, name string, partitions int32) error {
	conn, err := client.Dial(client.ConnConfig{Endpoints: endpoints, Credentials: creds, RequestTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := conn.Topics().CreateTopic(cctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: partitions})
		if err == nil || errors.Is(err, client.ErrTopicAlreadyExists) {
			return nil
		}
		if cctx.Err() != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dialOptions carry creds; a client reconnects to a restarted node within
// a second (gRPC's default backoff grows to two minutes, which would hide
// recovery).
func dialOptions(creds client.Credentials) []grpc.DialOption {
	return append(creds.DialOptions(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxRecvMsgSize)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
	)
}

// Recovered reports whether every client completed an operation since t
// (the final heal).
func (w *Offsets) Recovered(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lastOK) == 0 {
		return false
	}
	for _, at := range w.lastOK {
		if at.Before(t) {
			return false
		}
	}
	return true
}

func (w *Offsets) ok(proc int) {
	if chaser(proc) {
		return // not a client that must recover
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastOK[proc] = time.Now()
}

// Run drives the clients until ctx ends.
func (w *Offsets) Run(ctx context.Context) {
	w.defaults()
	w.mu.Lock()
	w.start = time.Now()
	w.mu.Unlock()
	var wg sync.WaitGroup
	proc := 0
	for _, ep := range w.Endpoints {
		for range w.ProcsPerNode {
			id := proc
			proc++
			w.mu.Lock()
			w.lastOK[id] = time.Time{}
			w.mu.Unlock()
			wg.Go(func() { w.client(ctx, id, ep) })
		}
	}
	wg.Wait()
}

func (w *Offsets) key(rng *rand.Rand) history.Key {
	epoch := w.epoch()
	k := history.Key{
		Group:     fmt.Sprintf("reg-%03d-%d", epoch, rng.IntN(w.Groups)),
		Topic:     OffsetsTopic,
		Partition: int32(rng.IntN(w.Partitions)),
	}
	w.mu.Lock()
	w.used[k] = true
	w.mu.Unlock()
	return k
}

// client is one process, bound to one node like a Jepsen client: no
// leader-following, no retries; every call is one attempt. It writes over
// a connection with the admin credential and reads over one with the
// client credential, both to its node.
func (w *Offsets) client(ctx context.Context, proc int, endpoint string) {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(proc)))
	wconn, err := grpc.NewClient(endpoint, dialOptions(w.Creds.Admin)...)
	if err != nil {
		w.Log.Error("offsets client", "endpoint", endpoint, "err", err)
		return
	}
	defer wconn.Close()
	rconn, err := grpc.NewClient(endpoint, dialOptions(w.Creds.Client)...)
	if err != nil {
		w.Log.Error("offsets client", "endpoint", endpoint, "err", err)
		return
	}
	defer rconn.Close()
	writer, reader := cohortv1.NewGroupCoordinatorClient(wconn), cohortv1.NewGroupCoordinatorClient(rconn)
	for ctx.Err() == nil {
		k := w.key(rng)
		if rng.IntN(2) == 0 {
			w.read(ctx, reader, proc, endpoint, k, false)
		} else {
			w.write(ctx, writer, proc, endpoint, k)
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.Pause):
		}
	}
}

func (w *Offsets) write(ctx context.Context, groups cohortv1.GroupCoordinatorClient, proc int, endpoint string, k history.Key) {
	v := w.next.Add(1)
	e := history.Entry{Type: history.TypeOp, Process: proc, F: history.FWrite, Node: endpoint,
		Group: k.Group, Topic: k.Topic, Partition: k.Partition, Value: history.Int64(v), Start: w.Rec.Now(), Note: chaseNote(proc)}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.Timeout)
	var c call
	resp, err := groups.OffsetCommit(cctx, &cohortv1.OffsetCommitRequest{
		GroupId: k.Group, Generation: -1,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: k.Topic, Partition: k.Partition, Offset: v}},
	}, c.options()...)
	cancel()
	e.End = w.Rec.Now()
	e.Outcome, e.Error = classify(err, &c), errString(err)
	if err == nil && !isFinalProc(proc) {
		w.ok(proc)
	}
	if err == nil {
		for _, p := range resp.GetPartitions() {
			if p.GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
				e.Outcome, e.Error = history.Fail, p.GetError().String()+": "+p.GetErrorMessage()
			}
		}
	}
	w.Rec.Add(e)
}

func (w *Offsets) read(ctx context.Context, groups cohortv1.GroupCoordinatorClient, proc int, endpoint string, k history.Key, final bool) bool {
	e := history.Entry{Type: history.TypeOp, Process: proc, F: history.FRead, Node: endpoint, Final: final,
		Group: k.Group, Topic: k.Topic, Partition: k.Partition, Start: w.Rec.Now(), Note: chaseNote(proc)}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.Timeout)
	var c call
	fetched, err := client.FetchOffsets(cctx, groups, &cohortv1.OffsetFetchRequest{
		GroupId: k.Group, Partitions: []*cohortv1.TopicPartitions{{Topic: k.Topic, Partitions: []int32{k.Partition}}},
	}, c.options()...)
	cancel()
	e.End = w.Rec.Now()
	if err != nil {
		// A read that did not answer constrains nothing.
		e.Outcome, e.Error = history.Fail, errString(err)
		if classify(err, &c) == history.Info {
			e.Outcome = history.Info
		}
		w.Rec.Add(e)
		return false
	}
	v := int64(-1)
	for _, p := range fetched {
		if p.GetTopic() == k.Topic && p.GetPartition() == k.Partition {
			v = p.GetOffset()
		}
	}
	e.Value, e.Outcome = history.Int64(v), history.OK
	w.Rec.Add(e)
	if !final {
		w.ok(proc)
	}
	return true
}

// epoch is the number of the live keys' epoch (the runner's goroutines
// call it too, hence the lock).
func (w *Offsets) epoch() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(time.Since(w.start) / w.KeyEpoch)
}

// ChaseProc is the process of the chaser's operations.
const ChaseProc = 800

// chaser reports whether proc is the chaser's or a burst's.
func chaser(proc int) bool { return proc == ChaseProc || (proc >= BurstProc && proc < BurstProc+90) }

// Chase sends n operations, reads and writes alternating on live keys, to
// endpoint one after another, as clients that retry on a new leader the
// moment it is elected would: the runner calls it when it sees a new
// leader, so that a leader serving before it caught up (its barrier) or
// without checking its leadership is read at once. Calls must not overlap
// (one process).
func (w *Offsets) Chase(ctx context.Context, endpoint string, n int) {
	w.mu.Lock()
	if w.chasers == nil {
		w.chasers = map[string][2]cohortv1.GroupCoordinatorClient{}
	}
	cs, ok := w.chasers[endpoint]
	w.mu.Unlock()
	if !ok {
		wconn, err := grpc.NewClient(endpoint, dialOptions(w.Creds.Admin)...)
		if err != nil {
			return
		}
		rconn, err := grpc.NewClient(endpoint, dialOptions(w.Creds.Client)...)
		if err != nil {
			wconn.Close()
			return
		}
		w.conns = append(w.conns, wconn, rconn)
		cs = [2]cohortv1.GroupCoordinatorClient{cohortv1.NewGroupCoordinatorClient(wconn), cohortv1.NewGroupCoordinatorClient(rconn)}
		w.mu.Lock()
		w.chasers[endpoint] = cs
		w.mu.Unlock()
	}
	rng := rand.New(rand.NewPCG(w.Seed, uint64(w.next.Load())))
	for i := range n {
		if ctx.Err() != nil {
			return
		}
		k := w.key(rng)
		if i%2 == 0 {
			w.read(ctx, cs[1], ChaseProc, endpoint, k, false)
		} else {
			w.write(ctx, cs[0], ChaseProc, endpoint, k)
		}
	}
}

// chaseNote marks the chaser's operations (history.NoteChase).
func chaseNote(proc int) string {
	if chaser(proc) {
		return history.NoteChase
	}
	return ""
}

// BurstProc is the first process of a burst's reads (one process each).
const BurstProc = 810

// Burst reads every live key from endpoint at once, each read its own
// process: sent the moment a paused leader resumes, while it may still
// believe it leads, so that a read it answers without confirming its
// leadership is caught stale (a write the new leader acknowledged during
// the pause completed before the read began).
func (w *Offsets) Burst(ctx context.Context, endpoint string) {
	w.mu.Lock()
	cs, ok := w.chasers[endpoint]
	w.mu.Unlock()
	if !ok {
		return // no connection yet: a dial now would come too late
	}
	epoch := w.epoch()
	var wg sync.WaitGroup
	proc := BurstProc
	for g := range w.Groups {
		for p := range w.Partitions {
			k := history.Key{Group: fmt.Sprintf("reg-%03d-%d", epoch, g), Topic: OffsetsTopic, Partition: int32(p)}
			id := proc
			proc++
			wg.Go(func() { w.read(ctx, cs[1], id, endpoint, k, false) })
		}
	}
	wg.Wait()
}

// HammerProc is the first process of Hammer's readers (one per key and
// node).
const HammerProc = 830

// Hammer reads every live key through each of endpoints (the nodes that
// survive a leader kill) in a tight loop, one reader per key and node,
// until each reader has had 3 answers or d has passed: the followers refuse
// at once while no leader is known and forward the first read after one is
// elected, so some reads reach the new leader within milliseconds, before
// the commit of its first entry, the moment a leader that serves before
// its leadership barrier answers from an FSM that lacks the old leader's
// last acknowledged writes.
func (w *Offsets) Hammer(ctx context.Context, endpoints []string, d time.Duration) {
	epoch := w.epoch()
	until := time.Now().Add(d)
	var wg sync.WaitGroup
	proc := HammerProc
	for _, ep := range endpoints {
		w.mu.Lock()
		cs, ok := w.chasers[ep]
		w.mu.Unlock()
		if !ok {
			continue
		}
		for g := range w.Groups {
			for p := range w.Partitions {
				k := history.Key{Group: fmt.Sprintf("reg-%03d-%d", epoch, g), Topic: OffsetsTopic, Partition: int32(p)}
				id := proc
				proc++
				wg.Go(func() {
					for ok := 0; ok < 3 && time.Now().Before(until) && ctx.Err() == nil; {
						if w.read(ctx, cs[1], id, ep, k, false) {
							ok++
						}
						time.Sleep(2 * time.Millisecond)
					}
				})
			}
		}
	}
	wg.Wait()
}

// CloseChasers closes the chaser's connections.
func (w *Offsets) CloseChasers() {
	for _, c := range w.conns {
		c.Close()
	}
}

// final: process ids of the final reads.
func isFinalProc(proc int) bool { return proc >= 900 }

// Final reads every key ever used, each until it answers or ctx ends,
// through whichever node answers (process ids from 900).
func (w *Offsets) Final(ctx context.Context) {
	w.defaults()
	w.mu.Lock()
	keys := make([]history.Key, 0, len(w.used))
	for k := range w.used {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	conns := make([]cohortv1.GroupCoordinatorClient, len(w.Endpoints))
	for i, ep := range w.Endpoints {
		c, err := grpc.NewClient(ep, dialOptions(w.Creds.Client)...)
		if err != nil {
			continue
		}
		defer c.Close()
		conns[i] = cohortv1.NewGroupCoordinatorClient(c)
	}
	for _, k := range keys {
		for i := 0; ctx.Err() == nil; i++ {
			n := i % len(conns)
			if conns[n] != nil && w.read(ctx, conns[n], 900+n, w.Endpoints[n], k, true) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
