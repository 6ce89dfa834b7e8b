package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// A client log of one cooperative round per target (two generations),
// with lines outside the rounds that must not count.
const stepsLog = `23:59:59.900000 cohort m1 [INFO] joining group; group: g
00:00:00.000000 cohort round 0 start
00:00:00.010000 cohort m2 [INFO] joining group; group: g
00:00:00.050000 cohort m0 [INFO] heartbeat errored; group: g, err: REBALANCE_IN_PROGRESS
00:00:00.060000 cohort m0 [INFO] joining group; group: g
00:00:00.100000 cohort m1 [INFO] joining group; group: g
00:00:00.130000 cohort m0 [INFO] balancing group as leader
00:00:00.150000 cohort m1 [INFO] synced; group: g, assigned: g[1]
00:00:00.170000 cohort m0 [INFO] synced; group: g, assigned: g[0]
00:00:00.180000 cohort m1 [INFO] joining group; group: g
00:00:00.250000 cohort m2 [INFO] joining group; group: g
00:00:00.270000 cohort m0 [INFO] balancing group as leader
00:00:00.300000 cohort m2 [INFO] synced; group: g, assigned: g[2]
00:00:00.310000 cohort round 0 end
00:00:00.400000 cohort m1 [INFO] joining group; group: g
00:00:01.000000 kfake round 0 start
00:00:01.005000 kfake m2 [INFO] joining group; group: g
00:00:01.045000 kfake m1 [INFO] joining group; group: g
00:00:01.055000 kfake m0 [INFO] balancing group as leader
00:00:01.075000 kfake m2 [INFO] synced; group: g, assigned: g[2]
00:00:01.080000 kfake round 0 end
`

func TestSteps_MediansPerGenerationAndTarget(t *testing.T) {
	var out bytes.Buffer
	if err := writeSteps(strings.NewReader(stepsLog), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cohort: 1 rounds, kfake: 1 rounds") {
		t.Errorf("steps output does not count one round per target:\n%s", &out)
	}
	rows := stepRows(out.String())
	want := map[string][2]string{
		// cohort, generation 1: joins 10 → 100 ms, leader at 130, last sync at 170.
		// kfake, generation 1: joins 5 → 45, leader at 55, sync at 75.
		"1 " + stepNames[0]: {"90.00 ms", "40.00 ms"},
		"1 " + stepNames[1]: {"30.00 ms", "10.00 ms"},
		"1 " + stepNames[2]: {"40.00 ms", "20.00 ms"},
		// cohort, generation 2: joins 180 → 250, leader at 270, sync at 300; kfake has none.
		"2 " + stepNames[0]: {"70.00 ms", "-"},
		"2 " + stepNames[1]: {"20.00 ms", "-"},
		"2 " + stepNames[2]: {"30.00 ms", "-"},
	}
	for k, w := range want {
		if rows[k] != w {
			t.Errorf("row %q: got %v, want %v\n%s", k, rows[k], w, &out)
		}
	}
}

func TestSteps_RefusesALogWithoutRoundMarks(t *testing.T) {
	err := writeSteps(strings.NewReader("00:00:00.000000 cohort m0 [INFO] joining group; group: g\n"), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no round marks") {
		t.Fatalf("a log without round marks gave %v, want an error naming the missing marks", err)
	}
	if err := steps(nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "want one argument") {
		t.Fatalf("no argument gave %v, want an error asking for the file", err)
	}
}

// stepRows is the steps table's rows by "generation step", each with its
// cohort and kfake cells.
func stepRows(out string) map[string][2]string {
	rows := map[string][2]string{}
	for line := range strings.Lines(out) {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		if len(cells) == 4 {
			rows[cells[0]+" "+cells[1]] = [2]string{cells[2], cells[3]}
		}
	}
	return rows
}
