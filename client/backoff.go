package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with "equal jitter": the delay for
// attempt n is uniform in [d/2, d) with d = min(Min·2ⁿ, Max), so retries of
// many members spread out but none retries hot.
type backoff struct {
	min, max time.Duration
	rand     func() float64 // [0, 1); rand.Float64 unless a test sets it
}

func newBackoff(min, max time.Duration) backoff {
	return backoff{min: min, max: max, rand: rand.Float64}
}

// delay returns the wait before retry number attempt (0-based).
func (b backoff) delay(attempt int) time.Duration {
	d := b.min
	for i := 0; i < attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	half := d / 2
	return half + time.Duration(b.rand()*float64(d-half))
}

// wait sleeps for delay(attempt) or until ctx is done.
func (b backoff) wait(ctx context.Context, attempt int) error {
	t := time.NewTimer(b.delay(attempt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
