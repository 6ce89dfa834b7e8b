package workload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What the Kafka workload uses: a topic made through the gRPC admin API
// and a group that only Kafka clients join, named for the protocol so that
// a classic and a consumer group can never be the same group.
const (
	KafkaTopic         = "kafka-orders"
	KafkaGroup         = "kafka-billing"
	KafkaConsumerGroup = "kafka-billing-kip848"
	kafkaPartitions    = 8
)

// The group protocols the Kafka workload's consumers speak.
const (
	// KafkaClassic: JoinGroup, SyncGroup and Heartbeat, the assignment
	// made by the consumers' cooperative-sticky balancer.
	KafkaClassic = "classic"
	// KafkaConsumer: Kafka's consumer group protocol (KIP-848),
	// ConsumerGroupHeartbeat, the assignment made by the coordinator
	// (its "uniform" assignor) and fenced by member epochs.
	KafkaConsumer = "consumer"
)

// CheckKafkaProtocol says why p is not a protocol of the Kafka workload;
// nil when it is ("" is the default, classic).
func CheckKafkaProtocol(p string) error {
	switch p {
	case "", KafkaClassic, KafkaConsumer:
		return nil
	}
	return fmt.Errorf("kafka workload: unknown group protocol %q: want %s or %s", p, KafkaClassic, KafkaConsumer)
}

// Kafka runs kgo consumers (franz-go, an independent Kafka client) of one
// group through the nodes' Kafka listeners while faults happen: the
// cooperative-sticky protocol (Protocol classic) or the coordinator's
// assignments (Protocol consumer, KIP-848), no autocommit, a commit of
// every held partition every CommitEvery, and now and then one consumer
// closed and replaced, so that the group rebalances under faults. In a
// consumer group the even slots are static members (an instance ID per
// slot): a replaced one leaves with epoch -2 and its successor takes its
// place and partitions, so static restarts happen under faults too.
//
// Every commit of a partition takes its offset from one workload-wide
// counter per partition, so a later commit is always larger than an earlier
// one. The group's fencing orders the acknowledged ones (a partition has one
// owner per generation, or per member epoch in a consumer group, and one
// consumer's commits are sequential), so once the commits stop the
// committed offset of a partition may not be below the largest one the
// coordinator acknowledged. Final checks that, and that after recovery the
// consumers hold every partition exactly once.
//
// It keeps its own verdict (Verdict) and records nothing in the history:
// the checkers judge the gRPC workloads, this one judges the Kafka front.
type Kafka struct {
	// Endpoints are the nodes' gRPC addresses (Setup's topic);
	// KafkaEndpoints their Kafka addresses, the consumers' seeds.
	Endpoints      []string
	KafkaEndpoints []string
	Log            *slog.Logger
	Seed           uint64
	Creds          Credentials
	// Protocol is the group protocol: KafkaClassic (default) or
	// KafkaConsumer. A consumer group's session timeout and heartbeat
	// interval are the coordinator's (cohortd --consumer-*), not the
	// client's.
	Protocol string
	// SessionTimeout of the consumers (default 6 s, the run's; classic
	// only).
	SessionTimeout time.Duration
	// ClientLog receives the kgo clients' own log at info level (nil:
	// none).
	ClientLog io.Writer
	// Consumers (default 4); CommitEvery (default 200 ms); a consumer is
	// replaced every RestartMin to RestartMax (default 20-40 s); Recovery
	// bounds Final's wait for a complete assignment (default 30 s).
	Consumers              int
	CommitEvery            time.Duration
	RestartMin, RestartMax time.Duration
	Recovery               time.Duration

	// commitMu is held shared by every commit in flight; Final takes it to
	// stop them and wait for the last answers.
	commitMu       sync.RWMutex
	commitsStopped bool

	mu          sync.Mutex
	next        [kafkaPartitions]int64 // the last offset handed out per partition
	acked       map[int32]int64        // the largest acknowledged offset per partition
	attempts    int                    // partition commits sent
	acks        int
	refused     map[string]int // by Kafka error
	unanswered  int            // no response: the outcome is unknown
	generations map[int32]bool // generations (member epochs) the commits were sent in
	restarts    int
	noRestarts  bool               // Final stopped them
	live        []*kafkaConsumer   // the current consumer of every slot, nil between two
	checked     bool               // Final read the committed offsets
	found       map[int32]int64    // what it read; absent: no offset
	assignment  string             // "" when Final saw a complete, disjoint assignment
	finalNote   string             // what Final could not do
	finalTook   time.Duration      // from Final's start to a complete assignment
	balancedAt  map[string][]int32 // the assignment Final saw
}

// kafkaConsumer is one incarnation of a slot: a kgo client and what its
// rebalance callbacks say it holds.
type kafkaConsumer struct {
	name string
	cl   *kgo.Client

	mu   sync.Mutex
	held map[int32]bool
}

func (c *kafkaConsumer) change(parts map[string][]int32, add bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts[KafkaTopic] {
		if add {
			c.held[p] = true
		} else {
			delete(c.held, p)
		}
	}
}

func (c *kafkaConsumer) holding() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.held))
}

func (w *Kafka) init() {
	if w.Protocol == "" {
		w.Protocol = KafkaClassic
	}
	if w.SessionTimeout == 0 {
		w.SessionTimeout = 6 * time.Second
	}
	if w.Consumers == 0 {
		w.Consumers = 4
	}
	if w.CommitEvery == 0 {
		w.CommitEvery = 200 * time.Millisecond
	}
	if w.RestartMin == 0 {
		w.RestartMin = 20 * time.Second
	}
	if w.RestartMax <= w.RestartMin {
		w.RestartMax = w.RestartMin + 20*time.Second
	}
	if w.Recovery == 0 {
		w.Recovery = 30 * time.Second
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acked == nil {
		w.acked, w.refused, w.generations = map[int32]int64{}, map[string]int{}, map[int32]bool{}
		w.live = make([]*kafkaConsumer, w.Consumers)
	}
}

// group is the consumers' group: one name per protocol.
func (w *Kafka) group() string {
	if w.Protocol == KafkaConsumer {
		return KafkaConsumerGroup
	}
	return KafkaGroup
}

// Setup checks the protocol and creates the topic, as admin, through the
// gRPC API.
func (w *Kafka) Setup(ctx context.Context) error {
	w.init()
	if err := CheckKafkaProtocol(w.Protocol); err != nil {
		return err
	}
	return createTopic(ctx, w.Endpoints, w.Creds.Admin, KafkaTopic, kafkaPartitions)
}

// Run keeps Consumers consumers in the group until ctx ends, replacing one
// now and then until Final stops that; the consumers then leave.
func (w *Kafka) Run(ctx context.Context) {
	w.init()
	var wg sync.WaitGroup
	restart := make([]chan struct{}, w.Consumers)
	for i := range restart {
		restart[i] = make(chan struct{}, 1)
		wg.Go(func() { w.slot(ctx, i, restart[i]) })
	}
	defer wg.Wait()
	rng := rand.New(rand.NewPCG(w.Seed, 0x6b61666b61))
	for {
		sleep(ctx, w.RestartMin+time.Duration(rng.Int64N(int64(w.RestartMax-w.RestartMin))))
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		stopped := w.noRestarts
		w.mu.Unlock()
		if stopped {
			continue
		}
		select {
		case restart[rng.IntN(len(restart))] <- struct{}{}:
		default: // that slot is restarting already
		}
	}
}

// slot runs one consumer after another until ctx ends.
func (w *Kafka) slot(ctx context.Context, i int, restart <-chan struct{}) {
	for inc := 0; ctx.Err() == nil; inc++ {
		c, err := w.newConsumer(fmt.Sprintf("kafka-c%d.%d", i, inc), w.instance(i))
		if err != nil {
			w.Log.Warn("kafka consumer: new client", "slot", i, "err", err)
			sleep(ctx, time.Second)
			continue
		}
		w.Log.Info("kafka consumer joins", "consumer", c.name, "group", w.group(), "protocol", w.Protocol, "instance", w.instance(i))
		w.mu.Lock()
		w.live[i] = c
		w.mu.Unlock()

		pctx, stopPolling := context.WithCancel(ctx)
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			// Fetches are always empty (Cohort keeps no records);
			// polling keeps the consumer's group machinery going.
			for pctx.Err() == nil {
				if f := c.cl.PollFetches(pctx); f.Err() != nil {
					sleep(pctx, 100*time.Millisecond)
				}
			}
		}()
		replaced := w.commitLoop(ctx, c, restart)
		stopPolling()
		<-polled
		w.mu.Lock()
		w.live[i] = nil
		if replaced {
			w.restarts++
		}
		w.mu.Unlock()
		if replaced {
			w.Log.Info("kafka consumer restarts: leaves the group", "consumer", c.name)
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = c.cl.LeaveGroupContext(lctx)
		cancel()
		c.cl.Close()
	}
}

// instance is slot i's static instance ID: the even slots' of a consumer
// group, "" (a dynamic member) otherwise.
func (w *Kafka) instance(i int) string {
	if w.Protocol != KafkaConsumer || i%2 != 0 {
		return ""
	}
	return fmt.Sprintf("kafka-static-%d", i)
}

// newConsumer makes a kgo consumer of the group (it joins in the
// background), static when instance is not "".
func (w *Kafka) newConsumer(name, instance string) (*kafkaConsumer, error) {
	c := &kafkaConsumer{name: name, held: map[int32]bool{}}
	opts := []kgo.Opt{
		kgo.SeedBrokers(w.KafkaEndpoints...), kgo.ClientID(name),
		kgo.ConsumerGroup(w.group()), kgo.ConsumeTopics(KafkaTopic), kgo.DisableAutoCommit(),
		// In a consumer group the rebalance timeout bounds how long the
		// coordinator waits for a revocation to be confirmed.
		kgo.RebalanceTimeout(2 * w.SessionTimeout), kgo.FetchMaxWait(time.Second),
		// Requests to a dead or paused node give up before the session
		// timeout, so the member finds the new coordinator in time.
		kgo.RequestTimeoutOverhead(5 * time.Second), kgo.RetryTimeout(30 * time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { c.change(p, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { c.change(p, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { c.change(p, false) }),
	}
	if w.Protocol == KafkaConsumer {
		// The coordinator assigns (its "uniform" assignor, which the
		// sticky balancer names) and sets the session timeout and
		// heartbeat interval.
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	} else {
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(w.SessionTimeout), kgo.HeartbeatInterval(200*time.Millisecond))
	}
	if instance != "" {
		opts = append(opts, kgo.InstanceID(instance))
	}
	if tc := w.Creds.Client.TLS; tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if w.ClientLog != nil {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(w.ClientLog, kgo.LogLevelInfo, func() string {
			return time.Now().Format("15:04:05.000 ") + name + " "
		})))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kgo consumer %s: %w", name, err)
	}
	c.cl = cl
	return c, nil
}

// commitLoop commits what c holds every CommitEvery until ctx ends (false)
// or the slot is told to restart (true).
func (w *Kafka) commitLoop(ctx context.Context, c *kafkaConsumer, restart <-chan struct{}) bool {
	tick := time.NewTicker(w.CommitEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-restart:
			return true
		case <-tick.C:
		}
		w.commit(ctx, c)
	}
}

// commit commits a fresh offset of every partition c holds, with
// CommitOffsetsSync, and records the answer.
func (w *Kafka) commit(ctx context.Context, c *kafkaConsumer) {
	w.commitMu.RLock()
	defer w.commitMu.RUnlock()
	if w.commitsStopped {
		return
	}
	held := c.holding()
	if len(held) == 0 {
		return
	}
	offsets := map[int32]int64{}
	req := map[int32]kgo.EpochOffset{}
	w.mu.Lock()
	for _, p := range held {
		w.next[p]++
		offsets[p] = w.next[p]
		req[p] = kgo.EpochOffset{Epoch: -1, Offset: w.next[p]}
	}
	w.attempts += len(held)
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.cl.CommitOffsetsSync(cctx, map[string]map[int32]kgo.EpochOffset{KafkaTopic: req},
		func(_ *kgo.Client, r *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			w.record(offsets, r, resp, err)
		})
}

// record takes in one commit's answer: a partition is acknowledged only by
// error code 0 in the response; a request without a response leaves every
// partition unknown.
func (w *Kafka) record(offsets map[int32]int64, r *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r != nil && r.Generation > 0 {
		w.generations[r.Generation] = true
	}
	if err != nil || resp == nil {
		w.unanswered += len(offsets)
		return
	}
	answered := map[int32]bool{}
	for _, t := range resp.Topics {
		if t.Topic != KafkaTopic {
			continue
		}
		for _, p := range t.Partitions {
			o, ok := offsets[p.Partition]
			if !ok || answered[p.Partition] {
				continue
			}
			answered[p.Partition] = true
			if p.ErrorCode != 0 {
				w.refused[kafkaErrorName(p.ErrorCode)]++
				continue
			}
			w.acks++
			if o > w.acked[p.Partition] {
				w.acked[p.Partition] = o
			}
		}
	}
	w.unanswered += len(offsets) - len(answered)
}

func kafkaErrorName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		if ke, ok := err.(*kerr.Error); ok {
			return ke.Message
		}
		return err.Error()
	}
	return fmt.Sprintf("error %d", code)
}

// Final, once the faults are healed: it stops the restarts, waits (up to
// Recovery) until the live consumers hold every partition, each once, and
// the coordinator's DescribeGroups (ConsumerGroupDescribe in a consumer
// group) agrees; then it stops the commits, waits
// for the last answers, and reads the committed offsets with a new kadm
// client (a long-lived kgo client may keep a dead coordinator cached),
// trying until ctx ends.
func (w *Kafka) Final(ctx context.Context) {
	w.init()
	w.mu.Lock()
	w.noRestarts = true
	w.mu.Unlock()
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, w.Recovery)
	held, problem := w.awaitAssignment(actx)
	cancel()
	w.mu.Lock()
	w.assignment, w.balancedAt = problem, held
	w.finalTook = time.Since(start).Round(100 * time.Millisecond)
	w.mu.Unlock()
	if problem == "" {
		w.Log.Info("kafka consumers hold every partition once", "after", w.finalTook, "assignment", heldString(held))
	} else {
		w.Log.Error("kafka consumers: no complete, disjoint assignment after recovery", "problem", problem, "held", heldString(held))
	}

	w.commitMu.Lock()
	w.commitsStopped = true
	w.commitMu.Unlock()

	var last error
	for ctx.Err() == nil {
		found, err := w.fetchCommitted(ctx)
		if err == nil {
			w.mu.Lock()
			w.checked, w.found = true, found
			lost := lostCommits(w.acked, found)
			w.mu.Unlock()
			if len(lost) > 0 {
				w.Log.Error("kafka: acknowledged commits lost", "partitions", strings.Join(lost, "; "))
			} else {
				w.Log.Info("kafka: every acknowledged commit kept", "committed", found)
			}
			return
		}
		last = err
		sleep(ctx, 500*time.Millisecond)
	}
	w.mu.Lock()
	w.finalNote = "the committed offsets could not be read: " + errString(last)
	w.mu.Unlock()
}

// awaitAssignment polls until the live consumers' assignment is complete
// and disjoint and the coordinator says the same, or ctx ends; it returns
// the assignment and "" or the last thing wrong.
func (w *Kafka) awaitAssignment(ctx context.Context) (map[string][]int32, string) {
	var adm *kadm.Client
	defer func() {
		if adm != nil {
			adm.Close()
		}
	}()
	var held map[string][]int32
	problem := "not checked"
	for {
		held, problem = w.liveAssignment()
		if problem == "" {
			if adm == nil {
				var err error
				if adm, err = w.admin(); err != nil {
					return held, err.Error()
				}
			}
			var err error
			if problem, err = w.describedAgrees(ctx, adm, held); err != nil {
				// A fresh client next time: this one may keep a dead
				// coordinator.
				adm.Close()
				adm, problem = nil, "describe the group: "+err.Error()
			}
		}
		if problem == "" {
			return held, ""
		}
		select {
		case <-ctx.Done():
			return held, problem
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// liveAssignment is what every slot's consumer holds, and "" or what keeps
// it from being an assignment of the topic.
func (w *Kafka) liveAssignment() (map[string][]int32, string) {
	w.mu.Lock()
	live := slices.Clone(w.live)
	w.mu.Unlock()
	held := map[string][]int32{}
	for i, c := range live {
		if c == nil {
			return held, fmt.Sprintf("slot %d has no consumer", i)
		}
		held[c.name] = c.holding()
	}
	return held, assignmentProblem(held, kafkaPartitions)
}

// assignmentProblem says why held (consumer: partitions) is not an
// assignment of partitions 0..n-1, every partition held by exactly one
// consumer; "" when it is.
func assignmentProblem(held map[string][]int32, n int32) string {
	owner := map[int32]string{}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(held)) {
		for _, p := range held[name] {
			switch prev, ok := owner[p]; {
			case p < 0 || p >= n:
				problems = append(problems, fmt.Sprintf("%s holds partition %d, which does not exist", name, p))
			case ok:
				problems = append(problems, fmt.Sprintf("partition %d is held by %s and %s", p, prev, name))
			default:
				owner[p] = name
			}
		}
	}
	var nobody []string
	for p := range n {
		if _, ok := owner[p]; !ok {
			nobody = append(nobody, fmt.Sprint(p))
		}
	}
	if len(nobody) > 0 {
		problems = append(problems, "held by nobody: partitions "+strings.Join(nobody, ", "))
	}
	return strings.Join(problems, "; ")
}

// describedAgrees compares the coordinator's view of the group
// (DescribeGroups, or ConsumerGroupDescribe in a consumer group) with held:
// Stable, the same members, the same partitions each.
func (w *Kafka) describedAgrees(ctx context.Context, adm *kadm.Client, held map[string][]int32) (string, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	group := w.group()
	var d describedGroup
	if w.Protocol == KafkaConsumer {
		described, err := adm.DescribeConsumerGroups(dctx, group)
		if err != nil {
			return "", err
		}
		cg, ok := described[group]
		if !ok {
			return "", fmt.Errorf("no answer for consumer group %s", group)
		}
		if cg.Err != nil {
			return "", cg.Err
		}
		d = fromConsumerGroup(cg)
	} else {
		described, err := adm.DescribeGroups(dctx, group)
		if err != nil {
			return "", err
		}
		g, ok := described[group]
		if !ok {
			return "", fmt.Errorf("no answer for group %s", group)
		}
		if g.Err != nil {
			return "", g.Err
		}
		d = fromClassicGroup(g)
	}
	return describedProblem(d, held), nil
}

// describedGroup is the coordinator's view of the group, whichever the
// protocol.
type describedGroup struct {
	state   string
	members []describedMember
}

type describedMember struct {
	id, clientID string
	assigned     []int32 // of KafkaTopic, sorted
	// problem: why assigned cannot be compared ("" when it can).
	problem string
}

func fromClassicGroup(g kadm.DescribedGroup) describedGroup {
	d := describedGroup{state: g.State}
	for _, m := range g.Members {
		dm := describedMember{id: m.MemberID, clientID: m.ClientID}
		if ca, ok := m.Assigned.AsConsumer(); !ok {
			dm.problem = fmt.Sprintf("member %s: assignment not in the consumer protocol", m.ClientID)
		} else {
			for _, t := range ca.Topics {
				if t.Topic == KafkaTopic {
					dm.assigned = append(dm.assigned, t.Partitions...)
				}
			}
		}
		slices.Sort(dm.assigned)
		d.members = append(d.members, dm)
	}
	return d
}

// fromConsumerGroup takes a member's current assignment (not its target);
// a Stable group has every member at the group's assignment epoch, so a
// member behind it says the coordinator contradicts itself.
func fromConsumerGroup(g kadm.DescribedConsumerGroup) describedGroup {
	d := describedGroup{state: g.State}
	for _, m := range g.Members {
		dm := describedMember{id: m.MemberID, clientID: m.ClientID}
		for p := range m.Assignment[KafkaTopic] {
			dm.assigned = append(dm.assigned, p)
		}
		slices.Sort(dm.assigned)
		if g.State == "Stable" && m.MemberEpoch != g.AssignmentEpoch {
			dm.problem = fmt.Sprintf("member %s is at epoch %d in a Stable group, whose assignment epoch is %d", m.ClientID, m.MemberEpoch, g.AssignmentEpoch)
		}
		d.members = append(d.members, dm)
	}
	return d
}

// describedProblem says how d differs from held (consumer: partitions):
// not Stable, other members (by client ID), other partitions; "" when it
// agrees.
func describedProblem(d describedGroup, held map[string][]int32) string {
	if d.state != "Stable" || len(d.members) != len(held) {
		return fmt.Sprintf("the coordinator has the group %s with %d members, want Stable with %d", d.state, len(d.members), len(held))
	}
	for _, m := range d.members {
		mine, ok := held[m.clientID]
		switch {
		case !ok:
			return fmt.Sprintf("the coordinator lists member %s (%s), which is not a live consumer", m.id, m.clientID)
		case m.problem != "":
			return m.problem
		case !slices.Equal(m.assigned, mine):
			return fmt.Sprintf("the coordinator assigned %s partitions %v, it holds %v", m.clientID, m.assigned, mine)
		}
	}
	return ""
}

// admin is a new kadm client with the admin's credential.
func (w *Kafka) admin() (*kadm.Client, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(w.KafkaEndpoints...), kgo.ClientID("kafka-final"),
		kgo.RequestTimeoutOverhead(3 * time.Second), kgo.RetryTimeout(5 * time.Second)}
	if tc := w.Creds.Admin.TLS; tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kadm client: %w", err)
	}
	return kadm.NewClient(cl), nil
}

// fetchCommitted reads the group's committed offsets of the topic with a
// new kadm client.
func (w *Kafka) fetchCommitted(ctx context.Context) (map[int32]int64, error) {
	adm, err := w.admin()
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(fctx, w.group())
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("fetch the offsets of group %s: %w", w.group(), err)
	}
	found := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == KafkaTopic && o.At >= 0 {
			found[o.Partition] = o.At
		}
	})
	return found, nil
}

// lostCommits names every partition whose committed offset (found; absent:
// none) is below the largest acknowledged commit of it.
func lostCommits(acked, found map[int32]int64) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(acked)) {
		got, ok := found[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s/%d: a commit of offset %d was acknowledged, the group has no offset for it", KafkaTopic, p, acked[p]))
		case got < acked[p]:
			out = append(out, fmt.Sprintf("%s/%d: a commit of offset %d was acknowledged, the group has %d", KafkaTopic, p, acked[p], got))
		}
	}
	return out
}

// Verdict says what the workload saw: a summary, and what breaks its
// promises (none in a valid run).
func (w *Kafka) Verdict() (summary string, violations []string) {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	var refused []string
	for _, name := range slices.Sorted(maps.Keys(w.refused)) {
		refused = append(refused, fmt.Sprintf("%s %d", name, w.refused[name]))
	}
	total := 0
	for _, n := range w.refused {
		total += n
	}
	gens := slices.Sorted(maps.Keys(w.generations))
	span := "none"
	if len(gens) > 0 {
		span = fmt.Sprintf("%d-%d", gens[0], gens[len(gens)-1])
	}
	protocol := "classic protocol"
	if w.Protocol == KafkaConsumer {
		protocol = "consumer protocol (KIP-848)"
	}
	summary = fmt.Sprintf("kafka workload (%s, %d kgo consumers of %s on %s): %d partition commits sent, %d acknowledged, %d refused",
		protocol, w.Consumers, w.group(), KafkaTopic, w.attempts, w.acks, total)
	if len(refused) > 0 {
		summary += " (" + strings.Join(refused, ", ") + ")"
	}
	summary += fmt.Sprintf(", %d unanswered; ", w.unanswered)
	if w.Protocol == KafkaConsumer {
		// Every member has its own epoch: their number is no count of
		// rebalances.
		summary += fmt.Sprintf("commits fenced by %d member epochs (%s)", len(gens), span)
	} else {
		summary += fmt.Sprintf("%d rebalances seen (commits in %d generations, %s)", max(len(gens)-1, 0), len(gens), span)
	}
	summary += fmt.Sprintf(", %d consumer restarts", w.restarts)

	if w.acks == 0 {
		violations = append(violations, "no commit was acknowledged in the whole run")
	}
	switch {
	case w.assignment != "":
		violations = append(violations, "after recovery the consumers never held every partition exactly once: "+w.assignment)
	case w.balancedAt != nil:
		summary += fmt.Sprintf("; final: every partition held once %v after the heal", w.finalTook)
	}
	if !w.checked {
		note := w.finalNote
		if note == "" {
			note = "the committed offsets were not read (no final phase)"
		}
		violations = append(violations, note)
		return summary, violations
	}
	lost := lostCommits(w.acked, w.found)
	violations = append(violations, lost...)
	summary += fmt.Sprintf("; %d of %d partitions with acknowledged commits kept them", len(w.acked)-len(lost), len(w.acked))
	return summary, violations
}

// heldString is held as "name [partitions]", sorted by name, for logs.
func heldString(held map[string][]int32) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(held)) {
		out = append(out, fmt.Sprintf("%s %v", name, held[name]))
	}
	return strings.Join(out, ", ")
}
