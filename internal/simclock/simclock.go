// Package simclock is the clock of capstan's own components in a
// simulation that runs faster than real time.
//
// A simulation keeps real instants: the API server stamps its objects with
// the wall clock, and kube-controller-manager's controllers time what they
// see by it. What runs faster is every duration: a component waiting 10
// simulated minutes at 20x waits 30 real seconds, and the time between two
// instants, 30 real seconds apart, is 10 simulated minutes. A component
// takes a clock.WithTicker and measures durations between instants with
// Elapsed and deadlines with Add, never with time.Time's Sub and Add: on the
// real clock they are those, on a Scaled clock they are multiplied or
// divided by its speed. So its constants and configured delays stay those of
// the cluster simulated, and nothing is scaled one by one.
package simclock

import (
	"time"

	"k8s.io/utils/clock"
)

// Scaled is the wall clock with durations speed times shorter: timers,
// tickers and sleeps of d last d/speed of real time. Now is the wall
// clock's.
type Scaled struct {
	Speed float64
}

var _ clock.WithTicker = Scaled{}

// Real is how long d of simulated time lasts in real time (at least a
// nanosecond for a positive d).
func (c Scaled) Real(d time.Duration) time.Duration {
	if d <= 0 || c.Speed <= 1 {
		return d
	}
	return max(time.Duration(float64(d)/c.Speed), 1)
}

// Simulated is how much simulated time d of real time is.
func (c Scaled) Simulated(d time.Duration) time.Duration {
	if c.Speed <= 1 {
		return d
	}
	return time.Duration(float64(d) * c.Speed)
}

func (Scaled) Now() time.Time { return time.Now() }

func (c Scaled) Since(t time.Time) time.Duration { return c.Simulated(time.Since(t)) }

func (c Scaled) After(d time.Duration) <-chan time.Time { return time.After(c.Real(d)) }

func (c Scaled) NewTimer(d time.Duration) clock.Timer {
	return scaledTimer{c: c, Timer: clock.RealClock{}.NewTimer(c.Real(d))}
}

func (c Scaled) AfterFunc(d time.Duration, f func()) clock.Timer {
	return scaledTimer{c: c, Timer: clock.RealClock{}.AfterFunc(c.Real(d), f)}
}

func (c Scaled) Tick(d time.Duration) <-chan time.Time {
	//nolint:staticcheck // as clock.RealClock's Tick: the caller keeps it for ever.
	return time.Tick(c.Real(d))
}

func (c Scaled) NewTicker(d time.Duration) clock.Ticker {
	return clock.RealClock{}.NewTicker(c.Real(d))
}

func (c Scaled) Sleep(d time.Duration) { time.Sleep(c.Real(d)) }

type scaledTimer struct {
	c Scaled
	clock.Timer
}

func (t scaledTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.Real(d)) }

// Elapsed is the time from one instant to another on c: to.Sub(from), in
// simulated time on a Scaled clock.
func Elapsed(c clock.PassiveClock, from, to time.Time) time.Duration {
	// A nil clock is the real one.
	if s, ok := c.(Scaled); ok {
		return s.Simulated(to.Sub(from))
	}
	return to.Sub(from)
}

// Add is the instant d after t on c: t.Add(d), d being simulated time on
// a Scaled clock (a nil clock is the real one).
func Add(c clock.PassiveClock, t time.Time, d time.Duration) time.Time {
	if s, ok := c.(Scaled); ok {
		if d < 0 {
			return t.Add(-s.Real(-d))
		}
		return t.Add(s.Real(d))
	}
	return t.Add(d)
}

// Real is how long d on c lasts in real time: d, or d divided by a Scaled
// clock's speed (a nil clock is the real one).
func Real(c clock.PassiveClock, d time.Duration) time.Duration {
	if s, ok := c.(Scaled); ok {
		return s.Real(d)
	}
	return d
}
