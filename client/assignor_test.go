package client

import (
	"slices"
	"testing"
)

// The leader's plan through package assign: complete, disjoint, only to
// subscribers; sticky keeps what members owned (read from the metadata this
// client writes).
func TestAssignor_PlansAreCompleteDisjointAndSticky(t *testing.T) {
	partitions := map[string]int32{"a": 4, "b": 3}
	for _, name := range []string{"range", "roundrobin", "sticky", "consistent-hash"} {
		t.Run(name, func(t *testing.T) {
			a, err := lookupAssignor(name)
			if err != nil {
				t.Fatal(err)
			}
			md := func(topics []string, owned []TopicPartition, gen int32) []byte {
				b, err := a.metadata(topics, owned, gen)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			members := []subscription{
				{MemberID: "m1", Metadata: md([]string{"a", "b"}, nil, NoGeneration)},
				{MemberID: "m2", Metadata: md([]string{"a"}, nil, NoGeneration)},
				{MemberID: "m3", Topics: []string{"a", "b"}, Metadata: []byte("unreadable")},
			}
			plan, err := a.assign(members, partitions)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[TopicPartition]string{}
			for id, tps := range plan {
				for _, tp := range tps {
					if prev, dup := seen[tp]; dup {
						t.Fatalf("%v given to %s and %s", tp, prev, id)
					}
					seen[tp] = id
					if id == "m2" && tp.Topic == "b" {
						t.Fatalf("m2 got %v without subscribing to b", tp)
					}
				}
			}
			if len(seen) != 7 || len(plan) != 3 {
				t.Fatalf("plan not complete: %v", plan)
			}
			if name != "sticky" {
				return
			}
			// m3 leaves; m1 and m2 keep everything they had.
			next, err := a.assign([]subscription{
				{MemberID: "m1", Metadata: md([]string{"a", "b"}, plan["m1"], 5)},
				{MemberID: "m2", Metadata: md([]string{"a"}, plan["m2"], 5)},
			}, partitions)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"m1", "m2"} {
				for _, tp := range plan[id] {
					if !slices.Contains(next[id], tp) {
						t.Fatalf("sticky moved %v away from %s: %v → %v", tp, id, plan, next)
					}
				}
			}
		})
	}
}
