package proc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PollEvery is how often Poll checks its condition unless told otherwise:
// often enough to catch a state that lasts a few tens of milliseconds (a
// group preparing a rebalance), rarely enough to leave the CPU to the
// processes under test.
const PollEvery = 10 * time.Millisecond

// WaitError is a wait that ended before its condition held.
type WaitError struct {
	What   string        // what was awaited
	Waited time.Duration // how long
	Last   string        // the condition's last detail
	Err    error         // context.DeadlineExceeded or context.Canceled
}

func (e *WaitError) Error() string {
	verb := "timed out"
	if !errors.Is(e.Err, context.DeadlineExceeded) {
		verb = "gave up (" + e.Err.Error() + ")"
	}
	msg := fmt.Sprintf("%s after %s waiting for %s", verb, e.Waited.Round(time.Millisecond), e.What)
	if e.Last != "" {
		msg += "; last: " + e.Last
	}
	return msg
}

func (e *WaitError) Unwrap() error { return e.Err }

// Poll calls cond every interval (PollEvery when 0) until it returns true,
// timeout passes (no limit but ctx's when 0) or ctx ends. cond's string
// says why it does not hold yet; the *WaitError names what was awaited and
// carries the last such detail. cond runs in the caller's goroutine, so a
// test may fail from inside it.
func Poll(ctx context.Context, every, timeout time.Duration, what string, cond func() (bool, string)) error {
	if every <= 0 {
		every = PollEvery
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		ok, detail := cond()
		if ok {
			return nil
		}
		timer.Reset(every)
		select {
		case <-ctx.Done():
			return &WaitError{What: what, Waited: time.Since(start), Last: detail, Err: ctx.Err()}
		case <-timer.C:
		}
	}
}

// WaitFor is Poll for a test: it fails t when cond does not hold within
// timeout.
func WaitFor(t TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := Poll(context.Background(), 0, timeout, what, cond); err != nil {
		t.Fatalf("%v", err)
	}
}
