package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"google.golang.org/protobuf/proto"
)

// A snapshot file, as `snapshot save` writes it:
//
//	magic "CHRTSNAP" | uint32 file version | uint32 n | n bytes SnapshotMetadata
//	| data (the FSM's own encoding) | m bytes SnapshotTrailer (size, SHA-256 of data)
//	| uint32 m | end magic "CHRTEND\n"
//
// All integers big-endian. The trailer is at the end because the checksum is
// known only once the data has streamed past.
const snapFileVersion = 1

var (
	snapMagic    = []byte("CHRTSNAP")
	snapEndMagic = []byte("CHRTEND\n")
)

// snapFile is a verified snapshot file.
type snapFile struct {
	Path        string
	FileVersion uint32
	Meta        *cohortv1.SnapshotMetadata
	Trailer     *cohortv1.SnapshotTrailer
	dataOffset  int64
}

// snapWriter writes a snapshot file as the stream arrives.
type snapWriter struct {
	f    *os.File
	h    io.Writer
	sum  func() []byte
	size uint64
}

func newSnapWriter(f *os.File, meta *cohortv1.SnapshotMetadata) (*snapWriter, error) {
	mb, err := proto.Marshal(meta)
	if err != nil {
		return nil, err
	}
	var hdr bytes.Buffer
	hdr.Write(snapMagic)
	binary.Write(&hdr, binary.BigEndian, uint32(snapFileVersion))
	binary.Write(&hdr, binary.BigEndian, uint32(len(mb)))
	hdr.Write(mb)
	if _, err := f.Write(hdr.Bytes()); err != nil {
		return nil, err
	}
	h := sha256.New()
	return &snapWriter{f: f, h: h, sum: func() []byte { return h.Sum(nil) }}, nil
}

func (w *snapWriter) Write(p []byte) (int, error) {
	w.h.Write(p)
	w.size += uint64(len(p))
	return w.f.Write(p)
}

// finish checks the stream's trailer against what was written and writes it.
func (w *snapWriter) finish(tr *cohortv1.SnapshotTrailer) error {
	if tr.GetSize() != w.size {
		return fmt.Errorf("received %d bytes of snapshot data, the server says %d", w.size, tr.GetSize())
	}
	if !bytes.Equal(tr.GetSha256(), w.sum()) {
		return fmt.Errorf("received data has SHA-256 %x, the server says %x", w.sum(), tr.GetSha256())
	}
	tb, err := proto.Marshal(tr)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.Write(tb)
	binary.Write(&b, binary.BigEndian, uint32(len(tb)))
	b.Write(snapEndMagic)
	_, err = w.f.Write(b.Bytes())
	return err
}

// openSnapFile reads a snapshot file's header and trailer and checks the
// data's size and SHA-256. It does not decode the data (see decode).
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
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, sf.dataOffset, int64(sf.Trailer.GetSize()))); err != nil {
		return nil, err
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, sf.Trailer.GetSha256()) {
		return nil, fmt.Errorf("%s is not a valid Cohort snapshot file: data SHA-256 is %x, the trailer says %x: the file is corrupted", path, sum, sf.Trailer.GetSha256())
	}
	return sf, nil
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
	if sf.FileVersion != snapFileVersion {
		return nil, bad("file version %d, this cohortctl reads version %d", sf.FileVersion, snapFileVersion)
	}
	n := int64(binary.BigEndian.Uint32(head[12:16]))
	if n > 1<<20 || 16+n+12 > fi.Size() {
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
	var tail [12]byte
	if _, err := f.ReadAt(tail[:], fi.Size()-12); err != nil || !bytes.Equal(tail[4:], snapEndMagic) {
		return nil, bad("no end marker (truncated?)")
	}
	m := int64(binary.BigEndian.Uint32(tail[:4]))
	dataEnd := fi.Size() - 12 - m
	if m > 1<<10 || dataEnd < sf.dataOffset {
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
		c.Members += len(g.Members)
		c.Offsets += len(st.Offsets(g.ID))
	}
	return c, nil
}

var errNoTrailer = errors.New("the server closed the snapshot stream without its checksum trailer")
