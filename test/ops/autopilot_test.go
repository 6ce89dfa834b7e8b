package ops

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/internal/proc"
)

// TestProcess_Autopilot_PromotesAfterStabilizationRemovesDeadAfterThreshold:
// with autopilot on, a joining non-voter is promoted once it has been
// healthy for the stabilisation time (not by itself), and a killed voter is
// removed once it has been dead for the threshold, never below the
// minimum quorum.
func TestProcess_Autopilot_PromotesAfterStabilizationRemovesDeadAfterThreshold(t *testing.T) {
	const stabilization, threshold = 2 * time.Second, 3 * time.Second
	c := newCluster(t, "--autopilot", "--autopilot-cleanup-dead-servers",
		"--autopilot-dead-server-threshold", threshold.String(), "--autopilot-server-stabilization-time", stabilization.String(),
		"--autopilot-interval", "200ms", "--autopilot-min-quorum", "3")
	c.form(3)
	st := c.waitVoters("n1", "n2", "n3")
	if ap := st.GetAutopilot(); !ap.GetEnabled() || !ap.GetCleanupDeadServers() || ap.GetMinQuorum() != 3 || ap.GetDeadServerThresholdMs() != threshold.Milliseconds() {
		t.Fatalf("status does not show the autopilot configuration: %v", ap)
	}
	proc.WaitFor(t, 10*time.Second, "autopilot's view in status", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return st.GetAutopilot().GetHealthy() && st.GetAutopilot().GetFailureTolerance() == 1 && server(st, st.GetLeaderId()).GetAutopilotState() == "leader", describe(st)
	})

	// raft-autopilot treats every server as stable during the first
	// stabilisation time after it starts on a new leader (it has no
	// history yet); past that, a new server must earn it.
	leader := st.GetLeaderId()
	proc.WaitFor(t, 10*time.Second, "autopilot running on the leader for the stabilization time", func() (bool, string) {
		started := logTime(c.nodes[leader].out.String(), `msg="autopilot started"`)
		return !started.IsZero() && time.Since(started) > stabilization+200*time.Millisecond, "started at " + started.String()
	})
	c.start("n4", "--join", strings.Join(c.grpcAddrs("n1", "n2", "n3"), ","))
	// The bound runs from the add itself, which the leader logs, not from
	// when a poll here first saw n4: that may be later by a poll and a
	// Status call, and would shorten what is measured.
	var added time.Time
	proc.WaitFor(t, 20*time.Second, "n4 added as a non-voter", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		if server(st, "n4") == nil {
			return false, describe(st)
		}
		for _, id := range []string{"n1", "n2", "n3"} {
			if at := logTime(c.nodes[id].out.String(), `msg="added non-voter"`, "server=n4 "); !at.IsZero() {
				added = at
				return true, ""
			}
		}
		return false, "n4 is in the configuration, but no node logged adding it yet"
	})
	proc.WaitFor(t, 30*time.Second, "n4 promoted by autopilot", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		s := server(st, "n4")
		return s != nil && s.GetVoter(), describe(st)
	})
	// The bound ends at the promotion, which autopilot logs as it makes
	// it, not when a poll here saw n4 a voter: that may be later by a poll
	// and would lengthen what is measured, hiding an early promotion.
	promoted := loggedAt(t, c, "autopilot promoting n4", `msg="Promoting server"`, "id=n4 ")
	t.Logf("n4 promoted %s after it was added", promoted.Sub(added))
	if d := promoted.Sub(added); d < stabilization-500*time.Millisecond {
		t.Fatalf("n4 promoted %s after it was added, before the stabilization time %s", d, stabilization)
	}
	if out := c.nodes["n4"].out.String(); strings.Contains(out, "promoted to voter") || !strings.Contains(out, "autopilot_promotes=true") {
		t.Fatalf("n4 should leave its promotion to autopilot:\n%s", proc.Tail(out, 20))
	}
	c.waitVoters("n1", "n2", "n3", "n4")

	// A dead voter goes after the threshold.
	c.kill("n4")
	killed := time.Now()
	proc.WaitFor(t, 30*time.Second, "n4 removed by autopilot", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return server(st, "n4") == nil, describe(st)
	})
	// From the kill to the removal raft logs as it starts it. Dead means
	// unreached by the leader's probes for the threshold, counted from the
	// last probe that got through, up to an autopilot interval (200 ms)
	// before the kill: hence the slack.
	removed := loggedAt(t, c, "raft removing n4", `msg="updating configuration"`, "command=RemoveServer", "server-id=n4 ")
	t.Logf("n4 removed %s after it was killed", removed.Sub(killed))
	if d := removed.Sub(killed); d < threshold-500*time.Millisecond {
		t.Fatalf("n4 removed %s after it died, before the threshold %s", d, threshold)
	}
	c.waitVoters("n1", "n2", "n3")

	// Never below the minimum quorum: a dead n3 stays, well past the
	// time autopilot took to remove n4.
	c.kill("n3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var after string
	err := proc.Poll(ctx, 200*time.Millisecond, threshold+2*time.Second, "autopilot to remove n3", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		after = describe(st)
		return server(st, "n3") == nil, after
	})
	if err == nil {
		t.Fatalf("autopilot removed n3 below the minimum quorum: %s", after)
	}
}

// loggedAt waits until one of n1, n2 and n3 has logged a line with
// every one of parts, and returns that line's time.
func loggedAt(t *testing.T, c *cluster, what string, parts ...string) time.Time {
	t.Helper()
	var at time.Time
	proc.WaitFor(t, 10*time.Second, "the log line of "+what, func() (bool, string) {
		for _, id := range []string{"n1", "n2", "n3"} {
			if at = logTime(c.nodes[id].out.String(), parts...); !at.IsZero() {
				return true, ""
			}
		}
		return false, "no node logged " + strings.Join(parts, " ")
	})
	return at
}

// logTime is the time of the last line of a node's log that contains every
// one of parts (zero if none does).
func logTime(log string, parts ...string) time.Time {
	var at time.Time
	for _, line := range strings.Split(log, "\n") {
		if !containsAll(line, parts) {
			continue
		}
		if ts, ok := strings.CutPrefix(strings.Fields(line)[0], "time="); ok {
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				at = t
			}
		}
	}
	return at
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
