package checker

import (
	"fmt"
	"slices"
	"sort"

	"github.com/cohortlabs/cohort/chaos/history"
)

// keyWrite is one attempt to set a key: an offsets write or one partition of a
// member's commit.
type keyWrite struct {
	value   int64
	outcome history.Outcome
	op      history.Entry
}

// writesByKey gathers acknowledged and unknown writes per key.
func writesByKey(es []history.Entry) map[history.Key][]keyWrite {
	w := map[history.Key][]keyWrite{}
	for _, e := range ops(es, history.FWrite, history.FCommit) {
		if e.F == history.FWrite {
			if (e.Outcome == history.OK || e.Outcome == history.Info) && e.Value != nil {
				w[e.Key()] = append(w[e.Key()], keyWrite{*e.Value, e.Outcome, e})
			}
			continue
		}
		for _, c := range e.Commits {
			if c.Outcome == history.OK || c.Outcome == history.Info {
				k := history.Key{Group: e.Group, Topic: c.Topic, Partition: c.Partition.Partition}
				w[k] = append(w[k], keyWrite{c.Offset, c.Outcome, e})
			}
		}
	}
	return w
}

// Durability is checker 5: after the final heal, every key reads its last
// acknowledged value or the value of a write whose outcome is unknown
// (which may have landed later). "Last" is real-time order: an
// acknowledged write is superseded only by an acknowledged write that began
// after it ended.
func Durability(es []history.Entry) Result {
	finals := map[history.Key]history.Entry{}
	for _, e := range ops(es, history.FRead, history.FFetch) {
		if e.Final && e.Outcome == history.OK {
			finals[e.Key()] = e
		}
	}
	writes := writesByKey(es)
	if len(finals) == 0 && len(writes) == 0 {
		return skipped(NameDurability, "no writes and no final reads in the history")
	}
	keys := sortedKeys(writes)
	var as []Anomaly
	for _, k := range keys {
		ws := writes[k]
		f, ok := finals[k]
		if !ok {
			if slices.ContainsFunc(ws, func(w keyWrite) bool { return w.outcome == history.OK }) {
				as = append(as, Anomaly{Kind: KindNoFinalRead, Message: fmt.Sprintf(
					"key %s has acknowledged writes but no successful final read", k)})
			}
			continue
		}
		var got int64 = -1
		if f.Value != nil {
			got = *f.Value
		}
		var lastAcked []keyWrite
		allowed := map[int64]bool{}
		anyAcked := false
		for _, w := range ws {
			if w.outcome == history.Info {
				allowed[w.value] = true
				continue
			}
			anyAcked = true
			superseded := slices.ContainsFunc(ws, func(o keyWrite) bool {
				return o.outcome == history.OK && o.op.Start > w.op.End
			})
			if !superseded {
				allowed[w.value] = true
				lastAcked = append(lastAcked, w)
			}
		}
		if !anyAcked {
			allowed[-1] = true
		}
		if allowed[got] {
			continue
		}
		evidence := []history.Entry{f}
		for _, w := range lastAcked {
			evidence = append(evidence, w.op)
		}
		vals := make([]int64, 0, len(lastAcked))
		for _, w := range lastAcked {
			vals = append(vals, w.value)
		}
		as = append(as, Anomaly{Kind: KindLostWrite, Message: fmt.Sprintf(
			"key %s: final read returned %d, but the last acknowledged write(s) set %v and no unknown write set %d",
			k, got, vals, got), Ops: truncate(evidence, 8)})
	}
	return result(NameDurability, len(keys), as)
}

// Liveness is checker 7: after the final heal, every group of the groups
// workload became Stable with exactly its live members within the window,
// every key could be read, and every client process completed an operation
// again.
func Liveness(es []history.Entry, o Options) Result {
	o = o.withDefaults()
	var heal int64 = -1
	for _, e := range es {
		if e.Type == history.TypeEvent && e.F == history.EvFinalPhase {
			heal = e.Start
		}
	}
	if heal < 0 {
		return skipped(NameLiveness, "the run never reached its final phase")
	}
	var as []Anomaly
	checked := 0
	limit := heal + int64(o.LivenessWindow)
	for _, e := range ops(es, history.FDescribe) {
		if !e.Final {
			continue
		}
		checked++
		if e.Outcome != history.OK || e.End > limit {
			as = append(as, Anomaly{Kind: KindGroupNotStable, Message: fmt.Sprintf(
				"group %s was not Stable with its live members within %v of the final heal: state %q, %s",
				e.Group, o.LivenessWindow, e.State, e.Error), Ops: []history.Entry{e}})
		}
	}
	// Processes: every one that did anything must succeed again after the
	// heal, within the window.
	type proc struct {
		last      history.Entry
		recovered bool
	}
	procs := map[int]*proc{}
	// A duplicated static member's older process is fenced for good: not
	// expected back (checker 8 judges it).
	zombies := map[int]bool{}
	for _, e := range es {
		if e.Type == history.TypeEvent && (e.F == history.EvZombieStopped || e.F == history.EvZombieSurvived) {
			zombies[e.Process] = true
		}
	}
	for _, e := range es {
		// Neither the chaser's reads nor a held-back zombie commit (sent
		// for an incarnation that may have left before the heal) are a
		// client's own work.
		if e.Type != history.TypeOp || e.F == history.FDescribe || zombies[e.Process] || e.Note == history.NoteChase || e.ZombieProbe() {
			continue
		}
		p, ok := procs[e.Process]
		if !ok {
			p = &proc{}
			procs[e.Process] = p
		}
		p.last = e
		if e.Outcome == history.OK && e.Start >= heal && e.End <= limit {
			p.recovered = true
		}
	}
	ids := make([]int, 0, len(procs))
	for id := range procs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		p := procs[id]
		// A member incarnation that crashed or left before the heal is not
		// expected back.
		if p.last.End < heal && p.last.F != history.FRead && p.last.F != history.FWrite {
			continue
		}
		checked++
		if !p.recovered {
			as = append(as, Anomaly{Kind: KindClientNotRecovered, Message: fmt.Sprintf(
				"process %d completed no operation within %v of the final heal", id, o.LivenessWindow),
				Ops: []history.Entry{p.last}})
		}
	}
	return result(NameLiveness, checked, as)
}
