package fsm

import (
	"fmt"
	"testing"
)

// BenchmarkConsumerHeartbeatBySize measures the entry every member of a
// KIP-848 consumer group sends once after a new group epoch: its heartbeat
// at the previous epoch, which moves it to the new one (its target kept).
// A round writes one per member, so each must cost the same in a
// 10,000-member group as in a 10-member one, or a round is quadratic.
// As BenchmarkJoinCostBySize, each iteration applies the entry to a
// copy-on-write copy of the same state.
func BenchmarkConsumerHeartbeatBySize(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("advance/members=%d", n), func(b *testing.B) {
			base := consumerScaleState(n)
			data := encode(b, v1(at(1<<40, hb{group: "g", member: scaleMember(n / 2), epoch: 1})))
			fs := make([]*FSM, b.N)
			for i := range fs {
				fs[i] = &FSM{state: base.clone()}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i, f := range fs {
				fs[i] = nil
				res := f.ApplyEntry(1, data)
				if res.Err != nil || res.Consumer == nil || res.Consumer.Epoch != 2 {
					b.Fatalf("the heartbeat: %v, %+v; want the member moved to epoch 2", res.Err, res.Consumer)
				}
			}
		})
	}
}

// consumerScaleState is a state with one consumer group "g" of n members
// subscribed to topic "t" (one partition each), at group epoch 2, every
// member still at epoch 1 holding its target: as right after a new epoch
// that moved no partition.
func consumerScaleState(n int) *State {
	s := NewState()
	budgets := DefaultBudgets()
	budgets.MembersPerGroup = 1 << 20
	s.budgets = budgets
	s.topics["t"] = int32(n)
	s.partitions = int64(n)
	var members []*ConsumerMember
	for i := range n {
		a := Assignment{Topics: []TopicPartitions{{Topic: "t", Partitions: []int32{int32(i)}}}}
		members = append(members, &ConsumerMember{ID: scaleMember(i), ClientID: "c", RebalanceTimeoutMs: 30_000,
			Topics: []string{"t"}, Assignor: "", Epoch: 1, PreviousEpoch: 0, Assigned: a, Target: a})
	}
	s.putConsumerGroup("g", &ConsumerGroup{ID: "g", Epoch: 2, AssignmentEpoch: 2, Assignor: "uniform", Members: listOf(members)})
	return s
}
