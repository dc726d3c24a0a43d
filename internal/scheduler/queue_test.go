package scheduler

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

func qpod(name string, prio int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec: corev1.PodSpec{Priority: ptr.To(prio)}}
}

func popName(t *testing.T, q *schedulingQueue) (*queuedPod, int64) {
	t.Helper()
	ch := make(chan *queuedPod, 1)
	var cycle int64
	go func() {
		qp, c, ok := q.Pop()
		if ok {
			cycle = c
			ch <- qp
		}
	}()
	select {
	case qp := <-ch:
		return qp, cycle
	case <-time.After(5 * time.Second):
		t.Fatal("Pop blocked")
	}
	return nil, 0
}

func TestQueueOrdersByPriorityThenAge(t *testing.T) {
	q := newSchedulingQueue(clock.RealClock{})
	defer q.Close()
	q.Add(qpod("low", 0), true)
	q.Add(qpod("high", 100), true)
	q.Add(qpod("low2", 0), true)
	for _, want := range []string{"high", "low", "low2"} {
		if qp, _ := popName(t, q); qp.pod.Name != want {
			t.Errorf("popped %s, want %s", qp.pod.Name, want)
		}
	}
}

func TestUnschedulablePodsWaitForAnEvent(t *testing.T) {
	q := newSchedulingQueue(clock.RealClock{})
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, cycle := popName(t, q)
	q.Requeue(qp, cycle, true)
	if q.Len() != 1 {
		t.Fatalf("queue len %d", q.Len())
	}
	// A status-only update (the scheduler's own condition) does not wake it.
	q.Add(qpod("p", 0), false)
	time.Sleep(300 * time.Millisecond)
	q.mu.Lock()
	active := len(q.active)
	q.mu.Unlock()
	if active != 0 {
		t.Fatal("parked pod made active without an event")
	}
	// A spec change does.
	q.Add(qpod("p", 0), true)
	if qp, _ := popName(t, q); qp.pod.Name != "p" {
		t.Fatal("wrong pod")
	}
}

func TestClusterEventDuringCycleRetriesInsteadOfParking(t *testing.T) {
	q := newSchedulingQueue(clock.RealClock{})
	defer q.Close()
	q.Add(qpod("p", 0), true)
	qp, cycle := popName(t, q)
	// A node appears while p is being scheduled.
	q.MoveAllToActive()
	q.Requeue(qp, cycle, true)
	start := time.Now()
	if got, _ := popName(t, q); got.pod.Name != "p" {
		t.Fatal("wrong pod")
	}
	if waited := time.Since(start); waited < initialBackoff/2 {
		t.Errorf("retried after %s, without backoff", waited)
	}
}

func TestDeleteRemovesQueuedPod(t *testing.T) {
	q := newSchedulingQueue(clock.RealClock{})
	defer q.Close()
	q.Add(qpod("gone", 0), true)
	q.Add(qpod("kept", 0), true)
	q.Delete(qpod("gone", 0))
	if qp, _ := popName(t, q); qp.pod.Name != "kept" {
		t.Errorf("popped %s", qp.pod.Name)
	}
}

func TestCacheAssumeAndConfirm(t *testing.T) {
	c := newNodeCache()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	c.setNode(node)
	p := qpod("p", 0)
	c.mu.Lock()
	c.assumeLocked(p, "n")
	c.mu.Unlock()
	if got := len(c.infos["n"].Pods); got != 1 {
		t.Fatalf("%d pods after assume", got)
	}
	// The binding failed: the assumption goes.
	c.unassume(p)
	if got := len(c.infos["n"].Pods); got != 0 {
		t.Fatalf("%d pods after unassume", got)
	}
	// Assumed, then observed bound: counted once.
	c.mu.Lock()
	c.assumeLocked(p, "n")
	c.mu.Unlock()
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n"
	c.accountPod(bound)
	if got := len(c.infos["n"].Pods); got != 1 {
		t.Fatalf("%d pods after confirmation", got)
	}
	c.unassume(p) // no longer an assumption: kept
	if got := len(c.infos["n"].Pods); got != 1 {
		t.Fatalf("%d pods after a late unassume", got)
	}
	c.removeNode("n")
	if c.hasNode("n") || len(c.list) != 0 {
		t.Errorf("node still listed")
	}
	c.forgetPod(bound)
	if _, ok := c.infos["n"]; ok {
		t.Errorf("placeholder of a deleted node kept")
	}
}

var _ = algorithm.MaxPriority
