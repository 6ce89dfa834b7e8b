package lograte

import "testing"

// The first warning passes and the ones right after it do not.
func TestLimiter_OnePerInterval(t *testing.T) {
	var l Limiter
	if !l.Allow() {
		t.Fatal("the first warning was held back")
	}
	for i := range 100 {
		if l.Allow() {
			t.Fatalf("warning %d within the interval was let through", i+2)
		}
	}
}
