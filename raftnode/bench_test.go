package raftnode

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchProfile is a set of raft timings to compare.
type benchProfile struct {
	name string
	mod  func(c *Config)
}

var applyProfiles = []benchProfile{
	{"default", func(*Config) {}},
	{"commit=5ms", func(c *Config) { c.CommitTimeout = 5 * time.Millisecond }},
	{"maxappend=256", func(c *Config) { c.MaxAppendEntries = 256 }},
	{"heartbeat=200ms", func(c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	}},
	{"raft-1s-timeouts", func(c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	}},
}

// BenchmarkReplicatedApply measures raw replicated apply on a three-node
// in-process cluster (loopback TCP, real bolt files): throughput and
// p50/p99 latency of Node.Apply on the leader at concurrency 1, 16 and 256,
// for each timing profile. Each op is a one-partition offset commit.
//
//	go test -run '^$' -bench BenchmarkReplicatedApply -benchtime 2s ./raftnode/
func BenchmarkReplicatedApply(b *testing.B) {
	for _, p := range applyProfiles {
		b.Run("profile="+p.name, func(b *testing.B) {
			c := newTestCluster(b, 3, func(_ int, cfg *Config) { p.mod(cfg) })
			leader := c.leader()
			leader.apply(b, createTopic("bench", 256))
			for _, conc := range []int{1, 16, 256} {
				b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
					benchApply(b, leader, conc)
				})
			}
		})
	}
}

func benchApply(b *testing.B, leader *testNode, conc int) {
	termBefore := leader.node.Term()
	lat := make([][]time.Duration, conc)
	var next sync.Mutex
	issued := 0
	take := func() (int, bool) {
		next.Lock()
		defer next.Unlock()
		if issued >= b.N {
			return 0, false
		}
		issued++
		return issued, true
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, ok := take()
				if !ok {
					return
				}
				cmd := commitOffsets("bench", -1, "", "bench", int64(i), int32(i%256))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				_, err := leader.node.Apply(ctx, cmd)
				lat[w] = append(lat[w], time.Since(t0))
				cancel()
				if err != nil {
					b.Errorf("apply: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(leader.node.Term()-termBefore), "term-changes")
}

// BenchmarkLeaderFailover measures the time from a leader crash (no
// leadership transfer) until the survivors agree on a new leader, for
// several heartbeat/election timeouts. One cluster per iteration.
//
//	go test -run '^$' -bench BenchmarkLeaderFailover -benchtime 5x ./raftnode/
func BenchmarkLeaderFailover(b *testing.B) {
	for _, hb := range []time.Duration{time.Second, 500 * time.Millisecond, 200 * time.Millisecond} {
		b.Run(fmt.Sprintf("heartbeat=%s", hb), func(b *testing.B) {
			var total time.Duration
			var worst time.Duration
			for range b.N {
				b.StopTimer()
				c := newTestCluster(b, 3, func(_ int, cfg *Config) {
					cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = hb, hb, hb/2
				})
				leader := c.leader()
				var survivors []*testNode
				for _, tn := range c.nodes {
					if tn != leader {
						survivors = append(survivors, tn)
					}
				}
				b.StartTimer()
				t0 := time.Now()
				leader.crash()
				c.leader(survivors...)
				d := time.Since(t0)
				b.StopTimer()
				total += d
				worst = max(worst, d)
				for _, tn := range c.nodes {
					tn.stop()
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
			b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
		})
	}
}
