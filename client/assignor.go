package client

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// assignor computes the group leader's plan for one protocol. It is the
// seam for package assign; the stand-ins below are used until it lands.
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
	Topics     []string
	Metadata   []byte
}

func lookupAssignor(name string) (assignor, error) {
	switch name {
	case "roundrobin":
		return roundRobin{}, nil
	case "range":
		return rangeAssignor{}, nil
	}
	return nil, fmt.Errorf("unknown assignor %q (known: roundrobin, range)", name)
}

// Subscription metadata, version 0: a zero byte, then the sorted topic
// names separated by zero bytes.
func encodeSubscription(topics []string) []byte {
	ts := slices.Clone(topics)
	sort.Strings(ts)
	ts = slices.Compact(ts)
	return append([]byte{0}, strings.Join(ts, "\x00")...)
}

func decodeSubscription(b []byte) ([]string, error) {
	if len(b) == 0 || b[0] != 0 {
		return nil, fmt.Errorf("subscription metadata: unknown version")
	}
	if len(b) == 1 {
		return nil, nil
	}
	var ts []string
	for _, t := range bytes.Split(b[1:], []byte{0}) {
		ts = append(ts, string(t))
	}
	return ts, nil
}

// topicsOf is a member's subscription: the topics the coordinator reports,
// else those in its metadata.
func (s subscription) topicsOf() []string {
	if len(s.Topics) > 0 {
		return s.Topics
	}
	ts, _ := decodeSubscription(s.Metadata)
	return ts
}

// roundRobin deals all subscribed partitions, in topic/partition order, to
// the members in member-ID order, skipping members not subscribed to a
// partition's topic (Kafka's RoundRobinAssignor).
type roundRobin struct{}

func (roundRobin) metadata(topics []string, _ []TopicPartition, _ int32) ([]byte, error) {
	return encodeSubscription(topics), nil
}

func (roundRobin) assign(members []subscription, partitions map[string]int32) (map[string][]TopicPartition, error) {
	ms, subs := sortedMembers(members)
	out := make(map[string][]TopicPartition, len(ms))
	for _, m := range ms {
		out[m] = nil
	}
	if len(ms) == 0 {
		return out, nil
	}
	next := 0
	for _, topic := range sortedTopics(partitions) {
		for p := int32(0); p < partitions[topic]; p++ {
			for range ms {
				m := ms[next%len(ms)]
				next++
				if subs[m][topic] {
					out[m] = append(out[m], TopicPartition{topic, p})
					break
				}
			}
		}
	}
	return out, nil
}

// rangeAssignor gives each topic's subscribers contiguous ranges of its
// partitions, the first members one extra when it does not divide evenly
// (Kafka's RangeAssignor).
type rangeAssignor struct{}

func (rangeAssignor) metadata(topics []string, _ []TopicPartition, _ int32) ([]byte, error) {
	return encodeSubscription(topics), nil
}

func (rangeAssignor) assign(members []subscription, partitions map[string]int32) (map[string][]TopicPartition, error) {
	ms, subs := sortedMembers(members)
	out := make(map[string][]TopicPartition, len(ms))
	for _, m := range ms {
		out[m] = nil
	}
	for _, topic := range sortedTopics(partitions) {
		var subscribers []string
		for _, m := range ms {
			if subs[m][topic] {
				subscribers = append(subscribers, m)
			}
		}
		if len(subscribers) == 0 {
			continue
		}
		n := partitions[topic]
		per, extra := n/int32(len(subscribers)), n%int32(len(subscribers))
		p := int32(0)
		for i, m := range subscribers {
			count := per
			if int32(i) < extra {
				count++
			}
			for range count {
				out[m] = append(out[m], TopicPartition{topic, p})
				p++
			}
		}
	}
	return out, nil
}

func sortedMembers(members []subscription) ([]string, map[string]map[string]bool) {
	ids := make([]string, 0, len(members))
	subs := make(map[string]map[string]bool, len(members))
	for _, m := range members {
		if _, dup := subs[m.MemberID]; !dup {
			ids = append(ids, m.MemberID)
			subs[m.MemberID] = map[string]bool{}
		}
		for _, t := range m.topicsOf() {
			subs[m.MemberID][t] = true
		}
	}
	sort.Strings(ids)
	return ids, subs
}

func sortedTopics(partitions map[string]int32) []string {
	ts := make([]string, 0, len(partitions))
	for t := range partitions {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}
