package rpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
	"github.com/cohortlabs/cohort/rpc"
)

// rawCodec sends a request's bytes as they are and decodes nothing, so a
// test can put on the wire what no generated client would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// A request whose strings are not UTF-8, sent as raw bytes to the leader
// or to a follower, is refused with InvalidArgument naming the field (not
// Internal, grpc-go's answer to a decode error); nothing is committed and
// the node keeps serving.
func TestRawRequest_InvalidUTF8_InvalidArgumentNamingTheField(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: testcluster.DefaultCoordinator()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Topics(c.Leader()).CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "t", Partitions: 1}); err != nil {
		t.Fatal(err)
	}

	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), []byte(s))
	}
	join := str(nil, 1, "g\xff\xfe") // JoinGroupRequest.group_id
	var offset []byte                // OffsetCommitPartition{topic: "t", offset: 5, metadata: "\xc3("}
	offset = str(offset, 1, "t")
	offset = protowire.AppendVarint(protowire.AppendTag(offset, 3, protowire.VarintType), 5)
	offset = str(offset, 4, "\xc3(")
	commit := str(nil, 1, "g")                                                                        // OffsetCommitRequest{group_id: "g", generation: -1, offsets: [offset]}
	commit = protowire.AppendVarint(protowire.AppendTag(commit, 2, protowire.VarintType), ^uint64(0)) // int32 -1
	commit = protowire.AppendBytes(protowire.AppendTag(commit, 5, protowire.BytesType), offset)

	follower := (c.Leader() + 1) % 3
	for _, tc := range []struct {
		method string
		req    []byte
		want   string
	}{
		{cohortv1.GroupCoordinator_JoinGroup_FullMethodName, join, "field JoinGroupRequest.group_id is not valid UTF-8"},
		{cohortv1.GroupCoordinator_OffsetCommit_FullMethodName, commit, "field OffsetCommitRequest.offsets[0].metadata is not valid UTF-8"},
	} {
		for _, node := range []int{c.Leader(), follower} {
			var resp []byte
			err := c.Conn(node).Invoke(ctx, tc.method, &tc.req, &resp, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) || rpc.Reason(err) != "INVALID_ARGUMENT" {
				t.Errorf("%s on node %d: %v, want InvalidArgument %q", tc.method, node, err, tc.want)
			}
		}
	}

	// Nothing reached the state, and the cluster still serves.
	got, err := c.Groups(c.Leader()).ListGroups(ctx, &cohortv1.ListGroupsRequest{})
	if err != nil || len(got.GetGroups()) != 0 {
		t.Fatalf("groups after the refused requests: %v, %v; want none", got.GetGroups(), err)
	}
	if _, err := c.Groups(follower).OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "g", Generation: -1,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "t", Offset: 5, Metadata: "fine"}}}); err != nil {
		t.Fatalf("a valid commit after the refused ones: %v", err)
	}
}
