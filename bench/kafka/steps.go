package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortlabs/cohort/bench/report"
)

// stepsCommand is the subcommand that reads a --client-log file back
// (kafka-bench steps FILE) and prints where each generation of the classic
// protocol's rounds spent its time, per target: the timeline behind a
// round's whole time, built from the members' own kgo log lines and the
// round marks the run writes beside them.
const stepsCommand = "steps"

// The kgo log lines (at info) that mark a member's steps, and the run's
// round marks.
const (
	logJoining = "joining group;"
	logLeader  = "balancing group as leader"
	logSynced  = "synced;"
	markStart  = "start"
	markEnd    = "end"
)

// logTime is the stamp of a --client-log line (the day is left out: a
// run that passes midnight is read as one day later).
const logTime = "15:04:05.000000"

// roundMark is the line a run writes into the client log when a round
// starts or ends: the stamp, the target, "round", its number, and start
// or end.
func roundMark(w io.Writer, target string, round int, what string) {
	fmt.Fprintf(w, "%s %s round %d %s\n", time.Now().Format(logTime), target, round, what)
}

// roundEvents is what one round of one target's log says: its start and
// end, and when members wrote a JoinGroup, when the group leader began
// balancing (once per generation) and when members synced.
type roundEvents struct {
	start, end    time.Duration
	joins, synced []time.Duration
	leaders       []time.Duration
}

// step names, in order, for each generation of a round.
var stepNames = []string{
	"joins (first JoinGroup written → last)",
	"→ the group leader's join answer",
	"→ last member synced",
}

// generationSteps splits a round into its generations (one per leader
// balancing) and gives each generation's three steps: from its first
// JoinGroup to its last, from the last to the group leader's answer, from
// that to the last member synced before the next generation's leader. A
// generation whose steps cannot all be read (no JoinGroup or sync logged
// in it) is left out.
func (r *roundEvents) generationSteps() [][]time.Duration {
	var out [][]time.Duration
	from := r.start
	for i, leader := range r.leaders {
		until := r.end
		if i+1 < len(r.leaders) {
			until = r.leaders[i+1]
		}
		joins := within(r.joins, from, leader)
		synced := within(r.synced, leader, until)
		from = leader
		if len(joins) == 0 || len(synced) == 0 {
			continue
		}
		first, last := slices.Min(joins), slices.Max(joins)
		out = append(out, []time.Duration{last - first, leader - last, slices.Max(synced) - leader})
	}
	return out
}

// within is the times t of ts with from ≤ t < until.
func within(ts []time.Duration, from, until time.Duration) []time.Duration {
	var out []time.Duration
	for _, t := range ts {
		if t >= from && t < until {
			out = append(out, t)
		}
	}
	return out
}

// readRounds reads a client log into each target's rounds, in the order
// the targets first appear. Lines of members outside a round (forming,
// closing) are dropped, and so is a round whose end was not logged (a run
// that failed in it).
func readRounds(in io.Reader) (targets []string, rounds map[string][]*roundEvents, err error) {
	rounds = map[string][]*roundEvents{}
	current := map[string]*roundEvents{}
	var day, last time.Duration
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.SplitN(sc.Text(), " ", 5)
		if len(f) < 4 {
			continue
		}
		at, perr := time.Parse(logTime, f[0])
		if perr != nil {
			continue
		}
		t := at.Sub(at.Truncate(24*time.Hour)) + day
		if t < last-time.Hour {
			day += 24 * time.Hour
			t += 24 * time.Hour
		}
		last = t
		target := f[1]
		if f[2] == "round" && len(f) == 5 {
			switch f[4] {
			case markStart:
				if !slices.Contains(targets, target) {
					targets = append(targets, target)
				}
				current[target] = &roundEvents{start: t}
			case markEnd:
				if r := current[target]; r != nil {
					r.end = t
					rounds[target] = append(rounds[target], r)
				}
				current[target] = nil
			default:
				return nil, nil, fmt.Errorf("line %d: round mark %q is neither start nor end", n, f[4])
			}
			continue
		}
		r := current[target]
		if r == nil || len(f) < 5 || !strings.HasPrefix(f[3], "[") {
			continue
		}
		msg := f[4]
		switch {
		case strings.HasPrefix(msg, logJoining):
			r.joins = append(r.joins, t)
		case strings.HasPrefix(msg, logLeader):
			r.leaders = append(r.leaders, t)
		case strings.HasPrefix(msg, logSynced):
			r.synced = append(r.synced, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if len(targets) == 0 {
		return nil, nil, fmt.Errorf("no round marks: not a --client-log file of a rebalance run (or one written before the marks existed)")
	}
	return targets, rounds, nil
}

// writeSteps prints, per generation of a round, the median of each step
// over the rounds on each target.
func writeSteps(in io.Reader, out io.Writer) error {
	targets, rounds, err := readRounds(in)
	if err != nil {
		return err
	}
	// medians[target][generation][step]
	medians := map[string][][]time.Duration{}
	gens := 0
	counts := make([]string, len(targets))
	for i, tg := range targets {
		counts[i] = fmt.Sprintf("%s: %d rounds", tg, len(rounds[tg]))
		var per [][][]time.Duration // [generation][step][round]
		for _, r := range rounds[tg] {
			for g, steps := range r.generationSteps() {
				if g == len(per) {
					per = append(per, make([][]time.Duration, len(stepNames)))
				}
				for s, d := range steps {
					per[g][s] = append(per[g][s], d)
				}
			}
		}
		for _, g := range per {
			row := make([]time.Duration, len(g))
			for s, ds := range g {
				row[s], _, _ = report.Percentiles(ds)
			}
			medians[tg] = append(medians[tg], row)
		}
		gens = max(gens, len(per))
	}
	fmt.Fprintf(out, "steps of a round, median over the rounds (%s)\n", strings.Join(counts, ", "))
	t := report.NewTable(out, append([]string{"generation", "step"}, targets...)...)
	for g := range gens {
		for s, name := range stepNames {
			cells := []string{strconv.Itoa(g + 1), name}
			for _, tg := range targets {
				cell := "-"
				if g < len(medians[tg]) {
					cell = report.MS(medians[tg][g][s])
				}
				cells = append(cells, cell)
			}
			t.Row(cells...)
		}
	}
	t.Flush()
	return nil
}

// steps is the steps subcommand: one argument, the client log.
func steps(args []string, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("want one argument, a file written by --client-log; got %d", len(args))
	}
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	return writeSteps(f, out)
}
