package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/raftnode"
	"google.golang.org/protobuf/proto"
)

// A snapshot file, as `snapshot save` writes it (file version 2):
//
//	magic "CHRTSNAP" | uint32 file version | uint32 n | n bytes SnapshotMetadata
//	| data (the FSM's own encoding) | m bytes SnapshotTrailer (size, SHA-256 of data)
//	| uint32 m | 32 bytes SHA-256 of every byte before it | end magic "CHRTEND\n"
//
// All integers big-endian. The trailer is at the end because the checksums
// are known only once the data has streamed past. The file SHA-256 covers
// the header: an edited index or term is a checksum mismatch, not a number
// a cluster might believe. Version 1 files (no file SHA-256 before the end
// magic) are still read; their header is unprotected, so only the
// plausibility checks stand between a forged index and a restore (and the
// leader ignores the index anyway).
const (
	snapFileVersion   = 2
	snapFileVersionV1 = 1
)

var (
	snapMagic    = []byte("CHRTSNAP")
	snapEndMagic = []byte("CHRTEND\n")
)

// Framing limits: a header or trailer larger than this is damage.
const (
	maxSnapMetadataBytes = 1 << 20
	maxSnapTrailerBytes  = 1 << 10
)

// snapFile is a verified snapshot file.
type snapFile struct {
	Path        string
	FileVersion uint32
	Meta        *cohortv1.SnapshotMetadata
	Trailer     *cohortv1.SnapshotTrailer
	dataOffset  int64
	// fileSum is the stored SHA-256 of the bytes before it (version 2),
	// at offset sumOffset.
	fileSum   []byte
	sumOffset int64
}

// HeaderChecksummed reports whether a checksum covers the file's header.
func (sf *snapFile) HeaderChecksummed() bool { return sf.FileVersion >= 2 }

// snapWriter writes a snapshot file as the stream arrives.
type snapWriter struct {
	f        io.Writer
	fileHash hash.Hash // every byte written
	dataHash hash.Hash // the data section
	size     uint64
}

func newSnapWriter(f io.Writer, meta *cohortv1.SnapshotMetadata) (*snapWriter, error) {
	mb, err := proto.Marshal(meta)
	if err != nil {
		return nil, err
	}
	var hdr bytes.Buffer
	hdr.Write(snapMagic)
	binary.Write(&hdr, binary.BigEndian, uint32(snapFileVersion))
	binary.Write(&hdr, binary.BigEndian, uint32(len(mb)))
	hdr.Write(mb)
	w := &snapWriter{f: f, fileHash: sha256.New(), dataHash: sha256.New()}
	if err := w.write(hdr.Bytes()); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *snapWriter) write(p []byte) error {
	w.fileHash.Write(p)
	_, err := w.f.Write(p)
	return err
}

func (w *snapWriter) Write(p []byte) (int, error) {
	w.dataHash.Write(p)
	w.size += uint64(len(p))
	if err := w.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// finish checks the stream's trailer against what was written and writes
// it, then the file's SHA-256 and the end magic.
func (w *snapWriter) finish(tr *cohortv1.SnapshotTrailer) error {
	if tr.GetSize() != w.size {
		return fmt.Errorf("received %d bytes of snapshot data, the server says %d", w.size, tr.GetSize())
	}
	if sum := w.dataHash.Sum(nil); !bytes.Equal(tr.GetSha256(), sum) {
		return fmt.Errorf("received data has SHA-256 %x, the server says %x", sum, tr.GetSha256())
	}
	tb, err := proto.Marshal(tr)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.Write(tb)
	binary.Write(&b, binary.BigEndian, uint32(len(tb)))
	if err := w.write(b.Bytes()); err != nil {
		return err
	}
	_, err = w.f.Write(append(w.fileHash.Sum(nil), snapEndMagic...))
	return err
}

// openSnapFile reads a snapshot file's header and trailer, checks its
// checksums (the file's, for version 2, and the data's) and that the
// header is plausible. It does not decode the data (see decode).
func openSnapFile(path string) (*snapFile, error) {
	sf, err := parseSnapFraming(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s is not a valid Cohort snapshot file: %s", path, fmt.Sprintf(format, args...))
	}
	if sf.HeaderChecksummed() {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, sf.sumOffset)); err != nil {
			return nil, err
		}
		if sum := h.Sum(nil); !bytes.Equal(sum, sf.fileSum) {
			return nil, bad("file SHA-256 is %x, the file says %x: its header or data was changed (corrupted or forged)", sum, sf.fileSum)
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, sf.dataOffset, int64(sf.Trailer.GetSize()))); err != nil {
		return nil, err
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, sf.Trailer.GetSha256()) {
		return nil, bad("data SHA-256 is %x, the trailer says %x: the file is corrupted", sum, sf.Trailer.GetSha256())
	}
	if err := checkSnapHeader(sf.Meta); err != nil {
		unprotected := ""
		if !sf.HeaderChecksummed() {
			unprotected = " (a version 1 file: no checksum covers its header)"
		}
		return nil, bad("forged or damaged header%s: %v", unprotected, err)
	}
	return sf, nil
}

// checkSnapHeader checks what a header claims against what a real cluster
// can produce.
func checkSnapHeader(m *cohortv1.SnapshotMetadata) error {
	if v := m.GetFsmFormatVersion(); v != fsm.SnapshotFormatVersion {
		return fmt.Errorf("FSM format version %d, this cohortctl reads version %d", v, fsm.SnapshotFormatVersion)
	}
	return raftnode.ValidateSnapshotPosition(m.GetIndex(), m.GetTerm())
}

// parseSnapFraming reads the header and trailer and checks the sizes.
func parseSnapFraming(path string) (*snapFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s is not a valid Cohort snapshot file: %s", path, fmt.Sprintf(format, args...))
	}
	var head [16]byte
	if _, err := io.ReadFull(f, head[:]); err != nil || !bytes.Equal(head[:8], snapMagic) {
		return nil, bad("no snapshot header (foreign file?)")
	}
	sf := &snapFile{Path: path, FileVersion: binary.BigEndian.Uint32(head[8:12])}
	// The end: [trailer][uint32 m]([32-byte file SHA-256])[end magic].
	tailLen := int64(4 + len(snapEndMagic))
	switch sf.FileVersion {
	case snapFileVersionV1:
	case snapFileVersion:
		tailLen += sha256.Size
	default:
		return nil, bad("file version %d, this cohortctl reads versions %d and %d", sf.FileVersion, snapFileVersionV1, snapFileVersion)
	}
	n := int64(binary.BigEndian.Uint32(head[12:16]))
	if n > maxSnapMetadataBytes || 16+n+tailLen > fi.Size() {
		return nil, bad("metadata length %d does not fit the file (truncated?)", n)
	}
	mb := make([]byte, n)
	if _, err := io.ReadFull(f, mb); err != nil {
		return nil, bad("metadata: %v", err)
	}
	sf.Meta = &cohortv1.SnapshotMetadata{}
	if err := proto.Unmarshal(mb, sf.Meta); err != nil {
		return nil, bad("metadata: %v", err)
	}
	sf.dataOffset = 16 + n
	tail := make([]byte, tailLen)
	if _, err := f.ReadAt(tail, fi.Size()-tailLen); err != nil || !bytes.Equal(tail[len(tail)-len(snapEndMagic):], snapEndMagic) {
		return nil, bad("no end marker (truncated?)")
	}
	if sf.FileVersion >= 2 {
		sf.sumOffset = fi.Size() - int64(len(snapEndMagic)) - sha256.Size
		sf.fileSum = tail[4 : 4+sha256.Size]
	}
	m := int64(binary.BigEndian.Uint32(tail[:4]))
	dataEnd := fi.Size() - tailLen - m
	if m > maxSnapTrailerBytes || dataEnd < sf.dataOffset {
		return nil, bad("trailer length %d does not fit the file", m)
	}
	tb := make([]byte, m)
	if _, err := f.ReadAt(tb, dataEnd); err != nil {
		return nil, bad("trailer: %v", err)
	}
	sf.Trailer = &cohortv1.SnapshotTrailer{}
	if err := proto.Unmarshal(tb, sf.Trailer); err != nil {
		return nil, bad("trailer: %v", err)
	}
	if got := uint64(dataEnd - sf.dataOffset); got != sf.Trailer.GetSize() {
		return nil, bad("%d bytes of data, the trailer says %d (truncated?)", got, sf.Trailer.GetSize())
	}
	if len(sf.Trailer.GetSha256()) != sha256.Size {
		return nil, bad("the trailer's data SHA-256 has %d bytes, want %d", len(sf.Trailer.GetSha256()), sha256.Size)
	}
	return sf, nil
}

// data opens the snapshot data section.
func (sf *snapFile) data() (io.ReadCloser, error) {
	f, err := os.Open(sf.Path)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, sf.dataOffset, int64(sf.Trailer.GetSize())), f}, nil
}

// snapContents counts what a snapshot holds.
type snapContents struct {
	Topics, Partitions, Groups, Members, Offsets int
}

// decode decodes the data with the FSM's reader, which checks its own
// format version and CRC, and counts the contents.
func (sf *snapFile) decode() (snapContents, error) {
	rc, err := sf.data()
	if err != nil {
		return snapContents{}, err
	}
	defer rc.Close()
	st, err := fsm.ReadSnapshot(rc)
	if err != nil {
		return snapContents{}, fmt.Errorf("%s: %w", sf.Path, err)
	}
	var c snapContents
	for _, t := range st.Topics() {
		c.Topics++
		c.Partitions += int(t.Partitions)
	}
	for _, g := range st.Groups() {
		c.Groups++
		c.Members += g.Members.Len()
		c.Offsets += len(st.Offsets(g.ID))
	}
	return c, nil
}

var errNoTrailer = errors.New("the server closed the snapshot stream without its checksum trailer")
