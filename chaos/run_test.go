package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every run's nodes give consumer groups (KIP-848) the run's session
// timeout and a heartbeat well inside it, not cohortd's 45 s and 5 s.
func TestExtraArgs_ConsumerGroupTimingOfTheRun(t *testing.T) {
	for _, hostile := range []bool{false, true} {
		args := extraArgs(hostile, 6*time.Second)
		for flag, want := range map[string]string{"--consumer-session-timeout": "6s", "--consumer-heartbeat-interval": "200ms"} {
			i := slices.Index(args, flag)
			if i < 0 || i+1 >= len(args) || args[i+1] != want {
				t.Errorf("hostile=%v: args %q, want %s %s", hostile, args, flag, want)
			}
		}
	}
}

// An unknown Kafka protocol is refused before anything starts.
func TestRun_RefusesUnknownKafkaProtocol(t *testing.T) {
	_, err := Run(context.Background(), Options{Cohortd: "/nonexistent/cohortd", Kafka: true, KafkaProtocol: "kip848"})
	if err == nil || !strings.Contains(err.Error(), `unknown group protocol "kip848"`) {
		t.Fatalf("Run = %v, want the unknown protocol refused", err)
	}
}
