package assign

import (
	"testing"
)

// joinInput returns the members of a scenario's join step (each owning
// what the assignor gave it in the stable start) and the topics.
func joinInput(tb testing.TB, sc scenario, a Assignor) []Member {
	join, _ := sc.run(tb, a)
	return join.members
}

// BenchmarkAssign times one Assign call on each scenario's join step (the
// members own the previous plan of the same assignor).
func BenchmarkAssign(b *testing.B) {
	for _, sc := range scenarios() {
		for _, a := range allAssignors(b) {
			b.Run(sc.name+"/"+a.Name(), func(b *testing.B) {
				members := joinInput(b, sc, a)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := a.Assign(members, sc.topics); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStickyEndToEnd times what the coordinator does for a sticky
// group at the join step: decode every member's metadata, assign, encode
// every member's assignment.
func BenchmarkStickyEndToEnd(b *testing.B) {
	for _, sc := range scenarios() {
		b.Run(sc.name, func(b *testing.B) {
			members := joinInput(b, sc, Sticky{})
			metas := make([][]byte, len(members))
			for i, m := range members {
				data, err := EncodeSubscription(Subscription{Topics: m.Topics, Owned: m.Owned, Generation: m.Generation})
				if err != nil {
					b.Fatal(err)
				}
				metas[i] = data
			}
			decoded := make([]Member, len(members))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for i, data := range metas {
					m, err := DecodeMember(members[i].ID, "", data)
					if err != nil {
						b.Fatal(err)
					}
					decoded[i] = m
				}
				plan, err := Sticky{}.Assign(decoded, sc.topics)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := plan.EncodeAssignments(nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
