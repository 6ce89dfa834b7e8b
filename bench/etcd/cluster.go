package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// members is the cluster's size, as cohort-bench's in-process cluster.
const members = 3

// cluster is three etcd members embedded in this process, on loopback.
type cluster struct {
	etcds   []*embed.Etcd
	clients []string // each member's client URL, in member order
}

// startCluster starts the three members with their data under dir and
// waits until each is ready and all name the same leader. Ports are
// chosen by the kernel just before the start, so another process can take
// one in between: a start that fails to bind is tried again with new ports.
func startCluster(ctx context.Context, dir string, logLevel string) (*cluster, error) {
	var err error
	for range 3 {
		var c *cluster
		c, err = startClusterOnce(ctx, dir, logLevel)
		if err == nil {
			return c, nil
		}
		if !strings.Contains(err.Error(), "address already in use") || ctx.Err() != nil {
			return nil, err
		}
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	return nil, err
}

func startClusterOnce(ctx context.Context, dir string, logLevel string) (*cluster, error) {
	ports, err := freePorts(2 * members)
	if err != nil {
		return nil, err
	}
	peer := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])} }
	client := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])} }
	name := func(i int) string { return fmt.Sprintf("m%d", i+1) }
	var initial []string
	for i := range members {
		u := peer(i)
		initial = append(initial, name(i)+"="+u.String())
	}

	c := &cluster{}
	for i := range members {
		cfg := embed.NewConfig()
		cfg.Name = name(i)
		cfg.Dir = filepath.Join(dir, name(i))
		cfg.ListenPeerUrls = []url.URL{peer(i)}
		cfg.AdvertisePeerUrls = []url.URL{peer(i)}
		cfg.ListenClientUrls = []url.URL{client(i)}
		cfg.AdvertiseClientUrls = []url.URL{client(i)}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "etcd-bench"
		cfg.ClusterState = embed.ClusterStateFlagNew
		// Everything else, fsync included, stays at etcd's defaults: the
		// comparison is with etcd as an operator would run it.
		if logLevel == "" {
			cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		} else {
			cfg.LogLevel = logLevel
			cfg.LogOutputs = []string{"stderr"}
		}
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("start etcd member %s: %w", cfg.Name, err)
		}
		c.etcds = append(c.etcds, e)
		u := client(i)
		c.clients = append(c.clients, u.String())
	}
	if err := c.waitReady(ctx, time.Minute); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// waitReady waits until every member has joined the cluster and all name
// the same leader.
func (c *cluster) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for _, e := range c.etcds {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			return fmt.Errorf("etcd member %s: %w", e.Config().Name, err)
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s not ready: %w", e.Config().Name, ctx.Err())
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := c.leader(); err == nil {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("etcd cluster has no leader: %w", ctx.Err())
		}
	}
}

// leader is the index of the member all three name as leader.
func (c *cluster) leader() (int, error) {
	lead := c.etcds[0].Server.Leader()
	for _, e := range c.etcds {
		if l := e.Server.Leader(); l == 0 || l != lead {
			return -1, errors.New("members do not agree on a leader")
		}
	}
	for i, e := range c.etcds {
		if e.Server.MemberID() == lead {
			return i, nil
		}
	}
	return -1, fmt.Errorf("leader %s is not a member", lead)
}

// Close stops the followers together, then the leader. A leader stopping
// beside its followers tries to hand its leadership to one of them, which
// is stopping too, and waits seconds for the hand-over to fail; followers
// stop at once, and a leader with no peer left skips the hand-over.
func (c *cluster) Close() {
	lead := -1
	for i, e := range c.etcds {
		if e.Server.Leader() == e.Server.MemberID() {
			lead = i
		}
	}
	var wg sync.WaitGroup
	for i, e := range c.etcds {
		if i != lead {
			wg.Go(e.Close)
		}
	}
	wg.Wait()
	if lead >= 0 {
		c.etcds[lead].Close()
	}
}

// freePorts reserves n distinct loopback ports, holding all of them until
// the last is chosen so that none repeats.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
