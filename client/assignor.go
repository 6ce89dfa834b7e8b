package client

import (
	"fmt"
	"slices"

	"github.com/cohortlabs/cohort/assign"
)

// assignor computes the group leader's plan for one protocol: the seam
// between the member's life and package assign.
type assignor interface {
	// metadata encodes the member's subscription for JoinGroup: its topics
	// and what it owned in generation gen (sticky assignors read those).
	metadata(topics []string, owned []TopicPartition, gen int32) ([]byte, error)
	// assign maps every member ID to its partitions.
	assign(members []subscription, partitions map[string]int32) (map[string][]TopicPartition, error)
}

// subscription is one member of the group leader's JoinGroup answer.
type subscription struct {
	MemberID   string
	InstanceID string
	// Topics as the coordinator reports them.
	Topics []string
	// Metadata for the chosen protocol, as the member sent it.
	Metadata []byte
}

// lookupAssignor returns the assign package's assignor for a protocol name.
func lookupAssignor(name string) (assignor, error) {
	a, err := assign.Lookup(name)
	if err != nil {
		return nil, err
	}
	return registered{a}, nil
}

// registered adapts an assign.Assignor, with assign's versioned
// subscription encoding as protocol metadata.
type registered struct{ a assign.Assignor }

func (r registered) metadata(topics []string, owned []TopicPartition, gen int32) ([]byte, error) {
	s := assign.Subscription{Topics: topics, Generation: assign.NoGeneration}
	if len(owned) > 0 {
		s.Owned, s.Generation = toAssign(owned), gen
	}
	return assign.EncodeSubscription(s)
}

func (r registered) assign(members []subscription, partitions map[string]int32) (map[string][]TopicPartition, error) {
	in := make([]assign.Member, 0, len(members))
	for _, s := range members {
		m, err := assign.DecodeMember(s.MemberID, s.InstanceID, s.Metadata)
		if err != nil {
			// A member whose metadata this client cannot read still has
			// the subscription the coordinator reports.
			if len(s.Topics) == 0 {
				return nil, err
			}
			m = assign.Member{ID: s.MemberID, InstanceID: s.InstanceID, Generation: assign.NoGeneration}
		}
		if len(s.Topics) > 0 {
			m.Topics = s.Topics
		}
		in = append(in, m)
	}
	plan, err := r.a.Assign(in, partitions)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]TopicPartition, len(plan.Members))
	for _, m := range plan.Members {
		out[m.MemberID] = fromAssign(m.Topics)
	}
	return out, nil
}

// serverSideAssignor checks a Config.ServerSideAssignor: an assignor the
// coordinator runs (eager ones only; the coordinator refuses
// cooperative-sticky in server-side groups).
func serverSideAssignor(name string) error {
	if name == assign.NameCooperativeSticky {
		return fmt.Errorf("%q needs the client-driven cooperative protocol: use Protocols with protocol type %q instead", name, DefaultProtocolType)
	}
	if _, err := assign.Lookup(name); err != nil {
		return err
	}
	return nil
}

// diffPartitions returns the partitions of a not in b; both sorted.
func diffPartitions(a, b []TopicPartition) []TopicPartition {
	var out []TopicPartition
	for _, tp := range a {
		if !slices.Contains(b, tp) {
			out = append(out, tp)
		}
	}
	return out
}

func toAssign(tps []TopicPartition) []assign.TopicPartitions {
	var out []assign.TopicPartitions
	for _, tp := range tps {
		if n := len(out); n > 0 && out[n-1].Topic == tp.Topic {
			out[n-1].Partitions = append(out[n-1].Partitions, tp.Partition)
			continue
		}
		out = append(out, assign.TopicPartitions{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
	}
	return out
}

func fromAssign(tps []assign.TopicPartitions) []TopicPartition {
	out := []TopicPartition{}
	for _, t := range tps {
		for _, p := range t.Partitions {
			out = append(out, TopicPartition{t.Topic, p})
		}
	}
	sortTopicPartitions(out)
	return out
}
