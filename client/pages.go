package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// The reads whose answers grow with the state (OffsetFetch, DescribeGroups,
// ListGroups, ListTopics) are paged by the server: one call returns one
// page and a next_page_token. These helpers follow every page and return
// all items. The request is not modified; its page_size applies to each
// page (0: the server's default) and a page_token in it starts the walk
// there. A page may be served by a different node than the previous one
// (a leader change): tokens are positions in the state, not cursors.

// FetchOffsets returns every offset OffsetFetch answers for req.
func FetchOffsets(ctx context.Context, c cohortv1.GroupCoordinatorClient, req *cohortv1.OffsetFetchRequest, opts ...grpc.CallOption) ([]*cohortv1.OffsetFetchPartition, error) {
	return allPages(ctx, req, "OffsetFetch",
		func(r *cohortv1.OffsetFetchRequest, token string) { r.PageToken = token },
		func(ctx context.Context, r *cohortv1.OffsetFetchRequest) (*cohortv1.OffsetFetchResponse, error) {
			return c.OffsetFetch(ctx, r, opts...)
		},
		(*cohortv1.OffsetFetchResponse).GetPartitions, (*cohortv1.OffsetFetchResponse).GetNextPageToken)
}

// DescribeGroups returns the descriptions of every group in req, in group
// ID order.
func DescribeGroups(ctx context.Context, c cohortv1.GroupCoordinatorClient, req *cohortv1.DescribeGroupsRequest, opts ...grpc.CallOption) ([]*cohortv1.GroupDescription, error) {
	return allPages(ctx, req, "DescribeGroups",
		func(r *cohortv1.DescribeGroupsRequest, token string) { r.PageToken = token },
		func(ctx context.Context, r *cohortv1.DescribeGroupsRequest) (*cohortv1.DescribeGroupsResponse, error) {
			return c.DescribeGroups(ctx, r, opts...)
		},
		(*cohortv1.DescribeGroupsResponse).GetGroups, (*cohortv1.DescribeGroupsResponse).GetNextPageToken)
}

// ListGroups returns every group ListGroups answers for req, in group ID
// order.
func ListGroups(ctx context.Context, c cohortv1.GroupCoordinatorClient, req *cohortv1.ListGroupsRequest, opts ...grpc.CallOption) ([]*cohortv1.ListedGroup, error) {
	return allPages(ctx, req, "ListGroups",
		func(r *cohortv1.ListGroupsRequest, token string) { r.PageToken = token },
		func(ctx context.Context, r *cohortv1.ListGroupsRequest) (*cohortv1.ListGroupsResponse, error) {
			return c.ListGroups(ctx, r, opts...)
		},
		(*cohortv1.ListGroupsResponse).GetGroups, (*cohortv1.ListGroupsResponse).GetNextPageToken)
}

// ListTopics returns every topic, in name order.
func ListTopics(ctx context.Context, c cohortv1.TopicsClient, req *cohortv1.ListTopicsRequest, opts ...grpc.CallOption) ([]*cohortv1.TopicPartitionCount, error) {
	return allPages(ctx, req, "ListTopics",
		func(r *cohortv1.ListTopicsRequest, token string) { r.PageToken = token },
		func(ctx context.Context, r *cohortv1.ListTopicsRequest) (*cohortv1.ListTopicsResponse, error) {
			return c.ListTopics(ctx, r, opts...)
		},
		(*cohortv1.ListTopicsResponse).GetTopics, (*cohortv1.ListTopicsResponse).GetNextPageToken)
}

// allPages calls call with req's copy until a page has no next token.
func allPages[Req proto.Message, Resp any, Item any](
	ctx context.Context, req Req, what string,
	setToken func(Req, string),
	call func(context.Context, Req) (Resp, error),
	items func(Resp) []Item, next func(Resp) string,
) ([]Item, error) {
	r := proto.Clone(req).(Req)
	var out []Item
	for page := 1; ; page++ {
		resp, err := call(ctx, r)
		if err != nil {
			if page == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("%s page %d: %w", what, page, err)
		}
		out = append(out, items(resp)...)
		token := next(resp)
		if token == "" {
			return out, nil
		}
		if len(items(resp)) == 0 {
			// A server that answers an empty page with a token would make
			// this loop forever; Cohort's servers never do.
			return nil, fmt.Errorf("%s page %d: no items but a next page token", what, page)
		}
		setToken(r, token)
	}
}
