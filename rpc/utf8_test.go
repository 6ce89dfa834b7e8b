package rpc

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func TestCheckUTF8_NamesTheField(t *testing.T) {
	tests := []struct {
		name string
		req  any
		want string // "" for valid
	}{
		{"valid", &cohortv1.JoinGroupRequest{GroupId: "grüße", Topics: []string{"t"}}, ""},
		{"top-level string", &cohortv1.JoinGroupRequest{GroupId: "g\xff"}, "field JoinGroupRequest.group_id is not valid UTF-8"},
		{"repeated string", &cohortv1.JoinGroupRequest{GroupId: "g", Topics: []string{"ok", "\xc3"}}, "field JoinGroupRequest.topics[1] is not valid UTF-8"},
		{"nested message", &cohortv1.OffsetCommitRequest{GroupId: "g", Offsets: []*cohortv1.OffsetCommitPartition{
			{Topic: "t"}, {Topic: "t", Metadata: "\xed\xa0\x80"}, // a UTF-16 surrogate is not UTF-8
		}}, "field OffsetCommitRequest.offsets[1].metadata is not valid UTF-8"},
		{"bytes are not strings", &cohortv1.JoinGroupRequest{GroupId: "g", Protocols: []*cohortv1.ProtocolMetadata{{Name: "range", Metadata: []byte{0xff}}}}, ""},
		{"oneof", &cohortv1.SnapshotRestoreRequest{Part: &cohortv1.SnapshotRestoreRequest_Metadata{Metadata: &cohortv1.SnapshotMetadata{NodeId: "\xff"}}},
			"field SnapshotRestoreRequest.metadata.node_id is not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkUTF8(tt.req)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("checkUTF8: %v, want nil", err)
				}
				return
			}
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.want) {
				t.Fatalf("checkUTF8: %v, want InvalidArgument %q", err, tt.want)
			}
			if Reason(err) != "INVALID_ARGUMENT" {
				t.Fatalf("reason %q, want INVALID_ARGUMENT", Reason(err))
			}
		})
	}
}
