package rpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/raftnode"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// snapshotChunk is the data size of one stream message.
const snapshotChunk = 256 << 10

// SnapshotSave streams a fresh snapshot of the leader's state: metadata,
// data, then the data's size and SHA-256.
func (s *ClusterService) SnapshotSave(_ *cohortv1.SnapshotSaveRequest, stream grpc.ServerStreamingServer[cohortv1.SnapshotSaveResponse]) error {
	ctx := stream.Context()
	meta, rc, err := s.cl.Node().OpenSnapshot(ctx)
	if err != nil {
		return toStatus(err)
	}
	defer rc.Close()
	err = stream.Send(&cohortv1.SnapshotSaveResponse{Part: &cohortv1.SnapshotSaveResponse_Metadata{Metadata: &cohortv1.SnapshotMetadata{
		FsmFormatVersion: fsm.SnapshotFormatVersion, Index: meta.Index, Term: meta.Term,
		NodeId: s.cl.Node().ID(), CreatedUnixMs: time.Now().UnixMilli(),
	}}})
	if err != nil {
		return err
	}
	h := sha256.New()
	buf := make([]byte, snapshotChunk)
	var size uint64
	for {
		k, rerr := io.ReadFull(rc, buf)
		if k > 0 {
			h.Write(buf[:k])
			size += uint64(k)
			if err := stream.Send(&cohortv1.SnapshotSaveResponse{Part: &cohortv1.SnapshotSaveResponse_Data{Data: bytes.Clone(buf[:k])}}); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return status.Errorf(codes.Internal, "read snapshot %s: %v", meta.ID, rerr)
		}
	}
	if size != uint64(meta.Size) {
		return status.Errorf(codes.Internal, "snapshot %s: read %d bytes, its metadata says %d", meta.ID, size, meta.Size)
	}
	return stream.Send(&cohortv1.SnapshotSaveResponse{Part: &cohortv1.SnapshotSaveResponse_Trailer{Trailer: &cohortv1.SnapshotTrailer{
		Size: size, Sha256: h.Sum(nil),
	}}})
}

// SnapshotRestore receives a snapshot stream, verifies it completely
// (plausible metadata, size, SHA-256, the FSM's own decoding), and only
// then replaces the cluster's state with it. The stream is bounded: data
// past the node's MaxSnapshotSize ends it with ResourceExhausted, a pause
// longer than SnapshotRestoreIdleTimeout before any message with
// DeadlineExceeded; either way the partial upload is deleted and nothing
// changes. The index in the metadata is only reported: Raft installs the
// snapshot at the cluster's next index.
func (s *ClusterService) SnapshotRestore(stream grpc.ClientStreamingServer[cohortv1.SnapshotRestoreRequest, cohortv1.SnapshotRestoreResponse]) error {
	ctx := stream.Context()
	node := s.cl.Node()
	cfg := node.Config()
	recv := newIdleReceiver(ctx, stream, cfg.SnapshotRestoreIdleTimeout)
	defer recv.stop()

	first, err := recv.next()
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.InvalidArgument, "snapshot stream: %v", err)
	}
	meta := first.GetMetadata()
	if meta == nil {
		return status.Error(codes.InvalidArgument, "snapshot stream must start with its metadata")
	}
	if v := meta.GetFsmFormatVersion(); v != fsm.SnapshotFormatVersion {
		return status.Errorf(codes.InvalidArgument, "snapshot has FSM format version %d; this cluster reads version %d: nothing changed", v, fsm.SnapshotFormatVersion)
	}
	if err := raftnode.ValidateSnapshotPosition(meta.GetIndex(), meta.GetTerm()); err != nil {
		return status.Errorf(codes.InvalidArgument, "snapshot metadata is forged or damaged: %v: nothing changed", err)
	}
	tmp, err := os.CreateTemp(cfg.DataDir, "restore-*.snap")
	if err != nil {
		return status.Errorf(codes.Internal, "buffer the snapshot: %v", err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	h := sha256.New()
	var size uint64
	maxSize := uint64(cfg.MaxSnapshotSize)
	var trailer *cohortv1.SnapshotTrailer
	for trailer == nil {
		m, err := recv.next()
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "snapshot stream ended without its checksum trailer (truncated?): nothing changed")
		}
		if err != nil {
			return err
		}
		switch p := m.GetPart().(type) {
		case *cohortv1.SnapshotRestoreRequest_Data:
			if size+uint64(len(p.Data)) > maxSize {
				return status.Errorf(codes.ResourceExhausted, "snapshot data exceeds the maximum snapshot size of %d bytes (--max-snapshot-size): nothing changed", maxSize)
			}
			h.Write(p.Data)
			size += uint64(len(p.Data))
			if _, err := tmp.Write(p.Data); err != nil {
				return status.Errorf(codes.Internal, "buffer the snapshot: %v", err)
			}
		case *cohortv1.SnapshotRestoreRequest_Trailer:
			trailer = p.Trailer
		default:
			return status.Error(codes.InvalidArgument, "snapshot stream: metadata may only come first")
		}
	}
	if trailer.GetSize() != size {
		return status.Errorf(codes.InvalidArgument, "snapshot data is %d bytes, its trailer says %d (truncated?): nothing changed", size, trailer.GetSize())
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, trailer.GetSha256()) {
		return status.Errorf(codes.InvalidArgument, "snapshot SHA-256 is %x, its trailer says %x (corrupted): nothing changed", sum, trailer.GetSha256())
	}
	idx, err := node.RestoreSnapshot(ctx, tmp, int64(size))
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&cohortv1.SnapshotRestoreResponse{
		Index: idx,
		Message: fmt.Sprintf("restored the snapshot taken at index %d (term %d, on %s) on every node; it stands at the cluster's index %d",
			meta.GetIndex(), meta.GetTerm(), meta.GetNodeId(), idx),
	})
}

// idleReceiver receives a client stream's messages with a bound on the
// wait for each: gRPC's Recv takes no deadline, so one goroutine receives
// and next waits for it with a timer. When the handler returns, gRPC ends
// the stream, which ends a Recv still waiting; stop lets the goroutine go.
type idleReceiver[T any] struct {
	ctx  context.Context
	idle time.Duration
	msgs chan idleMsg[T]
	done chan struct{}
}

type idleMsg[T any] struct {
	m   *T
	err error
}

func newIdleReceiver[T any](ctx context.Context, stream interface{ Recv() (*T, error) }, idle time.Duration) *idleReceiver[T] {
	r := &idleReceiver[T]{ctx: ctx, idle: idle, msgs: make(chan idleMsg[T]), done: make(chan struct{})}
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case r.msgs <- idleMsg[T]{m, err}:
			case <-r.done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// next returns the next message, the stream's error (io.EOF at its end),
// or DeadlineExceeded after idle without a message.
func (r *idleReceiver[T]) next() (*T, error) {
	t := time.NewTimer(r.idle)
	defer t.Stop()
	select {
	case m := <-r.msgs:
		return m.m, m.err
	case <-t.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no message on the snapshot stream for %s (--snapshot-restore-idle-timeout): nothing changed", r.idle)
	case <-r.ctx.Done():
		return nil, status.FromContextError(r.ctx.Err()).Err()
	}
}

func (r *idleReceiver[T]) stop() { close(r.done) }
