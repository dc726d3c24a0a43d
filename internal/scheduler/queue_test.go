package scheduler

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func qpod(name string, prio int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec: corev1.PodSpec{Priority: ptr.To(prio)}}
}

func newTestQueue() (*schedulingQueue, *clocktesting.FakeClock) {
	c := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	return newSchedulingQueue(c), c
}

// activeLen is how many pods are ready to pop.
func activeLen(q *schedulingQueue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.active)
}

// pop pops a pod that must be active already: it never waits.
func pop(t *testing.T, q *schedulingQueue) (*queuedPod, *corev1.Pod, int64) {
	t.Helper()
	if activeLen(q) == 0 {
		t.Fatal("no active pod to pop")
	}
	qp, pod, cycle, ok := q.Pop()
	if !ok {
		t.Fatal("queue closed")
	}
	return qp, pod, cycle
}

func TestQueueOrdersByPriorityThenAge(t *testing.T) {
	q, c := newTestQueue()
	defer q.Close()
	q.Add(qpod("low", 0), true)
	c.Step(time.Millisecond)
	q.Add(qpod("high", 100), true)
	c.Step(time.Millisecond)
	q.Add(qpod("low2", 0), true)
	for _, want := range []string{"high", "low", "low2"} {
		if _, p, _ := pop(t, q); p.Name != want {
			t.Errorf("popped %s, want %s", p.Name, want)
		}
	}
}

func TestUnschedulablePodsWaitForAnEvent(t *testing.T) {
	q, c := newTestQueue()
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, _, cycle := pop(t, q)
	if !q.Requeue(qp, cycle, true) {
		t.Fatal("not requeued")
	}
	if q.Len() != 1 {
		t.Fatalf("queue len %d", q.Len())
	}
	// A status-only update (the scheduler's own condition) does not wake
	// it, however long it waits short of the flush.
	q.Add(qpod("p", 0), false)
	c.Step(unschedulableFlush - time.Second)
	q.FlushStale()
	if n := activeLen(q); n != 0 {
		t.Fatalf("%d active: parked pod made active without an event", n)
	}
	// A spec change does.
	q.Add(qpod("p", 0), true)
	if _, p, _ := pop(t, q); p.Name != "p" {
		t.Fatal("wrong pod")
	}
}

func TestParkedPodsAreFlushedAfterAMinute(t *testing.T) {
	q, c := newTestQueue()
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, _, cycle := pop(t, q)
	q.Requeue(qp, cycle, true)
	c.Step(unschedulableFlush)
	q.FlushStale()
	if _, p, _ := pop(t, q); p.Name != "p" {
		t.Fatal("wrong pod")
	}
}

func TestClusterEventDuringCycleRetriesAfterBackoff(t *testing.T) {
	q, c := newTestQueue()
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, _, cycle := pop(t, q)
	// A node appears while p is being scheduled.
	q.MoveAllToActive()
	q.Requeue(qp, cycle, true)
	if n := activeLen(q); n != 0 {
		t.Fatal("retried without backoff")
	}
	c.Step(initialBackoff - time.Millisecond)
	if n := activeLen(q); n != 0 {
		t.Fatal("retried before the backoff ended")
	}
	c.Step(time.Millisecond)
	if _, p, _ := pop(t, q); p.Name != "p" {
		t.Fatal("wrong pod")
	}
}

func TestBackoffDoublesUpToTheMaximum(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("attempt %d: backoff %s, want %s", i+1, got, w)
		}
	}
}

func TestDeleteRemovesQueuedPod(t *testing.T) {
	q, _ := newTestQueue()
	defer q.Close()
	q.Add(qpod("gone", 0), true)
	q.Add(qpod("kept", 0), true)
	q.Delete(qpod("gone", 0))
	if _, p, _ := pop(t, q); p.Name != "kept" {
		t.Errorf("popped %s", p.Name)
	}
}

// A pod deleted (or bound by someone else) while it is being scheduled
// leaves the queue for good: its failed attempt does not put it back.
func TestPodGoneWhileInFlightIsNotRequeued(t *testing.T) {
	for _, unschedulable := range []bool{true, false} {
		q, c := newTestQueue()
		q.Add(qpod("p", 0), true)
		qp, _, cycle := pop(t, q)
		q.Delete(qpod("p", 0))
		if q.Requeue(qp, cycle, unschedulable) {
			t.Errorf("unschedulable=%v: a deleted pod was requeued", unschedulable)
		}
		q.MoveAllToActive()
		c.Step(unschedulableFlush + maxBackoff)
		q.FlushStale()
		if q.Len() != 0 || activeLen(q) != 0 {
			t.Errorf("unschedulable=%v: %d pods queued after the deletion", unschedulable, q.Len())
		}
		q.Close()
	}
}

// A pod whose spec changes while it is being scheduled is retried with the
// new spec, not parked with the old verdict.
func TestPodChangedWhileInFlightIsRetried(t *testing.T) {
	q, c := newTestQueue()
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, _, cycle := pop(t, q)
	updated := qpod("p", 0)
	updated.Labels = map[string]string{"new": "label"}
	q.Add(updated, true)
	q.Requeue(qp, cycle, true)
	c.Step(initialBackoff)
	_, p, _ := pop(t, q)
	if p.Labels["new"] != "label" {
		t.Fatalf("retried with the old pod %+v", p.ObjectMeta)
	}
}

// A pod deleted and created again under the same name while the old one
// was being bound is scheduled too.
func TestPodRecreatedWhileInFlightIsQueued(t *testing.T) {
	q, _ := newTestQueue()
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, old, _ := pop(t, q)
	q.Delete(old)
	fresh := qpod("p", 0)
	fresh.UID = "p-2"
	q.Add(fresh, true)
	q.Done(qp, old)
	if _, p, _ := pop(t, q); p.UID != "p-2" {
		t.Fatalf("popped %s, want the new pod", p.UID)
	}
}

// The scheduler works on the pod Pop returned while the informer refreshes
// the queued one: under -race, reading the popped pod while Add replaces
// the in-flight entry must not be a data race, and the attempt keeps the
// object it started with.
func TestPoppedPodIsNotChangedByAdd(t *testing.T) {
	q, _ := newTestQueue()
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, pod, cycle := pop(t, q)
	done := make(chan string)
	go func() {
		// What a decision and a binding read.
		name := ""
		for range 1000 {
			name = pod.Name + pod.Namespace + string(pod.UID)
		}
		done <- name
	}()
	for i := range 1000 {
		updated := qpod("p", int32(i))
		q.Add(updated, true)
	}
	if got := <-done; got != "pnsp" {
		t.Fatalf("read %q", got)
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority != 0 {
		t.Fatal("the popped pod changed under the attempt")
	}
	q.Requeue(qp, cycle, true)
	q.mu.Lock()
	latest := q.known["ns/p"].pod
	q.mu.Unlock()
	if *latest.Spec.Priority != 999 {
		t.Fatalf("requeued with priority %d, want the latest object", *latest.Spec.Priority)
	}
}

// A pod's backoff runs from its failed attempt, as upstream's does: an
// event after it has waited its backoff makes it active at once, one
// sooner waits only the rest of it.
func TestBackoffRunsFromTheFailedAttempt(t *testing.T) {
	q, c := newTestQueue()
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, _, cycle := pop(t, q)
	q.Requeue(qp, cycle, true)
	c.Step(backoff(1) + time.Millisecond)
	q.MoveAllToActive()
	if n := activeLen(q); n != 1 {
		t.Fatalf("%d active after an event past the backoff, want 1", n)
	}
	qp, _, cycle = pop(t, q)
	q.Requeue(qp, cycle, true)
	c.Step(time.Second)
	q.MoveAllToActive()
	if n := activeLen(q); n != 0 {
		t.Fatalf("%d active 1s into a %s backoff", n, backoff(2))
	}
	c.Step(backoff(2) - time.Second)
	if n := activeLen(q); n != 1 {
		t.Fatalf("%d active once the backoff ran out, want 1", n)
	}
}
