package rpc_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/raftnode"
)

// savedSnapshot is a SnapshotSave stream, collected.
type savedSnapshot struct {
	meta    *cohortv1.SnapshotMetadata
	data    []byte
	trailer *cohortv1.SnapshotTrailer
}

func saveSnapshot(t *testing.T, conn *grpc.ClientConn) savedSnapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stream, err := cohortv1.NewClusterServiceClient(conn).SnapshotSave(ctx, &cohortv1.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var s savedSnapshot
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("snapshot save: %v", err)
		}
		switch p := m.GetPart().(type) {
		case *cohortv1.SnapshotSaveResponse_Metadata:
			s.meta = p.Metadata
		case *cohortv1.SnapshotSaveResponse_Data:
			s.data = append(s.data, p.Data...)
		case *cohortv1.SnapshotSaveResponse_Trailer:
			s.trailer = p.Trailer
		}
	}
	if s.meta == nil || s.trailer == nil || len(s.data) == 0 {
		t.Fatalf("incomplete snapshot stream: %+v", s)
	}
	return s
}

// restore streams s as a SnapshotRestore call and returns the answer.
func restore(ctx context.Context, conn *grpc.ClientConn, s savedSnapshot) (*cohortv1.SnapshotRestoreResponse, error) {
	stream, err := cohortv1.NewClusterServiceClient(conn).SnapshotRestore(ctx)
	if err != nil {
		return nil, err
	}
	msgs := []*cohortv1.SnapshotRestoreRequest{{Part: &cohortv1.SnapshotRestoreRequest_Metadata{Metadata: s.meta}}}
	for data := s.data; len(data) > 0; {
		k := min(len(data), 64<<10)
		msgs = append(msgs, &cohortv1.SnapshotRestoreRequest{Part: &cohortv1.SnapshotRestoreRequest_Data{Data: data[:k]}})
		data = data[k:]
	}
	if s.trailer != nil {
		msgs = append(msgs, &cohortv1.SnapshotRestoreRequest{Part: &cohortv1.SnapshotRestoreRequest_Trailer{Trailer: s.trailer}})
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			break // the server answered early; CloseAndRecv says why
		}
	}
	return stream.CloseAndRecv()
}

func topicNames(t *testing.T, c *testcluster.Cluster, i int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := c.Topics(i).ListTopics(ctx, &cohortv1.ListTopicsRequest{})
	if err != nil {
		t.Fatalf("list topics on %s: %v", c.Nodes[i].ID, err)
	}
	var names []string
	for _, tp := range resp.GetTopics() {
		names = append(names, tp.GetTopic())
	}
	return names
}

func createTopic(t *testing.T, c *testcluster.Cluster, i int, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Topics(i).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: 1}); err != nil {
		t.Fatalf("create topic %s on %s: %v", name, c.Nodes[i].ID, err)
	}
}

// refusedAndUnchanged checks that err has code and mentions every want,
// that no buffered upload is left in any data dir, and that the cluster
// still holds only its own topics and commits new writes.
func refusedAndUnchanged(t *testing.T, c *testcluster.Cluster, err error, code codes.Code, want ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("restore: %v, want %s", err, code)
	}
	for _, w := range want {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Fatalf("restore: %q does not mention %q", status.Convert(err).Message(), w)
		}
	}
	for _, n := range c.Nodes {
		left, _ := filepath.Glob(filepath.Join(n.Node.Config().DataDir, "restore-*"))
		if len(left) > 0 {
			t.Fatalf("a refused restore left %v behind", left)
		}
	}
	leader := c.WaitServing()
	names := topicNames(t, c, leader)
	if !slices.Contains(names, "own") {
		t.Fatalf("a refused restore changed the topics: %v", names)
	}
	for _, name := range names {
		if name != "own" && !strings.HasPrefix(name, "after-") {
			t.Fatalf("a refused restore changed the topics: %s appeared", name)
		}
	}
	name := fmt.Sprintf("after-%d", time.Now().UnixNano())
	createTopic(t, c, leader, name)
}

// A snapshot taken at a higher index than the target cluster's restores,
// on every node, at the target's next index (Raft assigns it, the file's
// index is only reported), and the cluster goes on committing. The same
// snapshot with its index forged near 2^64 (or its term) is refused with
// InvalidArgument naming the value and the limit, and nothing changes.
func TestSnapshotRestore_IndexFromTheCluster_ForgedIndexRefused(t *testing.T) {
	a := testcluster.Start(t, 1, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	for i := range 30 {
		createTopic(t, a, 0, fmt.Sprintf("t%02d", i))
	}
	snap := saveSnapshot(t, a.Conn(0))

	b := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	leader := b.WaitServing()
	createTopic(t, b, leader, "own")
	before := b.Nodes[leader].Node.LastIndex()
	if before >= snap.meta.GetIndex() {
		t.Fatalf("test setup: the target (%d) must be behind the snapshot (%d)", before, snap.meta.GetIndex())
	}
	follower := (leader + 1) % 3

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, forged := range []struct {
		index, term uint64
		want        string
	}{
		{math.MaxUint64 - 1, snap.meta.GetTerm(), "snapshot index 18446744073709551614: must be between 1 and 9223372036854775807"},
		{math.MaxInt64 + 1, snap.meta.GetTerm(), "snapshot index 9223372036854775808"},
		{snap.meta.GetIndex(), math.MaxUint64, "snapshot term 18446744073709551615"},
	} {
		bad := snap
		bad.meta = proto.Clone(snap.meta).(*cohortv1.SnapshotMetadata)
		bad.meta.Index, bad.meta.Term = forged.index, forged.term
		_, err := restore(ctx, b.Conn(follower), bad)
		refusedAndUnchanged(t, b, err, codes.InvalidArgument, forged.want, "nothing changed")
	}

	resp, err := restore(ctx, b.Conn(follower), snap)
	if err != nil {
		t.Fatalf("restore of a valid snapshot: %v", err)
	}
	if resp.GetIndex() <= before || resp.GetIndex() >= snap.meta.GetIndex() {
		t.Fatalf("restored at index %d: want it after the cluster's %d, not at the snapshot's %d", resp.GetIndex(), before, snap.meta.GetIndex())
	}
	leader = b.WaitServing()
	for i := range b.Nodes {
		testcluster.WaitFor(t, 20*time.Second, "restored topics on "+b.Nodes[i].ID, func() (bool, string) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			r, err := b.Topics(i).ListTopics(ctx, &cohortv1.ListTopicsRequest{AllowStale: true})
			return err == nil && len(r.GetTopics()) == 30, fmt.Sprint(len(r.GetTopics()), err)
		})
	}
	createTopic(t, b, leader, "after-restore")
	if idx := b.Nodes[leader].Node.LastIndex(); idx >= snap.meta.GetIndex() {
		t.Fatalf("the cluster's index jumped to %d (the snapshot was taken at %d)", idx, snap.meta.GetIndex())
	}
}

// The restore stream is bounded: data past --max-snapshot-size ends it
// with ResourceExhausted, a stream that stalls longer than
// --snapshot-restore-idle-timeout (before its metadata, or between two
// messages) with DeadlineExceeded; both name the limit, delete the upload
// and change nothing.
func TestSnapshotRestore_OversizedAndIdleStreams_Refused(t *testing.T) {
	const maxSize = 4 << 10
	const idle = 300 * time.Millisecond
	c := testcluster.Start(t, 1, testcluster.Options{
		Coordinator: testcluster.DefaultCoordinator(),
		Raft: func(_ int, rc *raftnode.Config) {
			rc.MaxSnapshotSize = maxSize
			rc.SnapshotRestoreIdleTimeout = idle
		},
	})
	createTopic(t, c, 0, "own")
	snap := saveSnapshot(t, c.Conn(0))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	big := snap
	big.data = make([]byte, maxSize+1)
	sum := sha256.Sum256(big.data)
	big.trailer = &cohortv1.SnapshotTrailer{Size: uint64(len(big.data)), Sha256: sum[:]}
	_, err := restore(ctx, c.Conn(0), big)
	refusedAndUnchanged(t, c, err, codes.ResourceExhausted, "maximum snapshot size of 4096 bytes", "--max-snapshot-size")

	for name, sent := range map[string][]*cohortv1.SnapshotRestoreRequest{
		"nothing sent":           nil,
		"metadata only":          {{Part: &cohortv1.SnapshotRestoreRequest_Metadata{Metadata: snap.meta}}},
		"stalled after the data": {{Part: &cohortv1.SnapshotRestoreRequest_Metadata{Metadata: snap.meta}}, {Part: &cohortv1.SnapshotRestoreRequest_Data{Data: snap.data}}},
	} {
		t.Run(name, func(t *testing.T) {
			stream, err := cohortv1.NewClusterServiceClient(c.Conn(0)).SnapshotRestore(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range sent {
				if err := stream.Send(m); err != nil {
					t.Fatal(err)
				}
			}
			// Keep the stream open and wait for the server's answer.
			err = stream.RecvMsg(&cohortv1.SnapshotRestoreResponse{})
			refusedAndUnchanged(t, c, err, codes.DeadlineExceeded, idle.String(), "--snapshot-restore-idle-timeout")
		})
	}
}
