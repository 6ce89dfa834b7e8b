package rpc

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestClusterService_Authorize_RequiresTheConfiguredToken(t *testing.T) {
	s := &ClusterService{token: "s3cret"}
	withAuth := func(v string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(AuthorizationHeader, v))
	}
	for name, ctx := range map[string]context.Context{
		"missing":   context.Background(),
		"wrong":     withAuth("Bearer nope"),
		"no scheme": withAuth("s3cret"),
		"prefix":    withAuth("Bearer s3cre"),
	} {
		if err := s.authorize(ctx); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: %v, want Unauthenticated", name, err)
		}
	}
	if err := s.authorize(withAuth("Bearer s3cret")); err != nil {
		t.Errorf("right token refused: %v", err)
	}
	open := &ClusterService{}
	if err := open.authorize(context.Background()); err != nil {
		t.Errorf("no token configured, call refused: %v", err)
	}
}
