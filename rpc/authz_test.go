package rpc

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/auth"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Test_AuthorizationRules_NameEveryMethod: every method of Cohort's
// services has a rule of its own, so a new RPC is a decision, not an
// accident (a method without one needs admin).
func Test_AuthorizationRules_NameEveryMethod(t *testing.T) {
	for _, sd := range []struct {
		name    string
		methods []string
	}{
		{cohortv1.GroupCoordinator_ServiceDesc.ServiceName, methodNames(cohortv1.GroupCoordinator_ServiceDesc.Methods, cohortv1.GroupCoordinator_ServiceDesc.Streams)},
		{cohortv1.Topics_ServiceDesc.ServiceName, methodNames(cohortv1.Topics_ServiceDesc.Methods, cohortv1.Topics_ServiceDesc.Streams)},
		{cohortv1.ClusterService_ServiceDesc.ServiceName, methodNames(cohortv1.ClusterService_ServiceDesc.Methods, cohortv1.ClusterService_ServiceDesc.Streams)},
	} {
		for _, m := range sd.methods {
			if _, ok := authorizationRules["/"+sd.name+"/"+m]; !ok {
				t.Errorf("/%s/%s has no authorization rule", sd.name, m)
			}
		}
	}
}

func Test_Authorize_RolesAndSelf(t *testing.T) {
	admin := auth.Principal{Role: auth.RoleAdmin, Name: "alice"}
	client := auth.Principal{Role: auth.RoleClient, Name: "app"}
	n2 := auth.Principal{Role: auth.RoleNode, Name: "n2"}
	cases := []struct {
		who    auth.Principal
		method string
		req    any
		want   codes.Code
	}{
		{auth.Principal{}, cohortv1.ClusterService_Health_FullMethodName, nil, codes.OK},
		{auth.Principal{}, cohortv1.GroupCoordinator_JoinGroup_FullMethodName, &cohortv1.JoinGroupRequest{}, codes.Unauthenticated},
		{client, cohortv1.GroupCoordinator_JoinGroup_FullMethodName, &cohortv1.JoinGroupRequest{}, codes.OK},
		{admin, cohortv1.GroupCoordinator_JoinGroup_FullMethodName, &cohortv1.JoinGroupRequest{}, codes.OK},
		{n2, cohortv1.GroupCoordinator_JoinGroup_FullMethodName, &cohortv1.JoinGroupRequest{}, codes.PermissionDenied},
		{client, cohortv1.GroupCoordinator_OffsetCommit_FullMethodName, &cohortv1.OffsetCommitRequest{MemberId: "m"}, codes.OK},
		{client, cohortv1.GroupCoordinator_OffsetCommit_FullMethodName, &cohortv1.OffsetCommitRequest{Generation: -1}, codes.PermissionDenied},
		{admin, cohortv1.GroupCoordinator_OffsetCommit_FullMethodName, &cohortv1.OffsetCommitRequest{Generation: -1}, codes.OK},
		{client, cohortv1.Topics_DeleteTopic_FullMethodName, &cohortv1.DeleteTopicRequest{}, codes.PermissionDenied},
		{client, cohortv1.GroupCoordinator_DeleteGroups_FullMethodName, &cohortv1.DeleteGroupsRequest{}, codes.PermissionDenied},
		{n2, cohortv1.ClusterService_RegisterNode_FullMethodName, &cohortv1.RegisterNodeRequest{NodeId: "n2"}, codes.OK},
		{n2, cohortv1.ClusterService_RegisterNode_FullMethodName, &cohortv1.RegisterNodeRequest{NodeId: "n1"}, codes.PermissionDenied},
		{n2, cohortv1.ClusterService_RemoveServer_FullMethodName, &cohortv1.RemoveServerRequest{NodeId: "n2"}, codes.OK},
		{n2, cohortv1.ClusterService_RemoveServer_FullMethodName, &cohortv1.RemoveServerRequest{NodeId: "n3"}, codes.PermissionDenied},
		{n2, cohortv1.ClusterService_AddVoter_FullMethodName, &cohortv1.AddVoterRequest{NodeId: "n2"}, codes.PermissionDenied},
		{admin, cohortv1.ClusterService_AddVoter_FullMethodName, &cohortv1.AddVoterRequest{NodeId: "n9"}, codes.OK},
		{client, cohortv1.ClusterService_SnapshotRestore_FullMethodName, nil, codes.PermissionDenied},
		{admin, "/cohort.v1.Future/Unknown", nil, codes.OK},
		{client, "/cohort.v1.Future/Unknown", nil, codes.PermissionDenied},
	}
	for _, tc := range cases {
		err := authorize(tc.who, tc.method, tc.req)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s calling %s: %v, want %v", tc.who, tc.method, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), tc.method) {
			t.Errorf("%s calling %s: the refusal does not name the method: %v", tc.who, tc.method, err)
		}
	}
}

// Test_Authenticate_TrustsForwardingMetadataFromNodesOnly: a forwarded
// principal is believed from a node; from anyone else the keys only nodes
// may set are dropped, and the caller is who its own credential says.
func Test_Authenticate_TrustsForwardingMetadataFromNodesOnly(t *testing.T) {
	toks, err := auth.NewTokens("", map[string]auth.Principal{
		"node-token-0123456789":   {Role: auth.RoleNode, Name: "n2"},
		"client-token-0123456789": {Role: auth.RoleClient, Name: "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuthorizer(Security{Tokens: toks})
	call := func(token string) context.Context {
		md := metadata.Pairs(principalKey, "admin/mallory", forwardedKey, "1", clientHostKey, "203.0.113.9:1")
		if token != "" {
			md.Set(AuthorizationHeader, "Bearer "+token)
		}
		return metadata.NewIncomingContext(context.Background(), md)
	}
	ctx, err := a.authenticate(call("node-token-0123456789"))
	if err != nil || auth.FromContext(ctx) != (auth.Principal{Role: auth.RoleAdmin, Name: "mallory"}) || ClientHost(ctx) != "203.0.113.9:1" {
		t.Fatalf("from a node: %v %v %q", auth.FromContext(ctx), err, ClientHost(ctx))
	}
	for _, tok := range []string{"client-token-0123456789", ""} {
		ctx, err := a.authenticate(call(tok))
		if err != nil {
			t.Fatal(err)
		}
		if p := auth.FromContext(ctx); p.Role == auth.RoleAdmin {
			t.Fatalf("token %q: the forwarded principal was believed: %v", tok, p)
		}
		if forwarded(ctx) || strings.Contains(ClientHost(ctx), "203.0.113.9") {
			t.Fatalf("token %q: node-only metadata survived", tok)
		}
	}
	if _, err := a.authenticate(call("unknown-token-0123456789")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an unknown token: %v, want Unauthenticated", err)
	}
}

func methodNames(unary []grpc.MethodDesc, streams []grpc.StreamDesc) []string {
	var out []string
	for _, m := range unary {
		out = append(out, m.MethodName)
	}
	for _, s := range streams {
		out = append(out, s.StreamName)
	}
	return out
}
