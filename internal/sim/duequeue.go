package sim

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// dueQueue hands keys to workers in the order they fall due, earliest
// first. Where a work queue takes keys in the order they were added, a
// pool of workers that falls behind (more leases due than it renews) here
// always renews the lease that has waited longest, so that no lease ages
// past the others. A key is with one worker at a time; one scheduled
// while a worker has it is handed out again once the worker is done.
type dueQueue struct {
	clock clock.WithTicker
	// ready hands a due key to a free worker.
	ready chan string
	// wake tells the dispatcher that the earliest key changed.
	wake chan struct{}

	mu         sync.Mutex
	items      dueHeap
	byKey      map[string]*dueItem
	processing map[string]bool
	// again holds, for a key a worker has, when it is due next.
	again map[string]time.Time
}

type dueItem struct {
	key   string
	due   time.Time
	index int
}

type dueHeap []*dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*dueItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

func newDueQueue(c clock.WithTicker) *dueQueue {
	return &dueQueue{clock: c, ready: make(chan string), wake: make(chan struct{}, 1),
		byKey: map[string]*dueItem{}, processing: map[string]bool{}, again: map[string]time.Time{}}
}

// Add makes key due now.
func (q *dueQueue) Add(key string) { q.AddAt(key, q.clock.Now()) }

// AddAfter makes key due after d.
func (q *dueQueue) AddAfter(key string, d time.Duration) { q.AddAt(key, q.clock.Now().Add(d)) }

// AddAt makes key due at due, or leaves it due earlier if it already is.
func (q *dueQueue) AddAt(key string, due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.processing[key] {
		if at, ok := q.again[key]; !ok || due.Before(at) {
			q.again[key] = due
		}
		return
	}
	q.push(key, due)
}

// push schedules key; q.mu is held.
func (q *dueQueue) push(key string, due time.Time) {
	if it, ok := q.byKey[key]; ok {
		if !due.Before(it.due) {
			return
		}
		it.due = due
		heap.Fix(&q.items, it.index)
	} else {
		it := &dueItem{key: key, due: due}
		q.byKey[key] = it
		heap.Push(&q.items, it)
	}
	if q.items[0].key == key {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// Done says a worker is through with key: scheduled meanwhile, it is
// queued again.
func (q *dueQueue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if due, ok := q.again[key]; ok {
		delete(q.again, key)
		q.push(key, due)
	}
}

// Len is how many keys wait, due or not.
func (q *dueQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Overdue is how long the earliest key has been due (0: none is).
func (q *dueQueue) Overdue() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return 0
	}
	return max(0, q.clock.Since(q.items[0].due))
}

// Run hands due keys to the workers reading Ready until ctx ends.
func (q *dueQueue) Run(ctx context.Context) {
	for {
		q.mu.Lock()
		var wait time.Duration = -1
		var key string
		if len(q.items) > 0 {
			top := q.items[0]
			if d := top.due.Sub(q.clock.Now()); d > 0 {
				wait = d
			} else {
				heap.Pop(&q.items)
				delete(q.byKey, top.key)
				q.processing[top.key] = true
				key = top.key
			}
		}
		q.mu.Unlock()
		if key != "" {
			select {
			case q.ready <- key:
				continue
			case <-ctx.Done():
				return
			}
		}
		var t clock.Timer
		var timer <-chan time.Time
		if wait >= 0 {
			t = q.clock.NewTimer(wait)
			timer = t.C()
		}
		select {
		case <-timer:
		case <-q.wake:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Ready is where workers take due keys from.
func (q *dueQueue) Ready() <-chan string { return q.ready }
