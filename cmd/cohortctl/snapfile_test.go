package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crypto/sha256"
	"github.com/cohortlabs/cohort/fsm"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"google.golang.org/protobuf/proto"
)

// testFSMData is the FSM encoding of a state with two topics.
func testFSMData(t *testing.T) []byte {
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
	return data.Bytes()
}

func testMeta(index, term uint64) *cohortv1.SnapshotMetadata {
	return &cohortv1.SnapshotMetadata{FsmFormatVersion: fsm.SnapshotFormatVersion, Index: index, Term: term, NodeId: "n1", CreatedUnixMs: time.Now().UnixMilli()}
}

// writeSnapshotFile writes data under meta as `snapshot save` does
// (version 2, checksums correct) and returns the file's path and bytes.
func writeSnapshotFile(t *testing.T, meta *cohortv1.SnapshotMetadata, data []byte) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w, err := newSnapWriter(&b, meta)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if err := w.finish(&cohortv1.SnapshotTrailer{Size: uint64(len(data)), Sha256: sum[:]}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "s.snap")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b.Bytes()
}

// writeV1SnapshotFile writes data under meta in file version 1, as
// cohortctl wrote it before version 2: no checksum over the header.
func writeV1SnapshotFile(t *testing.T, meta *cohortv1.SnapshotMetadata, data []byte) string {
	t.Helper()
	mb, err := proto.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	tb, err := proto.Marshal(&cohortv1.SnapshotTrailer{Size: uint64(len(data)), Sha256: sum[:]})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("CHRTSNAP")
	binary.Write(&b, binary.BigEndian, uint32(1))
	binary.Write(&b, binary.BigEndian, uint32(len(mb)))
	b.Write(mb)
	b.Write(data)
	b.Write(tb)
	binary.Write(&b, binary.BigEndian, uint32(len(tb)))
	b.WriteString("CHRTEND\n")
	path := filepath.Join(t.TempDir(), "v1.snap")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeTestSnapshot writes a snapshot file of an FSM with two topics, as
// `snapshot save` does, and returns its path and bytes.
func writeTestSnapshot(t *testing.T) (string, []byte) {
	t.Helper()
	return writeSnapshotFile(t, testMeta(2, 1), testFSMData(t))
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
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	// Each check on its own: the other field matches the data.
	right := sha256.Sum256([]byte("abc"))
	wrong := sha256.Sum256([]byte("abd"))
	if err := w.finish(&cohortv1.SnapshotTrailer{Size: 3, Sha256: wrong[:]}); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("a wrong checksum with the right size: %v, want a SHA-256 mismatch", err)
	}
	if err := w.finish(&cohortv1.SnapshotTrailer{Size: 4, Sha256: right[:]}); err == nil || !strings.Contains(err.Error(), "received 3 bytes") {
		t.Fatalf("a wrong size with the right checksum: %v, want a size mismatch", err)
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
		{"flipped data byte", mutate(func(b []byte) []byte { b[dataOffset(b)+3] ^= 1; return b }), "corrupted"},
		{"flipped header byte", mutate(func(b []byte) []byte { b[dataOffset(b)-3] ^= 1; return b }), "its header or data was changed"},
		{"flipped file checksum", mutate(func(b []byte) []byte { b[len(b)-9] ^= 1; return b }), "file SHA-256"},
		{"truncated", good[:len(good)-30], ""},
		{"no end marker", good[:len(good)-1], "no end marker"},
		{"extra byte in data", mutate(func(b []byte) []byte {
			i := dataOffset(b) + 3
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

// dataOffset is where a snapshot file's data section starts.
func dataOffset(b []byte) int { return 16 + int(binary.BigEndian.Uint32(b[12:16])) }

func TestSnapFile_V1_StillRead_HeaderNotChecksummed(t *testing.T) {
	path := writeV1SnapshotFile(t, testMeta(2, 1), testFSMData(t))
	sf, err := openSnapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sf.FileVersion != 1 || sf.HeaderChecksummed() || sf.Meta.GetIndex() != 2 {
		t.Fatalf("version %d, header checksummed %v, metadata %v", sf.FileVersion, sf.HeaderChecksummed(), sf.Meta)
	}
	if c, err := sf.decode(); err != nil || c.Topics != 2 {
		t.Fatalf("contents %+v, %v", c, err)
	}
	v2, _ := writeTestSnapshot(t)
	if sf, err := openSnapFile(v2); err != nil || sf.FileVersion != 2 || !sf.HeaderChecksummed() {
		t.Fatalf("a saved file is version 2 with a checksummed header: %+v, %v", sf, err)
	}
}

// A header claiming an index or term raft would wrap (or 0) is refused by
// both file versions, whether or not the file's checksums match; the error
// names the value and the limit.
func TestSnapFile_ForgedIndexOrTerm_Refused(t *testing.T) {
	data := testFSMData(t)
	for _, tc := range []struct {
		name        string
		index, term uint64
		want        string
	}{
		{"index near 2^64", math.MaxUint64 - 1, 1, "snapshot index 18446744073709551614: must be between 1 and 9223372036854775807"},
		{"index 2^63", math.MaxInt64 + 1, 1, "snapshot index 9223372036854775808"},
		{"index 0", 0, 1, "snapshot index 0"},
		{"term near 2^64", 5, math.MaxUint64, "snapshot term 18446744073709551615"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v2, _ := writeSnapshotFile(t, testMeta(tc.index, tc.term), data)
			v1 := writeV1SnapshotFile(t, testMeta(tc.index, tc.term), data)
			for _, path := range []string{v2, v1} {
				_, err := openSnapFile(path)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "forged or damaged header") {
					t.Fatalf("%s: %v, want a refusal mentioning %q", path, err, tc.want)
				}
			}
		})
	}
}
