package checker

import (
	"fmt"
	"strings"

	"github.com/cohortlabs/cohort/chaos/history"
)

// events returns the events named f.
func events(es []history.Entry, f string) []history.Entry {
	var out []history.Entry
	for _, e := range es {
		if e.Type == history.TypeEvent && e.F == f {
			out = append(out, e)
		}
	}
	return out
}

// StaticFencing is checker 8 (KIP-345): a static member's instance belongs
// to its newest process. When a second process with the instance ID
// starts while the first runs (member-duplicate), the first never joins
// successfully again once the second has, and it stops (the group fences
// it) instead of running on.
func StaticFencing(es []history.Entry) Result {
	dups := events(es, history.EvMemberDuplicate)
	if len(dups) == 0 {
		return skipped(NameStatic, "no duplicated static member in the history")
	}
	// The incarnations of each instance, in start order.
	started := map[string][]history.Entry{}
	ended := map[string]history.Entry{} // zombie incarnation → how it ended
	for _, e := range es {
		if e.Type != history.TypeEvent || e.Instance == "" {
			continue
		}
		switch e.F {
		case history.EvMemberStart, history.EvMemberRestart, history.EvMemberDuplicate:
			started[e.Instance] = append(started[e.Instance], e)
		case history.EvZombieStopped, history.EvZombieSurvived:
			ended[e.Incarnation] = e
		}
	}
	joins := map[string][]history.Entry{} // incarnation → successful joins
	for _, e := range ops(es, history.FJoin) {
		if e.Outcome == history.OK {
			joins[e.Incarnation] = append(joins[e.Incarnation], e)
		}
	}
	var as []Anomaly
	for _, d := range dups {
		var zombie string
		for _, s := range started[d.Instance] {
			if s.Start < d.Start && s.Incarnation != d.Incarnation {
				zombie = s.Incarnation
			}
		}
		if zombie == "" {
			continue
		}
		if e, ok := ended[zombie]; ok && e.F == history.EvZombieSurvived {
			as = append(as, Anomaly{Kind: KindZombieSurvived, Message: fmt.Sprintf(
				"instance %s: %s was still running three session timeouts after %s took its instance ID", d.Instance, zombie, d.Incarnation),
				Ops: []history.Entry{d, e}})
		}
		newer := joins[d.Incarnation]
		if len(newer) == 0 {
			continue
		}
		first := newer[0]
		for _, j := range joins[zombie] {
			if j.Start > first.End {
				as = append(as, Anomaly{Kind: KindZombieRejoined, Message: fmt.Sprintf(
					"instance %s: %s joined as %s at %s, after %s had joined with the instance ID at %s: the older process took the slot back",
					d.Instance, zombie, j.Member, secs(j.End), d.Incarnation, secs(first.End)), Ops: []history.Entry{first, j}})
				break
			}
		}
	}
	return result(NameStatic, len(dups), as)
}

// CutJoins is checker 9: a member whose JoinGroup was cut while it waited
// at the join barrier (its connection reset) is still a member when it
// retries: its next JoinGroup, sent within half a session timeout of the
// cut, is not refused UNKNOWN_MEMBER_ID.
func CutJoins(es []history.Entry, o Options) Result {
	cuts := events(es, history.EvJoinCut)
	if len(cuts) == 0 {
		return skipped(NameCutJoins, "no JoinGroup was cut in the history")
	}
	joins := map[string][]history.Entry{} // incarnation → join attempts
	for _, e := range ops(es, history.FJoin) {
		joins[e.Incarnation] = append(joins[e.Incarnation], e)
	}
	var as []Anomaly
	checked := 0
	for _, c := range cuts {
		for _, j := range joins[c.Incarnation] {
			if j.Start < c.Start {
				continue
			}
			if j.Start-c.Start > int64(o.SessionTimeout/2) {
				break // too late to say: the session may have ended
			}
			checked++
			if strings.Contains(j.Error, "UNKNOWN_MEMBER_ID") {
				as = append(as, Anomaly{Kind: KindCutLostMember, Message: fmt.Sprintf(
					"%s: member %s's JoinGroup was cut at %s and its retry at %s was refused: %s",
					c.Incarnation, c.Member, secs(c.Start), secs(j.Start), j.Error), Ops: []history.Entry{c, j}})
			}
			break
		}
	}
	return result(NameCutJoins, checked, as)
}
