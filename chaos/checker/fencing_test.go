package checker

import (
	"testing"

	"github.com/cohortlabs/cohort/chaos/history"
)

func nem(kind, phase string, at int64) history.Entry {
	return history.Entry{Type: history.TypeNemesis, F: kind, Fault: kind, Phase: phase, Start: at}
}

// rebalancedAt60 is healthyGroup moved to generation 3 at 60 s with no
// churn.
func rebalancedAt60() []history.Entry {
	return append(healthyGroup(),
		join("i1", "m1", "", 3, "m1", 60*s, history.Member{Member: "m1"}, history.Member{Member: "m2"}),
		join("i2", "m2", "", 3, "m1", 60*s),
	)
}

func TestFailover_JudgesLeaderFaultsOnAMixedSchedule(t *testing.T) {
	o := Options{SessionTimeout: 6 * 1e9}
	// A leader pause and a transfer shortly before: still unexplained.
	es := append(rebalancedAt60(),
		nem("pause-leader", history.NemStart, 50*s), nem("pause-leader", history.NemStop, 53*s),
		nem("transfer-leadership", history.NemStart, 55*s), nem("transfer-leadership", history.NemStop, 55*s),
		// A partition after the new generation excuses nothing.
		nem("partition-halves", history.NemStart, 61*s), nem("partition-halves", history.NemStop, 63*s))
	assertFlags(t, Failover(es, o), KindUnexplainedRebal)
}

func TestFailover_ExcusesGenerationsNearFaultsItDoesNotJudge(t *testing.T) {
	o := Options{SessionTimeout: 6 * 1e9}
	for name, faults := range map[string][]history.Entry{
		"follower paused": {nem("pause-one", history.NemStart, 50*s), nem("pause-one", history.NemStop, 54*s)},
		// Members may expire in a long leader pause.
		"leader paused past the session timeout": {nem("pause-leader", history.NemStart, 50*s), nem("pause-leader", history.NemStop, 57*s)},
		"partition still in place":               {nem("isolate-one", history.NemStart, 58*s)},
	} {
		r := Failover(append(rebalancedAt60(), faults...), o)
		if !r.Valid || r.Excused != 1 {
			t.Errorf("%s: valid=%v excused=%d anomalies %v, want the generation excused", name, r.Valid, r.Excused, kinds(r))
		}
	}
	// A frozen member explains the generation its expiry causes.
	es := append(rebalancedAt60(), history.Entry{Type: history.TypeEvent, F: history.EvMemberFreeze, Group: "grp", Start: 52 * s})
	assertValid(t, Failover(es, o))
}

func heartbeat(member string, gen int32, end int64) history.Entry {
	return history.Entry{Type: history.TypeOp, F: history.FHeartbeat, Group: "grp", Member: member, Generation: gen,
		Start: end - s/10, End: end, Outcome: history.OK}
}

func TestStaleGeneration_FlagsCommitAckedAfterNewerGenerationWasAnswered(t *testing.T) {
	// m1 was answered generation 2 at 5 s; m2 commits for generation 1
	// from 9 s on and is acknowledged.
	es := append(healthyGroup(), commit("m2", "", 1, history.OK, 9*s, 13, 1))
	assertFlags(t, StaleGeneration(es), KindStaleGeneration)
	// A heartbeat answer counts as seeing the generation.
	es = []history.Entry{heartbeat("m1", 4, 2*s), commit("m2", "", 3, history.OK, 4*s, 1)}
	assertFlags(t, StaleGeneration(es), KindStaleGeneration)
}

func TestStaleGeneration_AcceptsRefusedAndConcurrentOldCommits(t *testing.T) {
	es := append(healthyGroup(),
		// Refused: the fence worked.
		commit("m2", "", 1, history.Fail, 9*s, 13, 1),
		// Sent (4.5 s) before generation 2 was answered (5 s): may have
		// landed while generation 1 was current.
		commit("m2", "", 1, history.OK, 5*s+s/4, 12, 1),
		// Standalone commits carry no generation.
		history.Entry{Type: history.TypeOp, F: history.FCommit, Group: "grp", Generation: -1, Start: 20 * s, End: 21 * s,
			Outcome: history.OK, Commits: []history.PartitionCommit{{Partition: history.Partition{Topic: "t"}, Offset: 1, Outcome: history.OK}}},
	)
	assertValid(t, StaleGeneration(es))
}

func TestOffsetsNeverGoBack_FlagsLowerOffsetAckedAfterHigher(t *testing.T) {
	es := []history.Entry{
		commit("m1", "", 1, history.OK, 2*s, 10),
		commit("m2", "", 2, history.OK, 4*s, 20),
		commit("m1", "", 1, history.OK, 6*s, 15), // sent at 5.5 s, after 20 was acked at 4 s
	}
	assertFlags(t, OffsetsNeverGoBack(es), KindOffsetWentBack)
}

func TestOffsetsNeverGoBack_AcceptsConcurrentAndOtherPartitions(t *testing.T) {
	es := []history.Entry{
		commit("m1", "", 1, history.OK, 2*s, 10, 0),
		// Concurrent with the 10 (sent at 1.5 s, before it was acked).
		commit("m2", "", 1, history.OK, 2*s, 9, 1),
		commit("m2", "", 1, history.OK, 2*s+s/10, 8, 0),
		// Another partition has its own order.
		commit("m2", "", 1, history.OK, 5*s, 3, 1),
		// A refused or unknown lower commit is not an acknowledgement.
		commit("m3", "", 1, history.Fail, 7*s, 1, 0),
		commit("m3", "", 1, history.Info, 8*s, 2, 0),
		commit("m1", "", 1, history.OK, 9*s, 11, 0),
	}
	r := OffsetsNeverGoBack(es)
	// Partition 1: 9 acked by 2 s, then 3 sent at 4.5 s: that one went back.
	assertFlags(t, r, KindOffsetWentBack)
	if len(r.Anomalies) != 1 {
		t.Fatalf("want only partition 1's 3 flagged, got %+v", r.Anomalies)
	}
	assertValid(t, OffsetsNeverGoBack(es[:2]))
}

func leaderEv(node string, term uint64, at int64) history.Entry {
	return history.Entry{Type: history.TypeEvent, F: history.EvLeader, Node: node, Term: term, Start: at}
}

func poll(at int64, members ...string) history.Entry {
	e := history.Entry{Type: history.TypeOp, F: history.FDescribe, Group: "grp", State: "Stable", Start: at, End: at + s/10,
		Outcome: history.OK}
	for _, m := range members {
		e.Members = append(e.Members, history.Member{Member: m})
	}
	return e
}

func crash(member, instance string, at int64) history.Entry {
	return history.Entry{Type: history.TypeEvent, F: history.EvMemberCrash, Group: "grp", Member: member, Instance: instance, Start: at}
}

func TestExpiry_FlagsCrashedMemberStillInGroupAfterItsDeadline(t *testing.T) {
	o := Options{SessionTimeout: 6 * 1e9, RebalanceTimeout: 12 * 1e9} // deadline: 21 s
	es := []history.Entry{
		leaderEv("n1", 2, 0),
		crash("m1", "", 10*s),
		poll(20*s, "m1", "m2"),
		poll(32*s, "m1", "m2"), // 22 s after the crash in one leadership
	}
	assertFlags(t, Expiry(es, o), KindMemberNotExpired)
}

func TestExpiry_CountsFromTheLatestLeaderAndNotWithoutOne(t *testing.T) {
	o := Options{SessionTimeout: 6 * 1e9, RebalanceTimeout: 12 * 1e9}
	es := []history.Entry{
		leaderEv("n1", 2, 0),
		crash("m1", "", 10*s),
		// A new leader at 20 s re-arms every session: m1 may live to 41 s.
		leaderEv("n2", 3, 20*s),
		poll(35*s, "m1", "m2"),
		// No leader from 38 s to 60 s; then n1 leads again (deadline 81 s).
		leaderEv("", 0, 38*s),
		poll(50*s, "m1", "m2"),
		leaderEv("n1", 4, 60*s),
		poll(75*s, "m1", "m2"),
		poll(82*s, "m2"),
		// A static member is replaced by its restart, not expired.
		crash("s1", "inst-1", 10*s),
		poll(90*s, "s1", "m2"),
	}
	r := Expiry(es, o)
	assertValid(t, r)
	if r.Checked != 1 {
		t.Fatalf("checked %d crashes, want m1's", r.Checked)
	}
}

func TestLiveness_DoesNotExpectTheChaserBack(t *testing.T) {
	heal := history.Entry{Type: history.TypeEvent, F: history.EvFinalPhase, Start: 10 * s}
	chase := read(800, 0, 1, 3*s, 4*s)
	chase.Note = history.NoteChase
	es := []history.Entry{
		write(0, 0, 1, 1*s, 2*s, history.OK), chase, heal,
		write(0, 0, 2, 11*s, 12*s, history.OK),
	}
	assertValid(t, Liveness(es, Options{}))
	chase.Note = ""
	assertFlags(t, Liveness(append(es, chase), Options{}), KindClientNotRecovered)
}

// A member that left before the heal is not expected back, even when the
// workload sends one of its held-back commits (a zombie probe) afterwards.
func TestLiveness_DoesNotExpectAZombieCommitsMemberBack(t *testing.T) {
	heal := history.Entry{Type: history.TypeEvent, F: history.EvFinalPhase, Start: 10 * s}
	join := history.Entry{Type: history.TypeOp, Process: 7, F: history.FJoin, Start: 1 * s, End: 2 * s, Outcome: history.OK}
	zombie := history.Entry{Type: history.TypeOp, Process: 7, F: history.FCommit, Start: 12 * s, End: 12 * s, Outcome: history.Fail,
		Note: history.NoteZombie + "generation 5 sent after generation 6 was answered"}
	es := []history.Entry{join, heal, zombie}
	assertValid(t, Liveness(es, Options{}))
	zombie.Note = ""
	assertFlags(t, Liveness([]history.Entry{join, heal, zombie}, Options{}), KindClientNotRecovered)
}
