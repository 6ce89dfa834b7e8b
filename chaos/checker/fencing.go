package checker

import (
	"fmt"
	"sort"

	"github.com/cohortlabs/cohort/chaos/history"
)

// StaleGeneration is checker 10: once any member of a group was answered
// for generation M (a JoinGroup, SyncGroup or Heartbeat that succeeded),
// no commit for an older generation N < M sent after that answer arrived
// is acknowledged. A group's generation never goes back (the workload
// never deletes its groups), so such a commit comes from a member the
// group has moved past: a zombie the generation fence must refuse.
// Commits concurrent with the answer are not judged: the generation may
// have moved just after them.
func StaleGeneration(es []history.Entry) Result {
	commits := ops(es, history.FCommit)
	if len(commits) == 0 {
		return skipped(NameStaleGen, "no member commits in the history")
	}
	type seen struct {
		end int64
		op  history.Entry
	}
	byGroup := map[string][]seen{}
	for _, e := range ops(es, history.FJoin, history.FSync, history.FHeartbeat) {
		if e.Outcome == history.OK && e.Generation > 0 {
			byGroup[e.Group] = append(byGroup[e.Group], seen{e.End, e})
		}
	}
	// Per group, the newest generation answered by each moment.
	newest := map[string][]seen{}
	for g, ss := range byGroup {
		sort.Slice(ss, func(i, j int) bool { return ss[i].end < ss[j].end })
		var run []seen
		for _, s := range ss {
			if len(run) == 0 || s.op.Generation > run[len(run)-1].op.Generation {
				run = append(run, s)
			}
		}
		newest[g] = run
	}
	var as []Anomaly
	checked := 0
	for _, c := range commits {
		if c.Generation < 0 || !acked(c) {
			continue
		}
		checked++
		run := newest[c.Group]
		i := sort.Search(len(run), func(i int) bool { return run[i].end >= c.Start }) - 1
		if i < 0 || run[i].op.Generation <= c.Generation {
			continue
		}
		as = append(as, Anomaly{Kind: KindStaleGeneration, Message: fmt.Sprintf(
			"group %s: commit by %s for generation %d acknowledged at %s, sent after a member was answered for generation %d at %s",
			c.Group, c.Member, c.Generation, secs(c.End), run[i].op.Generation, secs(run[i].end)),
			Ops: []history.Entry{run[i].op, c}})
	}
	return result(NameStaleGen, checked, as)
}

// acked: some partition of a commit was acknowledged.
func acked(c history.Entry) bool {
	for _, p := range c.Commits {
		if p.Outcome == history.OK {
			return true
		}
	}
	return false
}

// OffsetsNeverGoBack is checker 11: per partition of a group, an
// acknowledged commit sent after another was acknowledged sets a higher
// offset. The workload draws each partition's offsets from one counter
// shared by every member and commits them one call at a time per member,
// and never resets offsets, so the only way to a lower acknowledged offset
// is an old commit (a retry, a zombie's) accepted after a newer owner's:
// a generation or member fence let it through. Unknown commits and the
// final reads are checker 5's (an unknown commit may land late).
func OffsetsNeverGoBack(es []history.Entry) Result {
	type ack struct {
		offset     int64
		start, end int64
		op         history.Entry
	}
	byKey := map[history.Key][]ack{}
	for _, e := range ops(es, history.FCommit) {
		if e.Generation < 0 {
			continue
		}
		for _, c := range e.Commits {
			if c.Outcome == history.OK {
				k := history.Key{Group: e.Group, Topic: c.Topic, Partition: c.Partition.Partition}
				byKey[k] = append(byKey[k], ack{c.Offset, e.Start, e.End, e})
			}
		}
	}
	if len(byKey) == 0 {
		return skipped(NameOffsetsBack, "no acknowledged member commits in the history")
	}
	keys := sortedKeys(byKey)
	var as []Anomaly
	checked := 0
	for _, k := range keys {
		byEnd := byKey[k]
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].end < byEnd[j].end })
		byStart := append([]ack(nil), byEnd...)
		sort.Slice(byStart, func(i, j int) bool { return byStart[i].start < byStart[j].start })
		// Sweep: max is the highest offset acknowledged before b began.
		var max *ack
		next := 0
		for _, b := range byStart {
			for next < len(byEnd) && byEnd[next].end < b.start {
				if max == nil || byEnd[next].offset > max.offset {
					max = &byEnd[next]
				}
				next++
			}
			checked++
			if max != nil && b.offset < max.offset {
				as = append(as, Anomaly{Kind: KindOffsetWentBack, Message: fmt.Sprintf(
					"%s: offset %d acknowledged (member %s, generation %d) after offset %d had been (member %s, generation %d)",
					k, b.offset, b.op.Member, b.op.Generation, max.offset, max.op.Member, max.op.Generation),
					Ops: []history.Entry{max.op, b.op}})
			}
		}
	}
	return result(NameOffsetsBack, checked, as)
}
