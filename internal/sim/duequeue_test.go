package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// A pool that fell behind renews the lease that has waited longest first,
// whatever order the keys were added in.
func TestDueQueueHandsOutTheLongestOverdueFirst(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	q := newDueQueue(clk)
	q.AddAt("c", now.Add(-1*time.Second))
	q.AddAt("a", now.Add(-3*time.Second))
	q.AddAt("later", now.Add(time.Minute))
	q.AddAt("b", now.Add(-2*time.Second))
	// An earlier time moves a key up; a later one leaves it.
	q.AddAt("c", now.Add(-4*time.Second))
	q.AddAt("a", now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	var got []string
	for range 3 {
		select {
		case k := <-q.Ready():
			got = append(got, k)
			q.Done(k)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %v handed out", got)
		}
	}
	if want := "c a b"; strings.Join(got, " ") != want {
		t.Errorf("handed out %q, want %q", strings.Join(got, " "), want)
	}
	select {
	case k := <-q.Ready():
		t.Fatalf("%s handed out before it is due", k)
	case <-time.After(50 * time.Millisecond):
	}
	// The dispatcher waits on the clock: once it passes, the key comes.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	select {
	case k := <-q.Ready():
		if k != "later" {
			t.Errorf("handed out %s, want later", k)
		}
		// Scheduled while a worker has it: handed out again once done.
		q.Add(k)
		select {
		case again := <-q.Ready():
			t.Fatalf("%s handed out to a second worker", again)
		case <-time.After(50 * time.Millisecond):
		}
		q.Done(k)
	case <-time.After(10 * time.Second):
		t.Fatal("the key due in a minute never came")
	}
	select {
	case k := <-q.Ready():
		if k != "later" {
			t.Errorf("handed out %s, want later again", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a key scheduled while processed was lost")
	}
}
