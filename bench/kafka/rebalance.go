package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/raftnode"
)

// How a rebalance is measured: a group of N kgo consumers is formed and
// left to become stable (every member has completed a SyncGroup of the
// same generation, and the partitions the members hold, as their
// OnPartitionsAssigned/Revoked/Lost callbacks say, are every partition
// exactly once). Then, each round, one kgo client more is created in the
// group, and the round lasts until the group is stable again at a newer
// generation, the new member included. The time so runs from the client's
// creation (its bootstrap and join are inside it) to the last member's
// callback that completes the assignment, and is read by polling the
// members every pollInterval. Most of it is the members' heartbeat timers
// (a member hears of a rebalance from its next heartbeat), so each round
// also gives the time from the last JoinGroup any member wrote (a kgo
// broker-write hook) to the end: the coordinator's own part, as
// cohort-bench's "after last rejoin".
//
// With --protocol consumer (KIP-848) there is no SyncGroup: a member is
// told its member epoch in every ConsumerGroupHeartbeat answer (kgo's
// GroupMetadata), and the coordinator moves each member to the group's
// newest epoch once it holds nothing another member is to get. The group
// is stable when every member has been told the same epoch, newer than the
// last round's, and the members hold every partition exactly once (the
// same callbacks). A join is a heartbeat at member epoch 0.

// pollInterval is how often the members' state is checked: the
// resolution of a rebalance time.
const pollInterval = 2 * time.Millisecond

// settle is how long a stable group is left alone at least before a
// round: the members' offset fetches and first fetches after a sync are
// not part of the next rebalance.
const settle = 500 * time.Millisecond

// phase is how far into a heartbeat interval round r starts, beyond
// settle, as a fraction of the interval. The members' heartbeat timers
// start when they sync, all at about the same moment, so a fixed wait
// would start every round at the same point of their timers and make the
// wait for the next heartbeat the same every round: all but nothing when
// the wait is a multiple of the interval and the join lands just before
// the members' heartbeats, a whole interval when it lands just after. A
// target whose join takes a few milliseconds longer would pay the whole
// interval every round. Rounds start instead at phases spread over the
// interval (the golden-ratio sequence: 0.62, 0.24, 0.85, 0.47, …), the same
// on both targets, so that each round's wait for a heartbeat is alike on
// both and the rounds together sample it.
func phase(r int) float64 {
	const golden = 0.6180339887498949
	f := float64(r+1) * golden
	return f - float64(int(f))
}

// member is one kgo consumer of the group and what its callbacks said.
type member struct {
	// cl is set once the client is created; the write hook may run
	// before.
	cl atomic.Pointer[kgo.Client]
	// consumer: the member uses the KIP-848 protocol.
	consumer bool

	mu sync.Mutex
	// gen is the generation of the member's last completed SyncGroup
	// (kgo calls OnPartitionsAssigned after every one, with nothing new
	// too); -1 before the first. Classic only.
	gen  int32
	held map[int32]struct{}

	// lastJoin is when the member last wrote a JoinGroup request, or
	// under consumer a ConsumerGroupHeartbeat at member epoch 0 (Unix
	// nanoseconds).
	lastJoin atomic.Int64
	// classicJoin: a consumer member wrote a JoinGroup, so kgo fell back
	// to the classic protocol (the target does not serve KIP-848).
	classicJoin atomic.Bool
	// heartbeats collects the round trips of the member's heartbeats.
	heartbeats *durations
}

// durations is a list of durations many members append to, while it is
// on.
type durations struct {
	on atomic.Bool
	mu sync.Mutex
	d  []time.Duration
}

func (l *durations) add(d time.Duration) {
	if !l.on.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, d)
}

// take returns the durations collected and starts a new list.
func (l *durations) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d
	l.d = nil
	return d
}

// OnBrokerE2E is kgo's HookBrokerE2E: it collects each heartbeat's round
// trip, from its write to its answer read (kgo's DurationE2E: the wait
// for a connection busy with an earlier request left out). A member
// heartbeats again one interval after an answer, so late answers spread
// the members' next heartbeats, and a round waits for the last.
func (m *member) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if (key == kmsg.Heartbeat.Int16() || key == kmsg.ConsumerGroupHeartbeat.Int16()) && e2e.Err() == nil {
		m.heartbeats.add(e2e.DurationE2E())
	}
}

// OnBrokerWrite is kgo's HookBrokerWrite: it notes when a join went out.
func (m *member) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	switch {
	case key == kmsg.JoinGroup.Int16() && m.consumer:
		m.classicJoin.Store(true)
	case key == kmsg.JoinGroup.Int16():
		m.lastJoin.Store(time.Now().UnixNano())
	case key == kmsg.ConsumerGroupHeartbeat.Int16() && m.consumer && m.epoch() < 0:
		// kgo stores the answer's epoch only after the write, so an
		// epoch not yet above 0 here is this request's: a join.
		m.lastJoin.Store(time.Now().UnixNano())
	}
}

// epoch is the member epoch kgo was last told (consumer only), -1 before
// the member joined. kgo keeps 0 while joining.
func (m *member) epoch() int32 {
	cl := m.cl.Load()
	if cl == nil {
		return -1
	}
	if _, e := cl.GroupMetadata(); e > 0 {
		return e
	}
	return -1
}

// state is what the member agrees on with the others, the generation of
// its last SyncGroup (classic) or its member epoch (consumer), and calls
// each partition it holds with mu held. A classic member's generation is
// read in the same critical section as its partitions: its callback
// changes both at once.
func (m *member) state(each func(p int32)) int32 {
	epoch := int32(-1)
	if m.consumer {
		epoch = m.epoch()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.held {
		each(p)
	}
	if m.consumer {
		return epoch
	}
	return m.gen
}

func (m *member) assigned(_ context.Context, cl *kgo.Client, tps map[string][]int32) {
	_, gen := cl.GroupMetadata()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ps := range tps {
		for _, p := range ps {
			m.held[p] = struct{}{}
		}
	}
	m.gen = gen
}

func (m *member) revoked(_ context.Context, _ *kgo.Client, tps map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ps := range tps {
		for _, p := range ps {
			delete(m.held, p)
		}
	}
}

// consumerGroup is the group measured on one target at one size.
type consumerGroup struct {
	t          *target
	name       string // group and topic
	partitions int
	consumer   bool // KIP-848 members
	opts       []kgo.Opt
	log        io.Writer // the members' kgo logs (nil: none)
	heartbeats durations // every member's heartbeat round trips

	mu      sync.Mutex
	members []*member
}

// join creates one more member.
func (g *consumerGroup) join() error {
	m := &member{consumer: g.consumer, gen: -1, held: map[int32]struct{}{}, heartbeats: &g.heartbeats}
	opts := append(slices.Clone(g.opts),
		kgo.OnPartitionsAssigned(m.assigned),
		kgo.OnPartitionsRevoked(m.revoked),
		kgo.OnPartitionsLost(m.revoked),
		kgo.WithHooks(m),
	)
	if g.log != nil {
		g.mu.Lock()
		prefix := fmt.Sprintf(" %s m%d ", g.t.name, len(g.members))
		g.mu.Unlock()
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(g.log, kgo.LogLevelInfo, func() string {
			return time.Now().Format(logTime) + prefix
		})))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("%s: consumer: %w", g.t.name, err)
	}
	m.cl.Store(cl)
	g.mu.Lock()
	g.members = append(g.members, m)
	g.mu.Unlock()
	return nil
}

// close closes every member, many at once: each leaves the group.
func (g *consumerGroup) close() {
	g.mu.Lock()
	ms := g.members
	g.members = nil
	g.mu.Unlock()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, m := range ms {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m.cl.Load().Close()
		})
	}
	wg.Wait()
}

// stable reports whether every member has synced the same generation
// (consumer: been told the same member epoch), newer than after, and the
// members hold every partition exactly once; gen is that generation.
func (g *consumerGroup) stable(after int32) (gen int32, ok bool) {
	g.mu.Lock()
	ms := g.members
	g.mu.Unlock()
	owners := make([]int, g.partitions)
	gen = -1
	count := func(p int32) {
		if int(p) < len(owners) {
			owners[p]++
		}
	}
	for i, m := range ms {
		mg := m.state(count)
		if i == 0 {
			gen = mg
		}
		if mg < 0 || mg <= after || mg != gen {
			return -1, false
		}
	}
	for _, n := range owners {
		if n != 1 {
			return -1, false
		}
	}
	return gen, len(ms) > 0
}

// lastJoin is the latest JoinGroup write of any member.
func (g *consumerGroup) lastJoin() time.Time {
	g.mu.Lock()
	ms := g.members
	g.mu.Unlock()
	var last int64
	for _, m := range ms {
		last = max(last, m.lastJoin.Load())
	}
	return time.Unix(0, last)
}

// classicJoins is how many consumer members fell back to the classic
// protocol.
func (g *consumerGroup) classicJoins() int {
	g.mu.Lock()
	ms := g.members
	g.mu.Unlock()
	n := 0
	for _, m := range ms {
		if m.classicJoin.Load() {
			n++
		}
	}
	return n
}

// genWord is what the members agree on under the group's protocol.
func (g *consumerGroup) genWord() string {
	if g.consumer {
		return "member epoch"
	}
	return "generation"
}

// describe says how far the group is from stable, for a timeout's error.
func (g *consumerGroup) describe() string {
	g.mu.Lock()
	ms := g.members
	g.mu.Unlock()
	gens := map[int32]int{}
	owners := make([]int, g.partitions)
	count := func(p int32) {
		if int(p) < len(owners) {
			owners[p]++
		}
	}
	for _, m := range ms {
		gens[m.state(count)]++
	}
	var parts []string
	for _, gen := range slices.Sorted(func(yield func(int32) bool) {
		for k := range gens {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%d at %s %d", gens[gen], g.genWord(), gen))
	}
	var unowned, shared int
	for _, n := range owners {
		switch {
		case n == 0:
			unowned++
		case n > 1:
			shared++
		}
	}
	return fmt.Sprintf("%d members synced (%s); of %d partitions %d unowned, %d held twice or more",
		len(ms), strings.Join(parts, ", "), g.partitions, unowned, shared)
}

// waitStable polls until the group is stable at a generation newer than
// after, for at most timeout.
func (g *consumerGroup) waitStable(ctx context.Context, after int32, timeout time.Duration) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if gen, ok := g.stable(after); ok {
			return gen, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("not stable after %s %d within %s: %s", g.genWord(), after, timeout, g.describe())
		case <-tick.C:
		}
	}
}

// groupResult is one target's figures at one size.
type groupResult struct {
	formed   time.Duration   // from the first client's creation to the first stable generation
	rounds   []time.Duration // each measured rebalance
	afters   []time.Duration // each round's time after the last JoinGroup written
	gens     []int32         // generations (consumer: member epochs) each round went through (a cooperative balancer's rebalance is two)
	entries  []uint64        // Raft entries each round wrote (replicated targets only)
	terms    []uint64        // elections during each round (replicated targets only)
	closeDur time.Duration   // closing every member
	rssMiB   int             // the process's resident memory with the group formed, -1 unknown
	// heartbeats are the round trips of the heartbeats answered while a
	// round ran, from its start to its end. Not those between rounds:
	// just after the group forms, each member fetches its offsets and
	// the metadata of a topic of size+rounds partitions, and kgo's
	// parsing of those answers keeps this process's cores busy for
	// seconds (at 1,000 members), which delays every answer read here,
	// a heartbeat's included, whichever the target.
	heartbeats []time.Duration
	err        error
}

// measureGroup forms a group of size members on t and measures rounds
// rebalances, each adding one member.
func measureGroup(ctx context.Context, o options, t *target, bal kgo.GroupBalancer, size int) (res groupResult) {
	res.rssMiB = -1
	name := fmt.Sprintf("bench-rebalance-%d", size)
	partitions := o.partitions
	if partitions == 0 {
		partitions = max(64, size+o.rounds)
	}
	if err := createTopic(ctx, t, name, partitions); err != nil {
		res.err = err
		return res
	}
	consumer := o.protocol == "consumer"
	g := &consumerGroup{t: t, name: name, partitions: partitions, consumer: consumer, log: o.clientLog, opts: []kgo.Opt{
		kgo.SeedBrokers(t.seeds...),
		kgo.ConsumerGroup(name),
		kgo.ConsumeTopics(name),
		kgo.Balancers(bal),
		kgo.DisableAutoCommit(),
	}}
	// A KIP-848 member heartbeats at the interval the coordinator's
	// answers give it; kgo's own is only for a coordinator that gives none.
	interval := o.heartbeat
	if consumer {
		g.opts = append(g.opts, kgo.ServerSideBalancer())
		interval = o.consumerHB
	} else {
		g.opts = append(g.opts, kgo.HeartbeatInterval(o.heartbeat))
	}
	defer func() {
		start := time.Now()
		g.close()
		res.closeDur = time.Since(start)
	}()
	start := time.Now()
	for range size {
		if err := g.join(); err != nil {
			res.err = err
			return res
		}
	}
	gen, err := g.waitStable(ctx, -1, o.roundTimeout)
	if err != nil {
		res.err = fmt.Errorf("%s, %d members forming: %w", t.name, size, err)
		return res
	}
	res.formed = time.Since(start)
	res.rssMiB = rssMiB()
	defer func() { res.heartbeats = g.heartbeats.take() }()
	if err := g.checkProtocol(); err != nil {
		res.err = fmt.Errorf("%s, %d members forming: %w", t.name, size, err)
		return res
	}
	for r := range o.rounds {
		select {
		case <-ctx.Done():
			res.err = ctx.Err()
			return res
		case <-time.After(settle + time.Duration(phase(r)*float64(interval))):
		}
		index0, term0 := indexOf(t), termOf(t)
		start := time.Now()
		if g.log != nil {
			roundMark(g.log, t.name, r, markStart)
		}
		g.heartbeats.on.Store(true)
		if err := g.join(); err != nil {
			res.err = err
			return res
		}
		next, err := g.waitStable(ctx, gen, o.roundTimeout)
		g.heartbeats.on.Store(false)
		if err != nil {
			res.err = fmt.Errorf("%s, %d members, round %d: %w", t.name, size+r, r+1, err)
			return res
		}
		end := time.Now()
		if g.log != nil {
			roundMark(g.log, t.name, r, markEnd)
		}
		if err := g.checkProtocol(); err != nil {
			res.err = fmt.Errorf("%s, %d members, round %d: %w", t.name, size+r, r+1, err)
			return res
		}
		res.rounds = append(res.rounds, end.Sub(start))
		res.afters = append(res.afters, end.Sub(g.lastJoin()))
		res.gens = append(res.gens, next-gen)
		if t.raftStats != nil {
			res.entries = append(res.entries, indexOf(t)-index0)
			res.terms = append(res.terms, termOf(t)-term0)
		}
		gen = next
	}
	return res
}

// checkProtocol fails a consumer group any of whose members fell back to
// the classic protocol: its rounds would not be KIP-848's.
func (g *consumerGroup) checkProtocol() error {
	if !g.consumer {
		return nil
	}
	if n := g.classicJoins(); n > 0 {
		return fmt.Errorf("%d member(s) fell back to the classic protocol (wrote a JoinGroup): the target does not serve KIP-848 to kgo", n)
	}
	return nil
}

// measureRebalances measures every size on every target, Cohort first,
// and writes one row per size.
func measureRebalances(ctx context.Context, o options, sizes []int, targets []*target, out io.Writer) error {
	bal, balName, err := balancer(o.protocol, o.balancer)
	if err != nil {
		return err
	}
	gensNote := "generations per round"
	if o.protocol == "consumer" {
		gensNote = "member epochs moved per round"
		fmt.Fprintf(out, "rebalance: consumer protocol (KIP-848, kgo ServerSideBalancer), server assignor %s, heartbeat interval the coordinators give the members: cohort %s (coordinator ConsumerHeartbeatInterval), kfake %s (group.consumer.heartbeat.interval.ms), one member added per round, %d rounds per size, each starting at its own phase of that interval (the same on both targets); time from the new client's creation until every member has been told the same, newer member epoch and the partitions are held exactly once (polled every %s); after last join: from the last ConsumerGroupHeartbeat at member epoch 0 (a join) any member wrote to that moment, which leaves out only the new client's bootstrap: existing members do not rejoin\n",
			balName, o.consumerHB, o.consumerHB, o.rounds, pollInterval)
	} else {
		fmt.Fprintf(out, "rebalance: classic protocol, balancer %s, heartbeat %s, Cohort's initial rebalance delay %s (kfake has none), one member added per round, %d rounds per size, each starting at its own phase of the heartbeat interval (the same on both targets); time from the new client's creation until every member has synced one newer generation and the partitions are held exactly once (polled every %s); after last join: from the last JoinGroup any member wrote to that moment\n",
			balName, o.heartbeat, o.initialDelay, o.rounds, pollInterval)
	}
	cols := []string{"members"}
	for _, t := range targets {
		cols = append(cols, t.name+" median", t.name+" max")
	}
	cols = append(cols, "median ratio")
	for _, t := range targets {
		cols = append(cols, t.name+" after last join")
	}
	cols = append(cols, "after last join ratio")
	tb := report.NewTable(out, cols...)
	defer tb.Flush()
	for _, size := range sizes {
		row := []string{strconv.Itoa(size)}
		var medians, afters []time.Duration
		for _, t := range targets {
			term0 := termOf(t)
			res := measureGroup(ctx, o, t, bal, size)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if res.err != nil {
				fmt.Fprintf(out, "rebalance %s, %d members: %v\n", t.name, size, res.err)
			}
			fmt.Fprintf(out, "rebalance %s, %d members: formed in %s, %s; rounds %v, after last join %v; %s %v%s; %s; all members closed in %s%s\n",
				t.name, size, res.formed.Round(time.Millisecond), rssNote(res.rssMiB), msList(res.rounds), msList(res.afters), gensNote, res.gens, entriesNote(res.entries, res.terms), heartbeatNote(res.heartbeats), res.closeDur.Round(time.Millisecond), termNote(t, term0))
			if len(res.rounds) < o.rounds {
				row = append(row, "-", "-")
				medians, afters = append(medians, 0), append(afters, 0)
				continue
			}
			p50, _, maxD := report.Percentiles(slices.Clone(res.rounds))
			a50, _, _ := report.Percentiles(slices.Clone(res.afters))
			row = append(row, report.MS(p50), report.MS(maxD))
			medians, afters = append(medians, p50), append(afters, a50)
		}
		row = append(row, ratio(float64(medians[0]), float64(medians[1])))
		for _, a := range afters {
			if a > 0 {
				row = append(row, report.MS(a))
			} else {
				row = append(row, "-")
			}
		}
		row = append(row, ratio(float64(afters[0]), float64(afters[1])))
		tb.Row(row...)
	}
	return nil
}

// termOf is the highest Raft term among t's nodes (0: not replicated).
func termOf(t *target) uint64 {
	return highest(t, func(st raftnode.Stats) uint64 { return st.Term })
}

// indexOf is the highest last log index among t's nodes (0: not
// replicated).
func indexOf(t *target) uint64 {
	return highest(t, func(st raftnode.Stats) uint64 { return st.LastIndex })
}

// highest is the largest figure f reads from any of t's nodes.
func highest(t *target, f func(raftnode.Stats) uint64) uint64 {
	if t.raftStats == nil {
		return 0
	}
	var v uint64
	for _, st := range t.raftStats() {
		v = max(v, f(st))
	}
	return v
}

// entriesNote lists the Raft entries each round wrote and the elections
// during each ("" for a target that writes none).
func entriesNote(entries, terms []uint64) string {
	if len(entries) == 0 {
		return ""
	}
	return fmt.Sprintf("; Raft entries per round %v, elections per round %v", entries, terms)
}

// heartbeatNote summarises heartbeat round trips: their number and
// median, 99th percentile and largest.
func heartbeatNote(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no heartbeats answered during the rounds"
	}
	p50, p99, most := report.Percentiles(ds)
	return fmt.Sprintf("heartbeat round trips during the rounds: %d, p50 %s, p99 %s, max %s", len(ds), report.MS(p50), report.MS(p99), report.MS(most))
}

// msList is ds in whole milliseconds, in order.
func msList(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = strconv.FormatInt(d.Milliseconds(), 10)
	}
	return "[" + strings.Join(parts, " ") + "] ms"
}

// termNote says whether t's Raft term moved since term0: an election
// (e.g. a leader whose lease lapsed while the process was short of CPU),
// which sends every member back to FindCoordinator and can add a
// rebalance.
func termNote(t *target, term0 uint64) string {
	if t.raftStats == nil {
		return ""
	}
	if term := termOf(t); term != term0 {
		return fmt.Sprintf("; Raft term %d → %d: %d election(s) during this size", term0, term, term-term0)
	}
	return fmt.Sprintf("; Raft term %d throughout", term0)
}

// rssMiB is the process's resident memory (VmRSS), or -1.
func rssMiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if kb, err := strconv.Atoi(f[0]); err == nil {
					return kb / 1024
				}
			}
		}
	}
	return -1
}

func rssNote(mib int) string {
	if mib < 0 {
		return "resident memory unknown"
	}
	return fmt.Sprintf("process resident memory %d MiB when formed", mib)
}
