package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/internal/testcluster"
)

// runCtl runs cohortctl in-process against endpoint and returns its
// output and error.
func runCtl(t *testing.T, endpoint string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--endpoints", endpoint, "--timeout", "20s"}, args...))
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		// As main prints it: gRPC statuses as "Code: message".
		err = errors.New(describeError(err))
	}
	return out.String(), err
}

func mustCtl(t *testing.T, endpoint string, args ...string) string {
	t.Helper()
	out, err := runCtl(t, endpoint, args...)
	if err != nil {
		t.Fatalf("cohortctl %v: %v\n%s", args, err, out)
	}
	return out
}

// A snapshot file with a forged index (version 2 with its checksums
// recomputed, or version 1 whose header no checksum covers) is refused by
// inspect, by restore, and by the leader when the local check is skipped;
// the cluster keeps its state and serves writes. A version 1 file of a
// real snapshot still restores.
func TestSnapshot_ForgedIndexRefused_V1FileRestores(t *testing.T) {
	c := testcluster.Start(t, 1, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ep := c.Addr(0)
	mustCtl(t, ep, "topics", "create", "orders", "--partitions", "3")
	dir := t.TempDir()
	saved := filepath.Join(dir, "saved.snap")
	mustCtl(t, ep, "snapshot", "save", saved)
	var info snapshotInfo
	if err := json.Unmarshal([]byte(mustCtl(t, ep, "snapshot", "inspect", saved, "-o", "json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.FileVersion != 2 || !info.HeaderChecksummed || info.Topics != 1 {
		t.Fatalf("saved file: %+v", info)
	}
	sf, err := openSnapFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := sf.data()
	if err != nil {
		t.Fatal(err)
	}
	var data bytes.Buffer
	if _, err := data.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	mustCtl(t, ep, "topics", "create", "later", "--partitions", "1")

	forgedMeta := testMeta(math.MaxUint64-1, sf.Meta.GetTerm())
	forgedV2, _ := writeSnapshotFile(t, forgedMeta, data.Bytes())
	forgedV1 := writeV1SnapshotFile(t, forgedMeta, data.Bytes())
	const want = "snapshot index 18446744073709551614: must be between 1 and 9223372036854775807"
	for _, path := range []string{forgedV2, forgedV1} {
		for _, args := range [][]string{
			{"snapshot", "inspect", path},
			{"snapshot", "restore", path},
		} {
			out, err := runCtl(t, ep, args...)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("cohortctl %v: %v\n%s\nwant a refusal mentioning %q", args, err, out, want)
			}
		}
		out, err := runCtl(t, ep, "snapshot", "restore", "--no-verify", path)
		if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), want) {
			t.Fatalf("the leader accepted a forged index: %v\n%s", err, out)
		}
	}
	topics := mustCtl(t, ep, "topics", "list", "-o", "json")
	if !strings.Contains(topics, "later") {
		t.Fatalf("refused restores changed the state: %s", topics)
	}
	mustCtl(t, ep, "topics", "create", "after-refusals", "--partitions", "1")

	v1 := writeV1SnapshotFile(t, sf.Meta, data.Bytes())
	out := mustCtl(t, ep, "snapshot", "inspect", v1)
	if !strings.Contains(out, "header not checksummed") {
		t.Fatalf("inspect of a version 1 file does not say its header is unprotected:\n%s", out)
	}
	out = mustCtl(t, ep, "snapshot", "restore", v1)
	if !strings.Contains(out, "restored the snapshot") {
		t.Fatalf("restore of a version 1 file: %s", out)
	}
	c.WaitServing()
	topics = mustCtl(t, ep, "topics", "list", "-o", "json")
	if !strings.Contains(topics, "orders") || strings.Contains(topics, "later") {
		t.Fatalf("after restoring the version 1 file: %s", topics)
	}
	mustCtl(t, ep, "topics", "create", "after-restore", "--partitions", "1")
}
