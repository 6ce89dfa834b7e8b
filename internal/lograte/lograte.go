// Package lograte spaces warnings that a flood could repeat: refused
// connections on a listener under attack must not become a flood of log
// lines.
package lograte

import (
	"sync"
	"time"
)

// Interval is how often a Limiter lets a warning through.
const Interval = 10 * time.Second

// Limiter lets one warning through per Interval. The zero value is ready;
// the first warning always passes.
type Limiter struct {
	mu   sync.Mutex
	last time.Time
}

// Allow reports whether a warning may be logged now.
func (l *Limiter) Allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= Interval { // the zero time is long past
		l.last = now
		return true
	}
	return false
}
