package simclock

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

func TestAScaledClockRunsDurationsAtItsSpeed(t *testing.T) {
	c := Scaled{Speed: 60}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if got := Elapsed(c, t0, t0.Add(time.Second)); got != time.Minute {
		t.Errorf("a real second at 60x is %s simulated, want 1m", got)
	}
	if got := Add(c, t0, time.Minute); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("a simulated minute after t0 at 60x is %s, want a real second after", got.Sub(t0))
	}
	if got := Add(c, t0, -time.Minute); !got.Equal(t0.Add(-time.Second)) {
		t.Errorf("a simulated minute before t0 at 60x is %s", got.Sub(t0))
	}
	if got := Real(c, 5*time.Minute); got != 5*time.Second {
		t.Errorf("5 simulated minutes last %s at 60x, want 5s", got)
	}
	// Every other clock, and none, is taken as it is.
	for _, other := range []clock.PassiveClock{nil, clock.RealClock{}, testingclock.NewFakeClock(t0), Scaled{Speed: 1}} {
		if got := Elapsed(other, t0, t0.Add(time.Second)); got != time.Second {
			t.Errorf("%T: a second is %s", other, got)
		}
		if got := Add(other, t0, time.Minute); !got.Equal(t0.Add(time.Minute)) {
			t.Errorf("%T: a minute after t0 is %s after", other, got.Sub(t0))
		}
	}
}

func TestAScaledTimerFiresAtItsSpeed(t *testing.T) {
	c := Scaled{Speed: 600}
	start := time.Now()
	timer := c.NewTimer(10 * time.Minute)
	select {
	case <-timer.C():
	case <-time.After(time.Minute):
		t.Fatal("a 10-minute timer at 600x had not fired after a real minute")
	}
	if d := c.Since(start); d < 10*time.Minute {
		t.Errorf("the timer fired %s (simulated) after it was set, before its 10 minutes", d)
	}
	timer.Reset(10 * time.Minute)
	select {
	case <-timer.C():
	case <-time.After(time.Minute):
		t.Fatal("a timer reset to 10 minutes at 600x had not fired after a real minute")
	}
}
