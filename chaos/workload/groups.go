package workload

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/chaos/history"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Groups is the consumer-group workload.
type Groups struct {
	Endpoints []string
	Rec       *history.Recorder
	Log       *slog.Logger
	Seed      uint64
	// Creds: members are clients; the final describe, which compares
	// member IDs, is an admin's (a client's hides them).
	Creds Credentials
	// Groups (default 2) with Slots members each (default 4); every
	// second slot is a static member (instance ID kept across restarts).
	Groups, Slots int
	// Partitions of the topic every member subscribes to (default 6).
	Partitions int
	// SessionTimeout of the members (default 6 s).
	SessionTimeout time.Duration
	// Lifetime bounds how long one member incarnation lives before it
	// leaves, crashes or (static) restarts (default 10–40 s). Zero Max
	// turns churn off.
	LifetimeMin, LifetimeMax time.Duration
	// CommitEvery is the pause between a member's commits (default 300 ms).
	CommitEvery time.Duration
	// Member faults. Duplicates is the chance that a static incarnation,
	// at the end of its life, is not stopped but joined by a second
	// process with its instance ID (it becomes a zombie the group must
	// fence: KIP-345); CutJoins the chance that a rejoin's JoinGroup is cut
	// (its connection reset) while it waits at the join barrier. Defaults
	// 0.25 and 0.2; negative: never. Freezes is the chance that a dynamic
	// member, at the end of its life, freezes instead (every call held for
	// 1.5 session timeouts, then sent with its old member ID and
	// generation: it must be fenced) and lives on; ZombieCommits the chance
	// that a commit is held back until the group has moved to a newer
	// generation and then delivered (the client was told it failed), as a
	// delayed packet would be: it must be refused. Defaults 0.15 and 0.03.
	Duplicates, CutJoins, Freezes, ZombieCommits float64

	procs   atomic.Int64
	offsets sync.Map // history.Key → *atomic.Int64, the next offset of a partition
	churn   atomic.Bool
	mu      sync.Mutex
	live    map[string]*incarnation // slot → current incarnation
	gens    map[string]int32        // group → newest generation a member was answered
	held    sync.WaitGroup          // zombie commits not yet delivered
	runDone <-chan struct{}         // closed when Run's context ends
	// noRestart: slots start no new incarnation (after CrashOne).
	noRestart atomic.Bool
	zombies   sync.WaitGroup // duplicated incarnations still running
}

type incarnation struct {
	slot, group, instance, name string
	proc                        int
	member                      *client.Member
	crashed                     atomic.Bool
	// thawed is closed when a frozen member resumes (nil: not frozen).
	thawed atomic.Pointer[chan struct{}]
	// kill crashes the member (CrashOne).
	kill  chan struct{}
	mu    sync.Mutex
	owned []client.TopicPartition
	rng   *rand.Rand // for the interceptor's faults, under mu
}

// cutAfter is how long a JoinGroup chosen to be cut runs first: half the
// cuts come 5–50 ms in, while its entry is being committed (the entry is
// applied after its caller left: the engine must follow it all the same),
// the others 500 ms in, when it waits at the barrier. ok is false when the
// call is not to be cut.
func (inc *incarnation) cutAfter(p float64) (d time.Duration, ok bool) {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if inc.rng.Float64() >= p {
		return 0, false
	}
	if inc.rng.IntN(2) == 0 {
		return 5*time.Millisecond + time.Duration(inc.rng.Int64N(int64(45*time.Millisecond))), true
	}
	return 500 * time.Millisecond, true
}

func (w *Groups) defaults() {
	if w.Groups == 0 {
		w.Groups = 2
	}
	if w.Slots == 0 {
		w.Slots = 4
	}
	if w.Partitions == 0 {
		w.Partitions = 6
	}
	if w.SessionTimeout == 0 {
		w.SessionTimeout = 6 * time.Second
	}
	if w.LifetimeMin == 0 && w.LifetimeMax == 0 {
		w.LifetimeMin, w.LifetimeMax = 10*time.Second, 40*time.Second
	}
	if w.CommitEvery == 0 {
		w.CommitEvery = 300 * time.Millisecond
	}
	if w.Duplicates == 0 {
		w.Duplicates = 0.25
	}
	if w.CutJoins == 0 {
		w.CutJoins = 0.2
	}
	if w.Freezes == 0 {
		w.Freezes = 0.15
	}
	if w.ZombieCommits == 0 {
		w.ZombieCommits = 0.03
	}
	w.mu.Lock()
	if w.live == nil {
		w.live = map[string]*incarnation{}
		w.gens = map[string]int32{}
	}
	w.mu.Unlock()
}

// GroupIDs are the groups the workload runs.
func (w *Groups) GroupIDs() []string {
	w.defaults()
	var out []string
	for g := range w.Groups {
		out = append(out, fmt.Sprintf("grp-%d", g))
	}
	return out
}

// Setup creates the topic.
func (w *Groups) Setup(ctx context.Context) error {
	w.defaults()
	return createTopic(ctx, w.Endpoints, w.Creds.Admin, GroupsTopic, int32(w.Partitions))
}

// StopChurn lets every slot keep (or start) one member that stays.
func (w *Groups) StopChurn() { w.churn.Store(false) }

// Run drives every slot until ctx ends; members are then closed.
func (w *Groups) Run(ctx context.Context) {
	w.defaults()
	w.mu.Lock()
	w.runDone = ctx.Done()
	w.mu.Unlock()
	w.churn.Store(w.LifetimeMax > 0)
	var wg sync.WaitGroup
	for gi, g := range w.GroupIDs() {
		for s := range w.Slots {
			slot := fmt.Sprintf("%s/s%d", g, s)
			instance := ""
			if s%2 == 1 {
				instance = fmt.Sprintf("%s-static-%d", g, s)
			}
			rng := rand.New(rand.NewPCG(w.Seed, uint64(1000+gi*100+s)))
			wg.Go(func() { w.slot(ctx, rng, slot, g, instance) })
		}
	}
	wg.Wait()
	w.zombies.Wait()
	w.held.Wait()
}

// memberEvent is event with the incarnation's member ID.
func (w *Groups) memberEvent(f string, inc *incarnation, note string) {
	w.Rec.Add(history.Entry{Type: history.TypeEvent, F: f, Group: inc.group, Instance: inc.instance, Incarnation: inc.name,
		Process: inc.proc, Member: inc.member.MemberID(), Start: w.Rec.Now(), Note: note})
}

func (w *Groups) event(f, group, instance, name string, proc int, note string) {
	w.Rec.Add(history.Entry{Type: history.TypeEvent, F: f, Group: group, Instance: instance, Incarnation: name,
		Process: proc, Start: w.Rec.Now(), Note: note})
}

// slot runs member incarnations one after another.
func (w *Groups) slot(ctx context.Context, rng *rand.Rand, slot, group, instance string) {
	// Stagger the first joins a little.
	sleep(ctx, time.Duration(rng.Int64N(int64(2*time.Second))))
	how := ""
	for n := 0; ctx.Err() == nil; n++ {
		inc := &incarnation{slot: slot, group: group, instance: instance, name: fmt.Sprintf("%s#%d", slot, n),
			proc: 1000 + int(w.procs.Add(1)), rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), kill: make(chan struct{})}
		ev := history.EvMemberStart
		switch {
		case how == history.EvMemberDuplicate:
			ev = history.EvMemberDuplicate
		case n > 0 && instance != "":
			ev = history.EvMemberRestart
		}
		how = w.incarnate(ctx, rng, inc, ev)
		if ctx.Err() != nil || w.noRestart.Load() {
			return
		}
		if how == history.EvMemberDuplicate {
			continue // the second process starts at once
		}
		// A static member restarts within its session timeout; others come
		// back after a pause.
		pause := time.Duration(rng.Int64N(int64(3 * time.Second)))
		if how == history.EvMemberCrash && instance != "" {
			pause = w.SessionTimeout / 3
		}
		sleep(ctx, pause)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// incarnate runs one member until its lifetime ends (or ctx ends) and
// returns how it ended.
func (w *Groups) incarnate(ctx context.Context, rng *rand.Rand, inc *incarnation, ev string) string {
	m, err := client.NewMember(client.Config{
		Endpoints:        w.Endpoints,
		GroupID:          inc.group,
		InstanceID:       inc.instance,
		ClientID:         inc.name,
		Topics:           []string{GroupsTopic},
		SessionTimeout:   w.SessionTimeout,
		RebalanceTimeout: 2 * w.SessionTimeout,
		RequestTimeout:   2 * time.Second,
		RetryBackoffMax:  time.Second,
		Credentials:      w.Creds.Client,
		DialOptions:      []grpc.DialOption{grpc.WithUnaryInterceptor(w.interceptor(inc))},
		OnAssigned: func(_ context.Context, _ int32, a []client.TopicPartition) {
			inc.mu.Lock()
			inc.owned = a
			inc.mu.Unlock()
		},
		OnRevoked: func(context.Context, []client.TopicPartition) {
			inc.mu.Lock()
			inc.owned = nil
			inc.mu.Unlock()
		},
	})
	if err != nil {
		w.Log.Error("groups: new member", "slot", inc.slot, "err", err)
		sleep(ctx, time.Second)
		return history.EvMemberLeave
	}
	inc.member = m
	w.mu.Lock()
	w.live[inc.slot] = inc
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.live[inc.slot] == inc {
			delete(w.live, inc.slot)
		}
		w.mu.Unlock()
	}()
	w.event(ev, inc.group, inc.instance, inc.name, inc.proc, "")
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	zombie := false
	defer func() {
		if !zombie {
			stop()
		}
	}()
	ran := make(chan error, 1)
	go func() { ran <- m.Run(runCtx) }()
	var commits sync.WaitGroup
	commits.Go(func() { w.committer(runCtx, inc) })

	life := w.LifetimeMin
	if w.LifetimeMax > w.LifetimeMin {
		life += time.Duration(rng.Int64N(int64(w.LifetimeMax - w.LifetimeMin)))
	}
	lifeEnd := time.After(life)
	how := history.EvMemberLeave
	froze := false
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-inc.kill:
			done, how = true, history.EvMemberCrash
		case err := <-ran:
			w.Log.Warn("groups: member stopped by itself", "incarnation", inc.name, "err", err)
			stop()
			commits.Wait()
			w.memberEvent(history.EvMemberCrash, inc, "member stopped: "+errString(err))
			return history.EvMemberCrash
		case <-lifeEnd:
			if !w.churn.Load() {
				lifeEnd = time.After(time.Second)
				continue
			}
			if inc.instance == "" && !froze && rng.Float64() < w.Freezes {
				froze = true
				w.freeze(ctx, inc)
				lifeEnd = time.After(w.SessionTimeout)
				continue
			}
			done = true
			switch {
			case inc.instance != "" && rng.Float64() < w.Duplicates:
				how = history.EvMemberDuplicate
			case rng.IntN(2) == 0:
				how = history.EvMemberCrash
			}
		}
	}
	if how == history.EvMemberDuplicate {
		// This process keeps running; the slot's next incarnation, with
		// the same instance ID, must fence it.
		zombie = true
		w.zombies.Go(func() { w.watchZombie(ctx, inc, ran, stop, &commits) })
		return how
	}
	if how == history.EvMemberCrash {
		// The process dies: nothing more leaves it, not even a LeaveGroup.
		inc.crashed.Store(true)
		w.memberEvent(history.EvMemberCrash, inc, "")
		stop()
		commits.Wait()
		<-ran
		return how
	}
	stop()
	commits.Wait()
	// The leave is recorded as it starts: the others may rejoin the next
	// generation before LeaveGroup's answer reaches this member, and the
	// failover checker explains a generation by churn that began before it.
	w.event(history.EvMemberLeave, inc.group, inc.instance, inc.name, inc.proc, "")
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = m.Close(cctx)
	cancel()
	<-ran
	return how
}

// watchZombie waits for a duplicated incarnation to stop by itself (the
// group fences it: FENCED_INSTANCE_ID is fatal to the client) and records
// how it ended; one still running after three session timeouts is
// recorded as having survived, and crashed.
func (w *Groups) watchZombie(ctx context.Context, inc *incarnation, ran <-chan error, stop context.CancelFunc, commits *sync.WaitGroup) {
	limit := time.NewTimer(3 * w.SessionTimeout)
	defer limit.Stop()
	ev, note, kill := history.EvZombieStopped, "", false
	select {
	case err := <-ran:
		note = errString(err)
	case <-limit.C:
		ev, kill = history.EvZombieSurvived, true
	case <-ctx.Done():
		note, kill = "run ended", true
	}
	if kill {
		inc.crashed.Store(true)
	}
	stop()
	commits.Wait()
	if kill {
		<-ran
	}
	w.event(ev, inc.group, inc.instance, inc.name, inc.proc, note)
}

// freeze holds every call of the member for 1.5 session timeouts, as if
// its process were stopped, then lets them go with what they carried: the
// old member ID and generation, which the group must have fenced.
func (w *Groups) freeze(ctx context.Context, inc *incarnation) {
	thawed := make(chan struct{})
	inc.thawed.Store(&thawed)
	w.memberEvent(history.EvMemberFreeze, inc, "")
	sleep(ctx, w.SessionTimeout*3/2)
	w.memberEvent(history.EvMemberResume, inc, "")
	close(thawed)
}

// held waits while the member is frozen and reports whether it was.
func (inc *incarnation) held() bool {
	ch := inc.thawed.Load()
	if ch == nil {
		return false
	}
	select {
	case <-*ch:
		return false
	default:
	}
	<-*ch
	return true
}

// committer commits the next offset of every owned partition, over and
// over: offsets per partition only grow, across members.
func (w *Groups) committer(ctx context.Context, inc *incarnation) {
	for ctx.Err() == nil {
		sleep(ctx, w.CommitEvery)
		inc.mu.Lock()
		owned := slices.Clone(inc.owned)
		inc.mu.Unlock()
		if len(owned) == 0 || ctx.Err() != nil {
			continue
		}
		var pos []client.PartitionOffset
		for _, tp := range owned {
			k := history.Key{Group: inc.group, Topic: tp.Topic, Partition: tp.Partition}
			c, _ := w.offsets.LoadOrStore(k, new(atomic.Int64))
			pos = append(pos, client.PartitionOffset{TopicPartition: tp, Offset: c.(*atomic.Int64).Add(1)})
		}
		// Up to three callers commit a share of the partitions each, at
		// once: the first goes out alone and the others wait and share
		// the next request (client/commit.go), under the faults too. A
		// partition is in one share, so its offsets still only grow.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		shares := make([][]client.PartitionOffset, min(3, len(pos)))
		for i, o := range pos {
			shares[i%len(shares)] = append(shares[i%len(shares)], o)
		}
		var wg sync.WaitGroup
		for _, share := range shares {
			wg.Go(func() { _ = inc.member.Commit(cctx, share) })
		}
		wg.Wait()
		cancel()
	}
}

// errCrashed is what a crashed member's calls get: it no longer exists.
var errCrashed = status.Error(codes.Unavailable, "chaos: this member client crashed")

// interceptor records every attempt of the member's group calls.
func (w *Groups) interceptor(inc *incarnation) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if inc.crashed.Load() {
			return errCrashed
		}
		if inc.held() {
			// The frozen process's call goes out now, with a fresh
			// deadline: its own ran out while it was stopped.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			ctx = fctx
		}
		start := w.Rec.Now()
		if c, ok := req.(*cohortv1.OffsetCommitRequest); ok && c.GetGeneration() >= 0 && inc.chance(w.ZombieCommits) {
			w.held.Go(func() { w.zombieCommit(inc, c, method, cc, invoker, opts) })
			return status.Error(codes.Unavailable, "chaos: commit delayed in the network")
		}
		if j, ok := req.(*cohortv1.JoinGroupRequest); ok && j.GetMemberId() != "" {
			if after, cut := inc.cutAfter(w.CutJoins); cut {
				return w.cutJoin(ctx, inc, start, after, j, method, reply, cc, invoker, opts)
			}
		}
		var c call
		err := invoker(ctx, method, req, reply, cc, append(opts, c.options()...)...)
		return w.record(inc, start, &c, cc, req, reply, err, "")
	}
}

func (inc *incarnation) chance(p float64) bool {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	return inc.rng.Float64() < p
}

// zombieCommit delivers a commit the member was told had failed once the
// group has moved past its generation (a member was answered a newer one):
// a packet delayed past a rebalance. The group must refuse it (checkers 10
// and 11 judge it). With no newer generation within three session
// timeouts it is dropped.
func (w *Groups) zombieCommit(inc *incarnation, req *cohortv1.OffsetCommitRequest, method string, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts []grpc.CallOption) {
	gen := req.GetGeneration()
	limit := time.Now().Add(3 * w.SessionTimeout)
	newer := int32(0)
	w.mu.Lock()
	done := w.runDone
	w.mu.Unlock()
	for time.Now().Before(limit) && !inc.crashed.Load() {
		w.mu.Lock()
		newer = w.gens[inc.group]
		w.mu.Unlock()
		if newer > gen {
			break
		}
		select {
		case <-done:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	if inc.crashed.Load() || newer <= gen {
		// Lost in the network instead: delivered late within its own
		// generation it would be a legitimate commit of a lower offset.
		return
	}
	note := fmt.Sprintf("generation %d sent after generation %d was answered", gen, newer)
	w.memberEvent(history.EvZombieCommit, inc, note)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var c call
	reply := new(cohortv1.OffsetCommitResponse)
	start := w.Rec.Now()
	err := invoker(ctx, method, req, reply, cc, append(opts, c.options()...)...)
	_ = w.record(inc, start, &c, cc, req, reply, err, history.NoteZombie+note)
}

// cutJoin sends a JoinGroup and resets its connection after the given
// time, if it has not been answered by then: the client sees a transport
// error and retries.
func (w *Groups) cutJoin(ctx context.Context, inc *incarnation, start int64, after time.Duration, j *cohortv1.JoinGroupRequest,
	method string, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	var c call
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(after, cancel)
	err := invoker(cctx, method, j, reply, cc, append(opts, c.options()...)...)
	if timer.Stop() {
		return w.record(inc, start, &c, cc, j, reply, err, "") // answered in time
	}
	w.Rec.Add(history.Entry{Type: history.TypeOp, F: history.FJoin, Process: inc.proc, Start: start, End: w.Rec.Now(),
		Node: cc.Target(), Group: inc.group, Instance: inc.instance, Incarnation: inc.name, Member: j.GetMemberId(),
		Outcome: history.Info, Error: "cut by the chaos client"})
	w.Rec.Add(history.Entry{Type: history.TypeEvent, F: history.EvJoinCut, Group: inc.group, Instance: inc.instance,
		Incarnation: inc.name, Process: inc.proc, Member: j.GetMemberId(), Start: w.Rec.Now(), Note: after.String()})
	return status.Error(codes.Unavailable, "chaos: JoinGroup connection cut "+after.String()+" in")
}

// record adds one group call to the history and returns its error.
func (w *Groups) record(inc *incarnation, start int64, c *call, cc *grpc.ClientConn, req, reply any, err error, note string) error {
	if inc.crashed.Load() && err == nil {
		// Answered after the crash: the dead process never saw it.
		return errCrashed
	}
	e := history.Entry{Type: history.TypeOp, Process: inc.proc, Start: start, End: w.Rec.Now(), Node: cc.Target(),
		Group: inc.group, Instance: inc.instance, Incarnation: inc.name, Note: note}
	e.Outcome, e.Error = classify(err, c), errString(err)
	switch r := req.(type) {
	case *cohortv1.JoinGroupRequest:
		e.F = history.FJoin
		e.Member = r.GetMemberId()
		if resp, ok := reply.(*cohortv1.JoinGroupResponse); ok && err == nil {
			e.Member, e.Generation, e.Leader = resp.GetMemberId(), resp.GetGeneration(), resp.GetLeaderId()
			for _, jm := range resp.GetMembers() {
				e.Members = append(e.Members, history.Member{Member: jm.GetMemberId(), Instance: jm.GetInstanceId()})
			}
		}
	case *cohortv1.SyncGroupRequest:
		e.F, e.Member, e.Generation = history.FSync, r.GetMemberId(), r.GetGeneration()
		for _, ma := range r.GetAssignments() {
			e.Plan = append(e.Plan, history.Member{Member: ma.GetMemberId(), Assignment: partitions(ma.GetAssignment())})
		}
		if resp, ok := reply.(*cohortv1.SyncGroupResponse); ok && err == nil {
			e.Assignment = partitions(resp.GetAssignment())
		}
		if err != nil {
			e.Plan = nil
		}
	case *cohortv1.HeartbeatRequest:
		e.F, e.Member, e.Generation = history.FHeartbeat, r.GetMemberId(), r.GetGeneration()
	case *cohortv1.OffsetCommitRequest:
		e.F, e.Member, e.Generation = history.FCommit, r.GetMemberId(), r.GetGeneration()
		results := map[history.Partition]*cohortv1.OffsetCommitPartitionResult{}
		if resp, ok := reply.(*cohortv1.OffsetCommitResponse); ok && err == nil {
			for _, p := range resp.GetPartitions() {
				results[history.Partition{Topic: p.GetTopic(), Partition: p.GetPartition()}] = p
			}
		}
		for _, o := range r.GetOffsets() {
			p := history.Partition{Topic: o.GetTopic(), Partition: o.GetPartition()}
			pc := history.PartitionCommit{Partition: p, Offset: o.GetOffset(), Outcome: e.Outcome}
			if res, ok := results[p]; ok && res.GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
				pc.Outcome, pc.Error = history.Fail, res.GetError().String()
			}
			e.Commits = append(e.Commits, pc)
		}
	case *cohortv1.LeaveGroupRequest:
		e.F = "leave"
		if ms := r.GetMembers(); len(ms) > 0 {
			e.Member = ms[0].GetMemberId()
		}
	default:
		return err
	}
	if e.Outcome == history.OK && (e.F == history.FJoin || e.F == history.FSync || e.F == history.FHeartbeat) {
		w.mu.Lock()
		w.gens[e.Group] = max(w.gens[e.Group], e.Generation)
		w.mu.Unlock()
	}
	w.Rec.Add(e)
	return err
}

func partitions(a *cohortv1.Assignment) []history.Partition {
	out := []history.Partition{}
	for _, t := range a.GetTopics() {
		for _, p := range t.GetPartitions() {
			out = append(out, history.Partition{Topic: t.GetTopic(), Partition: p})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// LiveMembers returns each group's live member IDs ("" for one that has
// not joined yet).
func (w *Groups) LiveMembers() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for _, inc := range w.live {
		if inc.member != nil {
			out[inc.group] = append(out[inc.group], inc.member.MemberID())
		}
	}
	return out
}

// AwaitStable polls until every group is Stable with exactly its live
// members, for at most window, and records one final describe per group.
func (w *Groups) AwaitStable(ctx context.Context, window time.Duration) {
	conn, err := client.Dial(client.ConnConfig{Endpoints: w.Endpoints, Credentials: w.Creds.Admin, RequestTimeout: 2 * time.Second})
	if err != nil {
		return
	}
	defer conn.Close()
	start := w.Rec.Now()
	deadline := time.Now().Add(window)
	pending := slices.Clone(w.GroupIDs())
	last := map[string]string{}
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		described, err := client.DescribeGroups(cctx, conn.Groups(), &cohortv1.DescribeGroupsRequest{GroupIds: pending})
		cancel()
		if err != nil {
			for _, g := range pending {
				last[g] = "describe: " + errString(err)
			}
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		live := w.LiveMembers()
		var still []string
		for _, d := range described {
			var got []string
			for _, m := range d.GetMembers() {
				got = append(got, m.GetMemberId())
			}
			want := slices.Clone(live[d.GetGroupId()])
			slices.Sort(got)
			slices.Sort(want)
			if d.GetState() == "Stable" && slices.Equal(got, want) && !slices.Contains(want, "") {
				w.Rec.Add(history.Entry{Type: history.TypeOp, Process: 950, F: history.FDescribe, Final: true, Group: d.GetGroupId(),
					State: d.GetState(), Generation: d.GetGeneration(), Start: start, End: w.Rec.Now(), Outcome: history.OK})
				continue
			}
			last[d.GetGroupId()] = fmt.Sprintf("state %s generation %d members %v, live members %v", d.GetState(), d.GetGeneration(), got, want)
			still = append(still, d.GetGroupId())
		}
		pending = still
		if len(pending) > 0 {
			sleep(ctx, 500*time.Millisecond)
		}
	}
	for _, g := range pending {
		w.Rec.Add(history.Entry{Type: history.TypeOp, Process: 950, F: history.FDescribe, Final: true, Group: g,
			Start: start, End: w.Rec.Now(), Outcome: history.Fail, Error: last[g]})
	}
}

// Monitor describes every group every 500 ms until ctx ends and records
// the answers (state, generation, members): checker 12 reads from them
// whether crashed members were expired during the run.
func (w *Groups) Monitor(ctx context.Context) {
	w.defaults()
	conn, err := client.Dial(client.ConnConfig{Endpoints: w.Endpoints, Credentials: w.Creds.Admin, RequestTimeout: 2 * time.Second})
	if err != nil {
		w.Log.Error("groups monitor", "err", err)
		return
	}
	defer conn.Close()
	for ctx.Err() == nil {
		start := w.Rec.Now()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		described, err := client.DescribeGroups(cctx, conn.Groups(), &cohortv1.DescribeGroupsRequest{GroupIds: w.GroupIDs()})
		cancel()
		if err == nil {
			end := w.Rec.Now()
			for _, d := range described {
				e := history.Entry{Type: history.TypeOp, Process: 970, F: history.FDescribe, Group: d.GetGroupId(),
					State: d.GetState(), Generation: d.GetGeneration(), Start: start, End: end, Outcome: history.OK}
				for _, m := range d.GetMembers() {
					e.Members = append(e.Members, history.Member{Member: m.GetMemberId(), Instance: m.GetInstanceId()})
				}
				w.Rec.Add(e)
			}
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// CrashOne crashes one live dynamic member once the groups are stable
// after the final heal and starts no new member in its place. It returns
// the member's group and ID ("" when there was none to crash). With
// AwaitGone, checker 12 then judges an expiry under a leadership that
// lasts (during the faults few crashes see one long enough).
func (w *Groups) CrashOne() (group, member string) {
	w.noRestart.Store(true)
	w.mu.Lock()
	var victim *incarnation
	for _, sl := range slices.Sorted(maps.Keys(w.live)) {
		if inc := w.live[sl]; inc.instance == "" && inc.member != nil && inc.member.MemberID() != "" {
			victim = inc
			break
		}
	}
	w.mu.Unlock()
	if victim == nil {
		return "", ""
	}
	member = victim.member.MemberID()
	close(victim.kill)
	return victim.group, member
}

// AwaitGone waits until member is no longer in group, or wait has passed.
func (w *Groups) AwaitGone(ctx context.Context, group, member string, wait time.Duration) {
	conn, err := client.Dial(client.ConnConfig{Endpoints: w.Endpoints, Credentials: w.Creds.Admin, RequestTimeout: 2 * time.Second})
	if err != nil {
		return
	}
	defer conn.Close()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 500*time.Millisecond)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		described, err := client.DescribeGroups(cctx, conn.Groups(), &cohortv1.DescribeGroupsRequest{GroupIds: []string{group}})
		cancel()
		if err != nil || len(described) == 0 {
			continue
		}
		if !slices.ContainsFunc(described[0].GetMembers(), func(m *cohortv1.GroupMemberDescription) bool { return m.GetMemberId() == member }) {
			return
		}
	}
}

// FinalFetch reads every partition's committed offset of every group
// (after the members stopped), for the durability checker.
func (w *Groups) FinalFetch(ctx context.Context) {
	conn, err := client.Dial(client.ConnConfig{Endpoints: w.Endpoints, Credentials: w.Creds.Client, RequestTimeout: 2 * time.Second})
	if err != nil {
		return
	}
	defer conn.Close()
	for _, g := range w.GroupIDs() {
		for ctx.Err() == nil {
			e := history.Entry{Type: history.TypeOp, Process: 960, F: history.FFetch, Final: true, Group: g, Start: w.Rec.Now()}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			fetched, err := client.FetchOffsets(cctx, conn.Groups(), &cohortv1.OffsetFetchRequest{GroupId: g})
			cancel()
			if err != nil {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			got := map[int32]int64{}
			for _, p := range fetched {
				if p.GetTopic() == GroupsTopic {
					got[p.GetPartition()] = p.GetOffset()
				}
			}
			end := w.Rec.Now()
			for p := range int32(w.Partitions) {
				v, ok := got[p]
				if !ok {
					v = -1
				}
				e := e
				e.Topic, e.Partition, e.Value, e.End, e.Outcome = GroupsTopic, p, history.Int64(v), end, history.OK
				w.Rec.Add(e)
			}
			break
		}
	}
}
