// Command composecheck drives deploy/compose/compose-test.sh against a
// running three-node compose cluster from the host, through the published
// 127.0.0.1 ports and the client library, as an application would.
//
// Phase "failover": a group of members shares one generation and commits,
// a standalone writer commits without pause, the leader's container is
// killed with `docker kill`; the group must keep its generation and
// assignment, commits must resume and every acknowledged one be readable,
// and the killed container, started again, must rejoin as a follower.
// The offsets it expects are written to --state.
//
// Phase "verify": after `compose down` and `up` with the volumes kept, the
// offsets in --state must be readable and every node must report Raft
// state and agree on a leader.
//
// The cluster serves mutual TLS only: every connection presents the
// certificate of --tls-cert (the compose PKI's admin certificate) and
// accepts only servers whose certificates chain to --tls-ca and name a
// node. Phase failover first checks that a plaintext connection and a TLS
// connection without a client certificate are refused.
//
// It never touches anything but the endpoints and containers it is given.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

const (
	topic           = "orders"
	partitions      = 6
	groupID         = "compose-check"
	standaloneGroup = "compose-check-standalone"
	members         = 3
)

// node is one cohortd container as seen from the host.
type node struct {
	id        string // Raft node ID, also the host name it advertises
	grpc      string // published gRPC address on 127.0.0.1
	http      string // published HTTP address on 127.0.0.1
	container string // Docker container ID
	cluster   cohortv1.ClusterServiceClient
}

// state is what phase failover leaves for phase verify.
type state struct {
	Generation int32                       `json:"generation"`
	Offsets    map[string]map[string]int64 `json:"offsets"` // group -> "topic/partition" -> offset
	// UpTo bounds an offset from above where a commit that failed at the
	// client may still land: the standalone writer's last request, cut
	// off when it stopped, can be applied after Offsets were read.
	UpTo map[string]map[string]int64 `json:"up_to,omitempty"`
}

func main() {
	var (
		phase, statePath, docker          string
		endpoints, https, ids, containers string
		tlsFiles                          auth.Files
		timeout                           time.Duration
	)
	flag.StringVar(&phase, "phase", "failover", "failover or verify")
	flag.StringVar(&endpoints, "endpoints", "", "published gRPC addresses, comma-separated, one per node")
	flag.StringVar(&https, "http", "", "published HTTP addresses, same order")
	flag.StringVar(&ids, "nodes", "cohort-1,cohort-2,cohort-3", "node IDs (= advertised host names), same order")
	flag.StringVar(&containers, "containers", "", "Docker container IDs, same order (phase failover)")
	flag.StringVar(&statePath, "state", "", "file for the expected offsets (written by failover, read by verify)")
	flag.StringVar(&docker, "docker", "docker", "docker command")
	flag.StringVar(&tlsFiles.Cert, "tls-cert", "", "client certificate (PEM) to present: the compose PKI's admin.crt")
	flag.StringVar(&tlsFiles.Key, "tls-key", "", "its key")
	flag.StringVar(&tlsFiles.CA, "tls-ca", "", "CA bundle (PEM) the nodes' certificates chain to")
	flag.DurationVar(&timeout, "timeout", 150*time.Second, "bound on the whole phase")
	flag.Parse()

	var creds client.Credentials
	var err error
	if !tlsFiles.Complete() {
		err = fmt.Errorf("--tls-cert %q, --tls-key %q and --tls-ca %q are all required: the compose cluster serves mutual TLS only", tlsFiles.Cert, tlsFiles.Key, tlsFiles.CA)
	} else {
		creds.TLS, err = client.LoadTLS(tlsFiles.Cert, tlsFiles.Key, tlsFiles.CA)
	}
	var nodes []*node
	if err == nil {
		nodes, err = parseNodes(endpoints, https, ids, containers, phase == "failover", creds)
	}
	if err == nil && statePath == "" {
		err = errors.New("--state is required")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "composecheck:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := &check{nodes: nodes, docker: docker, start: time.Now(), creds: creds, caFile: tlsFiles.CA}
	switch phase {
	case "failover":
		err = c.failover(ctx, statePath)
	case "verify":
		err = c.verify(ctx, statePath)
	default:
		err = fmt.Errorf("phase %q: want failover or verify", phase)
	}
	if err != nil {
		c.logf("FAIL: %v", err)
		os.Exit(1)
	}
	c.logf("PASS (phase %s)", phase)
}

func parseNodes(endpoints, https, ids, containers string, needContainers bool, creds client.Credentials) ([]*node, error) {
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	g, h, id, ct := split(endpoints), split(https), split(ids), split(containers)
	if len(g) == 0 || len(h) != len(g) || len(id) != len(g) || (needContainers && len(ct) != len(g)) {
		return nil, fmt.Errorf("--endpoints %q, --http %q, --nodes %q and --containers %q must list the same number of nodes", endpoints, https, ids, containers)
	}
	var out []*node
	for i := range g {
		conn, err := grpc.NewClient(g[i], creds.DialOptions()...)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", g[i], err)
		}
		n := &node{id: id[i], grpc: g[i], http: h[i], cluster: cohortv1.NewClusterServiceClient(conn)}
		if needContainers {
			n.container = ct[i]
		}
		out = append(out, n)
	}
	return out, nil
}

type check struct {
	nodes  []*node
	docker string
	start  time.Time
	// creds are every connection's: TLS with the admin certificate, the
	// server verified as a node of the compose CA.
	creds  client.Credentials
	caFile string
}

func (c *check) logf(format string, args ...any) {
	fmt.Printf("composecheck %6.1fs  %s\n", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

// dialOptions make the host reach the addresses the nodes advertise
// (cohort-N:port, resolvable only on the compose network) through the
// ports published on 127.0.0.1: the client follows the leader a node
// names, and that name is the advertised one.
func (c *check) dialOptions() []grpc.DialOption {
	hosts := map[string]string{}
	for _, n := range c.nodes {
		host, _, _ := net.SplitHostPort(n.grpc)
		hosts[n.id] = host
	}
	return []grpc.DialOption{grpc.WithResolvers(loopbackResolver{hosts: hosts})}
}

func (c *check) endpoints() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.grpc)
	}
	return out
}

func (c *check) failover(ctx context.Context, statePath string) error {
	if err := c.waitServing(ctx); err != nil {
		return err
	}
	if err := c.refusesUnauthenticated(ctx); err != nil {
		return err
	}
	conn, err := client.Dial(client.ConnConfig{Endpoints: c.endpoints(), Credentials: c.creds, DialOptions: c.dialOptions()})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ensureTopic(ctx, conn); err != nil {
		return err
	}

	// A group of members sharing one generation.
	group := make([]*client.Member, members)
	var wg sync.WaitGroup
	runCtx, stopMembers := context.WithCancel(ctx)
	defer func() { stopMembers(); wg.Wait() }()
	for i := range group {
		m, err := client.NewMember(client.Config{
			Endpoints: c.endpoints(), Credentials: c.creds, DialOptions: c.dialOptions(),
			GroupID: groupID, ClientID: fmt.Sprintf("composecheck-%d", i), Topics: []string{topic},
			SessionTimeout: 10 * time.Second, HeartbeatInterval: 500 * time.Millisecond, RebalanceTimeout: 15 * time.Second,
		})
		if err != nil {
			return err
		}
		group[i] = m
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(runCtx) }()
	}
	var gen int32
	if err := poll(ctx, 45*time.Second, "three members sharing one generation and all partitions", func() (bool, string) {
		var ok bool
		var detail string
		gen, ok, detail = settled(group)
		return ok, detail
	}); err != nil {
		return err
	}
	before := make([][]client.TopicPartition, len(group))
	want := map[string]map[string]int64{groupID: {}, standaloneGroup: {}}
	for i, m := range group {
		before[i] = m.Assignment()
		var offs []client.PartitionOffset
		for _, tp := range before[i] {
			offs = append(offs, client.PartitionOffset{TopicPartition: tp, Offset: int64(1000 + tp.Partition)})
			want[groupID][tp.String()] = int64(1000 + tp.Partition)
		}
		if err := m.Commit(ctx, offs); err != nil {
			return fmt.Errorf("member %d commit before the kill: %w", i, err)
		}
	}
	c.logf("group %s: generation %d, assignments %v, offsets committed", groupID, gen, before)

	// A standalone writer commits without pause across the failover.
	w := &standaloneWriter{conn: conn}
	wctx, stopWriter := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); w.run(wctx) }()
	defer func() { stopWriter(); <-writerDone }()
	if err := poll(ctx, 20*time.Second, "standalone commits before the kill", func() (bool, string) {
		n, _ := w.counts()
		return n >= 20, fmt.Sprintf("%d acknowledged", n)
	}); err != nil {
		return err
	}

	// Kill the leader's container.
	leader, err := c.leader(ctx)
	if err != nil {
		return err
	}
	ackedAtKill, _ := w.counts()
	if err := c.run(ctx, c.docker, "kill", leader.container); err != nil {
		return err
	}
	killedAt := time.Now()
	c.logf("docker kill %s (leader %s); %d standalone commits acknowledged so far", short(leader.container), leader.id, ackedAtKill)

	// Member commits resume on the new leader.
	for i, m := range group {
		offs := []client.PartitionOffset{{TopicPartition: before[i][0], Offset: 5000 + int64(i)}}
		if err := m.Commit(ctx, offs); err != nil {
			return fmt.Errorf("member %d commit after the kill: %w", i, err)
		}
		want[groupID][before[i][0].String()] = 5000 + int64(i)
	}
	c.logf("member commits after the kill done %.2fs after it", time.Since(killedAt).Seconds())
	if err := poll(ctx, 30*time.Second, "standalone commits after the kill", func() (bool, string) {
		n, _ := w.counts()
		return n >= ackedAtKill+20, fmt.Sprintf("%d acknowledged, %d at the kill", n, ackedAtKill)
	}); err != nil {
		return err
	}
	stopWriter()
	<-writerDone
	acked, failed := w.counts()
	c.logf("standalone writer: %d commits acknowledged, %d failed attempts", acked, failed)

	// Generation and assignment unchanged, on the members and on the
	// cluster.
	for i, m := range group {
		if m.Generation() != gen || !slices.Equal(m.Assignment(), before[i]) {
			return fmt.Errorf("member %d after the failover: generation %d assignment %v, had %d %v", i, m.Generation(), m.Assignment(), gen, before[i])
		}
	}
	if err := describeStable(ctx, conn, gen); err != nil {
		return err
	}
	// Every acknowledged commit is readable.
	if err := fetchEquals(ctx, conn, groupID, want[groupID], nil); err != nil {
		return err
	}
	lastAcked, lastTried := w.last()
	if err := fetchEquals(ctx, conn, standaloneGroup, lastAcked, lastTried); err != nil {
		return err
	}
	got, err := fetch(ctx, conn, standaloneGroup)
	if err != nil {
		return err
	}
	want[standaloneGroup] = got
	c.logf("every acknowledged commit is readable on the new leader")

	// The killed container comes back as a follower.
	if err := c.run(ctx, c.docker, "start", leader.container); err != nil {
		return err
	}
	if err := c.waitFollower(ctx, leader); err != nil {
		return err
	}
	c.logf("%s restarted and rejoined as a follower", leader.id)
	for i, m := range group {
		if m.Generation() != gen || !slices.Equal(m.Assignment(), before[i]) {
			return fmt.Errorf("member %d after the rejoin: generation %d assignment %v, had %d %v", i, m.Generation(), m.Assignment(), gen, before[i])
		}
	}
	if err := describeStable(ctx, conn, gen); err != nil {
		return err
	}

	b, err := json.MarshalIndent(state{Generation: gen, Offsets: want, UpTo: map[string]map[string]int64{standaloneGroup: lastTried}}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(statePath, b, 0o644)
}

func (c *check) verify(ctx context.Context, statePath string) error {
	b, err := os.ReadFile(statePath)
	if err != nil {
		return err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("read %s: %w", statePath, err)
	}
	if err := c.waitServing(ctx); err != nil {
		return err
	}
	leaders := map[string]bool{}
	for _, n := range c.nodes {
		info, err := n.cluster.NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
		if err != nil {
			return fmt.Errorf("node info from %s: %w", n.id, err)
		}
		if !info.GetHasState() {
			return fmt.Errorf("%s reports no raft state after down/up: the volume was not kept", n.id)
		}
		leaders[info.GetLeaderId()] = true
	}
	if len(leaders) != 1 {
		return fmt.Errorf("nodes disagree on the leader: %v", slices.Collect(maps.Keys(leaders)))
	}
	conn, err := client.Dial(client.ConnConfig{Endpoints: c.endpoints(), Credentials: c.creds, DialOptions: c.dialOptions()})
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, g := range slices.Sorted(maps.Keys(st.Offsets)) {
		if err := fetchEquals(ctx, conn, g, st.Offsets[g], st.UpTo[g]); err != nil {
			return err
		}
	}
	c.logf("after down and up: same leader on every node, %d groups' offsets as committed", len(st.Offsets))
	return nil
}

// waitServing waits until every node answers NodeInfo and knows a leader
// that has registered its gRPC address.
func (c *check) waitServing(ctx context.Context) error {
	return poll(ctx, 60*time.Second, "every node to know a registered leader", func() (bool, string) {
		for _, n := range c.nodes {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			info, err := n.cluster.NodeInfo(cctx, &cohortv1.NodeInfoRequest{})
			cancel()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", n.id, err)
			}
			if info.GetLeaderId() == "" || info.GetLeaderGrpcAddress() == "" {
				return false, fmt.Sprintf("%s: no registered leader yet", n.id)
			}
		}
		return true, ""
	})
}

// refusesUnauthenticated checks that every node refuses a plaintext
// connection and a TLS connection without a client certificate: the
// cluster must not serve anyone who does not present a certificate of its
// CA.
func (c *check) refusesUnauthenticated(ctx context.Context) error {
	anonymous, err := client.LoadTLS("", "", c.caFile)
	if err != nil {
		return err
	}
	attempts := []struct {
		what  string
		creds client.Credentials
	}{
		{"a plaintext connection", client.Credentials{}},
		{"a TLS connection without a client certificate", client.Credentials{TLS: anonymous}},
	}
	var refusals []string
	for _, n := range c.nodes {
		for _, a := range attempts {
			conn, err := grpc.NewClient(n.grpc, a.creds.DialOptions()...)
			if err != nil {
				return fmt.Errorf("connect to %s: %w", n.grpc, err)
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = cohortv1.NewClusterServiceClient(conn).NodeInfo(cctx, &cohortv1.NodeInfoRequest{})
			cancel()
			conn.Close()
			if err == nil {
				return fmt.Errorf("%s answered %s", n.id, a.what)
			}
			refusals = append(refusals, status.Code(err).String())
		}
	}
	c.logf("every node refuses plaintext and TLS without a client certificate (%s)", strings.Join(slices.Compact(slices.Sorted(slices.Values(refusals))), ", "))
	return nil
}

// leader returns the node every node names as leader and that says so
// itself.
func (c *check) leader(ctx context.Context) (*node, error) {
	var found *node
	err := poll(ctx, 20*time.Second, "one leader all nodes agree on", func() (bool, string) {
		named := map[string]bool{}
		found = nil
		for _, n := range c.nodes {
			info, err := n.cluster.NodeInfo(ctx, &cohortv1.NodeInfoRequest{})
			if err != nil {
				return false, fmt.Sprintf("%s: %v", n.id, err)
			}
			named[info.GetLeaderId()] = true
			if info.GetState() == cohortv1.RaftState_RAFT_STATE_LEADER {
				found = n
			}
		}
		if found == nil || len(named) != 1 || !named[found.id] {
			return false, fmt.Sprintf("leaders named: %v", slices.Collect(maps.Keys(named)))
		}
		return true, ""
	})
	return found, err
}

// waitFollower waits until n follows a leader other than itself, has
// applied what the leader had committed when the wait began, and answers
// /readyz with 200.
func (c *check) waitFollower(ctx context.Context, n *node) error {
	var target uint64
	for _, o := range c.nodes {
		if o == n {
			continue
		}
		if info, err := o.cluster.NodeInfo(ctx, &cohortv1.NodeInfoRequest{}); err == nil && info.GetState() == cohortv1.RaftState_RAFT_STATE_LEADER {
			target = info.GetCommitIndex()
		}
	}
	return poll(ctx, 60*time.Second, n.id+" to rejoin as a ready follower", func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := n.cluster.NodeInfo(cctx, &cohortv1.NodeInfoRequest{})
		if err != nil {
			return false, err.Error()
		}
		if info.GetState() != cohortv1.RaftState_RAFT_STATE_FOLLOWER || info.GetLeaderId() == "" || info.GetLeaderId() == n.id {
			return false, fmt.Sprintf("state %s, leader %q", info.GetState(), info.GetLeaderId())
		}
		if target == 0 || info.GetAppliedIndex() < target {
			return false, fmt.Sprintf("applied index %d, leader had committed %d", info.GetAppliedIndex(), target)
		}
		code, body := httpGet(cctx, "http://"+n.http+"/readyz")
		return code == http.StatusOK, fmt.Sprintf("/readyz %d %s", code, body)
	})
}

func (c *check) run(ctx context.Context, name string, args ...string) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func ensureTopic(ctx context.Context, conn *client.Conn) error {
	return poll(ctx, 30*time.Second, "topic "+topic, func() (bool, string) {
		_, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: topic, Partitions: partitions}, client.AttemptTimeout(3*time.Second))
		if err == nil {
			return true, ""
		}
		list, lerr := client.ListTopics(ctx, conn.Topics(), &cohortv1.ListTopicsRequest{})
		if lerr == nil {
			for _, t := range list {
				if t.GetTopic() == topic && t.GetPartitions() == partitions {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("create: %v; list: %v", err, lerr)
	})
}

// settled reports whether every member has the same generation and the
// members own every partition exactly once.
func settled(group []*client.Member) (int32, bool, string) {
	gen := group[0].Generation()
	owned := map[string]int{}
	for i, m := range group {
		if g := m.Generation(); g != gen || g == client.NoGeneration {
			return 0, false, fmt.Sprintf("member %d generation %d, member 0 %d", i, g, gen)
		}
		if len(m.Assignment()) == 0 {
			return 0, false, fmt.Sprintf("member %d owns nothing", i)
		}
		for _, tp := range m.Assignment() {
			owned[tp.String()]++
		}
	}
	if len(owned) != partitions {
		return 0, false, fmt.Sprintf("%d of %d partitions owned", len(owned), partitions)
	}
	for tp, n := range owned {
		if n != 1 {
			return 0, false, fmt.Sprintf("%s owned by %d members", tp, n)
		}
	}
	return gen, true, ""
}

func describeStable(ctx context.Context, conn *client.Conn, gen int32) error {
	d, err := conn.Groups().DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{groupID}})
	if err != nil {
		return fmt.Errorf("describe %s: %w", groupID, err)
	}
	g := d.GetGroups()[0]
	if g.GetGeneration() != gen || g.GetState() != "Stable" || len(g.GetMembers()) != members {
		return fmt.Errorf("group %s on the cluster: generation %d state %s with %d members, want generation %d Stable with %d",
			groupID, g.GetGeneration(), g.GetState(), len(g.GetMembers()), gen, members)
	}
	return nil
}

func fetch(ctx context.Context, conn *client.Conn, group string) (map[string]int64, error) {
	fetched, err := client.FetchOffsets(ctx, conn.Groups(), &cohortv1.OffsetFetchRequest{GroupId: group})
	if err != nil {
		return nil, fmt.Errorf("offset fetch %s: %w", group, err)
	}
	out := map[string]int64{}
	for _, p := range fetched {
		if p.GetOffset() >= 0 {
			out[client.TopicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}.String()] = p.GetOffset()
		}
	}
	return out, nil
}

// fetchEquals checks group's committed offsets against want; with
// upTo, an offset may also be any value in (want, upTo] — a commit that
// failed at the client may still have been applied.
func fetchEquals(ctx context.Context, conn *client.Conn, group string, want, upTo map[string]int64) error {
	got, err := fetch(ctx, conn, group)
	if err != nil {
		return err
	}
	for tp, w := range want {
		g, ok := got[tp]
		switch {
		case !ok:
			return fmt.Errorf("group %s: acknowledged offset %d for %s is missing", group, w, tp)
		case g == w:
		case upTo != nil && g > w && g <= upTo[tp]:
		default:
			return fmt.Errorf("group %s: offset %s = %d, acknowledged %d", group, tp, g, w)
		}
	}
	return nil
}

// standaloneWriter commits increasing offsets to every partition for a
// group without members, one request at a time, recording what was
// acknowledged and what was tried.
type standaloneWriter struct {
	conn *client.Conn

	mu             sync.Mutex
	acked, failed  int
	lastAck, tried map[string]int64
}

func (w *standaloneWriter) run(ctx context.Context) {
	w.mu.Lock()
	w.lastAck, w.tried = map[string]int64{}, map[string]int64{}
	w.mu.Unlock()
	for offset := int64(1); ctx.Err() == nil; offset++ {
		p := int32(offset % partitions)
		tp := client.TopicPartition{Topic: topic, Partition: p}.String()
		w.mu.Lock()
		w.tried[tp] = offset
		w.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := w.conn.Groups().OffsetCommit(cctx, &cohortv1.OffsetCommitRequest{
			GroupId: standaloneGroup, Generation: -1,
			Offsets: []*cohortv1.OffsetCommitPartition{{Topic: topic, Partition: p, Offset: offset}},
		})
		cancel()
		if err == nil && len(resp.GetPartitions()) == 1 && resp.GetPartitions()[0].GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
			err = fmt.Errorf("partition error %s", resp.GetPartitions()[0].GetError())
		}
		w.mu.Lock()
		if err == nil {
			w.acked++
			w.lastAck[tp] = offset
		} else if ctx.Err() == nil {
			w.failed++
		}
		w.mu.Unlock()
	}
}

func (w *standaloneWriter) counts() (acked, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.failed
}

func (w *standaloneWriter) last() (acked, tried map[string]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.lastAck), maps.Clone(w.tried)
}

// poll checks cond until it holds, failing after timeout or when ctx ends.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting %v for %s: %s", timeout, what, detail)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func httpGet(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// loopbackResolver replaces gRPC's dns resolver for this program's
// connections: an advertised host name (cohort-N) becomes its published
// host, the port is kept; anything else is passed through.
type loopbackResolver struct{ hosts map[string]string }

func (r loopbackResolver) Scheme() string { return "dns" }

func (r loopbackResolver) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	addr := target.Endpoint()
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if h, ok := r.hosts[host]; ok {
			addr = net.JoinHostPort(h, port)
		}
	}
	if err := cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: addr}}}); err != nil {
		return nil, err
	}
	return nopResolver{}, nil
}

type nopResolver struct{}

func (nopResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (nopResolver) Close()                                {}
