package rpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/cluster"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// PeerClient is cluster.Peers over gRPC: it calls other nodes'
// ClusterService, one connection per address, with the node's credentials
// (Security.DialOptions). Refusals come back as errcode errors
// (fromStatus).
type PeerClient struct {
	opts []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

var _ cluster.Peers = (*PeerClient)(nil)

// NewPeerClient returns a client that authenticates as sec says.
func NewPeerClient(sec Security) *PeerClient {
	opts := sec.DialOptions()
	// Ping idle peer connections so one whose peer vanished (a partition
	// that healed, a killed node) is noticed in seconds rather than when TCP
	// gives up; Limits.KeepaliveMinTime permits pings this often.
	opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: forwardPingInterval, Timeout: forwardPingTimeout, PermitWithoutStream: true,
	}))
	opts = append(opts, clientOptions()...)
	return &PeerClient{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

func (c *PeerClient) client(ctx context.Context, addr string) (cohortv1.ClusterServiceClient, context.Context, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		return nil, nil, fmt.Errorf("peer client closed")
	}
	conn, ok := c.conns[addr]
	if !ok {
		var err error
		// NewClient does not connect; the first call does, bounded by its context.
		conn, err = grpc.NewClient(addr, c.opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		c.conns[addr] = conn
	}
	return cohortv1.NewClusterServiceClient(conn), ctx, nil
}

// NodeInfo asks the node at addr to describe itself.
func (c *PeerClient) NodeInfo(ctx context.Context, addr string) (cluster.NodeInfo, error) {
	cl, ctx, err := c.client(ctx, addr)
	if err != nil {
		return cluster.NodeInfo{}, err
	}
	var from peer.Peer
	resp, err := cl.NodeInfo(ctx, &cohortv1.NodeInfoRequest{}, grpc.Peer(&from))
	if err != nil {
		return cluster.NodeInfo{}, fmt.Errorf("node info from %s: %w", addr, fromStatus(err))
	}
	// Over TLS the answer is only as good as the certificate: a node may
	// only speak for the ID its certificate names.
	if ti, ok := from.AuthInfo.(credentials.TLSInfo); ok {
		if len(ti.State.PeerCertificates) == 0 {
			return cluster.NodeInfo{}, fmt.Errorf("node info from %s: no server certificate", addr)
		}
		p, err := auth.FromCertificate(ti.State.PeerCertificates[0])
		if err != nil || p.Name != resp.GetNodeId() {
			return cluster.NodeInfo{}, fmt.Errorf("node info from %s: it answers as node %q but its certificate names %v (%v)", addr, resp.GetNodeId(), p, err)
		}
	}
	return nodeInfoOf(resp), nil
}

// RegisterNode asks the leader, through the node at addr, to record reg.
func (c *PeerClient) RegisterNode(ctx context.Context, addr string, reg cluster.Registration) error {
	cl, ctx, err := c.client(ctx, addr)
	if err != nil {
		return err
	}
	_, err = cl.RegisterNode(ctx, &cohortv1.RegisterNodeRequest{NodeId: reg.NodeID, GrpcAddress: reg.GRPCAddress, RaftAddress: reg.RaftAddress,
		MaxCommandVersion: reg.MaxCommandVersion, KafkaAddress: reg.KafkaAddress})
	if err != nil {
		return fmt.Errorf("register node %q at %s: %w", reg.NodeID, addr, fromStatus(err))
	}
	return nil
}

// AddNonvoter asks the leader, through the node at addr, to add reg as a
// non-voter.
func (c *PeerClient) AddNonvoter(ctx context.Context, addr string, reg cluster.Registration) (cluster.AddAnswer, error) {
	cl, ctx, err := c.client(ctx, addr)
	if err != nil {
		return cluster.AddAnswer{}, err
	}
	resp, err := cl.AddNonvoter(ctx, &cohortv1.AddNonvoterRequest{NodeId: reg.NodeID, RaftAddress: reg.RaftAddress, GrpcAddress: reg.GRPCAddress})
	if err != nil {
		return cluster.AddAnswer{}, fmt.Errorf("add non-voter %q at %s: %w", reg.NodeID, addr, fromStatus(err))
	}
	return cluster.AddAnswer{Changed: resp.GetChanged(), Message: resp.GetMessage(), AutopilotEnabled: resp.GetAutopilotEnabled()}, nil
}

// Promote asks the leader, through the node at addr, to promote id.
func (c *PeerClient) Promote(ctx context.Context, addr, id string) (string, error) {
	cl, ctx, err := c.client(ctx, addr)
	if err != nil {
		return "", err
	}
	resp, err := cl.Promote(ctx, &cohortv1.PromoteRequest{NodeId: id})
	if err != nil {
		return "", fmt.Errorf("promote %q at %s: %w", id, addr, fromStatus(err))
	}
	return resp.GetMessage(), nil
}

// Status asks the leader, through the node at addr, for the cluster status.
func (c *PeerClient) Status(ctx context.Context, addr string) (cluster.Status, error) {
	cl, ctx, err := c.client(ctx, addr)
	if err != nil {
		return cluster.Status{}, err
	}
	resp, err := cl.Status(ctx, &cohortv1.StatusRequest{})
	if err != nil {
		return cluster.Status{}, fmt.Errorf("cluster status from %s: %w", addr, fromStatus(err))
	}
	return statusOf(resp), nil
}

// Close closes every connection.
func (c *PeerClient) Close() error {
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
