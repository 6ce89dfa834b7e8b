package raftnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

// PeerClient reaches another node's ClusterService. Formation and
// registration use it; tests may substitute their own.
type PeerClient interface {
	NodeInfo(ctx context.Context, addr string) (*cohortv1.NodeInfoResponse, error)
	RegisterNode(ctx context.Context, addr string, req *cohortv1.RegisterNodeRequest) (*cohortv1.RegisterNodeResponse, error)
	Close() error
}

// GRPCPeerClient is a PeerClient over gRPC that keeps one connection per
// address. It uses no TLS (TLS is configured by cohortd later).
type GRPCPeerClient struct {
	opts []grpc.DialOption
	// token, when set, is sent as the admin bearer token on every call.
	token string

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewGRPCPeerClient returns a client dialling with opts, or without TLS
// when opts is empty.
func NewGRPCPeerClient(opts ...grpc.DialOption) *GRPCPeerClient {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// Ping idle peer connections so one whose peer vanished (a partition
	// that healed, a killed node) is noticed in seconds rather than when TCP
	// gives up; cohortd's gRPC server permits pings this often.
	opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: 2 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true,
	}))
	return &GRPCPeerClient{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// WithToken makes the client send token as the admin bearer token.
func (c *GRPCPeerClient) WithToken(token string) *GRPCPeerClient {
	c.token = token
	return c
}

func (c *GRPCPeerClient) outgoing(ctx context.Context) context.Context {
	if c.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, AuthorizationHeader, "Bearer "+c.token)
}

// Cluster returns a ClusterService client for the node at addr over the
// shared connection. Calls through it carry no token unless the caller
// adds one.
func (c *GRPCPeerClient) Cluster(addr string) (cohortv1.ClusterServiceClient, error) {
	return c.client(addr)
}

// AddNonvoter asks the node at addr (any node: it forwards to the leader)
// to add a non-voter.
func (c *GRPCPeerClient) AddNonvoter(ctx context.Context, addr string, req *cohortv1.AddNonvoterRequest) (*cohortv1.AddNonvoterResponse, error) {
	cl, err := c.client(addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.AddNonvoter(c.outgoing(ctx), req)
	if err != nil {
		return nil, fmt.Errorf("add non-voter %q at %s: %w", req.GetNodeId(), addr, err)
	}
	return resp, nil
}

// Status asks the node at addr (any node: it forwards to the leader) for
// the cluster status.
func (c *GRPCPeerClient) Status(ctx context.Context, addr string) (*cohortv1.StatusResponse, error) {
	cl, err := c.client(addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Status(c.outgoing(ctx), &cohortv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("cluster status from %s: %w", addr, err)
	}
	return resp, nil
}

// Promote asks the node at addr to promote a non-voter.
func (c *GRPCPeerClient) Promote(ctx context.Context, addr string, req *cohortv1.PromoteRequest) (*cohortv1.PromoteResponse, error) {
	cl, err := c.client(addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Promote(c.outgoing(ctx), req)
	if err != nil {
		return nil, fmt.Errorf("promote %q at %s: %w", req.GetNodeId(), addr, err)
	}
	return resp, nil
}

func (c *GRPCPeerClient) client(addr string) (cohortv1.ClusterServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		return nil, fmt.Errorf("peer client closed")
	}
	conn, ok := c.conns[addr]
	if !ok {
		var err error
		// NewClient does not connect; the first RPC does, bounded by its context.
		conn, err = grpc.NewClient(addr, c.opts...)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		c.conns[addr] = conn
	}
	return cohortv1.NewClusterServiceClient(conn), nil
}

// NodeInfo asks the node at addr to describe itself.
func (c *GRPCPeerClient) NodeInfo(ctx context.Context, addr string) (*cohortv1.NodeInfoResponse, error) {
	cl, err := c.client(addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("node info from %s: %w", addr, err)
	}
	return resp, nil
}

// RegisterNode asks the node at addr (the leader) to record req.
func (c *GRPCPeerClient) RegisterNode(ctx context.Context, addr string, req *cohortv1.RegisterNodeRequest) (*cohortv1.RegisterNodeResponse, error) {
	cl, err := c.client(addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.RegisterNode(c.outgoing(ctx), req)
	if err != nil {
		return nil, fmt.Errorf("register node %q at %s: %w", req.GetNodeId(), addr, err)
	}
	return resp, nil
}

// Close closes every connection.
func (c *GRPCPeerClient) Close() error {
	c.mu.Lock()
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	var first error
	for _, conn := range conns {
		if err := conn.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
