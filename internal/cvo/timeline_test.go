package cvo

import (
	"testing"
	"time"
)

func TestBreakdownSplitsWallTime(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var tl Timeline
	tl.accepted("4.10.91", at(0))
	tl.started("4.10.91", 5)
	// Two applies overlapping (100-300, 200-400), an operator waited for
	// 400-900 with an apply inside it (500-600), a gap (900-1000), then
	// a last apply (1000-1100).
	tl.task("4.10.91", TaskApply, at(100), at(300))
	tl.task("4.10.91", TaskApply, at(200), at(400))
	tl.task("4.10.91", TaskWait, at(400), at(900))
	tl.task("4.10.91", TaskApply, at(500), at(600))
	tl.task("4.10.91", TaskApply, at(1000), at(1100))
	tl.completed("4.10.91", at(1200))
	tl.completed("4.10.91", at(5000)) // the first completion counts
	p := tl.Pass("4.10.91")
	if p.Tasks != 5 || !p.Completed.Equal(at(1200)) {
		t.Fatalf("pass %+v", p)
	}
	b := p.Breakdown(p.Accepted, p.Completed)
	want := Breakdown{Applying: 500 * time.Millisecond, Waiting: 400 * time.Millisecond, Between: 300 * time.Millisecond,
		ApplySum: 600 * time.Millisecond, Applies: 4, Waits: 1}
	if b != want {
		t.Errorf("breakdown %+v, want %+v", b, want)
	}
	if b.Applying+b.Waiting+b.Between != p.Completed.Sub(p.Accepted) {
		t.Errorf("the parts do not add up to the wall time")
	}
	// A nil timeline records nothing and does not fail.
	var none *Timeline
	none.task("x", TaskApply, at(0), at(1))
}
