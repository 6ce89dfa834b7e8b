package ops

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/internal/proc"
)

// cuttableDialer dials TCP connections that the test can cut all at once,
// and refuse while blocked: a network fault on one client's side only.
type cuttableDialer struct {
	mu      sync.Mutex
	conns   []net.Conn
	blocked bool
	dials   int // connections made
}

func (d *cuttableDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	blocked := d.blocked
	d.mu.Unlock()
	if blocked {
		return nil, fmt.Errorf("dial %s: blocked by the test", addr)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.dials++
	d.mu.Unlock()
	return c, nil
}

func (d *cuttableDialer) dialed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

// cut closes every connection; block also refuses new ones until unblock.
func (d *cuttableDialer) cut(block bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
	d.blocked = block
}

func (d *cuttableDialer) unblock() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.blocked = false
}

// runMember starts a member of cfg and closes it when the test ends.
func runMember(t *testing.T, cfg client.Config) *client.Member {
	t.Helper()
	m, err := client.NewMember(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = m.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

// parkedJoins reads cohort_group_parked_calls{kind="join"} from a node's
// /metrics.
func parkedJoins(httpAddr string) (int, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `cohort_group_parked_calls{kind="join"} `); ok {
			n, err := strconv.ParseFloat(v, 64)
			return int(n), err
		}
	}
	return 0, sc.Err()
}

// TestProcess_ParkedJoinCut_MemberKeepsItsID: a member waits at the join
// barrier (another member, cut off from the cluster, holds it open) for
// longer than its own session timeout, then its connection is cut. Its
// client retries the join with its member ID and is still a member: the
// session counted from when the call parked and was cut, not from its last
// heartbeat. Before, the retry got UNKNOWN_MEMBER_ID and the member came
// back with a new ID (issue 13, finding 3).
func TestProcess_ParkedJoinCut_MemberKeepsItsID(t *testing.T) {
	c := newCluster(t, "--min-session-timeout", "500ms")
	st := c.waitVotersAfterForm(3)
	c.mustCtl("topics", "create", "orders", "--partitions", "4")
	endpoints := c.grpcAddrs("n1", "n2", "n3")
	member := func(name string, session time.Duration, d *cuttableDialer) *client.Member {
		return runMember(t, client.Config{
			Endpoints: endpoints, GroupID: "billing", Topics: []string{"orders"}, ClientID: name,
			SessionTimeout: session, RebalanceTimeout: 30 * time.Second, HeartbeatInterval: session / 5,
			RetryBackoffMin: 50 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond,
			DialOptions: []grpc.DialOption{grpc.WithContextDialer(d.dial)},
		})
	}
	aNet, bNet, cNet := &cuttableDialer{}, &cuttableDialer{}, &cuttableDialer{}
	a := member("a", 2*time.Second, aNet)
	b := member("b", 10*time.Second, bNet)
	proc.WaitFor(t, 30*time.Second, "a and b hold two partitions each", func() (bool, string) {
		return len(a.Assignment()) == 2 && len(b.Assignment()) == 2, fmt.Sprint(a.Assignment(), b.Assignment())
	})
	id, gen := a.MemberID(), a.Generation()

	// b is cut off (it holds the next barrier open for its 10 s session);
	// a third member starts a rebalance; a rejoins and waits.
	bNet.cut(true)
	member("c", 10*time.Second, cNet)
	leaderHTTP := c.nodes[st.GetLeaderId()].http
	proc.WaitFor(t, 10*time.Second, "a and c parked at the join barrier", func() (bool, string) {
		n, err := parkedJoins(leaderHTTP)
		return err == nil && n >= 2, fmt.Sprint(n, err)
	})
	time.Sleep(4 * time.Second) // time passes: twice a's session timeout, parked
	dials := aNet.dialed()
	aNet.cut(false)
	// a's client reconnects and retries its join, which must park beside
	// c's before b comes back.
	proc.WaitFor(t, 10*time.Second, "a's join retried and parked again", func() (bool, string) {
		n, err := parkedJoins(leaderHTTP)
		return aNet.dialed() > dials && err == nil && n >= 2, fmt.Sprint(aNet.dialed()-dials, " new connections, ", n, " parked joins, ", err)
	})
	bNet.unblock()
	proc.WaitFor(t, 30*time.Second, "a in a later generation with partitions", func() (bool, string) {
		return a.Generation() > gen && len(a.Assignment()) > 0, fmt.Sprint(a.Generation(), a.Assignment())
	})
	if got := a.MemberID(); got != id {
		t.Fatalf("a's member ID changed from %s to %s: its session expired while its call was parked and cut", id, got)
	}
}
