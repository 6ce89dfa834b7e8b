package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/chaos/checker"
	"github.com/cohortlabs/cohort/chaos/history"
)

func TestReport_WritesResultsAndBothPlots(t *testing.T) {
	var es []history.Entry
	for i := range int64(200) {
		out := history.OK
		if i%17 == 0 {
			out = history.Info
		}
		es = append(es, history.Entry{Type: history.TypeOp, F: history.FWrite, Start: i * 5e7, End: i*5e7 + 3e6, Outcome: out,
			Group: "g", Topic: "t", Value: history.Int64(i)})
	}
	es = append(es,
		history.Entry{Type: history.TypeNemesis, Fault: "kill-leader", Phase: history.NemStart, Start: 2e9},
		history.Entry{Type: history.TypeNemesis, Fault: "kill-leader", Phase: history.NemStop, Start: 4e9},
	)
	history.Sort(es)
	dir := t.TempDir()
	r := &Results{Run: "test"}
	Summarise(r, es, checker.All(es, checker.Options{}))
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	if err := Plots(dir, "test", es); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "latency.png", "throughput.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s missing or empty: %v", f, err)
		}
	}
	if r.Faults["kill-leader"] != 1 || r.Ops[history.FWrite][history.Info] != 12 {
		t.Fatalf("counts wrong: faults %v ops %v", r.Faults, r.Ops)
	}
	if !strings.Contains(Text(r), "kill-leader") {
		t.Fatalf("summary misses the fault:\n%s", Text(r))
	}
}

func TestExpose_CountsFencesLeadershipReturnsAndZombies(t *testing.T) {
	lead := func(node string, term uint64, at int64) history.Entry {
		return history.Entry{Type: history.TypeEvent, F: history.EvLeader, Node: node, Term: term, Start: at}
	}
	commit := func(note, code string) history.Entry {
		out := history.OK
		if code != "" {
			out = history.Fail
		}
		return history.Entry{Type: history.TypeOp, F: history.FCommit, Note: note, Outcome: history.OK,
			Commits: []history.PartitionCommit{{Outcome: out, Error: code}}}
	}
	es := []history.Entry{
		lead("n1", 2, 0), lead("n2", 3, 10e9), lead("", 0, 20e9), lead("n1", 5, 30e9),
		{Type: history.TypeOp, F: history.FRead, Outcome: history.OK, Start: 30e9 + 5e8},
		{Type: history.TypeOp, F: history.FRead, Outcome: history.OK, Start: 35e9},
		commit("zombie: generation 3", "ILLEGAL_GENERATION"),
		commit("", "rpc error: code = FailedPrecondition desc = UNKNOWN_MEMBER_ID: member \"m\" is not in group \"g\""),
		commit("", "rpc error: code = Unavailable desc = no raft leader is known"),
		commit("zombie: generation 4", ""),
	}
	x := Expose(es)
	if x.LeaderChanges != 4 || len(x.LedAgain) != 1 || x.ReadsAfterLeaderChange != 1 {
		t.Fatalf("leadership: %+v, want 4 changes, n1 leading again, 1 read just after a change", x)
	}
	if x.ZombieCommits != 2 || x.ZombieCommitsRefused != 1 || x.ZombieCommitsAcked != 1 ||
		x.CommitsRefused["ILLEGAL_GENERATION"] != 1 || x.CommitsRefused["UNKNOWN_MEMBER_ID"] != 1 ||
		x.CommitsRefused["grpc Unavailable"] != 1 {
		t.Fatalf("commits: %+v", x)
	}
}
