package workload

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestAssignmentProblem_CompleteAndDisjoint(t *testing.T) {
	cases := []struct {
		name string
		held map[string][]int32
		want []string // substrings of the problem; none: no problem
	}{
		{"complete and disjoint", map[string][]int32{"a": {0, 1}, "b": {2}, "c": {3}}, nil},
		{"a consumer holding nothing", map[string][]int32{"a": {0, 1, 2, 3}, "b": nil}, nil},
		{"a partition held by nobody", map[string][]int32{"a": {0, 1}, "b": {3}}, []string{"held by nobody: partitions 2"}},
		{"a partition held twice", map[string][]int32{"a": {0, 1}, "b": {1, 2, 3}}, []string{"partition 1 is held by a and b"}},
		{"a partition that does not exist", map[string][]int32{"a": {0, 1, 2, 3, 9}}, []string{"a holds partition 9"}},
		{"nobody", map[string][]int32{}, []string{"partitions 0, 1, 2, 3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := assignmentProblem(c.held, 4)
			if len(c.want) == 0 && got != "" {
				t.Fatalf("problem %q, want none", got)
			}
			if len(c.want) > 0 && got == "" {
				t.Fatalf("no problem found, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("problem %q does not say %q", got, w)
				}
			}
		})
	}
}

func TestLostCommits_FoundBelowAcked(t *testing.T) {
	acked := map[int32]int64{0: 10, 1: 20, 2: 30, 3: 40}
	found := map[int32]int64{0: 10, 1: 25, 2: 29} // 3: no offset at all
	lost := lostCommits(acked, found)
	if len(lost) != 2 {
		t.Fatalf("lost %q, want partitions 2 and 3", lost)
	}
	if want := "kafka-orders/2: a commit of offset 30 was acknowledged, the group has 29"; lost[0] != want {
		t.Errorf("lost[0] = %q, want %q", lost[0], want)
	}
	if !strings.Contains(lost[1], "kafka-orders/3") || !strings.Contains(lost[1], "no offset") {
		t.Errorf("lost[1] = %q, want partition 3 without an offset", lost[1])
	}
	if lost := lostCommits(map[int32]int64{}, found); len(lost) != 0 {
		t.Errorf("nothing acknowledged, lost %q", lost)
	}
}

// commitAnswer is a response to a commit of offsets with one error code
// per partition (absent: 0).
func commitAnswer(offsets map[int32]int64, codes map[int32]int16) *kmsg.OffsetCommitResponse {
	resp := kmsg.NewPtrOffsetCommitResponse()
	rt := kmsg.NewOffsetCommitResponseTopic()
	rt.Topic = KafkaTopic
	for p := range offsets {
		rp := kmsg.NewOffsetCommitResponseTopicPartition()
		rp.Partition, rp.ErrorCode = p, codes[p]
		rt.Partitions = append(rt.Partitions, rp)
	}
	resp.Topics = append(resp.Topics, rt)
	return resp
}

func commitRequest(gen int32) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Generation = gen
	return r
}

// The verdict counts only error code 0 as an acknowledgement, keeps the
// largest acknowledged offset per partition, and names a partition whose
// committed offset is below it.
func TestKafkaVerdict_AckedAgainstFound(t *testing.T) {
	w := &Kafka{Log: slog.New(slog.DiscardHandler)}
	w.init()
	w.record(map[int32]int64{0: 5, 1: 6}, commitRequest(3), commitAnswer(map[int32]int64{0: 5, 1: 6}, nil), nil)
	w.record(map[int32]int64{0: 7, 1: 8}, commitRequest(4),
		commitAnswer(map[int32]int64{0: 7, 1: 8}, map[int32]int16{1: kerr.IllegalGeneration.Code}), nil)
	w.record(map[int32]int64{0: 9}, commitRequest(4), nil, kerr.RequestTimedOut)
	w.attempts = 5
	if w.acked[0] != 7 || w.acked[1] != 6 {
		t.Fatalf("acked %v, want 0:7 (not the unanswered 9) and 1:6 (not the refused 8)", w.acked)
	}
	w.assignment, w.balancedAt = "", map[string][]int32{"a": {0, 1}}
	w.checked, w.found = true, map[int32]int64{0: 9, 1: 5}
	summary, violations := w.Verdict()
	for _, s := range []string{"5 partition commits sent, 3 acknowledged, 1 refused (ILLEGAL_GENERATION 1), 1 unanswered", "commits in 2 generations, 3-4"} {
		if !strings.Contains(summary, s) {
			t.Errorf("summary %q does not say %q", summary, s)
		}
	}
	if len(violations) != 1 || violations[0] != "kafka-orders/1: a commit of offset 6 was acknowledged, the group has 5" {
		t.Fatalf("violations %q, want the lost commit of partition 1", violations)
	}

	w.found[1] = 6
	if _, violations := w.Verdict(); len(violations) != 0 {
		t.Fatalf("violations %q with every acknowledged commit kept", violations)
	}
}

func TestKafkaVerdict_AssignmentAndNothingAcked(t *testing.T) {
	w := &Kafka{Log: slog.New(slog.DiscardHandler)}
	w.init()
	w.assignment = "partition 1 is held by a and b"
	_, violations := w.Verdict()
	joined := strings.Join(violations, "\n")
	for _, s := range []string{
		"no commit was acknowledged in the whole run",
		"never held every partition exactly once: partition 1 is held by a and b",
		"the committed offsets were not read",
	} {
		if !strings.Contains(joined, s) {
			t.Errorf("violations %q do not say %q", violations, s)
		}
	}
}

// A consumer group's view (ConsumerGroupDescribe) is compared as a classic
// group's is: Stable, the same members by client ID, the same partitions
// of the topic each (other topics aside); and a Stable group's member
// behind the assignment epoch is a contradiction.
func TestDescribedProblem_ConsumerGroup(t *testing.T) {
	held := map[string][]int32{"c0": {0, 1, 2, 3}, "c1": {4, 5, 6, 7}}
	member := func(client string, epoch int32, parts ...int32) kadm.ConsumerGroupMember {
		set := kadm.TopicsSet{}
		set.Add(KafkaTopic, parts...)
		set.Add("other-topic", 0) // not the workload's
		return kadm.ConsumerGroupMember{MemberID: "id-" + client, ClientID: client, MemberEpoch: epoch, Assignment: set}
	}
	cases := []struct {
		name  string
		group kadm.DescribedConsumerGroup
		want  string // a substring of the problem; "": none
	}{
		{"agrees", kadm.DescribedConsumerGroup{State: "Stable", AssignmentEpoch: 7,
			Members: []kadm.ConsumerGroupMember{member("c1", 7, 7, 6, 5, 4), member("c0", 7, 0, 1, 2, 3)}}, ""},
		{"reconciling", kadm.DescribedConsumerGroup{State: "Reconciling", AssignmentEpoch: 7,
			Members: []kadm.ConsumerGroupMember{member("c0", 6, 0, 1, 2, 3), member("c1", 7, 4, 5, 6, 7)}},
			"the coordinator has the group Reconciling with 2 members, want Stable with 2"},
		{"a member too many", kadm.DescribedConsumerGroup{State: "Stable", AssignmentEpoch: 7,
			Members: []kadm.ConsumerGroupMember{member("c0", 7, 0, 1, 2, 3), member("c1", 7, 4, 5, 6, 7), member("c9", 7)}},
			"with 3 members, want Stable with 2"},
		{"a member that is not live", kadm.DescribedConsumerGroup{State: "Stable", AssignmentEpoch: 7,
			Members: []kadm.ConsumerGroupMember{member("c0", 7, 0, 1, 2, 3), member("c2", 7, 4, 5, 6, 7)}},
			"lists member id-c2 (c2), which is not a live consumer"},
		{"other partitions", kadm.DescribedConsumerGroup{State: "Stable", AssignmentEpoch: 7,
			Members: []kadm.ConsumerGroupMember{member("c0", 7, 0, 1, 2), member("c1", 7, 3, 4, 5, 6, 7)}},
			"the coordinator assigned c0 partitions [0 1 2], it holds [0 1 2 3]"},
		{"stable with a member behind", kadm.DescribedConsumerGroup{State: "Stable", AssignmentEpoch: 7,
			Members: []kadm.ConsumerGroupMember{member("c0", 7, 0, 1, 2, 3), member("c1", 5, 4, 5, 6, 7)}},
			"member c1 is at epoch 5 in a Stable group, whose assignment epoch is 7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := describedProblem(fromConsumerGroup(c.group), held)
			switch {
			case c.want == "" && got != "":
				t.Fatalf("problem %q, want none", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("problem %q, want %q", got, c.want)
			}
		})
	}
}

// Each protocol has its own group, and an unknown one is refused.
func TestKafka_ProtocolGroupAndCheck(t *testing.T) {
	for _, c := range []struct{ protocol, group string }{{"", KafkaGroup}, {KafkaClassic, KafkaGroup}, {KafkaConsumer, KafkaConsumerGroup}} {
		w := &Kafka{Protocol: c.protocol}
		w.init()
		if got := w.group(); got != c.group {
			t.Errorf("protocol %q: group %q, want %q", c.protocol, got, c.group)
		}
		if err := CheckKafkaProtocol(c.protocol); err != nil {
			t.Errorf("protocol %q refused: %v", c.protocol, err)
		}
	}
	if err := CheckKafkaProtocol("kip848"); err == nil || !strings.Contains(err.Error(), `unknown group protocol "kip848"`) {
		t.Fatalf("CheckKafkaProtocol(kip848) = %v, want an unknown protocol", err)
	}
}

// The summary names the protocol and the group; a consumer group's commits
// are fenced by member epochs, not generations, and their number counts no
// rebalances.
func TestKafkaVerdict_NamesProtocolAndEpochs(t *testing.T) {
	classic := &Kafka{Log: slog.New(slog.DiscardHandler)}
	classic.init()
	classic.record(map[int32]int64{0: 1}, commitRequest(3), commitAnswer(map[int32]int64{0: 1}, nil), nil)
	classic.record(map[int32]int64{0: 2}, commitRequest(5), commitAnswer(map[int32]int64{0: 2}, nil), nil)
	summary, _ := classic.Verdict()
	for _, s := range []string{"kafka workload (classic protocol, 4 kgo consumers of kafka-billing on kafka-orders)", "1 rebalances seen (commits in 2 generations, 3-5)"} {
		if !strings.Contains(summary, s) {
			t.Errorf("classic summary %q does not say %q", summary, s)
		}
	}

	consumer := &Kafka{Log: slog.New(slog.DiscardHandler), Protocol: KafkaConsumer}
	consumer.init()
	for i, epoch := range []int32{2, 4, 9} {
		o := map[int32]int64{int32(i): 1}
		consumer.record(o, commitRequest(epoch), commitAnswer(o, nil), nil)
	}
	summary, _ = consumer.Verdict()
	for _, s := range []string{"kafka workload (consumer protocol (KIP-848), 4 kgo consumers of kafka-billing-kip848 on kafka-orders)", "3 acknowledged", "commits fenced by 3 member epochs (2-9)"} {
		if !strings.Contains(summary, s) {
			t.Errorf("consumer summary %q does not say %q", summary, s)
		}
	}
	if strings.Contains(summary, "generation") || strings.Contains(summary, "rebalances") {
		t.Errorf("consumer summary %q speaks of generations or rebalances", summary)
	}
}
