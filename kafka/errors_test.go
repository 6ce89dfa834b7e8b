package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohortlabs/cohort/errcode"
)

// TestErrors_EveryCodeMapsToAKafkaCode: every protocol code has a Kafka
// error, and a code Cohort's clients retry is one Kafka's clients retry
// too (NOT_LEADER, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR): otherwise a
// leader change would surface to Kafka applications as a failure.
func TestErrors_EveryCodeMapsToAKafkaCode(t *testing.T) {
	for _, code := range errcode.Codes() {
		if code == errcode.None {
			continue
		}
		k, ok := kafkaCodes[code]
		if !ok {
			t.Errorf("%s has no Kafka error", code)
			continue
		}
		if code.Retriable() && !k.Retriable {
			t.Errorf("%s is retriable, its Kafka error %s is not", code, k.Message)
		}
		if got := kafkaError(errcode.Errorf(code, "x")); got != k {
			t.Errorf("kafkaError(%s) = %v, want %v", code, got, k)
		}
	}
	cases := map[error]*kerr.Error{
		nil:                      nil,
		context.DeadlineExceeded: kerr.RequestTimedOut,
		fmt.Errorf("wrapped: %w", errcode.Errorf(errcode.RebalanceInProgress, "x")): kerr.RebalanceInProgress,
		errors.New("disk on fire"): kerr.UnknownServerError,
	}
	for err, want := range cases {
		if got := kafkaError(err); got != want {
			t.Errorf("kafkaError(%v) = %v, want %v", err, got, want)
		}
	}
}
