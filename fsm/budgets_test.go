package fsm

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// v1 marks a command as written under the budget rules.
func v1(cmd *fsmv1.Command) *fsmv1.Command {
	cmd.Version = CommandVersion
	return cmd
}

// budgeted is a harness whose state holds b.
func budgeted(t *testing.T, b Budgets) *harness {
	t.Helper()
	h := newHarness(t)
	h.ok(SetBudgetsCommand(b))
	return h
}

// wantRefusal checks a budget refusal names the budget, the value and the
// limit.
func wantRefusal(t *testing.T, err error, code errcode.Code, parts ...string) {
	t.Helper()
	wantCode(t, err, code)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("refusal %q does not say %q", err, p)
		}
	}
}

// allocated is what f allocated on the heap, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The amplification the issue reproduced: a small join for a server-side
// group over huge topics. Under the default budgets, a join whose group
// would subscribe to more partitions than the budget is refused before any
// assignment runs, and the largest join that fits costs a bounded apply.
func TestBudgets_ServerSideJoinOverHugeTopicsIsRefusedAndBounded(t *testing.T) {
	b := DefaultBudgets()
	h := budgeted(t, b)
	per := int32(b.PartitionsPerTopic)
	for _, name := range []string{"a", "b", "c"} {
		h.ok(v1(at(1, createTopic{name, per})))
	}
	// At the budget: two topics of 16,384 partitions, 32,768 in all. The
	// apply that completes the join runs the server-side assignment over
	// every one of them.
	fits := join{group: "g", member: "m1", topics: []string{"a", "b"}, protocols: []string{"range"}, protocolType: ServerProtocolType, newMember: true}
	const bound = 64 << 20
	var res *ApplyResult
	if n := allocated(func() { res = h.apply(v1(at(2, fits))) }); n > bound {
		t.Fatalf("the join at the budget allocated %d bytes, over the bound of %d", n, bound)
	} else {
		t.Logf("join at the budget (%d partitions) allocated %d KiB", 2*per, n>>10)
	}
	if res.Err != nil {
		t.Fatalf("join at the budget: %v", res.Err)
	}
	g := h.group("g")
	if g.State != Stable || len(g.Members.Slice()[0].Assignment.Topics) != 2 {
		t.Fatalf("group %s with assignment %v, want Stable with both topics", g.State, g.Members.Slice()[0].Assignment.Topics)
	}

	// One topic more: refused, naming the budget, the value and the limit,
	// and at a small cost.
	over := join{group: "g", member: "m2", topics: []string{"a", "b", "c"}, protocols: []string{"range"}, protocolType: ServerProtocolType, newMember: true}
	var refused *ApplyResult
	if n := allocated(func() { refused = h.refused(v1(at(3, over)), errcode.BudgetExceeded) }); n > 1<<20+2*uint64(len(snapshotBytes(t, h.f))) {
		t.Fatalf("the refused join allocated %d bytes", n)
	}
	wantRefusal(t, refused.Err, errcode.BudgetExceeded, "subscribed-partitions-per-group", fmt.Sprint(3*per), fmt.Sprint(b.SubscribedPartitionsPerGroup))

	// The same join of an old log (version 0) is applied as it was.
	old := newHarness(t)
	for _, name := range []string{"a", "b", "c"} {
		old.ok(at(1, createTopic{name, per}))
	}
	old.ok(SetBudgetsCommand(b))
	old.ok(at(3, over))
}

// Version-0 commands (a log written before budgets) are never refused by a
// budget, so an old log replays to the same state; the same command under
// version 1 is.
func TestBudgets_OnlyCommandsWrittenUnderTheRulesAreBudgeted(t *testing.T) {
	h := budgeted(t, Budgets{Topics: 1})
	h.ok(at(1, createTopic{"a", 1}))
	h.ok(at(1, createTopic{"b", 1}))
	res := h.refused(v1(at(1, createTopic{"c", 1})), errcode.BudgetExceeded)
	wantRefusal(t, res.Err, errcode.BudgetExceeded, "budget topics", "3", "1")
}

// Lowering a budget below what is used removes nothing and refuses only
// growth: shrinking and steady-state commands still apply.
func TestBudgets_LoweredBudgetRefusesOnlyGrowth(t *testing.T) {
	h := budgeted(t, DefaultBudgets())
	h.ok(v1(at(1, createTopic{"t", 4})))
	h.ok(v1(at(1, createTopic{"u", 4})))
	for _, id := range []string{"m1", "m2"} {
		h.ok(v1(at(2, join{group: "g", member: id, topics: []string{"t"}, newMember: true})))
	}
	h.ok(v1(at(3, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0, 1}, offset: 5})))

	low := DefaultBudgets()
	low.Topics, low.Partitions, low.MembersPerGroup, low.OffsetsPerGroup = 1, 4, 1, 1
	h.ok(SetBudgetsCommand(low))
	if got := h.f.Budgets(); got != low {
		t.Fatalf("budgets %+v, want %+v", got, low)
	}
	if u, _ := h.f.Usage(); u.Topics != 2 || u.Partitions != 8 || u.MembersPerGroup != 2 || u.OffsetsPerGroup != 2 {
		t.Fatal("lowering a budget removed state")
	}

	wantRefusal(t, h.refused(v1(at(4, createTopic{"v", 1})), errcode.BudgetExceeded).Err, errcode.BudgetExceeded, "budget topics")
	wantRefusal(t, h.refused(v1(at(4, addPartitions{"t", 5})), errcode.BudgetExceeded).Err, errcode.BudgetExceeded, "budget partitions", "9", "4")
	wantRefusal(t, h.refused(v1(at(4, join{group: "g", member: "m3", topics: []string{"t"}, newMember: true})), errcode.GroupMaxSizeReached).Err,
		errcode.GroupMaxSizeReached, "members-per-group", "2", "1")
	// A commit that moves stored offsets applies; one that would store a
	// new offset is refused as a whole.
	h.ok(v1(at(4, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0, 1}, offset: 6})))
	wantRefusal(t, h.refused(v1(at(4, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0, 2}, offset: 7})), errcode.BudgetExceeded).Err,
		errcode.BudgetExceeded, "offsets-per-group", "3", "1")

	// Shrinking is never refused: a member leaves, a topic goes.
	h.ok(v1(at(5, remove{group: "g", members: []string{"m2"}})))
	h.ok(v1(at(5, deleteTopic("u"))))
	if u, _ := h.f.Usage(); u.Topics != 1 || u.MembersPerGroup != 1 {
		t.Fatalf("after shrinking: %+v", u)
	}
	// Admit gives the apply's verdict and changes nothing.
	before := snapshotBytes(t, h.f)
	if res := h.f.Admit(v1(at(7, createTopic{"v", 1}))); errcode.Of(res.Err) != errcode.BudgetExceeded {
		t.Fatalf("Admit: %v, want BUDGET_EXCEEDED", res.Err)
	}
	if res := h.f.Admit(v1(at(7, addPartitions{"t", 4}))); res.Err != nil {
		t.Fatalf("Admit of a change within the budgets: %v", res.Err)
	}
	if after := snapshotBytes(t, h.f); string(before) != string(after) {
		t.Fatal("Admit changed the state")
	}
}

// A topic created after a group settled is assigned: its creation starts a
// rebalance in the groups subscribed to it (under version 1; a version-0
// creation, from an older log, leaves them as they were).
func TestCreateTopic_RebalancesGroupsSubscribedToIt(t *testing.T) {
	for _, version := range []uint32{0, CommandVersion} {
		h := newHarness(t)
		h.ok(at(1, createTopic{"t", 2}))
		h.ok(at(2, join{group: "g", member: "a", topics: []string{"t", "later"}, newMember: true}))
		h.ok(at(3, join{group: "other", member: "b", topics: []string{"t"}, newMember: true}))
		g := h.group("g")
		h.ok(at(4, syncCmd{"g", g.Generation, "a", plan{"a": {"t": {0, 1}}}}))
		if g := h.group("g"); g.State != Stable {
			t.Fatalf("setup: %s", g.State)
		}
		create := at(5, createTopic{"later", 3})
		create.Version = version
		h.ok(create)
		want := Stable
		if version >= 1 {
			want = PreparingRebalance
		}
		if g := h.group("g"); g.State != want {
			t.Errorf("version %d: after creating a subscribed topic the group is %s, want %s", version, g.State, want)
		}
		if o := h.group("other"); o.State == PreparingRebalance {
			t.Errorf("version %d: a group not subscribed to the new topic started a rebalance", version)
		}
	}
}

// Rules 4 calibrate the state estimate: every member counts
// memberCalibration bytes more and every group groupCalibration more, so
// that the state-bytes budget bounds the heap it names. The same state
// figures that much more under rules 4 than under rules 3; a join or a
// commit that creates a member or a group is held to the calibrated
// figure; growth that creates neither (an offset overwritten) is not
// charged; and a log written under rules 3 keeps its outcomes.
func TestBudgets_Rules4_StateEstimateCountsMembersAndGroupsAtTheirHeap(t *testing.T) {
	// The usage figures under the newest rules the state has seen; the
	// harness's budget command is under today's, so both builds are read
	// under rules 4 by Usage: read each under its own rules.
	build := func(v uint32) (*harness, int64) {
		h := budgeted(t, DefaultBudgets())
		h.ok(under(v, at(1, createTopic{"t", 4})))
		for i := range 3 {
			h.ok(under(v, at(2, join{group: fmt.Sprintf("g%d", i), member: "a", topics: []string{"t"}, newMember: true})))
			h.ok(under(v, at(2, join{group: fmt.Sprintf("g%d", i), member: "b", topics: []string{"t"}, newMember: true})))
		}
		h.ok(under(v, at(3, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0}, offset: 1})))
		return h, h.f.state.estimateUnder(v)
	}
	_, v3 := build(3)
	h, v4 := build(4)
	const members, groups = 6, 4 // g0..g2 with a and b each; solo
	if want := v3 + members*memberCalibration + groups*groupCalibration; v4 != want {
		t.Fatalf("state estimate under rules 4 is %d, want rules 3's %d + %d members × %d + %d groups × %d = %d",
			v4, v3, members, memberCalibration, groups, groupCalibration, want)
	}

	// A budget with room for one more member under rules 3's figure but
	// not under rules 4's: the join is refused under 4 and applies under 3.
	m := join{group: "g0", member: "c", topics: []string{"t"}, newMember: true}
	spec := memberBytes(&Member{ID: "c", Protocols: []Protocol{{Name: "range"}}, Topics: []string{"t"}})
	low := DefaultBudgets()
	low.StateBytes = v4 + spec + memberCalibration/2
	h.ok(SetBudgetsCommand(low))
	wantRefusal(t, h.refused(under(4, at(4, m)), errcode.BudgetExceeded).Err, errcode.BudgetExceeded, "budget state-bytes")
	h.ok(under(3, at(4, m)))

	// A commit into a new group pays for the group under rules 4; one
	// that only overwrites an offset of an existing group does not grow.
	tight := DefaultBudgets()
	tight.StateBytes = h.f.state.estimateUnder(4) + 300
	h.ok(SetBudgetsCommand(tight))
	wantRefusal(t, h.refused(under(4, at(5, commit{group: "solo2", generation: -1, topic: "t", partitions: []int32{0}, offset: 1})), errcode.BudgetExceeded).Err,
		errcode.BudgetExceeded, "budget state-bytes")
	h.ok(under(4, at(5, commit{group: "solo", generation: -1, topic: "t", partitions: []int32{0}, offset: 2})))
}
