package scheduler

import (
	"container/heap"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/utils/clock"
)

// Backoff of a pod that failed to schedule: doubling from the initial
// value up to the maximum, as upstream does.
const (
	initialBackoff = time.Second
	maxBackoff     = 10 * time.Second
	// unschedulableFlush is how long a pod waits, with no cluster event
	// that could help it, before it is tried again anyway.
	unschedulableFlush = time.Minute
)

// Clock is what the scheduler needs of time: now, tickers and timers. A
// fake clock makes its backoffs and expiries testable.
type Clock interface {
	clock.WithTicker
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// queuedPod is a pending pod with its scheduling history. Every field is
// guarded by the queue's mutex: the scheduler works on the pod Pop
// returned, never on this struct.
type queuedPod struct {
	pod      *corev1.Pod
	key      string
	attempts int
	enqueued time.Time
	parkedAt time.Time
	// failedAt is when its last attempt failed: its backoff runs from
	// then, as upstream's does, not from when a cluster event moves it.
	failedAt  time.Time
	heapIndex int
	// While the pod is in flight (popped, not yet Done or Requeued):
	// gone says it was deleted or bound by someone else meanwhile, and
	// changed that its spec changed, so a failure is retried at once
	// rather than parked.
	gone, changed bool
}

// schedulingQueue holds the pods waiting for this scheduler: an active heap
// (highest priority first, then oldest), pods backing off after a failure,
// and unschedulable pods parked until a cluster event might help them. A
// popped pod is in flight until the scheduler calls Done or Requeue.
type schedulingQueue struct {
	clock Clock

	mu            sync.Mutex
	cond          *sync.Cond
	active        podHeap
	known         map[string]*queuedPod // every queued pod, wherever it is
	unschedulable map[string]*queuedPod
	backingOff    map[string]clock.Timer
	inFlight      map[string]*queuedPod
	// gated are the pods held by scheduling gates, never attempted
	// (scheduler_pending_pods{queue="gated"}).
	gated map[string]bool
	// cycle counts pops; moveCycle is the cycle of the last cluster
	// event. A pod that fails after an event that happened while it was
	// being scheduled is retried instead of parked.
	cycle, moveCycle int64
	closed           bool
}

func newSchedulingQueue(c Clock) *schedulingQueue {
	q := &schedulingQueue{clock: c, known: map[string]*queuedPod{}, unschedulable: map[string]*queuedPod{},
		backingOff: map[string]clock.Timer{}, inFlight: map[string]*queuedPod{}, gated: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Gate records a pod held by scheduling gates: out of the queues, counted
// as gated until it is added or deleted.
func (q *schedulingQueue) Gate(pod *corev1.Pod) {
	q.Delete(pod)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gated[podKey(pod)] = true
}

func podKey(pod *corev1.Pod) string {
	k, _ := cache.MetaNamespaceKeyFunc(pod)
	return k
}

// Add queues a new pending pod or refreshes a queued one. A parked pod
// whose spec or labels changed (reactivate) is tried again; one whose
// status alone changed (the scheduler's own condition) stays parked. A pod
// in flight keeps the newer object for its next attempt.
func (q *schedulingQueue) Add(pod *corev1.Pod, reactivate bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(pod)
	delete(q.gated, key)
	if f, ok := q.inFlight[key]; ok {
		f.pod = pod
		f.gone = false
		f.changed = f.changed || reactivate
		return
	}
	if qp, ok := q.known[key]; ok {
		qp.pod = pod
		if _, parked := q.unschedulable[key]; parked && reactivate {
			delete(q.unschedulable, key)
			q.pushLocked(qp)
		} else if qp.heapIndex >= 0 {
			heap.Fix(&q.active, qp.heapIndex)
		}
		return
	}
	qp := &queuedPod{pod: pod, key: key, enqueued: q.clock.Now(), heapIndex: -1}
	q.known[key] = qp
	q.pushLocked(qp)
}

func (q *schedulingQueue) pushLocked(qp *queuedPod) {
	heap.Push(&q.active, qp)
	q.cond.Signal()
}

// Delete forgets a pod that was deleted or that someone bound: queued, it
// leaves the queue; in flight, it will not come back when its attempt
// ends.
func (q *schedulingQueue) Delete(pod *corev1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(pod)
	delete(q.gated, key)
	if f, ok := q.inFlight[key]; ok && f.pod.UID == pod.UID {
		f.gone = true
	}
	qp, ok := q.known[key]
	if !ok {
		return
	}
	delete(q.known, key)
	delete(q.unschedulable, key)
	if t := q.backingOff[key]; t != nil {
		t.Stop()
		delete(q.backingOff, key)
	}
	if qp.heapIndex >= 0 {
		heap.Remove(&q.active, qp.heapIndex)
	}
}

// Pop blocks until a pod is active and returns it, the pod object to
// schedule and the cycle it is scheduled in; ok is false once the queue is
// closed.
func (q *schedulingQueue) Pop() (qp *queuedPod, pod *corev1.Pod, cycle int64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.active) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return nil, nil, 0, false
	}
	qp = heap.Pop(&q.active).(*queuedPod)
	delete(q.known, qp.key)
	qp.gone, qp.changed = false, false
	q.inFlight[qp.key] = qp
	q.cycle++
	return qp, qp.pod, q.cycle, true
}

// Done ends the attempt of a popped pod that was bound (or is gone). If a
// new pod of the same name replaced the attempted one meanwhile, the new
// one is queued.
func (q *schedulingQueue) Done(qp *queuedPod, attempted *corev1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inFlight[qp.key] != qp {
		return
	}
	delete(q.inFlight, qp.key)
	if qp.pod.UID != attempted.UID && !qp.gone && !q.closed {
		fresh := &queuedPod{pod: qp.pod, key: qp.key, enqueued: q.clock.Now(), heapIndex: -1}
		q.known[qp.key] = fresh
		q.pushLocked(fresh)
	}
}

// Requeue ends the attempt of a popped pod that could not be scheduled and
// puts it back, unless it went away meanwhile: it reports whether it did.
// Unschedulable pods park until a cluster event (MoveAllToActive) unless
// one already happened during their cycle or they changed; errors (a
// failed binding) back off and retry.
func (q *schedulingQueue) Requeue(qp *queuedPod, cycle int64, unschedulable bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inFlight[qp.key] != qp {
		return false
	}
	delete(q.inFlight, qp.key)
	if q.closed || qp.gone {
		return false
	}
	qp.attempts++
	qp.failedAt = q.clock.Now()
	q.known[qp.key] = qp
	if unschedulable && q.moveCycle < cycle && !qp.changed {
		qp.parkedAt = q.clock.Now()
		q.unschedulable[qp.key] = qp
		return true
	}
	q.backoffLocked(qp)
	return true
}

// backoff is how long a pod waits after attempts failures.
func backoff(attempts int) time.Duration {
	d := initialBackoff
	for i := 1; i < attempts && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

func (q *schedulingQueue) backoffLocked(qp *queuedPod) {
	key := qp.key
	if t := q.backingOff[key]; t != nil {
		t.Stop()
		delete(q.backingOff, key)
	}
	wait := backoff(qp.attempts)
	if !qp.failedAt.IsZero() {
		wait -= q.clock.Since(qp.failedAt)
	}
	if wait <= 0 {
		// Backed off long enough already (parked past its backoff).
		if qp.heapIndex < 0 {
			q.pushLocked(qp)
		}
		return
	}
	q.backingOff[key] = q.clock.AfterFunc(wait, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.backingOff, key)
		if cur, ok := q.known[key]; ok && cur == qp && !q.closed && qp.heapIndex < 0 {
			q.pushLocked(qp)
		}
	})
}

// MoveAllToActive retries every parked pod (with its backoff): a cluster
// event may have made room.
func (q *schedulingQueue) MoveAllToActive() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, qp := range q.unschedulable {
		delete(q.unschedulable, key)
		q.backoffLocked(qp)
	}
	q.moveCycle = q.cycle
}

// FlushStale retries pods parked longer than unschedulableFlush.
func (q *schedulingQueue) FlushStale() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	for key, qp := range q.unschedulable {
		if now.Sub(qp.parkedAt) >= unschedulableFlush {
			delete(q.unschedulable, key)
			q.pushLocked(qp)
		}
	}
}

// Len reports how many pods are queued (active, backing off or parked),
// not counting those in flight.
func (q *schedulingQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.known)
}

// Close wakes Pop callers and stops the queue.
func (q *schedulingQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, t := range q.backingOff {
		t.Stop()
	}
	q.cond.Broadcast()
}

// podHeap orders pods by priority, then by when they were queued.
type podHeap []*queuedPod

func (h podHeap) Len() int { return len(h) }
func (h podHeap) Less(i, j int) bool {
	pi, pj := corev1helpers.PodPriority(h[i].pod), corev1helpers.PodPriority(h[j].pod)
	if pi != pj {
		return pi > pj
	}
	return h[i].enqueued.Before(h[j].enqueued)
}
func (h podHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *podHeap) Push(x any) {
	qp := x.(*queuedPod)
	qp.heapIndex = len(*h)
	*h = append(*h, qp)
}
func (h *podHeap) Pop() any {
	old := *h
	qp := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	qp.heapIndex = -1
	return qp
}
