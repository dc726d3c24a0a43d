package chaos

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// setupPhase is a run's phase until its scenario starts the operation
// it kills capstan in: the install and the scenario's own preparations.
const setupPhase = "setup"

// operation follows where a run's operation is: the phase its scenario
// last entered, when it started (its first phase after setup), and how
// long capstan has been up since (the operation's time: a kill's outage
// and the restart after it do not count).
type operation struct {
	mu    sync.Mutex
	phase string
	// started is closed when the operation starts; startedAt is then set.
	started   chan struct{}
	startedAt time.Time
	// upSince is when the current process said it was up (zero while
	// none is); before is the operation's time up to it.
	upSince time.Time
	before  time.Duration
}

func newOperation() *operation {
	return &operation{phase: setupPhase, started: make(chan struct{})}
}

// enter records that the scenario is in phase p: its label, the part
// before a ':' (the phase "replacing:m1,m2" is "replacing"). The first
// phase other than setup starts the operation.
func (o *operation) enter(p string) {
	label, _, _ := strings.Cut(p, ":")
	if label == "" {
		label = setupPhase
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.phase = label
	if label != setupPhase && o.startedAt.IsZero() {
		o.startedAt = time.Now()
		close(o.started)
	}
}

// Phase is the phase the scenario last entered.
func (o *operation) Phase() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.phase
}

func (o *operation) hasStarted() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.startedAt.IsZero()
}

// up records that a process said it was up at t; down that it was
// killed (or died) at t.
func (o *operation) up(t time.Time) {
	o.mu.Lock()
	o.upSince = t
	o.mu.Unlock()
}

func (o *operation) down(t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.before += o.runningLocked(t)
	o.upSince = time.Time{}
}

// elapsed is the operation's time at t: how long capstan was up since
// the operation started.
func (o *operation) elapsed(t time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.before + o.runningLocked(t)
}

func (o *operation) runningLocked(t time.Time) time.Duration {
	if o.startedAt.IsZero() || o.upSince.IsZero() {
		return 0
	}
	from := o.upSince
	if o.startedAt.After(from) {
		from = o.startedAt
	}
	if t.Before(from) {
		return 0
	}
	return t.Sub(from)
}

// KillResult is a kill as it landed.
type KillResult struct {
	Kill Kill
	// At is when, from the run's start, it landed; OpTime the
	// operation's time then.
	At, OpTime time.Duration
	// Phase is the phase of the operation it landed in; InStart says that
	// it landed while capstan was starting again, after an earlier kill.
	Phase   string
	InStart bool
}

func (k KillResult) String() string {
	where := k.Phase
	if k.InStart {
		where += ", in the start"
	}
	return fmt.Sprintf("%s [%.0fs, %.1fs into the operation: %s]", k.Kill, k.At.Seconds(), k.OpTime.Seconds(), where)
}

// phaseCounts is "phase n, phase n" over kills, phases by first kill.
func phaseCounts(kills []KillResult) string {
	if len(kills) == 0 {
		return "-"
	}
	n := map[string]int{}
	var order []string
	for _, k := range kills {
		if n[k.Phase] == 0 {
			order = append(order, k.Phase)
		}
		n[k.Phase]++
	}
	sort.SliceStable(order, func(i, j int) bool { return n[order[i]] > n[order[j]] })
	parts := make([]string, len(order))
	for i, p := range order {
		parts[i] = fmt.Sprintf("%s %d", p, n[p])
	}
	return strings.Join(parts, ", ")
}
