package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/raftnode"
)

// The ClusterService fuzz targets: random requests to each method of the
// operators' API, two in sequence, against a real single-node cluster
// (membership changes need a real Raft). Afterwards the node must still
// lead and commit a write: no input may take it down. Run one with, e.g.:
//
//	go test ./rpc/ -run '^$' -fuzz '^FuzzClusterAddVoter$' -fuzztime 5m

// fuzzCluster starts a one-node cluster with fast Raft timeouts.
func fuzzCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	return testcluster.Start(t, 1, testcluster.Options{
		Coordinator: testcluster.DefaultCoordinator(),
		Raft: func(_ int, c *raftnode.Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
			c.Logger = testcluster.Logger()
		},
	})
}

// stillServes checks the node leads and commits.
func stillServes(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	proc.WaitFor(t, 10*time.Second, "the node to lead and commit after the fuzzed calls", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.Topics(0).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "after-fuzz", Partitions: 1})
		// An attempt that committed but lost its answer leaves the topic:
		// the retry's TOPIC_ALREADY_EXISTS proves a commit too.
		return err == nil || strings.Contains(status.Convert(err).Message(), "TOPIC_ALREADY_EXISTS"), fmt.Sprint(err)
	})
}

func fuzzClusterMethod[Req proto.Message](f *testing.F, call func(ctx context.Context, cl cohortv1.ClusterServiceClient, req Req) error, seeds ...Req) {
	for i, a := range seeds {
		ab, _ := proto.Marshal(a)
		bb, _ := proto.Marshal(seeds[(i+1)%len(seeds)])
		f.Add(ab, bb)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		// Each input has a cluster of its own, which mostly waits (for
		// an election, a call's deadline): replaying the kept inputs
		// (`go test`) runs them side by side. Fuzzing ignores it.
		t.Parallel()
		c := fuzzCluster(t)
		cl := cohortv1.NewClusterServiceClient(c.Conn(0))
		for _, data := range [][]byte{a, b} {
			req := seeds[0].ProtoReflect().New().Interface().(Req)
			if proto.Unmarshal(data, req) != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_ = call(ctx, cl, req)
			cancel()
		}
		stillServes(t, c)
	})
}

func FuzzClusterNodeInfo(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.NodeInfoRequest) error {
		_, err := cl.NodeInfo(ctx, r)
		return err
	}, &cohortv1.NodeInfoRequest{})
}

func FuzzClusterRegisterNode(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.RegisterNodeRequest) error {
		_, err := cl.RegisterNode(ctx, r)
		return err
	}, &cohortv1.RegisterNodeRequest{NodeId: "n1", GrpcAddress: "127.0.0.1:1", RaftAddress: "127.0.0.1:2"},
		&cohortv1.RegisterNodeRequest{NodeId: "n9", GrpcAddress: "not-an-address", RaftAddress: "999.999.999.999:99999"})
}

func FuzzClusterHealth(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.HealthRequest) error {
		_, err := cl.Health(ctx, r)
		return err
	}, &cohortv1.HealthRequest{})
}

func FuzzClusterStatus(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.StatusRequest) error {
		_, err := cl.Status(ctx, r)
		return err
	}, &cohortv1.StatusRequest{})
}

func FuzzClusterAddNonvoter(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.AddNonvoterRequest) error {
		_, err := cl.AddNonvoter(ctx, r)
		return err
	}, &cohortv1.AddNonvoterRequest{NodeId: "n2", RaftAddress: "127.0.0.1:1", GrpcAddress: "127.0.0.1:2"},
		&cohortv1.AddNonvoterRequest{NodeId: "n1", RaftAddress: "not-an-address"})
}

func FuzzClusterAddVoter(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.AddVoterRequest) error {
		_, err := cl.AddVoter(ctx, r)
		return err
	}, &cohortv1.AddVoterRequest{NodeId: "n2", RaftAddress: "127.0.0.1:1", GrpcAddress: "127.0.0.1:2"},
		&cohortv1.AddVoterRequest{NodeId: "n1", RaftAddress: "127.0.0.1:3"})
}

func FuzzClusterPromote(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.PromoteRequest) error {
		_, err := cl.Promote(ctx, r)
		return err
	}, &cohortv1.PromoteRequest{NodeId: "n1"}, &cohortv1.PromoteRequest{NodeId: "nobody"})
}

func FuzzClusterDemote(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.DemoteRequest) error {
		_, err := cl.Demote(ctx, r)
		return err
	}, &cohortv1.DemoteRequest{NodeId: "n1"}, &cohortv1.DemoteRequest{NodeId: "n1", Force: true})
}

func FuzzClusterRemoveServer(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.RemoveServerRequest) error {
		_, err := cl.RemoveServer(ctx, r)
		return err
	}, &cohortv1.RemoveServerRequest{NodeId: "n1"}, &cohortv1.RemoveServerRequest{NodeId: "n1", Force: true}, &cohortv1.RemoveServerRequest{NodeId: "x"})
}

func FuzzClusterTransferLeadership(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.TransferLeadershipRequest) error {
		_, err := cl.TransferLeadership(ctx, r)
		return err
	}, &cohortv1.TransferLeadershipRequest{}, &cohortv1.TransferLeadershipRequest{NodeId: "n1"})
}

func FuzzClusterSnapshotSave(f *testing.F) {
	fuzzClusterMethod(f, func(ctx context.Context, cl cohortv1.ClusterServiceClient, r *cohortv1.SnapshotSaveRequest) error {
		s, err := cl.SnapshotSave(ctx, r)
		if err != nil {
			return err
		}
		for {
			if _, err := s.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}, &cohortv1.SnapshotSaveRequest{})
}

// FuzzClusterSnapshotRestore sends the two fuzzed messages as one restore
// stream.
func FuzzClusterSnapshotRestore(f *testing.F) {
	seeds := []*cohortv1.SnapshotRestoreRequest{
		{Part: &cohortv1.SnapshotRestoreRequest_Metadata{Metadata: &cohortv1.SnapshotMetadata{Index: 1 << 63, Term: 1}}},
		{Part: &cohortv1.SnapshotRestoreRequest_Data{Data: []byte("not a snapshot")}},
		{Part: &cohortv1.SnapshotRestoreRequest_Trailer{Trailer: &cohortv1.SnapshotTrailer{}}},
	}
	for i, a := range seeds {
		ab, _ := proto.Marshal(a)
		bb, _ := proto.Marshal(seeds[(i+1)%len(seeds)])
		f.Add(ab, bb)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		t.Parallel() // as in fuzzClusterMethod
		c := fuzzCluster(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := cohortv1.NewClusterServiceClient(c.Conn(0)).SnapshotRestore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range [][]byte{a, b} {
			req := &cohortv1.SnapshotRestoreRequest{}
			if proto.Unmarshal(data, req) == nil {
				_ = s.Send(req)
			}
		}
		_, _ = s.CloseAndRecv()
		stillServes(t, c)
	})
}
