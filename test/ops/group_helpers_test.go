package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
	"google.golang.org/grpc"
)

// groupLoad runs consumer-group members against a cluster. Every member
// commits an increasing offset for each partition it owns every 50ms;
// acked records the highest offset the cluster acknowledged per partition,
// which must never be lost.
type groupLoad struct {
	t         *testing.T
	endpoints []string
	group     string
	topic     string
	// creds are the members' credentials (set before add), admin the
	// harness's own for descriptions and fetches.
	creds, admin client.Credentials

	mu      sync.Mutex
	members map[string]*loadMember
	acked   map[int32]int64
	next    int64
	genErrs []string
	// commitErrs are commits that failed while the member was running.
	commitErrs []string
}

type loadMember struct {
	m      *client.Member
	cancel context.CancelFunc
	done   chan struct{}
	// maxGen is the highest generation the member has been in; a member
	// never goes back to an older one.
	maxGen int32
}

func newGroupLoad(t *testing.T, endpoints []string, group, topic string) *groupLoad {
	g := &groupLoad{t: t, endpoints: endpoints, group: group, topic: topic, members: map[string]*loadMember{}, acked: map[int32]int64{}}
	t.Cleanup(func() {
		g.mu.Lock()
		names := make([]string, 0, len(g.members))
		for name := range g.members {
			names = append(names, name)
		}
		g.mu.Unlock()
		for _, name := range names {
			g.stop(name)
		}
	})
	return g
}

// add starts a member named name.
func (g *groupLoad) add(name string, static bool) {
	g.t.Helper()
	cfg := client.Config{
		Endpoints: g.endpoints, GroupID: g.group, Topics: []string{g.topic}, ClientID: name, Credentials: g.creds,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
	}
	if static {
		cfg.InstanceID = name
		cfg.SessionTimeout = 45 * time.Second
	}
	m, err := client.NewMember(cfg)
	if err != nil {
		g.t.Fatalf("new member %s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lm := &loadMember{m: m, cancel: cancel, done: make(chan struct{}), maxGen: -1}
	g.mu.Lock()
	g.members[name] = lm
	g.mu.Unlock()
	go func() {
		_ = m.Run(ctx)
	}()
	go func() {
		defer close(lm.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			g.commitOnce(ctx, name, lm)
		}
	}()
}

func (g *groupLoad) commitOnce(ctx context.Context, name string, lm *loadMember) {
	gen := lm.m.Generation()
	g.mu.Lock()
	// NoGeneration (-1) while (re)joining is fine; an older real one is not.
	if gen >= 0 && gen < lm.maxGen {
		g.genErrs = append(g.genErrs, fmt.Sprintf("%s went from generation %d back to %d", name, lm.maxGen, gen))
	}
	lm.maxGen = max(lm.maxGen, gen)
	g.next++
	off := g.next
	g.mu.Unlock()
	var offs []client.PartitionOffset
	for _, tp := range lm.m.Assignment() {
		offs = append(offs, client.PartitionOffset{TopicPartition: tp, Offset: off})
	}
	if len(offs) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := lm.m.Commit(cctx, offs)
	var cerr *client.CommitError
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		g.commitErrs = append(g.commitErrs, fmt.Sprintf("%s at generation %d: %v", name, gen, err))
	}
	for _, o := range offs {
		if err == nil || (errors.As(err, &cerr) && cerr.Partitions[o.TopicPartition] == nil) {
			g.acked[o.Partition] = max(g.acked[o.Partition], o.Offset)
		}
	}
}

// stop closes a member (it leaves the group).
func (g *groupLoad) stop(name string) {
	g.mu.Lock()
	lm := g.members[name]
	delete(g.members, name)
	g.mu.Unlock()
	if lm == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = lm.m.Close(ctx)
	lm.cancel()
	<-lm.done
}

// pause stops committing without closing members, so acked stays put.
func (g *groupLoad) pause() {
	g.mu.Lock()
	lms := make([]*loadMember, 0, len(g.members))
	for _, lm := range g.members {
		lms = append(lms, lm)
	}
	g.mu.Unlock()
	for _, lm := range lms {
		lm.cancel()
		<-lm.done
	}
}

func (g *groupLoad) memberIDs() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]string{}
	for name, lm := range g.members {
		out[name] = lm.m.MemberID()
	}
	return out
}

// describeGroup asks the cluster for the group.
func describeGroup(endpoints []string, group string, creds client.Credentials) (*cohortv1.GroupDescription, error) {
	var lastErr error
	for _, addr := range endpoints {
		conn, err := grpc.NewClient(addr, creds.DialOptions()...)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := cohortv1.NewGroupCoordinatorClient(conn).DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{group}})
		cancel()
		conn.Close()
		if err == nil && len(resp.GetGroups()) == 1 {
			return resp.GetGroups()[0], nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("describe %s: %w", group, lastErr)
}

func fetchOffsets(endpoints []string, group string, creds client.Credentials) (map[int32]int64, error) {
	var lastErr error
	for _, addr := range endpoints {
		conn, err := grpc.NewClient(addr, creds.DialOptions()...)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fetched, err := client.FetchOffsets(ctx, cohortv1.NewGroupCoordinatorClient(conn), &cohortv1.OffsetFetchRequest{GroupId: group})
		cancel()
		conn.Close()
		if err == nil {
			out := map[int32]int64{}
			for _, p := range fetched {
				out[p.GetPartition()] = p.GetOffset()
			}
			return out, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// waitStable waits until the group is Stable with exactly the running
// members, every member in the group's generation with the assignment the
// cluster stored for it, and every partition assigned. It returns the
// generation.
func (g *groupLoad) waitStable(endpoints []string, partitions int) int32 {
	g.t.Helper()
	var gen int32
	proc.WaitFor(g.t, 60*time.Second, "group "+g.group+" stable with every running member", func() (bool, string) {
		d, err := describeGroup(endpoints, g.group, g.admin)
		if err != nil {
			return false, err.Error()
		}
		ids := g.memberIDs()
		if d.GetState() != "Stable" || len(d.GetMembers()) != len(ids) {
			return false, fmt.Sprintf("state %s gen %d with %d members, want %d", d.GetState(), d.GetGeneration(), len(d.GetMembers()), len(ids))
		}
		assigned := 0
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, dm := range d.GetMembers() {
			var lm *loadMember
			for name, id := range ids {
				if id == dm.GetMemberId() {
					lm = g.members[name]
				}
			}
			if lm == nil {
				return false, "unknown member " + dm.GetMemberId()
			}
			if lm.m.Generation() != d.GetGeneration() {
				return false, fmt.Sprintf("member %s in generation %d, group in %d", dm.GetMemberId(), lm.m.Generation(), d.GetGeneration())
			}
			var stored []int32
			for _, tp := range dm.GetAssignment().GetTopics() {
				stored = append(stored, tp.GetPartitions()...)
			}
			var held []int32
			for _, tp := range lm.m.Assignment() {
				held = append(held, tp.Partition)
			}
			slices.Sort(stored)
			slices.Sort(held)
			if !slices.Equal(stored, held) {
				return false, fmt.Sprintf("member %s holds %v, cluster stored %v", dm.GetMemberId(), held, stored)
			}
			assigned += len(stored)
		}
		gen = d.GetGeneration()
		return assigned == partitions, fmt.Sprintf("%d of %d partitions assigned", assigned, partitions)
	})
	return gen
}

// checkNoLoss verifies every acknowledged commit is still there and no
// member went back a generation.
func (g *groupLoad) checkNoLoss(endpoints []string) {
	g.t.Helper()
	got, err := fetchOffsets(endpoints, g.group, g.admin)
	if err != nil {
		g.t.Fatalf("fetch offsets: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.acked) == 0 {
		g.t.Fatalf("no commit was acknowledged")
	}
	for p, off := range g.acked {
		if got[p] < off {
			g.t.Errorf("partition %d: committed offset %d, but %d was acknowledged: a commit was lost", p, got[p], off)
		}
	}
	for _, e := range g.genErrs {
		g.t.Error(e)
	}
}
