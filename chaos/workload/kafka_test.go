package workload

import (
	"log/slog"
	"strings"
	"testing"

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
