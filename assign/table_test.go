package assign

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAssignorTable prints the table of docs/assignors.md:
//
//	go test -run '^$' -bench AssignorTable -benchtime 1x ./assign/
//
// Balance is measured after the join step (after the leave step for S4,
// which starts by losing a member); moves count partitions taken from a
// member that is still in the group; time is one Assign call on the join
// step's input (for cooperative-sticky, round one), the fastest of several
// testing.Benchmark runs.
//
// It is a benchmark, not a test, so that `go test` never runs (or skips) it.
func BenchmarkAssignorTable(b *testing.B) {
	t := b
	fmt.Println("| Scenario | Assignor | max − min | max / avg | moves on join | moves on leave | time (join step) |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|")
	for _, sc := range scenarios() {
		for _, a := range allAssignors(t) {
			join, leave := sc.run(t, a)
			measured := join
			if sc.leaveFirst {
				measured = leave
			}
			spread, ratio := loadStats(measured.after, measured.members)
			joinMoves := fmt.Sprint(movedFrom(join.before, join.after))
			leaveMoves := fmt.Sprint(movedFrom(leave.before, leave.after))
			if a.Name() == NameCooperativeSticky {
				joinMoves += fmt.Sprintf(" (%d rounds)", join.rounds)
				leaveMoves += fmt.Sprintf(" (%d rounds)", leave.rounds)
			}
			best := time.Duration(1 << 62)
			for range 3 {
				r := testing.Benchmark(func(b *testing.B) {
					for b.Loop() {
						if _, err := a.Assign(join.members, sc.topics); err != nil {
							b.Fatal(err)
						}
					}
				})
				best = min(best, time.Duration(r.NsPerOp()))
			}
			fmt.Printf("| %s | %s | %d | %.3f | %s | %s | %s |\n", sc.name, a.Name(), spread, ratio, joinMoves, leaveMoves, fmtDuration(best))
		}
	}
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}
