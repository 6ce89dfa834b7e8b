package checker

import (
	"slices"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/chaos/history"
)

const s = int64(1e9) // one second in history time

func write(proc int, key int32, v int64, start, end int64, out history.Outcome) history.Entry {
	return history.Entry{Type: history.TypeOp, Process: proc, F: history.FWrite, Group: "g", Topic: "t", Partition: key,
		Value: history.Int64(v), Start: start, End: end, Outcome: out}
}

func read(proc int, key int32, v int64, start, end int64) history.Entry {
	return history.Entry{Type: history.TypeOp, Process: proc, F: history.FRead, Group: "g", Topic: "t", Partition: key,
		Value: history.Int64(v), Start: start, End: end, Outcome: history.OK}
}

func final(e history.Entry) history.Entry { e.Final = true; return e }

func kinds(r Result) []string {
	var out []string
	for _, a := range r.Anomalies {
		out = append(out, a.Kind)
	}
	return out
}

func assertFlags(t *testing.T, r Result, kind string) {
	t.Helper()
	if r.Valid || !slices.Contains(kinds(r), kind) {
		t.Fatalf("%s: valid=%v anomalies %v, want %s flagged", r.Name, r.Valid, kinds(r), kind)
	}
	for _, a := range r.Anomalies {
		if a.Kind == kind && len(a.Ops) == 0 {
			t.Fatalf("%s: anomaly %s reported without the operations that show it", r.Name, kind)
		}
	}
}

func assertValid(t *testing.T, r Result) {
	t.Helper()
	if !r.Valid || r.Skipped != "" {
		t.Fatalf("%s: valid=%v skipped=%q anomalies %+v, want valid and checked", r.Name, r.Valid, r.Skipped, r.Anomalies)
	}
}

func TestLinearizable_AcceptsSequentialAndConcurrentHistories(t *testing.T) {
	es := []history.Entry{
		read(0, 0, -1, 0, 1*s),
		write(0, 0, 5, 2*s, 3*s, history.OK),
		// Concurrent with the write of 7: either value is fine.
		write(1, 0, 7, 4*s, 6*s, history.OK),
		read(0, 0, 5, 4*s, 5*s),
		read(2, 0, 7, 7*s, 8*s),
		// A refused write constrains nothing.
		write(1, 0, 99, 9*s, 10*s, history.Fail),
		read(2, 0, 7, 11*s, 12*s),
	}
	assertValid(t, Linearizable(es, Options{}))
}

func TestLinearizable_UnknownWriteMayLandAnyTimeAfterItsCall(t *testing.T) {
	es := []history.Entry{
		write(0, 0, 1, 0, 1*s, history.OK),
		write(1, 0, 2, 2*s, 3*s, history.Info), // timed out
		read(2, 0, 1, 4*s, 5*s),                // not landed yet
		read(2, 0, 2, 20*s, 21*s),              // landed long after the client gave up
		read(2, 0, 2, 22*s, 23*s),
	}
	assertValid(t, Linearizable(es, Options{}))
	// ... but once it is seen, an older value may not come back.
	es = append(es, read(3, 0, 1, 24*s, 25*s))
	assertFlags(t, Linearizable(es, Options{}), KindNonLinearizable)
}

func TestLinearizable_FlagsStaleRead(t *testing.T) {
	es := []history.Entry{
		write(0, 0, 1, 0, 1*s, history.OK),
		write(0, 0, 2, 2*s, 3*s, history.OK),
		read(1, 0, 1, 4*s, 5*s), // stale: 2 was acknowledged before the read began
		// Another key stays fine and is not blamed.
		write(0, 1, 8, 0, 1*s, history.OK),
		read(1, 1, 8, 2*s, 3*s),
	}
	r := Linearizable(es, Options{VisualizeDir: t.TempDir()})
	assertFlags(t, r, KindNonLinearizable)
	if len(r.Anomalies) != 1 || r.Anomalies[0].Ops[0].Value == nil || *r.Anomalies[0].Ops[0].Value != 1 {
		t.Fatalf("want the stale read named first, got %+v", r.Anomalies)
	}
}

func TestDurability_FlagsLostWrite(t *testing.T) {
	es := []history.Entry{
		write(0, 0, 1, 0, 1*s, history.OK),
		write(0, 0, 2, 2*s, 3*s, history.OK),
		final(read(9, 0, 1, 10*s, 11*s)), // 2 was acknowledged and is gone
	}
	assertFlags(t, Durability(es), KindLostWrite)
	// The linearizability checker sees it too.
	assertFlags(t, Linearizable(es, Options{}), KindNonLinearizable)
}

func TestDurability_AcceptsLastAckedOrLaterUnknownWrite(t *testing.T) {
	for _, got := range []int64{2, 3} {
		es := []history.Entry{
			write(0, 0, 1, 0, 1*s, history.OK),
			write(0, 0, 2, 2*s, 3*s, history.OK),
			write(1, 0, 3, 4*s, 5*s, history.Info),
			final(read(9, 0, got, 10*s, 11*s)),
		}
		assertValid(t, Durability(es))
	}
	// A key nobody acknowledged may still be empty.
	es := []history.Entry{write(1, 0, 3, 4*s, 5*s, history.Info), final(read(9, 0, -1, 10*s, 11*s))}
	assertValid(t, Durability(es))
}

func TestDurability_FlagsLostMemberCommit(t *testing.T) {
	es := []history.Entry{
		commit("m1", "", 3, history.OK, 1*s, 10),
		commit("m1", "", 3, history.OK, 3*s, 20),
		{Type: history.TypeOp, F: history.FFetch, Final: true, Outcome: history.OK, Group: "grp", Topic: "t",
			Partition: 0, Value: history.Int64(10), Start: 10 * s, End: 11 * s},
	}
	assertFlags(t, Durability(es), KindLostWrite)
}

func join(inc, member, instance string, gen int32, leader string, end int64, roster ...history.Member) history.Entry {
	return history.Entry{Type: history.TypeOp, F: history.FJoin, Group: "grp", Incarnation: inc, Member: member, Instance: instance,
		Generation: gen, Leader: leader, Members: roster, Start: end - s/2, End: end, Outcome: history.OK}
}

func sync(inc, member, instance string, gen int32, end int64, parts ...int32) history.Entry {
	e := history.Entry{Type: history.TypeOp, F: history.FSync, Group: "grp", Incarnation: inc, Member: member, Instance: instance,
		Generation: gen, Start: end - s/2, End: end, Outcome: history.OK, Assignment: []history.Partition{}}
	for _, p := range parts {
		e.Assignment = append(e.Assignment, history.Partition{Topic: "t", Partition: p})
	}
	return e
}

func commit(member, instance string, gen int32, out history.Outcome, end int64, offset int64, parts ...int32) history.Entry {
	if len(parts) == 0 {
		parts = []int32{0}
	}
	e := history.Entry{Type: history.TypeOp, F: history.FCommit, Group: "grp", Member: member, Instance: instance,
		Generation: gen, Start: end - s/2, End: end, Outcome: out}
	for _, p := range parts {
		e.Commits = append(e.Commits, history.PartitionCommit{Partition: history.Partition{Topic: "t", Partition: p}, Offset: offset, Outcome: out})
	}
	return e
}

// healthyGroup is two members through two generations, the second after m2
// joined.
func healthyGroup() []history.Entry {
	r1 := []history.Member{{Member: "m1"}}
	r2 := []history.Member{{Member: "m1"}, {Member: "m2"}}
	return []history.Entry{
		{Type: history.TypeEvent, F: history.EvMemberStart, Group: "grp", Start: 0},
		join("i1", "m1", "", 1, "m1", 1*s, r1...),
		sync("i1", "m1", "", 1, 2*s, 0, 1),
		commit("m1", "", 1, history.OK, 3*s, 10, 0, 1),
		{Type: history.TypeEvent, F: history.EvMemberStart, Group: "grp", Start: 4 * s},
		join("i1", "m1", "", 2, "m1", 5*s, r2...),
		join("i2", "m2", "", 2, "m1", 5*s),
		sync("i1", "m1", "", 2, 6*s, 0),
		sync("i2", "m2", "", 2, 6*s, 1),
		commit("m1", "", 2, history.OK, 7*s, 11, 0),
		commit("m2", "", 2, history.OK, 7*s, 11, 1),
		// Refused commits for a partition no longer owned are fine.
		commit("m1", "", 2, history.Fail, 8*s, 12, 1),
	}
}

func TestGroupCheckers_AcceptHealthyGroup(t *testing.T) {
	es := healthyGroup()
	assertValid(t, Agreement(es))
	assertValid(t, Monotonic(es))
	assertValid(t, Fencing(es))
	assertValid(t, Failover(es, Options{}))
	assertValid(t, StaleGeneration(es))
	assertValid(t, OffsetsNeverGoBack(es))
}

func TestAgreement_FlagsDoubleOwner(t *testing.T) {
	es := append(healthyGroup(), sync("i3", "m3", "", 2, 6*s, 1)) // m3 also got partition 1 in gen 2
	assertFlags(t, Agreement(es), KindDoubleOwner)
}

func TestAgreement_StaticReplacementIsNotADoubleOwner(t *testing.T) {
	es := []history.Entry{
		join("a", "s1-old", "inst-1", 3, "s1-old", 1*s, history.Member{Member: "s1-old", Instance: "inst-1"}),
		sync("a", "s1-old", "inst-1", 3, 2*s, 0, 1),
		// The static member restarts and takes its slot with a new ID.
		join("b", "s1-new", "inst-1", 3, "s1-new", 5*s),
		sync("b", "s1-new", "inst-1", 3, 6*s, 0, 1),
	}
	assertValid(t, Agreement(es))
}

func TestAgreement_StaticLeaderReplacedAfterLostAnswerIsOneLeader(t *testing.T) {
	es := []history.Entry{
		// m2 is told the leader is "lost" (the static instance's ID whose
		// JoinGroup answer never reached it); the instance's retry replaces
		// it as "s-new" within the same generation.
		join("i2", "m2", "", 8, "lost", 1*s),
		join("i1", "s-new", "inst-1", 8, "s-new", 2*s, history.Member{Member: "s-new", Instance: "inst-1"}, history.Member{Member: "m2"}),
	}
	assertValid(t, Agreement(es))
	// Two real, different members named leader is still a disagreement.
	es = append(es, join("i3", "m3", "", 8, "m2", 3*s))
	assertFlags(t, Agreement(es), KindLeaderDisagree)
}

func TestAgreement_FlagsLeaderAndMemberListDisagreement(t *testing.T) {
	es := append(healthyGroup(), join("i2", "m2", "", 2, "m2", 5*s))
	assertFlags(t, Agreement(es), KindLeaderDisagree)
	es = append(healthyGroup(), join("i1", "m1", "", 2, "m1", 5*s, history.Member{Member: "m1"}))
	assertFlags(t, Agreement(es), KindMembersDisagree)
}

func TestMonotonic_FlagsGenerationGoingBack(t *testing.T) {
	es := append(healthyGroup(), join("i1", "m1", "", 1, "m1", 9*s))
	assertFlags(t, Monotonic(es), KindGenerationBack)
}

func TestFencing_FlagsCommitByNonOwner(t *testing.T) {
	// m2 owns partition 1 in generation 2; m1's commit of it is acknowledged.
	es := append(healthyGroup(), commit("m1", "", 2, history.OK, 9*s, 13, 1))
	assertFlags(t, Fencing(es), KindFencingBreach)
	// A commit for an old generation is a breach too.
	es = append(healthyGroup(), commit("m2", "", 1, history.OK, 9*s, 13, 1))
	assertFlags(t, Fencing(es), KindFencingBreach)
}

func TestFailover_FlagsGenerationWithoutChurn(t *testing.T) {
	es := append(healthyGroup(),
		join("i1", "m1", "", 3, "m1", 60*s, history.Member{Member: "m1"}, history.Member{Member: "m2"}),
		join("i2", "m2", "", 3, "m1", 60*s),
	)
	assertFlags(t, Failover(es, Options{SessionTimeout: 10 * 1e9}), KindUnexplainedRebal)
}

func TestLiveness_FlagsUnstableGroupAndSilentProcess(t *testing.T) {
	heal := history.Entry{Type: history.TypeEvent, F: history.EvFinalPhase, Start: 10 * s}
	ok := []history.Entry{
		write(0, 0, 1, 1*s, 2*s, history.OK),
		heal,
		write(0, 0, 2, 11*s, 12*s, history.OK),
		{Type: history.TypeOp, F: history.FDescribe, Final: true, Group: "grp", State: "Stable", Outcome: history.OK, Start: 10 * s, End: 13 * s},
	}
	assertValid(t, Liveness(ok, Options{}))
	bad := []history.Entry{
		write(0, 0, 1, 1*s, 2*s, history.OK),
		heal,
		write(0, 0, 2, 11*s, 12*s, history.Info),
		{Type: history.TypeOp, F: history.FDescribe, Final: true, Group: "grp", State: "PreparingRebalance", Outcome: history.Fail, Start: 10 * s, End: 40 * s},
	}
	r := Liveness(bad, Options{})
	assertFlags(t, r, KindGroupNotStable)
	assertFlags(t, r, KindClientNotRecovered)
}

func TestAll_RoundTripsThroughHistoryFile(t *testing.T) {
	path := t.TempDir() + "/history.jsonl"
	rec, err := history.NewRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range healthyGroup() {
		rec.Add(e)
	}
	for _, p := range []int32{0, 1} {
		rec.Add(history.Entry{Type: history.TypeOp, F: history.FFetch, Final: true, Outcome: history.OK, Group: "grp", Topic: "t",
			Partition: p, Value: history.Int64(11), Start: 20 * s, End: 21 * s})
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	es, err := history.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if rs := All(es, Options{}); !Valid(rs) {
		t.Fatalf("healthy history judged invalid: %+v", rs)
	}
}

func memberEvent(f, inc, instance, member string, at int64, note string) history.Entry {
	return history.Entry{Type: history.TypeEvent, F: f, Group: "grp", Incarnation: inc, Instance: instance, Member: member, Start: at, Note: note}
}

// A duplicate of static instance i1: s#0 runs, s#1 starts with its instance
// ID and joins; s#0 is fenced.
func duplicated() []history.Entry {
	return []history.Entry{
		memberEvent(history.EvMemberStart, "s#0", "i1", "", 0, ""),
		join("s#0", "m-a", "i1", 1, "m-a", 2*s, history.Member{Member: "m-a", Instance: "i1"}),
		memberEvent(history.EvMemberDuplicate, "s#1", "i1", "", 5*s, ""),
		join("s#1", "m-b", "i1", 1, "m-b", 6*s, history.Member{Member: "m-b", Instance: "i1"}),
		memberEvent(history.EvZombieStopped, "s#0", "i1", "", 7*s, "FENCED_INSTANCE_ID: a newer instance replaced this one"),
	}
}

func TestStaticFencing_AcceptsAFencedZombie(t *testing.T) {
	r := StaticFencing(duplicated())
	assertValid(t, r)
	if r.Checked != 1 {
		t.Fatalf("checked %d duplicates, want 1", r.Checked)
	}
	if r := StaticFencing(healthyGroup()); r.Skipped == "" {
		t.Fatal("a history without duplicates was checked")
	}
}

func TestStaticFencing_FlagsAZombieThatRejoinsOrSurvives(t *testing.T) {
	es := append(duplicated(), join("s#0", "m-c", "i1", 2, "m-c", 9*s, history.Member{Member: "m-c", Instance: "i1"}))
	assertFlags(t, StaticFencing(es), KindZombieRejoined)
	es = duplicated()
	es[len(es)-1] = memberEvent(history.EvZombieSurvived, "s#0", "i1", "", 25*s, "")
	assertFlags(t, StaticFencing(es), KindZombieSurvived)
}

func TestCutJoins_FlagsARetryRefusedUnknownMember(t *testing.T) {
	o := Options{SessionTimeout: 6 * time.Second}
	cut := memberEvent(history.EvJoinCut, "d#0", "", "m-a", 10*s, "")
	retry := join("d#0", "m-a", "", 3, "m-a", 12*s)
	assertValid(t, CutJoins([]history.Entry{cut, retry}, o))
	refused := retry
	refused.Outcome, refused.Error = history.Fail, "rpc error: code = NotFound desc = UNKNOWN_MEMBER_ID: member m-a is not in group grp"
	assertFlags(t, CutJoins([]history.Entry{cut, refused}, o), KindCutLostMember)
	// A retry long after the cut says nothing: the session may have ended.
	late := refused
	late.Start, late.End = 20*s, 21*s
	if r := CutJoins([]history.Entry{cut, late}, o); !r.Valid || r.Checked != 0 {
		t.Fatalf("a retry 10 s after the cut: valid=%v checked=%d, want valid and nothing checked", r.Valid, r.Checked)
	}
}

// Many unanswered writes on one key, as a run full of leader changes leaves
// them: each stays open to the end of the history, and without leaving out
// the ones no read saw porcupine would face 2^40 candidate sets and give up.
func TestLinearizable_DecidesManyUnknownWritesNoReadSaw(t *testing.T) {
	var es []history.Entry
	v := int64(0)
	for i := range 40 {
		at := int64(i) * 10 * s
		v++
		es = append(es, write(0, 0, v, at, at+1*s, history.OK))
		acked := v
		v++
		es = append(es, write(1+i%3, 0, v, at+2*s, at+3*s, history.Info))
		es = append(es, read(5, 0, acked, at+4*s, at+5*s))
	}
	o := Options{LinearizabilityTimeout: 10 * time.Second}
	assertValid(t, Linearizable(es, o))
	// Still checked, not waved through: one of those writes seen, then an
	// older value again, is flagged.
	end := int64(41) * 10 * s
	es = append(es, read(6, 0, 2, end, end+1*s), read(6, 0, 79, end+2*s, end+3*s))
	assertFlags(t, Linearizable(es, o), KindNonLinearizable)
}

func TestDropUnobserved_KeepsUnknownWritesSomeReadReturned(t *testing.T) {
	es := []history.Entry{
		write(0, 0, 1, 0, 1*s, history.OK),
		write(1, 0, 2, 0, 1*s, history.Info), // read back below: kept
		write(1, 0, 3, 0, 1*s, history.Info), // never read: left out
		write(1, 0, 4, 0, 1*s, history.Fail),
		read(2, 0, 2, 2*s, 3*s),
	}
	var got []int64
	for _, e := range dropUnobserved(es) {
		got = append(got, *e.Value)
	}
	if want := []int64{1, 2, 4, 2}; !slices.Equal(got, want) {
		t.Fatalf("values kept %v, want %v", got, want)
	}
}
