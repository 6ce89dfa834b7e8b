package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cohortlabs/cohort/chaos/history"
)

type genKey struct {
	group string
	gen   int32
}

func (g genKey) String() string { return fmt.Sprintf("group %s generation %d", g.group, g.gen) }

// identities maps member IDs to owner identities, from every operation
// that names both.
func identities(es []history.Entry) map[string]string {
	id := map[string]string{}
	add := func(member, instance string) {
		if member != "" && instance != "" {
			id[member] = identity(member, instance)
		}
	}
	for _, e := range es {
		add(e.Member, e.Instance)
		for _, m := range e.Members {
			add(m.Member, m.Instance)
		}
		for _, m := range e.Plan {
			add(m.Member, m.Instance)
		}
	}
	return id
}

func who(ids map[string]string, member string) string {
	if v, ok := ids[member]; ok {
		return v
	}
	return member
}

// Agreement is checker 2: in one generation of a group no partition has two
// owners (by the members' own SyncGroup answers and by the leader's plan),
// and every member saw the same group leader and the same member list.
func Agreement(es []history.Entry) Result {
	syncs := ops(es, history.FSync)
	joins := ops(es, history.FJoin)
	if len(syncs)+len(joins) == 0 {
		return skipped(NameAgreement, "no group operations in the history")
	}
	ids := identities(es)
	var as []Anomaly
	checked := 0

	type claim struct {
		owner string
		op    history.Entry
	}
	owners := map[genKey]map[history.Partition]claim{}
	claimed := func(gk genKey, p history.Partition, owner string, op history.Entry) {
		if owners[gk] == nil {
			owners[gk] = map[history.Partition]claim{}
		}
		prev, ok := owners[gk][p]
		if !ok {
			owners[gk][p] = claim{owner, op}
			return
		}
		if prev.owner != owner {
			as = append(as, Anomaly{Kind: KindDoubleOwner, Message: fmt.Sprintf(
				"%s: partition %s/%d owned by %s and by %s", gk, p.Topic, p.Partition, prev.owner, owner),
				Ops: []history.Entry{prev.op, op}})
		}
	}
	for _, e := range syncs {
		if e.Outcome != history.OK {
			continue
		}
		checked++
		gk := genKey{e.Group, e.Generation}
		for _, p := range e.Assignment {
			claimed(gk, p, identity(e.Member, e.Instance), e)
		}
		for _, m := range e.Plan {
			for _, p := range m.Assignment {
				claimed(gk, p, who(ids, m.Member), e)
			}
		}
	}

	// Member IDs some client was answered with. A static member whose
	// JoinGroup answer was lost (timeout, leader change) is replaced, within
	// the same generation, by its retry's new ID — leadership included — so
	// the others may name the lost ID as leader while the static member
	// names its new one: the same instance, not a disagreement.
	known := map[string]bool{}
	for _, e := range joins {
		if e.Outcome == history.OK {
			known[e.Member] = true
			for _, m := range e.Members {
				known[m.Member] = true
			}
		}
	}
	leaders := map[genKey]history.Entry{}
	rosters := map[genKey]history.Entry{}
	for _, e := range joins {
		if e.Outcome != history.OK {
			continue
		}
		checked++
		gk := genKey{e.Group, e.Generation}
		if prev, ok := leaders[gk]; !ok {
			leaders[gk] = e
		} else if a, b := who(ids, prev.Leader), who(ids, e.Leader); a != b && !staticReplacement(ids, known, a, b) {
			as = append(as, Anomaly{Kind: KindLeaderDisagree, Message: fmt.Sprintf(
				"%s: members were told different group leaders, %s and %s", gk, prev.Leader, e.Leader),
				Ops: []history.Entry{prev, e}})
		}
		if len(e.Members) == 0 {
			continue
		}
		if prev, ok := rosters[gk]; !ok {
			rosters[gk] = e
		} else if a, b := roster(ids, prev.Members), roster(ids, e.Members); !slices.Equal(a, b) {
			as = append(as, Anomaly{Kind: KindMembersDisagree, Message: fmt.Sprintf(
				"%s: the leader was given two member lists, %v and %v", gk, a, b), Ops: []history.Entry{prev, e}})
		}
	}
	// Every member answered for a generation is in that generation's list.
	for _, e := range append(slices.Clone(joins), syncs...) {
		if e.Outcome != history.OK {
			continue
		}
		gk := genKey{e.Group, e.Generation}
		r, ok := rosters[gk]
		if !ok {
			continue
		}
		if !slices.Contains(roster(ids, r.Members), identity(e.Member, e.Instance)) {
			as = append(as, Anomaly{Kind: KindNotInGeneration, Message: fmt.Sprintf(
				"%s: %s was answered %s but is not in the leader's member list %v", gk, e.Member, e.F, roster(ids, r.Members)),
				Ops: []history.Entry{r, e}})
		}
	}
	return result(NameAgreement, checked, as)
}

// staticReplacement: one leader is a static instance and the other an ID
// no client was ever answered with (the instance's lost incarnation).
func staticReplacement(ids map[string]string, known map[string]bool, a, b string) bool {
	static := func(x string) bool { return strings.HasPrefix(x, "instance:") }
	return (static(a) && !known[b] && !static(b)) || (static(b) && !known[a] && !static(a))
}

func roster(ids map[string]string, ms []history.Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		if m.Instance != "" {
			out = append(out, identity(m.Member, m.Instance))
		} else {
			out = append(out, who(ids, m.Member))
		}
	}
	sort.Strings(out)
	return out
}

// Monotonic is checker 3: each member client (one incarnation) sees its
// generations only grow: no JoinGroup or SyncGroup answer names a generation
// older than one it was already answered, and a repeated SyncGroup answer
// for the same generation carries the same assignment.
func Monotonic(es []history.Entry) Result {
	gops := ops(es, history.FJoin, history.FSync)
	if len(gops) == 0 {
		return skipped(NameMonotonic, "no group operations in the history")
	}
	var done []history.Entry
	for _, e := range gops {
		if e.Outcome == history.OK {
			done = append(done, e)
		}
	}
	// In the order the member saw the answers.
	sort.SliceStable(done, func(i, j int) bool { return done[i].End < done[j].End })
	type seen struct {
		max      history.Entry
		lastSync *history.Entry
	}
	by := map[string]*seen{}
	var as []Anomaly
	for _, e := range done {
		inc := e.Incarnation
		if inc == "" {
			inc = e.Group + "/" + e.Member
		}
		s, ok := by[inc]
		if !ok {
			by[inc] = &seen{max: e}
			if e.F == history.FSync {
				by[inc].lastSync = &e
			}
			continue
		}
		if e.Generation < s.max.Generation {
			as = append(as, Anomaly{Kind: KindGenerationBack, Message: fmt.Sprintf(
				"member %s (%s) of group %s was answered generation %d after generation %d",
				e.Member, inc, e.Group, e.Generation, s.max.Generation), Ops: []history.Entry{s.max, e}})
		} else {
			s.max = e
		}
		if e.F == history.FSync {
			if l := s.lastSync; l != nil && l.Generation == e.Generation && !slices.Equal(l.Assignment, e.Assignment) {
				as = append(as, Anomaly{Kind: KindGenerationRepeat, Message: fmt.Sprintf(
					"member %s of group %s was synced twice in generation %d with different assignments",
					e.Member, e.Group, e.Generation), Ops: []history.Entry{*l, e}})
			}
			s.lastSync = &e
		}
	}
	return result(NameMonotonic, len(done), as)
}

// Fencing is checker 4: every commit acknowledged for a partition names a
// member and generation in which that member owned the partition, by the
// member's own SyncGroup answer or by the group leader's plan.
func Fencing(es []history.Entry) Result {
	commits := ops(es, history.FCommit)
	if len(commits) == 0 {
		return skipped(NameFencing, "no member commits in the history")
	}
	type ownKey struct {
		gk     genKey
		member string
		p      history.Partition
	}
	owned := map[ownKey]bool{}
	for _, e := range ops(es, history.FSync) {
		if e.Outcome != history.OK {
			continue
		}
		gk := genKey{e.Group, e.Generation}
		for _, p := range e.Assignment {
			owned[ownKey{gk, e.Member, p}] = true
		}
		for _, m := range e.Plan {
			for _, p := range m.Assignment {
				owned[ownKey{gk, m.Member, p}] = true
			}
		}
	}
	var as []Anomaly
	checked := 0
	for _, e := range commits {
		var bad []string
		for _, c := range e.Commits {
			if c.Outcome != history.OK {
				continue
			}
			checked++
			if !owned[ownKey{genKey{e.Group, e.Generation}, e.Member, c.Partition}] {
				bad = append(bad, fmt.Sprintf("%s/%d@%d", c.Topic, c.Partition.Partition, c.Offset))
			}
		}
		if len(bad) > 0 {
			as = append(as, Anomaly{Kind: KindFencingBreach, Message: fmt.Sprintf(
				"group %s: commit of %s acknowledged for member %s in generation %d, which did not own it then",
				e.Group, strings.Join(bad, ", "), e.Member, e.Generation), Ops: []history.Entry{e}})
		}
	}
	return result(NameFencing, checked, as)
}

// Failover is checker 6: a leader change alone must not rebalance anyone.
// Every new generation of a group is explained by member churn (a member
// starting, leaving, crashing, freezing or restarting) since shortly
// before the previous generation, or excused by a fault the group need not
// ride out: one not in o.RideOut (a follower crash or pause, a partition, a
// membership change, which may cut members off for a session timeout), or a
// ride-out fault that lasted a session timeout or more. Such a fault
// excuses the generations first seen from its start to a session timeout
// (plus slack) after it ended. On a schedule of ride-out faults only, every
// generation is judged; on a mixed one, those away from other faults.
func Failover(es []history.Entry, o Options) Result {
	o = o.withDefaults()
	first := map[genKey]history.Entry{}
	for _, e := range ops(es, history.FJoin, history.FSync) {
		if e.Outcome != history.OK {
			continue
		}
		gk := genKey{e.Group, e.Generation}
		if f, ok := first[gk]; !ok || e.End < f.End {
			first[gk] = e
		}
	}
	if len(first) == 0 {
		return skipped(NameFailover, "no group operations in the history")
	}
	churn := map[string][]history.Entry{}
	for _, e := range es {
		if e.Type == history.TypeEvent && strings.HasPrefix(e.F, "member-") {
			churn[e.Group] = append(churn[e.Group], e)
		}
	}
	slack := int64(2e9)
	excuses := excusingFaults(es, o, slack)
	byGroup := map[string][]int32{}
	for gk := range first {
		byGroup[gk.group] = append(byGroup[gk.group], gk.gen)
	}
	// Each churn event explains at most one new generation: matched
	// greedily, earliest generation first, earliest eligible event first.
	// A crash or freeze is eligible up to a session timeout (plus slack)
	// before the previous generation appeared, since its expiry comes that
	// much later.
	var as []Anomaly
	checked, excused := 0, 0
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		gens := byGroup[g]
		slices.Sort(gens)
		evs := churn[g]
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].Start < evs[j].Start })
		used := make([]bool, len(evs))
		consume := func(from, to int64) bool {
			for i, c := range evs {
				if used[i] || c.Start > to {
					continue
				}
				lo := from
				if c.F == history.EvMemberCrash || c.F == history.EvMemberFreeze {
					lo -= int64(o.SessionTimeout)
				}
				if c.Start > lo {
					used[i] = true
					return true
				}
			}
			return false
		}
		consume(-1<<62, first[genKey{g, gens[0]}].End)
		for i := 1; i < len(gens); i++ {
			prev, cur := first[genKey{g, gens[i-1]}], first[genKey{g, gens[i]}]
			if consume(prev.Start-slack, cur.End) {
				checked++
				continue
			}
			if excusedBy(excuses, prev.Start-slack, cur.End) {
				excused++
				continue
			}
			checked++
			as = append(as, Anomaly{Kind: KindUnexplainedRebal, Message: fmt.Sprintf(
				"group %s moved from generation %d (first seen %s) to %d (first seen %s) with no member churn and no fault but leader changes to explain it",
				g, gens[i-1], secs(prev.End), gens[i], secs(cur.End)), Ops: []history.Entry{prev, cur}})
		}
	}
	r := result(NameFailover, checked, as)
	if excused > 0 {
		r.Excused = excused
	}
	return r
}

// window is a span of history time.
type window struct{ from, to int64 }

// excusingFaults are the windows in which a rebalance is excused: each
// fault not in o.RideOut (and each ride-out fault of a session timeout or
// more) from its start to a session timeout plus slack after its stop.
func excusingFaults(es []history.Entry, o Options, slack int64) []window {
	open := map[string]history.Entry{} // kind → the start of the fault in place
	var out []window
	var nems []history.Entry
	for _, e := range es {
		if e.Type == history.TypeNemesis {
			nems = append(nems, e)
		}
	}
	history.Sort(nems)
	for _, e := range nems {
		kind := e.Fault
		switch e.Phase {
		case history.NemStart:
			open[kind] = e
		case history.NemStop:
			start := e.Start // a heal without a start (heal-all): excuse its aftermath
			if s, ok := open[kind]; ok {
				start = s.Start
			}
			delete(open, kind)
			if slices.Contains(o.RideOut, kind) && e.Start-start < int64(o.SessionTimeout) {
				continue
			}
			out = append(out, window{start, e.Start + int64(o.SessionTimeout) + slack})
		}
	}
	for _, s := range open { // never stopped: excused to the end, unless it never began
		if !strings.HasPrefix(s.Note, "failed to start") {
			out = append(out, window{s.Start, 1 << 62})
		}
	}
	return out
}

func excusedBy(ws []window, from, to int64) bool {
	for _, w := range ws {
		if w.from <= to && w.to >= from {
			return true
		}
	}
	return false
}
