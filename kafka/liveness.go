package kafka

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/cluster"
)

// Liveness of the other brokers. A Kafka client drops a broker only when
// Metadata stops naming it; until then it keeps sending a dead
// coordinator's requests to it (franz-go's admin client does, for ever).
// Kafka's controller fences a broker that stops heartbeating; here every
// node dials the other brokers' Kafka addresses itself, every
// probeInterval, and Metadata names only the brokers that answered the
// latest dial, and this node, and the leader it follows (the coordinator
// must always be named).
const (
	probeInterval = time.Second
	probeTimeout  = 500 * time.Millisecond
)

// liveness is the latest dial result per broker address.
type liveness struct {
	mu   sync.Mutex
	dead map[string]bool
}

func (l *liveness) isDead(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead[addr]
}

// run probes until ctx ends.
func (l *liveness) run(ctx context.Context, c Cluster, self func() string) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		l.probe(ctx, c.KafkaBrokers(), self())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe dials every other broker at once and records which answered.
func (l *liveness) probe(ctx context.Context, brokers []cluster.KafkaBroker, self string) {
	dead := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	d := net.Dialer{Timeout: probeTimeout}
	for _, b := range brokers {
		if b.Address == self {
			continue
		}
		wg.Go(func() {
			nc, err := d.DialContext(ctx, "tcp", b.Address)
			if err == nil {
				nc.Close()
				return
			}
			mu.Lock()
			dead[b.Address] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	l.mu.Lock()
	l.dead = dead
	l.mu.Unlock()
}
