//go:build chaosbug

// This file exists only in a deliberately broken build (go build -tags
// chaosbug), against which the chaos suite must report the run invalid
// (`make chaos-bug`). It never ships: without the tag it is not compiled.
//
// The fault: every OffsetFetch is served as if the client had asked for a
// stale read, i.e. by whichever node received it, from its own FSM,
// without forwarding to the leader and without the read barrier. An
// isolated or lagging node then answers with offsets the cluster has
// already overwritten — a stale read the linearizability checker must flag.

package rpc

import (
	"context"

	"google.golang.org/grpc"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func init() {
	methods := cohortv1.GroupCoordinator_ServiceDesc.Methods
	for i, m := range methods {
		if m.MethodName != "OffsetFetch" {
			continue
		}
		correct := m.Handler
		methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			staleDec := func(in any) error {
				if err := dec(in); err != nil {
					return err
				}
				if r, ok := in.(*cohortv1.OffsetFetchRequest); ok {
					r.AllowStale = true // the bug
				}
				return nil
			}
			return correct(srv, ctx, staleDec, interceptor)
		}
	}
}
