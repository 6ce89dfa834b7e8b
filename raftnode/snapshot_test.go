package raftnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/fsm"
)

func TestValidateSnapshotPosition_RefusesWhatWouldWrapRaftsIndex(t *testing.T) {
	for _, tc := range []struct {
		index, term uint64
		want        string // "" means accepted
	}{
		{1, 1, ""},
		{math.MaxInt64, math.MaxInt64, ""},
		{0, 1, "snapshot index 0: must be between 1 and 9223372036854775807"},
		{math.MaxUint64 - 1, 1, "snapshot index 18446744073709551614: must be between 1 and 9223372036854775807"},
		{math.MaxInt64 + 1, 3, "snapshot index 9223372036854775808"},
		{5, 0, "snapshot term 0"},
		{5, math.MaxUint64, "snapshot term 18446744073709551615: must be between 1 and 9223372036854775807"},
	} {
		err := ValidateSnapshotPosition(tc.index, tc.term)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("index %d term %d: refused: %v", tc.index, tc.term, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("index %d term %d: %v, want an error containing %q", tc.index, tc.term, err, tc.want)
		}
	}
}

// snapshotOnDisk takes a snapshot of a one-node cluster with a topic,
// stops the node and returns it with the path of its newest snapshot
// directory (meta.json and state.bin).
func snapshotOnDisk(t *testing.T) (*testNode, string) {
	t.Helper()
	tn := newSingleNode(t, testConfig(t, "solo"))
	waitFor(t, 10*time.Second, "single node leads", func() (bool, string) { return tn.node.IsLeader(), "" })
	tn.apply(t, createTopic("orders", 3))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tn.node.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	tn.stop()
	dirs, err := filepath.Glob(filepath.Join(tn.cfg.DataDir, "raft", "snapshots", "*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("want one snapshot directory, have %v (%v)", dirs, err)
	}
	return tn, dirs[0]
}

// A forged snapshot in the data dir (an index raft would wrap, a term out
// of range, data that does not match its checksum or size) stops both
// cohortd's start and `cohortd recover` with an error naming the snapshot
// and what is wrong, instead of starting a node that never commits again.
// With the snapshot put back, the node starts and serves.
func TestNew_ForgedSnapshotInDataDir_RefusedNotWedged(t *testing.T) {
	tn, dir := snapshotOnDisk(t)
	metaPath, statePath := filepath.Join(dir, "meta.json"), filepath.Join(dir, "state.bin")
	origMeta, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	origState, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	setMeta := func(field string, v any) func() {
		return func() {
			var m map[string]any
			dec := json.NewDecoder(bytes.NewReader(origMeta))
			dec.UseNumber()
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			m[field] = v
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(metaPath, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Numbers beyond float64 precision must reach the JSON as written.
	forgedIndex := json.Number(fmt.Sprint(uint64(math.MaxUint64 - 1)))
	for _, tc := range []struct {
		name   string
		damage func()
		want   []string
	}{
		{"index near 2^64", setMeta("Index", forgedIndex), []string{"snapshot index 18446744073709551614", "9223372036854775807", dir}},
		{"term near 2^64", setMeta("Term", json.Number(fmt.Sprint(uint64(math.MaxUint64)))), []string{"snapshot term 18446744073709551615", dir}},
		{"configuration index past the snapshot", setMeta("ConfigurationIndex", json.Number("1000000")), []string{"configuration index 1000000", dir}},
		{"flipped state byte", func() {
			b := append([]byte(nil), origState...)
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(statePath, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"checksum", dir}},
		{"truncated state", func() {
			if err := os.WriteFile(statePath, origState[:len(origState)-3], 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{fmt.Sprintf("metadata says %d bytes, state.bin has %d", len(origState), len(origState)-3), dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.damage()
			t.Cleanup(func() {
				os.WriteFile(metaPath, origMeta, 0o600)
				os.WriteFile(statePath, origState, 0o600)
			})
			n, err := New(tn.cfg, fsm.New())
			if err == nil {
				n.Shutdown(t.Context())
				t.Fatal("cohortd started on a forged snapshot")
			}
			_, rerr := RecoverAsSingleNode(tn.cfg.DataDir, tn.cfg.RaftBind, testLogger())
			if rerr == nil {
				t.Fatal("recover accepted a forged snapshot")
			}
			for what, e := range map[string]error{"start": err, "recover": rerr} {
				for _, w := range tc.want {
					if !strings.Contains(e.Error(), w) {
						t.Errorf("%s: error %q does not mention %q", what, e, w)
					}
				}
			}
		})
	}

	// Put back, the node starts on it and goes on committing.
	again := startTestNode(t, tn.cfg)
	waitFor(t, 10*time.Second, "restarted node leads", func() (bool, string) { return again.node.IsLeader(), "" })
	if ok := hasTopic(again.fsm, "orders"); !ok {
		t.Fatal("the restarted node lost the snapshot's topic")
	}
	again.apply(t, createTopic("after", 1))
}

// RestoreSnapshot installs the snapshot at the cluster's next index, not at
// the index the snapshot was taken at: restoring a snapshot from a cluster
// far ahead leaves this cluster's log where it was (plus the restore and
// the re-registration), and a cluster further on still goes on committing.
func TestRestoreSnapshot_InstalledAtTheClustersIndex(t *testing.T) {
	ahead := newSingleNode(t, testConfig(t, "ahead"))
	waitFor(t, 10*time.Second, "ahead leads", func() (bool, string) { return ahead.node.IsLeader(), "" })
	for i := range 40 {
		ahead.apply(t, createTopic(fmt.Sprintf("t%d", i), 1))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	meta, rc, err := ahead.node.OpenSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ahead.snap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()

	behind := newSingleNode(t, testConfig(t, "behind"))
	waitFor(t, 10*time.Second, "behind leads", func() (bool, string) { return behind.node.IsLeader(), "" })
	behind.apply(t, createTopic("scratch", 1))
	before := behind.node.LastIndex()
	if before >= meta.Index {
		t.Fatalf("test setup: the restoring cluster (%d) must be behind the snapshot (%d)", before, meta.Index)
	}

	idx, err := behind.node.RestoreSnapshot(ctx, f, meta.Size)
	if err != nil {
		t.Fatal(err)
	}
	if idx <= before || idx >= meta.Index {
		t.Fatalf("restored at index %d: want it after the cluster's %d and unrelated to the snapshot's %d", idx, before, meta.Index)
	}
	if ok := hasTopic(behind.fsm, "t39"); !ok {
		t.Fatal("the restored state lacks the snapshot's topics")
	}
	if ok := hasTopic(behind.fsm, "scratch"); ok {
		t.Fatal("the restored state still has the replaced topic")
	}
	behind.apply(t, createTopic("after", 1))
	if got := behind.node.LastIndex(); got >= meta.Index {
		t.Fatalf("the cluster's index jumped to %d (snapshot taken at %d)", got, meta.Index)
	}

}

// A snapshot larger than MaxSnapshotSize is refused before anything changes.
func TestRestoreSnapshot_LargerThanMaxSnapshotSize_Refused(t *testing.T) {
	cfg := testConfig(t, "small")
	cfg.MaxSnapshotSize = minMaxSnapshotSize
	tn := newSingleNode(t, cfg)
	waitFor(t, 10*time.Second, "node leads", func() (bool, string) { return tn.node.IsLeader(), "" })
	tn.apply(t, createTopic("kept", 1))
	f, err := os.Create(filepath.Join(t.TempDir(), "big.snap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = tn.node.RestoreSnapshot(t.Context(), f, minMaxSnapshotSize+1)
	if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), "maximum snapshot size 1024") {
		t.Fatalf("oversized restore: %v, want ErrInvalidSnapshot naming the limit", err)
	}
	if ok := hasTopic(tn.fsm, "kept"); !ok {
		t.Fatal("a refused restore changed the state")
	}
	tn.apply(t, createTopic("after", 1))
}

func hasTopic(f *fsm.FSM, name string) (ok bool) {
	f.Read(func(s *fsm.State) { _, ok = s.Partitions(name) })
	return ok
}
