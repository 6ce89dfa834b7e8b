package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// memberOptions configure the group members a run starts.
type memberOptions struct {
	endpoints         []string
	group             string
	topics            []string
	sessionTimeout    time.Duration
	heartbeatInterval time.Duration
	// retryBackoffMax caps the client's retry backoff (0: the client's
	// default, 2 s).
	retryBackoffMax time.Duration
	// disableWatch: members learn of rebalances from heartbeats only.
	disableWatch bool
	// creds are the members' credentials (target.member).
	creds client.Credentials
	// perConn members share one client.Conn (0 or 1: each its own, as
	// consumers in processes of their own). Sharing keeps a run of
	// thousands of members within the open-files limit; every member still
	// makes its own calls.
	perConn int
	logger  *slog.Logger
}

// member is one client.Member with what its callbacks saw.
type member struct {
	m *client.Member

	mu         sync.Mutex
	gen        int32 // generation of the last OnAssigned
	assignedAt time.Time
	assigned   int // OnAssigned calls
	revoked    int // OnRevoked calls
	revokedAt  time.Time
	parts      []client.TopicPartition
	runErr     error
	done       chan struct{}
}

// holding returns the generation whose assignment the member holds, or
// false between a revocation and the next assignment.
func (m *member) holding() (gen int32, at time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen, m.assignedAt, m.assigned > m.revoked
}

func (m *member) counts() (assigned, revoked int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.assigned, m.revoked
}

func (m *member) lastRevoked() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revokedAt
}

func (m *member) partitions() []client.TopicPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts
}

// startMember starts one member's Run in the background, calling through
// conn when it is not nil.
func startMember(ctx context.Context, o memberOptions, i int, conn *client.Conn) (*member, error) {
	bm := &member{gen: client.NoGeneration, done: make(chan struct{})}
	m, err := client.NewMember(client.Config{
		Conn:              conn,
		Endpoints:         o.endpoints,
		GroupID:           o.group,
		ClientID:          fmt.Sprintf("bench-%d", i),
		Topics:            o.topics,
		SessionTimeout:    o.sessionTimeout,
		HeartbeatInterval: o.heartbeatInterval,
		RetryBackoffMax:   o.retryBackoffMax,
		DisableWatch:      o.disableWatch,
		Credentials:       o.creds,
		Logger:            o.logger,
		OnAssigned: func(_ context.Context, gen int32, a []client.TopicPartition) {
			now := time.Now()
			bm.mu.Lock()
			bm.gen, bm.assignedAt, bm.parts = gen, now, a
			bm.assigned++
			bm.mu.Unlock()
		},
		OnRevoked: func(context.Context, []client.TopicPartition) {
			bm.mu.Lock()
			bm.revoked++
			bm.revokedAt = time.Now()
			bm.parts = nil
			bm.mu.Unlock()
		},
	})
	if err != nil {
		return nil, err
	}
	bm.m = m
	go func() {
		err := m.Run(ctx)
		bm.mu.Lock()
		bm.runErr = err
		bm.mu.Unlock()
		close(bm.done)
	}()
	return bm, nil
}

// fleet is a set of members of one group.
type fleet struct {
	opts    memberOptions
	ctx     context.Context
	cancel  context.CancelFunc
	members []*member
	conns   []*client.Conn // shared by opts.perConn members each
}

func newFleet(ctx context.Context, o memberOptions) *fleet {
	fctx, cancel := context.WithCancel(ctx)
	return &fleet{opts: o, ctx: fctx, cancel: cancel}
}

// add starts n more members.
func (f *fleet) add(n int) ([]*member, error) {
	var added []*member
	for range n {
		var conn *client.Conn
		if i := len(f.members); f.opts.perConn > 1 {
			if i%f.opts.perConn == 0 {
				c, err := client.Dial(client.ConnConfig{Endpoints: f.opts.endpoints, Credentials: f.opts.creds, RetryBackoffMax: f.opts.retryBackoffMax, Logger: f.opts.logger})
				if err != nil {
					return added, err
				}
				f.conns = append(f.conns, c)
			}
			conn = f.conns[len(f.conns)-1]
		}
		m, err := startMember(f.ctx, f.opts, len(f.members), conn)
		if err != nil {
			return added, err
		}
		f.members = append(f.members, m)
		added = append(added, m)
	}
	return added, nil
}

// grow adds members in waves of at most wave until the fleet has n, each
// wave once the group is stable with the ones before, and returns the
// generation the group is stable at (gen: the one it was stable at
// before). Thousands of members started at once keep restarting the join
// round (each late arrival reopens it for all), as a real fleet rolled out
// all at once would.
func (f *fleet) grow(ctx context.Context, n, wave int, gen int32) (int32, error) {
	for len(f.members) < n {
		if _, err := f.add(min(wave, n-len(f.members))); err != nil {
			return gen, err
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		next, _, err := f.stable(sctx, gen)
		cancel()
		if err != nil {
			return gen, err
		}
		gen = next
	}
	return gen, nil
}

// stable waits until every member holds the assignment of one generation
// newer than after, and returns it with the latest time a member got it.
func (f *fleet) stable(ctx context.Context, after int32) (int32, time.Time, error) {
	var detail string
	for {
		gen, at, ok, d := f.check(after)
		if ok {
			return gen, at, nil
		}
		detail = d
		select {
		case <-ctx.Done():
			return 0, time.Time{}, fmt.Errorf("group %s with %d members not stable: %w (%s)", f.opts.group, len(f.members), ctx.Err(), detail)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (f *fleet) check(after int32) (int32, time.Time, bool, string) {
	var want int32
	var last time.Time
	for i, m := range f.members {
		select {
		case <-m.done:
			return 0, last, false, fmt.Sprintf("member %d stopped: %v", i, m.runErr)
		default:
		}
		gen, at, ok := m.holding()
		switch {
		case !ok:
			return 0, last, false, fmt.Sprintf("member %d holds no assignment", i)
		case gen <= after:
			return 0, last, false, fmt.Sprintf("member %d holds generation %d", i, gen)
		case i == 0:
			want = gen
		case gen != want:
			return 0, last, false, fmt.Sprintf("member %d holds generation %d, member 0 %d", i, gen, want)
		}
		if at.After(last) {
			last = at
		}
	}
	return want, last, true, ""
}

// close stops every member (dynamic members leave the group) and waits,
// at most until ctx ends.
func (f *fleet) close(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range f.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = m.m.Close(ctx)
		}()
	}
	wg.Wait()
	f.cancel()
	for _, c := range f.conns {
		_ = c.Close()
	}
}

// openWithTopic opens the run's cluster (starting it unless --endpoints)
// and creates topic with partitions through an admin Conn, which it
// returns for the caller to close with the target.
func openWithTopic(ctx context.Context, g *globalOptions, topic string, partitions int32) (*target, *client.Conn, error) {
	t, err := g.openTarget(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	conn, err := client.Dial(client.ConnConfig{Endpoints: t.addrs, Credentials: t.admin, Logger: g.logger()})
	if err == nil {
		if err = createTopic(ctx, conn.Topics(), topic, partitions); err != nil {
			_ = conn.Close()
		}
	}
	if err != nil {
		_ = t.Close()
		return nil, nil, err
	}
	return t, conn, nil
}

// createTopic creates a topic, tolerating one that exists.
func createTopic(ctx context.Context, topics cohortv1.TopicsClient, name string, partitions int32) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := topics.CreateTopic(cctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: partitions})
	if err != nil && client.ErrorCode(err) != errcode.TopicAlreadyExists {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return nil
}
