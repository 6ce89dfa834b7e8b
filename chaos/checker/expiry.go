package checker

import (
	"fmt"
	"slices"
	"sort"

	"github.com/cohortlabs/cohort/chaos/history"
)

// Expiry is checker 12, liveness during the run: a dynamic member whose
// process crashed (no LeaveGroup) is expired from its group within its
// session timeout plus the rebalance timeout plus slack, counted from the
// later of the crash and the start of the current leadership. A new leader
// re-arms every session from its own start, and without a leader nothing
// expires, so the clock restarts at every leader change the runner saw
// (EvLeader) and does not run while there is none. The runner's describe
// polls (non-final FDescribe with Members) that begin after the deadline,
// in the same leadership, must not list the member; the first poll that
// does not list it, at any time, shows it expired.
//
// Static members are left out: their instance restarts within a session
// timeout and takes the old member's place in the group.
func Expiry(es []history.Entry, o Options) Result {
	o = o.withDefaults()
	var describes, leaders []history.Entry
	for _, e := range es {
		switch {
		case e.Type == history.TypeOp && e.F == history.FDescribe && !e.Final && e.Outcome == history.OK:
			describes = append(describes, e)
		case e.Type == history.TypeEvent && e.F == history.EvLeader:
			leaders = append(leaders, e)
		}
	}
	if len(describes) == 0 || len(leaders) == 0 {
		return skipped(NameExpiry, "no describe polls or leader observations in the history")
	}
	sort.SliceStable(leaders, func(i, j int) bool { return leaders[i].Start < leaders[j].Start })
	// leaderAt returns the leadership in place at t (-1: none seen yet).
	leaderAt := func(t int64) int {
		return sort.Search(len(leaders), func(i int) bool { return leaders[i].Start > t }) - 1
	}
	budget := int64(o.SessionTimeout + o.RebalanceTimeout + 3e9)
	var as []Anomaly
	checked := 0
	for _, c := range events(es, history.EvMemberCrash) {
		if c.Instance != "" || c.Member == "" {
			continue
		}
		for _, d := range describes {
			if d.Group != c.Group || d.Start <= c.Start {
				continue
			}
			listed := slices.ContainsFunc(d.Members, func(m history.Member) bool { return m.Member == c.Member })
			if !listed {
				checked++ // expired (or replaced) in time
				break
			}
			li := leaderAt(d.Start)
			if li < 0 || leaders[li].Node == "" || leaderAt(d.End) != li {
				continue // no leader, or it changed during the poll
			}
			from := max(c.Start, leaders[li].Start)
			if d.Start < from+budget {
				continue
			}
			checked++
			as = append(as, Anomaly{Kind: KindMemberNotExpired, Message: fmt.Sprintf(
				"group %s: member %s crashed at %s and was still a member at %s, %s after leader %s (term %d) began at %s",
				c.Group, c.Member, secs(c.Start), secs(d.Start), secs(d.Start-from), leaders[li].Node, leaders[li].Term,
				secs(leaders[li].Start)), Ops: []history.Entry{c, leaders[li], d}})
			break
		}
	}
	return result(NameExpiry, checked, as)
}
