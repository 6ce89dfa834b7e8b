package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"

	"github.com/cohortlabs/cohort/assign"
	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// stateOptions are the curves `cohort-bench state` measures. An empty size
// list skips its curve.
type stateOptions struct {
	offsets, members, groups []int
	groupSize                int
	partitionsPerGroup       int
	commitBatch              int
	groupShapes              []string
}

// The shapes of "a group" the groups curve measures.
const (
	shapeOneMember = "one-member"
	shapeOneOffset = "one-offset"
)

const (
	// stateTopics is how many topics the offsets and members curves spread
	// their groups over (group i reads topic i mod stateTopics), so that
	// groups do not all name one topic, as in a real cluster.
	stateTopics = 100
	// smallTopicPartitions is the topic of the groups curve: each
	// one-member group subscribes to it and owns all of it.
	smallTopicPartitions = 16
	// stateEpochMs is the leader timestamp of the first entry; entries are
	// 1 ms apart.
	stateEpochMs = 1_767_225_600_000
)

func newStateCommand(g *globalOptions) *cobra.Command {
	var (
		o                             stateOptions
		offsets, members, groups      string
		shapes                        string
		groupSize, perGroup, perEntry int
	)
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Memory per offset, member and group, and snapshot and restore time vs offsets, of one replica's state machine",
		Long: `state measures the replicated state machine of one replica (package fsm)
directly: no Raft, no gRPC. Every replica holds this state and pays these
costs. Entries are applied as Raft's FSM loop applies them (encoded
commands, fsm.FSM.ApplyEntry), under the current command rules, with the
budgets raised so that the run fits (printed in the notes).

--offsets: for each size, a fresh FSM gets that many distinct committed
offsets: groups of --partitions-per-group partitions each (group i commits
every partition of topic i mod 100), standalone commits (no member,
generation -1, no metadata) of --commit-batch offsets per entry. Then the
FSM is snapshotted and written in full through raft's file snapshot store
(raft.FileSnapshotStore: fsync'd file and directory, CRC-64), in the run's
directory; the live FSM is dropped; and a fresh FSM restores from that
snapshot (the store's Open, which reads the file once for its CRC, then
fsm.FSM.Restore), as a restarting node does. The restored FSM is checked
to hold every offset with its committed value.

--members: groups of --group-size members each (the last one smaller),
Stable, every member with an assignment (the group's topic of
--partitions-per-group partitions dealt round-robin), formed as a group
forms: every member joins as new, the others rejoin, the leader's plan.
Members look like the Go client's: a Kafka-style member ID, client ID and
host, the roundrobin and range protocols with their subscription metadata.

--groups: for each --group-shape, that many groups: one-member (a Stable
group of one member owning a topic of 16 partitions) or one-offset (an
empty group holding one committed offset, as left by a standalone commit
or a group whose members left).

Heap figures are the live heap (runtime.GC twice, then HeapAlloc) less
that of the empty FSM, divided by the count; each includes its share of
what the items bring along (groups of the offsets, topics). "estimate" is
the FSM's own size estimate, which the state-bytes budget holds. Peak RSS
is the process's so far. The default run takes about a minute and a half
on two cores; 10^7 offsets hold 1.6 GiB of live heap, 2.5 GiB of RSS at
the peak, and a 570 MB snapshot in the run's directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, out io.Writer) error {
				var err error
				if o.offsets, err = parseSizes("offsets", offsets); err != nil {
					return err
				}
				if o.members, err = parseSizes("members", members); err != nil {
					return err
				}
				if o.groups, err = parseSizes("groups", groups); err != nil {
					return err
				}
				if o.groupShapes, err = parseList("group-shape", shapes, shapeOneMember, shapeOneOffset); err != nil {
					return err
				}
				o.groupSize, o.partitionsPerGroup, o.commitBatch = groupSize, perGroup, perEntry
				if err := o.validate(); err != nil {
					return err
				}
				dir, cleanup, err := g.stateDir()
				if err != nil {
					return err
				}
				defer cleanup()
				return runState(ctx, out, o, dir)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&offsets, "offsets", "10000,100000,1000000,10000000", "comma-separated counts of committed offsets (empty: skip)")
	f.StringVar(&members, "members", "1000,10000,100000", "comma-separated counts of members (empty: skip)")
	f.StringVar(&groups, "groups", "1000,10000,100000", "comma-separated counts of groups (empty: skip)")
	f.StringVar(&shapes, "group-shape", shapeOneMember+","+shapeOneOffset, "what a group of the groups curve holds: one-member, one-offset, or both")
	f.IntVar(&groupSize, "group-size", 1000, "members per group of the members curve")
	f.IntVar(&perGroup, "partitions-per-group", 1000, "offsets per group of the offsets curve, and partitions of a members-curve group's topic")
	f.IntVar(&perEntry, "commit-batch", 500, "offsets per CommitOffsets entry (offsets curve); commits per Batch entry (one-offset groups)")
	return cmd
}

// parseSizes is parseInts, with an empty list meaning "skip this curve".
func parseSizes(flag, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	return parseInts(flag, s)
}

func (o stateOptions) validate() error {
	switch {
	case len(o.offsets)+len(o.members)+len(o.groups) == 0:
		return fmt.Errorf("--offsets, --members and --groups are all empty: nothing to measure")
	case o.groupSize < 1:
		return fmt.Errorf("--group-size %d: want at least 1", o.groupSize)
	case o.partitionsPerGroup < 1 || o.partitionsPerGroup > fsm.MaxTopicPartitions:
		return fmt.Errorf("--partitions-per-group %d: want 1 to %d (a group's offsets are those of one topic)", o.partitionsPerGroup, fsm.MaxTopicPartitions)
	case o.commitBatch < 1 || o.commitBatch > fsm.MaxBatch:
		return fmt.Errorf("--commit-batch %d: want 1 to %d (a Batch entry's limit)", o.commitBatch, fsm.MaxBatch)
	}
	return nil
}

// stateDir is the run's directory for snapshots: --dir/state, or a new
// temporary directory removed afterwards unless --keep-dir.
func (g *globalOptions) stateDir() (string, func(), error) {
	if g.dir != "" {
		dir := filepath.Join(g.dir, "state")
		return dir, func() {}, os.MkdirAll(dir, 0o700)
	}
	dir, err := os.MkdirTemp("", "cohort-bench-state-")
	if err != nil {
		return "", nil, err
	}
	if g.keepDir {
		return dir, func() {}, nil
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// budgets are the default budgets, each raised to what the run's largest
// size needs. The state-bytes budget is lifted out of the way: the run
// measures what that budget bounds.
func (o stateOptions) budgets() fsm.Budgets {
	b := fsm.DefaultBudgets()
	groups := 0
	for _, n := range o.offsets {
		groups = max(groups, ceilDiv(n, o.partitionsPerGroup))
	}
	for _, n := range o.members {
		groups = max(groups, ceilDiv(n, o.groupSize))
	}
	for _, n := range o.groups {
		groups = max(groups, n)
	}
	per := int64(max(o.partitionsPerGroup, smallTopicPartitions))
	b.Groups = max(b.Groups, int64(groups))
	b.PartitionsPerTopic = max(b.PartitionsPerTopic, per)
	b.Partitions = max(b.Partitions, stateTopics*per+smallTopicPartitions)
	b.OffsetsPerGroup = max(b.OffsetsPerGroup, per)
	b.SubscribedPartitionsPerGroup = max(b.SubscribedPartitionsPerGroup, per)
	b.MembersPerGroup = max(b.MembersPerGroup, int64(o.groupSize))
	// A member here states about 200 bytes about itself; 1 KiB each leaves
	// room.
	b.MetadataBytesPerGroup = max(b.MetadataBytesPerGroup, int64(o.groupSize)<<10)
	b.StateBytes = 1 << 40
	return b
}

func budgetsLine(b fsm.Budgets) string {
	var parts []string
	for _, f := range fsm.BudgetFields() {
		parts = append(parts, fmt.Sprintf("%s %d", f.Name, *f.Value(&b)))
	}
	return strings.Join(parts, ", ")
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// sizeRow is one count of one curve for the closing bytes-per-item table.
type sizeRow struct {
	count int
	item  string
	heap  float64
}

func runState(ctx context.Context, out io.Writer, o stateOptions, dir string) error {
	start := time.Now()
	b := o.budgets()
	fmt.Fprintf(out, "replicated state of one replica (package fsm: no Raft, no gRPC), entries under command rules %d, %s\n", fsm.CommandVersion, report.LoadLine())
	fmt.Fprintf(out, "budgets used (defaults raised to fit the run; state-bytes out of the way): %s\n", budgetsLine(b))
	var summary []sizeRow
	for _, curve := range []func() ([]sizeRow, error){
		func() ([]sizeRow, error) { return offsetsCurve(ctx, out, b, o, dir) },
		func() ([]sizeRow, error) { return membersCurve(ctx, out, b, o) },
		func() ([]sizeRow, error) { return groupsCurve(ctx, out, b, o) },
	} {
		rows, err := curve()
		if err != nil {
			return err
		}
		summary = append(summary, rows...)
	}
	fmt.Fprintln(out, "heap bytes per item, every curve (for one plot):")
	tb := report.NewTable(out, "count", "item", "heap bytes/item")
	for _, s := range summary {
		tb.Row(fmt.Sprint(s.count), s.item, fmt.Sprintf("%.1f", s.heap))
	}
	tb.Flush()
	fmt.Fprintf(out, "state done in %v, peak RSS %s MiB, %s\n", time.Since(start).Round(time.Second), peakRSSMiB(), report.LoadLine())
	return ctx.Err()
}

// offsetsCurve prints the offsets table (nothing without --offsets).
func offsetsCurve(ctx context.Context, out io.Writer, b fsm.Budgets, o stateOptions, dir string) ([]sizeRow, error) {
	if len(o.offsets) == 0 {
		return nil, nil
	}
	fmt.Fprintf(out, "offsets: %d per group (group i commits topic i mod %d), standalone commits of %d offsets per entry, no metadata; snapshots through raft.FileSnapshotStore in %s; restore = the store's Open (a CRC-64 pass over the file) + fsm.FSM.Restore into a fresh FSM, the live one dropped first\n",
		o.partitionsPerGroup, stateTopics, o.commitBatch, dir)
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		return nil, fmt.Errorf("snapshot store in %s: %w", dir, err)
	}
	tb := report.NewTable(out, "offsets", "groups", "apply ns/offset", "heap bytes/offset", "estimate bytes/offset",
		"hold", "snapshot ms", "snapshot ns/offset", "snapshot bytes", "snapshot bytes/offset",
		"restore ms", "restore ns/offset", "restored heap bytes/offset", "restored offsets", "peak RSS MiB")
	defer tb.Flush() // on an error too: the sizes measured so far
	var rows []sizeRow
	for _, n := range o.offsets {
		row, heap, err := offsetsSize(ctx, store, b, o, n)
		if err != nil {
			return nil, fmt.Errorf("%d offsets: %w", n, err)
		}
		tb.Row(row...)
		rows = append(rows, sizeRow{n, "offset", heap})
	}
	return rows, nil
}

// membersCurve prints the members table (nothing without --members).
func membersCurve(ctx context.Context, out io.Writer, b fsm.Budgets, o stateOptions) ([]sizeRow, error) {
	if len(o.members) == 0 {
		return nil, nil
	}
	fmt.Fprintf(out, "members: Stable groups of %d members (the last one smaller), each group's topic of %d partitions dealt round-robin; the heap includes the groups and topics\n",
		o.groupSize, o.partitionsPerGroup)
	tb := report.NewTable(out, "members", "groups", "apply µs/member", "heap bytes/member", "estimate bytes/member", "snapshot bytes/member", "peak RSS MiB")
	defer tb.Flush()
	var rows []sizeRow
	for _, n := range o.members {
		r, base, err := emptyReplica(b)
		if err == nil {
			err = buildMembers(ctx, r, n, o.groupSize, o.partitionsPerGroup)
		}
		var cells []string
		var heap float64
		if err == nil {
			cells, heap, err = itemCells(r, base, n)
		}
		if err != nil {
			return nil, fmt.Errorf("%d members: %w", n, err)
		}
		tb.Row(append([]string{fmt.Sprint(n), fmt.Sprint(ceilDiv(n, o.groupSize))}, cells...)...)
		rows = append(rows, sizeRow{n, "member", heap})
	}
	return rows, nil
}

// groupsCurve prints the groups table, one row per count and shape
// (nothing without --groups).
func groupsCurve(ctx context.Context, out io.Writer, b fsm.Budgets, o stateOptions) ([]sizeRow, error) {
	if len(o.groups) == 0 {
		return nil, nil
	}
	fmt.Fprintf(out, "groups: %s: a Stable group of one member owning all %d partitions of one topic; %s: an empty group holding one committed offset (standalone commits, %d per Batch entry)\n",
		shapeOneMember, smallTopicPartitions, shapeOneOffset, o.commitBatch)
	tb := report.NewTable(out, "groups", "shape", "apply µs/group", "heap bytes/group", "estimate bytes/group", "snapshot bytes/group", "peak RSS MiB")
	defer tb.Flush()
	var rows []sizeRow
	for _, n := range o.groups {
		for _, shape := range o.groupShapes {
			r, base, err := emptyReplica(b)
			if err == nil {
				err = buildGroups(ctx, r, n, shape, o.commitBatch)
			}
			var cells []string
			var heap float64
			if err == nil {
				cells, heap, err = itemCells(r, base, n)
			}
			if err != nil {
				return nil, fmt.Errorf("%d %s groups: %w", n, shape, err)
			}
			tb.Row(append([]string{fmt.Sprint(n), shape}, cells...)...)
			rows = append(rows, sizeRow{n, shape + " group", heap})
		}
	}
	return rows, nil
}

// offsetsSize measures one size of the offsets curve: the row, and the
// heap bytes per offset.
func offsetsSize(ctx context.Context, store *raft.FileSnapshotStore, b fsm.Budgets, o stateOptions, n int) ([]string, float64, error) {
	built, err := buildAndPersistOffsets(ctx, store, b, o, n)
	if err != nil {
		return nil, 0, err
	}
	// Restore as a restarting node does: nothing else of the state in
	// memory (the built FSM is unreachable once the call above returned).
	base := liveHeap()
	start := time.Now()
	restored, err := restoreSnapshot(store, built.id)
	if err != nil {
		return nil, 0, err
	}
	restore := time.Since(start)
	restoredHeap := perItem(liveHeap()-base, n)
	if held := countOffsets(restored, n, o.partitionsPerGroup); held != n {
		return nil, 0, fmt.Errorf("the restored FSM holds %d of the %d committed offsets with their committed value (%d offsets in all)", held, n, restored.Stats().Offsets)
	}
	return []string{
		fmt.Sprint(n), fmt.Sprint(built.groups), fmt.Sprintf("%.0f", perItem(int64(built.apply), n)),
		fmt.Sprintf("%.1f", built.heap), fmt.Sprintf("%.1f", perItem(built.estimate, n)),
		report.US(built.hold), report.MS(built.persist), fmt.Sprintf("%.0f", perItem(int64(built.persist), n)),
		fmt.Sprint(built.size), fmt.Sprintf("%.1f", perItem(built.size, n)),
		report.MS(restore), fmt.Sprintf("%.0f", perItem(int64(restore), n)),
		fmt.Sprintf("%.1f", restoredHeap), fmt.Sprint(restored.Stats().Offsets), peakRSSMiB(),
	}, built.heap, nil
}

// builtOffsets is what building and persisting one size of the offsets
// curve measured.
type builtOffsets struct {
	groups int
	apply  time.Duration
	// heap is the live heap per offset; estimate the FSM's size estimate.
	heap     float64
	estimate int64
	// hold is Snapshot's copy (Apply waits for it); persist the whole of
	// taking and writing the snapshot.
	hold, persist time.Duration
	id            string
	size          int64
}

// buildAndPersistOffsets commits n offsets to a fresh FSM, measures its
// heap, and snapshots it into store as raft does.
func buildAndPersistOffsets(ctx context.Context, store *raft.FileSnapshotStore, b fsm.Budgets, o stateOptions, n int) (builtOffsets, error) {
	var out builtOffsets
	r, base, err := emptyReplica(b)
	if err != nil {
		return out, err
	}
	if out.groups, err = buildOffsets(ctx, r, n, o.partitionsPerGroup, o.commitBatch); err != nil {
		return out, err
	}
	out.apply = r.apply
	out.heap = perItem(liveHeap()-base, n)
	usage, _ := r.f.Usage()
	out.estimate = usage.StateBytes
	if got := r.f.Stats().Offsets; got != n {
		return out, fmt.Errorf("the FSM holds %d offsets after committing %d", got, n)
	}
	start := time.Now()
	snap := r.f.Snapshot()
	out.hold = time.Since(start)
	if out.id, out.size, err = persistSnapshot(store, snap); err != nil {
		return out, err
	}
	out.persist = time.Since(start)
	return out, nil
}

// itemCells are the cells of a members or groups row after its first two
// (count, groups or shape), for count items in r's state: apply time,
// heap, estimate and snapshot size per item, peak RSS; and the heap bytes
// per item.
func itemCells(r *replica, base int64, count int) ([]string, float64, error) {
	heap := perItem(liveHeap()-base, count)
	usage, _ := r.f.Usage()
	size, err := r.f.Snapshot().WriteTo(io.Discard)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	return []string{
		fmt.Sprintf("%.1f", perItem(int64(r.apply), count)/1000),
		fmt.Sprintf("%.1f", heap), fmt.Sprintf("%.1f", perItem(usage.StateBytes, count)),
		fmt.Sprintf("%.1f", perItem(size, count)), peakRSSMiB(),
	}, heap, nil
}

func perItem(total int64, n int) float64 { return float64(total) / float64(n) }

// liveHeap is the heap of reachable objects. The second collection frees
// what the first only moved to sync.Pool's victim cache (protobuf's and
// bufio's buffers) or left to finalizers.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// peakRSSMiB is the largest resident set this process has had so far.
func peakRSSMiB() string {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return "-"
	}
	return fmt.Sprint(ru.Maxrss >> 10) // KiB on Linux
}

// persistSnapshot writes snap in full as raft does when it takes a
// snapshot (raftnode's Persist into the file store's sink: buffered, CRC,
// fsync of the file, rename, fsync of the directory) and returns its ID
// and size.
func persistSnapshot(store *raft.FileSnapshotStore, snap *fsm.Snapshot) (string, int64, error) {
	sink, err := store.Create(raft.SnapshotVersionMax, snap.Index(), 1, raft.Configuration{}, 1, nil)
	if err != nil {
		return "", 0, fmt.Errorf("create snapshot: %w", err)
	}
	n, err := snap.WriteTo(sink)
	if err != nil {
		_ = sink.Cancel()
		return "", 0, fmt.Errorf("write snapshot %s: %w", sink.ID(), err)
	}
	if err := sink.Close(); err != nil {
		return "", 0, fmt.Errorf("close snapshot %s: %w", sink.ID(), err)
	}
	return sink.ID(), n, nil
}

// restoreSnapshot restores a fresh FSM from the stored snapshot id, as a
// node does on start (raft opens the snapshot, then FSM.Restore).
func restoreSnapshot(store *raft.FileSnapshotStore, id string) (*fsm.FSM, error) {
	meta, rc, err := store.Open(id)
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	defer rc.Close()
	f := fsm.New()
	if err := f.Restore(rc); err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	f.SetAppliedIndex(meta.Index)
	return f, nil
}

// replica applies entries to one FSM as Raft's FSM loop does on every
// node: encoded commands, one log index after another.
type replica struct {
	f     *fsm.FSM
	index uint64
	// apply is the time spent in ApplyEntry (decoding and applying), not
	// in building and encoding the commands.
	apply time.Duration
}

// emptyReplica is a new FSM holding budgets b, and the live heap with it.
func emptyReplica(b fsm.Budgets) (*replica, int64, error) {
	r := &replica{f: fsm.New()}
	if err := r.entry(fsm.SetBudgetsCommand(b)); err != nil {
		return nil, 0, err
	}
	r.apply = 0
	return r, liveHeap(), nil
}

// entry applies cmd as the next log entry, under the current command
// rules, and fails on any refusal: of the command, or of one of its
// partitions or batched commands.
func (r *replica) entry(cmd *fsmv1.Command) error {
	r.index++
	cmd.Version = fsm.CommandVersion
	cmd.TimestampMs = stateEpochMs + int64(r.index)
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return err
	}
	start := time.Now()
	res := r.f.ApplyEntry(r.index, data)
	r.apply += time.Since(start)
	if err := refusal(res); err != nil {
		return fmt.Errorf("log entry %d (%T): %w", r.index, cmd.GetKind(), err)
	}
	return nil
}

func refusal(res *fsm.ApplyResult) error {
	if res.Err != nil {
		return res.Err
	}
	for _, p := range res.Partitions {
		if p.Err != nil {
			return fmt.Errorf("%s/%d: %w", p.Topic, p.Partition, p.Err)
		}
	}
	for i, b := range res.Batch {
		if err := refusal(b); err != nil {
			return fmt.Errorf("batched command %d: %w", i, err)
		}
	}
	return nil
}

func (r *replica) createTopics(n, partitions int) error {
	for i := range n {
		if err := r.entry(&fsmv1.Command{Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{
			Name: stateTopic(i), Partitions: int32(partitions),
		}}}); err != nil {
			return err
		}
	}
	return nil
}

func stateTopic(i int) string { return fmt.Sprintf("topic-%03d", i) }
func stateGroup(i int) string { return fmt.Sprintf("group-%07d", i) }

// committedOffset is the offset the offsets curve commits for partition p
// of group g: distinct per partition, so that a restore that mixed them up
// is caught.
func committedOffset(g, p int) int64 { return int64(g)<<24 | int64(p) }

// buildOffsets commits n offsets, perGroup to a group (partitions 0.. of
// topic g mod stateTopics), batch to an entry, and returns the number of
// groups.
func buildOffsets(ctx context.Context, r *replica, n, perGroup, batch int) (int, error) {
	groups := ceilDiv(n, perGroup)
	if err := r.createTopics(min(groups, stateTopics), perGroup); err != nil {
		return 0, err
	}
	for g := range groups {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		parts, topic := min(perGroup, n-g*perGroup), stateTopic(g%stateTopics)
		for lo := 0; lo < parts; lo += batch {
			c := &fsmv1.CommitOffsets{GroupId: stateGroup(g), Generation: -1}
			for p := lo; p < min(lo+batch, parts); p++ {
				c.Offsets = append(c.Offsets, &fsmv1.OffsetCommit{Topic: topic, Partition: int32(p), Offset: committedOffset(g, p)})
			}
			if err := r.entry(&fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: c}}); err != nil {
				return 0, err
			}
		}
	}
	return groups, nil
}

// countOffsets is how many of the n offsets buildOffsets commits f holds
// with the committed value.
func countOffsets(f *fsm.FSM, n, perGroup int) int {
	held := 0
	f.Read(func(s *fsm.State) {
		for g := range ceilDiv(n, perGroup) {
			group, topic := stateGroup(g), stateTopic(g%stateTopics)
			for p := range min(perGroup, n-g*perGroup) {
				if v, ok := s.Offset(group, topic, int32(p)); ok && v.Offset == committedOffset(g, p) {
					held++
				}
			}
		}
	})
	return held
}

// memberSpec is member i of group as the Go client describes itself:
// client ID, an ID the coordinator made from it (Kafka's way: client ID
// and 32 hex digits), the client's host, its default protocols (roundrobin,
// range) with its subscription metadata, and its default timeouts.
func memberSpec(group string, i int, topic string) (*fsmv1.MemberSpec, error) {
	meta, err := assign.EncodeSubscription(assign.Subscription{Topics: []string{topic}, Generation: assign.NoGeneration})
	if err != nil {
		return nil, err
	}
	clientID := fmt.Sprintf("consumer-%s-%d", group, i)
	return &fsmv1.MemberSpec{
		MemberId:           fmt.Sprintf("%s-%016x%016x", clientID, uint64(i)*0x9e3779b97f4a7c15, uint64(i)),
		ClientId:           clientID,
		ClientHost:         fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff),
		SessionTimeoutMs:   int32(client.DefaultSessionTimeout / time.Millisecond),
		RebalanceTimeoutMs: int32(client.DefaultRebalanceTimeout / time.Millisecond),
		Topics:             []string{topic},
		Protocols: []*fsmv1.Protocol{
			{Name: assign.NameRoundRobin, Metadata: meta},
			{Name: assign.NameRange, Metadata: meta},
		},
	}, nil
}

func joinEntry(group string, spec *fsmv1.MemberSpec, newMember bool) *fsmv1.Command {
	return &fsmv1.Command{Kind: &fsmv1.Command_JoinMember{JoinMember: &fsmv1.JoinMember{
		GroupId: group, ProtocolType: "consumer", Member: spec, NewMember: newMember,
	}}}
}

// syncEntry is the leader's plan for g: partitions 0..partitions-1 of
// topic dealt round-robin over the members.
func syncEntry(g *fsm.Group, topic string, partitions int) *fsmv1.Command {
	plan := make([]*fsmv1.MemberAssignment, g.Members.Len())
	owned := make([][]int32, g.Members.Len())
	for p := range partitions {
		owned[p%g.Members.Len()] = append(owned[p%g.Members.Len()], int32(p))
	}
	for i, m := range g.Members.All() {
		a := &fsmv1.Assignment{}
		if len(owned[i]) > 0 {
			a.Topics = []*fsmv1.TopicPartitions{{Topic: topic, Partitions: owned[i]}}
		}
		plan[i] = &fsmv1.MemberAssignment{MemberId: m.ID, Assignment: a}
	}
	return &fsmv1.Command{Kind: &fsmv1.Command_SyncAssignment{SyncAssignment: &fsmv1.SyncAssignment{
		GroupId: g.ID, Generation: g.Generation, MemberId: g.LeaderID, Assignments: plan,
	}}}
}

// buildMembers forms Stable groups of groupSize members, n in all, the
// way a group forms: every member joins as new (each join reopens the
// round), the members the last joins left behind rejoin, which closes the
// barrier, and the leader's plan makes the group Stable.
func buildMembers(ctx context.Context, r *replica, n, groupSize, partitions int) error {
	groups := ceilDiv(n, groupSize)
	if err := r.createTopics(min(groups, stateTopics), partitions); err != nil {
		return err
	}
	for gi := range groups {
		if err := ctx.Err(); err != nil {
			return err
		}
		id, topic := stateGroup(gi), stateTopic(gi%stateTopics)
		specs := map[string]*fsmv1.MemberSpec{}
		for i := range min(groupSize, n-gi*groupSize) {
			spec, err := memberSpec(id, i, topic)
			if err != nil {
				return err
			}
			specs[spec.GetMemberId()] = spec
			if err := r.entry(joinEntry(id, spec, true)); err != nil {
				return err
			}
		}
		g, _ := r.f.Group(id)
		for _, m := range g.Members.All() {
			if !m.Joined {
				if err := r.entry(joinEntry(id, specs[m.ID], false)); err != nil {
					return err
				}
			}
		}
		if g, _ = r.f.Group(id); g.State != fsm.CompletingRebalance {
			return fmt.Errorf("group %s is %s once every member rejoined, want CompletingRebalance", id, g.State)
		}
		if err := r.entry(syncEntry(g, topic, partitions)); err != nil {
			return err
		}
		if g, _ = r.f.Group(id); g.State != fsm.Stable || g.Members.Len() != len(specs) {
			return fmt.Errorf("group %s is %s with %d members after the leader's plan, want Stable with %d", id, g.State, g.Members.Len(), len(specs))
		}
	}
	if got := r.f.Stats().Members; got != n {
		return fmt.Errorf("the FSM holds %d members, want %d", got, n)
	}
	return nil
}

// buildGroups makes n groups of the shape: one-member (a member joins an
// empty group, which completes its join at once, and its plan takes the
// whole topic) or one-offset (standalone commits, batch to a Batch entry,
// as the leader coalesces them).
func buildGroups(ctx context.Context, r *replica, n int, shape string, batch int) error {
	topic := stateTopic(0)
	if err := r.createTopics(1, smallTopicPartitions); err != nil {
		return err
	}
	switch shape {
	case shapeOneMember:
		for gi := range n {
			if gi%1000 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			id := stateGroup(gi)
			spec, err := memberSpec(id, 0, topic)
			if err != nil {
				return err
			}
			if err := r.entry(joinEntry(id, spec, true)); err != nil {
				return err
			}
			g, _ := r.f.Group(id)
			if err := r.entry(syncEntry(g, topic, smallTopicPartitions)); err != nil {
				return err
			}
			if g, _ = r.f.Group(id); g.State != fsm.Stable {
				return fmt.Errorf("group %s is %s after its member's join and plan, want Stable", id, g.State)
			}
		}
	case shapeOneOffset:
		for lo := 0; lo < n; lo += batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			b := &fsmv1.Batch{}
			for gi := lo; gi < min(lo+batch, n); gi++ {
				b.Commands = append(b.Commands, &fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{
					GroupId: stateGroup(gi), Generation: -1,
					Offsets: []*fsmv1.OffsetCommit{{Topic: topic, Partition: 0, Offset: int64(gi)}},
				}}})
			}
			if err := r.entry(&fsmv1.Command{Kind: &fsmv1.Command_Batch{Batch: b}}); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown group shape %q", shape)
	}
	if got := r.f.Stats().Groups; got != n {
		return fmt.Errorf("the FSM holds %d groups, want %d", got, n)
	}
	return nil
}
