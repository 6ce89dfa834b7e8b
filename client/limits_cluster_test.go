package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// A group whose members' metadata fills more than gRPC's default 4 MiB in
// the leader's JoinGroup answer (70 members × 64 KiB, inside the default
// 8 MiB member-metadata budget) still syncs: the server sends it and a
// Conn receives it.
func TestRealCluster_JoinAnswerOver4MiB_GroupSyncs(t *testing.T) {
	const members, metadataBytes = 70, 64 << 10
	cfg := testcluster.DefaultCoordinator()
	cfg.InitialRebalanceDelay = 3 * time.Second // every member joins the first round
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	conn, err := Dial(ConnConfig{Endpoints: c.Addrs(), RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}

	type joined struct {
		resp *cohortv1.JoinGroupResponse
		err  error
	}
	results := make(chan joined, members)
	for i := range members {
		go func() {
			req := &cohortv1.JoinGroupRequest{
				GroupId: "big", ProtocolType: "consumer", ClientId: fmt.Sprintf("c%d", i), Topics: []string{"t"},
				SessionTimeoutMs: 30_000, RebalanceTimeoutMs: 30_000,
				Protocols: []*cohortv1.ProtocolMetadata{{Name: "range", Metadata: bytes.Repeat([]byte{byte(i)}, metadataBytes)}},
			}
			for {
				resp, err := conn.Groups().JoinGroup(ctx, req)
				var perr *Error
				if errors.As(err, &perr) && perr.Code == errcode.MemberIDRequired && req.MemberId == "" && perr.Metadata["member_id"] != "" {
					req.MemberId = perr.Metadata["member_id"]
					continue
				}
				results <- joined{resp, err}
				return
			}
		}()
	}
	var leader *cohortv1.JoinGroupResponse
	var all []*cohortv1.JoinGroupResponse
	for range members {
		r := <-results
		if r.err != nil {
			t.Fatalf("JoinGroup: %v", r.err)
		}
		all = append(all, r.resp)
		if r.resp.GetMemberId() == r.resp.GetLeaderId() {
			leader = r.resp
		}
	}
	if leader == nil || len(leader.GetMembers()) != members {
		t.Fatalf("leader's join answer lists %d members, want %d", len(leader.GetMembers()), members)
	}
	var size int
	for _, m := range leader.GetMembers() {
		size += len(m.GetMetadata())
	}
	if size <= 4<<20 {
		t.Fatalf("member metadata in the leader's answer is %d bytes; the test needs more than 4 MiB", size)
	}

	synced := make(chan error, members)
	for _, r := range all {
		go func() {
			req := &cohortv1.SyncGroupRequest{GroupId: "big", MemberId: r.GetMemberId(), Generation: r.GetGeneration()}
			if r == leader {
				for _, m := range leader.GetMembers() {
					req.Assignments = append(req.Assignments, &cohortv1.MemberAssignment{MemberId: m.GetMemberId(), Assignment: &cohortv1.Assignment{}})
				}
			}
			_, err := conn.Groups().SyncGroup(ctx, req)
			synced <- err
		}()
	}
	for range members {
		if err := <-synced; err != nil {
			t.Fatalf("SyncGroup: %v", err)
		}
	}
}

// A request over gRPC's default 4 MiB but under the node's 16 MiB reaches
// validation; one over 16 MiB is refused by size, naming both sizes.
func TestRealCluster_RequestSizeLimit(t *testing.T) {
	c := testcluster.Start(t, 1, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	conn, err := Dial(ConnConfig{Endpoints: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: strings.Repeat("a", 5<<20), Partitions: 1})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("5 MiB topic name: %v, want InvalidArgument from validation", err)
	}
	_, err = conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: strings.Repeat("a", 17<<20), Partitions: 1})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "16777216") {
		t.Fatalf("17 MiB request: %v, want ResourceExhausted naming the 16 MiB limit", err)
	}
}
