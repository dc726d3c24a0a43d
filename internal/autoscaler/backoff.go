package autoscaler

import (
	"github.com/capstan-dev/capstan/internal/simclock"
	"k8s.io/utils/clock"
	"sync"
	"time"
)

// Upstream's node group backoff: 5 minutes after a failed scale-up,
// doubled on each failure after the last backoff ended, at most 30
// minutes, forgotten after 3 hours without failure.
const (
	initialBackoff    = 5 * time.Minute
	maxBackoff        = 30 * time.Minute
	backoffResetAfter = 3 * time.Hour
)

type backoffEntry struct {
	duration    time.Duration
	until       time.Time
	lastFailure time.Time
	reason      string
}

// backoff tracks node groups that failed to scale up.
type backoff struct {
	mu      sync.Mutex
	clock   clock.PassiveClock
	entries map[string]*backoffEntry
}

func newBackoff(c clock.PassiveClock) *backoff {
	return &backoff{clock: c, entries: map[string]*backoffEntry{}}
}

// fail records a failed scale-up of group id at now, and returns until
// when it is backed off.
func (b *backoff) fail(id, reason string, now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entries[id]
	switch {
	case e == nil || simclock.Elapsed(b.clock, e.lastFailure, now) > backoffResetAfter:
		e = &backoffEntry{duration: initialBackoff}
		b.entries[id] = e
	case now.After(e.until):
		e.duration = min(2*e.duration, maxBackoff)
	}
	e.until, e.lastFailure, e.reason = simclock.Add(b.clock, now, e.duration), now, reason
	return e.until
}

// backedOff reports whether group id may not scale up at now, and why.
func (b *backoff) backedOff(id string, now time.Time) (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entries[id]
	if e == nil || !now.Before(e.until) {
		return false, ""
	}
	return true, "in backoff after failed scale-up (" + e.reason + ")"
}

// notes remembers what was last said of each thing, so that an event is
// recorded when the message changes or has held for a while, not on every
// loop.
type notes struct {
	mu     sync.Mutex
	clock  clock.PassiveClock
	repeat time.Duration
	said   map[string]note
}

type note struct {
	msg string
	at  time.Time
}

func newNotes(repeat time.Duration, c clock.PassiveClock) *notes {
	return &notes{clock: c, repeat: repeat, said: map[string]note{}}
}

// changed reports whether msg is to be said of key now, and notes it.
func (n *notes) changed(key, msg string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	last, ok := n.said[key]
	if ok && last.msg == msg && simclock.Elapsed(n.clock, last.at, now) < n.repeat {
		return false
	}
	n.said[key] = note{msg: msg, at: now}
	return true
}

// keepOnly forgets every key not in live.
func (n *notes) keepOnly(live map[string]bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k := range n.said {
		if !live[k] {
			delete(n.said, k)
		}
	}
}
