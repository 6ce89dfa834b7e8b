package raftnode

import (
	"context"
	"fmt"
	"sync"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewGRPCPeerClient returns a client dialling with opts, or without TLS
// when opts is empty.
func NewGRPCPeerClient(opts ...grpc.DialOption) *GRPCPeerClient {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return &GRPCPeerClient{opts: opts, conns: map[string]*grpc.ClientConn{}}
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
	resp, err := cl.RegisterNode(ctx, req)
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
