package autoscaler

import (
	"testing"
	"time"
)

// Upstream's backoff: 5 minutes, doubled for a failure after the last
// backoff ended, at most 30 minutes, forgotten after 3 hours.
func TestBackoffDoublesToThirtyMinutes(t *testing.T) {
	b := newBackoff()
	now := t0
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i, w := range want {
		until := b.fail("g", "timeout", now)
		if got := until.Sub(now); got != w {
			t.Fatalf("failure %d: backed off %s, want %s", i+1, got, w)
		}
		if off, why := b.backedOff("g", now.Add(w-time.Second)); !off || why != "in backoff after failed scale-up (timeout)" {
			t.Fatalf("failure %d: not backed off just before the end: %v %q", i+1, off, why)
		}
		now = until.Add(time.Second)
		if off, _ := b.backedOff("g", now); off {
			t.Fatalf("failure %d: still backed off after the end", i+1)
		}
	}
	// A failure during a backoff does not double it.
	until := b.fail("h", "timeout", now)
	if again := b.fail("h", "timeout", now.Add(time.Minute)); again.Sub(now.Add(time.Minute)) != 5*time.Minute || !again.After(until) {
		t.Errorf("a failure during the backoff gave until %s", again)
	}
	// Three quiet hours later it starts again at 5 minutes.
	later := now.Add(4 * time.Hour)
	if got := b.fail("g", "timeout", later).Sub(later); got != 5*time.Minute {
		t.Errorf("after 3 quiet hours: %s, want 5m", got)
	}
}
