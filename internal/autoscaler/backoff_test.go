package autoscaler

import (
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/simclock"
)

// Upstream's backoff: 5 minutes, doubled for a failure after the last
// backoff ended, at most 30 minutes, forgotten after 3 hours.
func TestBackoffDoublesToThirtyMinutes(t *testing.T) {
	b := newBackoff(nil)
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

// On a simulation's clock the back-off is the cluster's 5 minutes, run at
// the speed.
func TestTheBackoffRunsOnAScaledClock(t *testing.T) {
	b := newBackoff(simclock.Scaled{Speed: 60})
	if until := b.fail("g", "cloudProviderError", t0); !until.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("backed off for %s of real time at 60x, want 5s (5 minutes)", until.Sub(t0))
	}
	if off, _ := b.backedOff("g", t0.Add(4*time.Second)); !off {
		t.Error("not backed off 4 real seconds (4 simulated minutes) after the failure")
	}
	if off, _ := b.backedOff("g", t0.Add(5*time.Second)); off {
		t.Error("still backed off 5 real seconds (5 simulated minutes) after the failure")
	}
}
