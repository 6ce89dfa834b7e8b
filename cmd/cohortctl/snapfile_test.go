package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crypto/sha256"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// writeTestSnapshot writes a snapshot file of an FSM with two topics, as
// `snapshot save` does, and returns its path and bytes.
func writeTestSnapshot(t *testing.T) (string, []byte) {
	t.Helper()
	f := fsm.New()
	for i, name := range []string{"orders", "audit"} {
		res := f.Apply(uint64(i+1), &fsmv1.Command{TimestampMs: 1, Kind: &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: name, Partitions: 3}}})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	var data bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "s.snap")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newSnapWriter(out, &cohortv1.SnapshotMetadata{FsmFormatVersion: fsm.SnapshotFormatVersion, Index: 2, Term: 1, NodeId: "n1", CreatedUnixMs: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data.Bytes()); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data.Bytes())
	if err := w.finish(&cohortv1.SnapshotTrailer{Size: uint64(data.Len()), Sha256: sum[:]}); err != nil {
		t.Fatal(err)
	}
	out.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

func TestSnapFile_RoundTrip_DescribesContents(t *testing.T) {
	path, _ := writeTestSnapshot(t)
	sf, err := openSnapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sf.Meta.GetIndex() != 2 || sf.Meta.GetTerm() != 1 || sf.FileVersion != snapFileVersion {
		t.Fatalf("metadata %v, version %d", sf.Meta, sf.FileVersion)
	}
	c, err := sf.decode()
	if err != nil {
		t.Fatal(err)
	}
	if c.Topics != 2 || c.Partitions != 6 || c.Groups != 0 {
		t.Fatalf("contents %+v", c)
	}
}

func TestSnapFile_Finish_RefusesStreamThatDoesNotMatchItsTrailer(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w, err := newSnapWriter(out, &cohortv1.SnapshotMetadata{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("abc"))
	sum := sha256.Sum256([]byte("abd"))
	if err := w.finish(&cohortv1.SnapshotTrailer{Size: 3, Sha256: sum[:]}); err == nil {
		t.Fatal("a wrong checksum was accepted")
	}
	if err := w.finish(&cohortv1.SnapshotTrailer{Size: 4}); err == nil {
		t.Fatal("a wrong size was accepted")
	}
}

func TestSnapFile_RefusesDamagedFiles(t *testing.T) {
	_, good := writeTestSnapshot(t)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name    string
		content []byte
		want    string
	}{
		{"empty", nil, "no snapshot header"},
		{"foreign", []byte("PK\x03\x04 zip zip zip zip zip zip zip"), "no snapshot header"},
		{"other file version", mutate(func(b []byte) []byte { b[11] = 9; return b }), "file version 9"},
		{"flipped data byte", mutate(func(b []byte) []byte { b[len(b)/2] ^= 1; return b }), "corrupted"},
		{"truncated", good[:len(good)-30], ""},
		{"no end marker", good[:len(good)-1], "no end marker"},
		{"extra byte in data", mutate(func(b []byte) []byte {
			i := len(b) / 2
			return append(b[:i], append([]byte{0}, b[i:]...)...)
		}), "bytes of data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.snap")
			if err := os.WriteFile(path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			sf, err := openSnapFile(path)
			if err == nil {
				_, err = sf.decode()
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "not a valid Cohort snapshot file") && !strings.Contains(err.Error(), "restore snapshot") {
				t.Fatalf("error %q does not say the file is invalid", err)
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to mention %q", err, tc.want)
			}
		})
	}
}
