package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ackNamespace holds the writes a run makes to check that none that was
// acknowledged is lost.
const ackNamespace = "capstan-chaos"

// acks writes a ConfigMap every interval while the cluster serves, and
// remembers which writes the API acknowledged and when, and the longest
// the API refused writes while capstan was up.
type acks struct {
	kube     kubernetes.Interface
	interval time.Duration
	// upAs is the process serving the API while capstan is up, nil
	// while it is not (killed, dead, starting).
	upAs func() *process

	mu    sync.Mutex
	next  int
	acked []ack
	// failingSince is when the first write of the current run of
	// failures started, all while failingProc was up.
	failingSince time.Time
	failingProc  *process
	outage       time.Duration
	// goneAt is when a write was last refused because the campaign's
	// namespace is gone: the API serves, and no write can be
	// acknowledged until something makes it again.
	goneAt time.Time
	// refused are the writes the API refused while one capstan process
	// was up from before the write to after it.
	refused []span
}

// span is a write's invocation and answer.
type span struct{ start, end time.Time }

type ack struct {
	name string
	at   time.Time
}

func newAcks(kube kubernetes.Interface, upAs func() *process) *acks {
	return &acks{kube: kube, interval: 250 * time.Millisecond, upAs: upAs}
}

// run writes until ctx ends.
func (a *acks) run(ctx context.Context) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		a.mu.Lock()
		a.next++
		name := fmt.Sprintf("ack-%06d", a.next)
		a.mu.Unlock()
		before, start := a.upAs(), time.Now()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ackNamespace}, Data: map[string]string{"written": start.Format(time.RFC3339Nano)}}
		_, err := a.kube.CoreV1().ConfigMaps(ackNamespace).Create(wctx, cm, metav1.CreateOptions{})
		cancel()
		a.wrote(name, err == nil, start, time.Now(), before, a.upAs())
		if apierrors.IsNotFound(err) {
			a.mu.Lock()
			a.goneAt = time.Now()
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wrote records a write that started at start, while before was up, and
// ended at end while after was: an acknowledged one, and the outage it
// ends when every write since the first failure was made while the same
// process stayed up (an outage across a kill is the kill's, not the
// API's).
func (a *acks) wrote(name string, ok bool, start, end time.Time, before, after *process) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ok {
		a.acked = append(a.acked, ack{name: name, at: end})
	} else if before != nil && before == after {
		a.refused = append(a.refused, span{start, end})
	}
	switch {
	case before == nil || before != after:
		a.failingSince, a.failingProc = time.Time{}, nil
	case ok:
		if !a.failingSince.IsZero() && a.failingProc == before {
			a.outage = max(a.outage, end.Sub(a.failingSince))
		}
		a.failingSince, a.failingProc = time.Time{}, nil
	case a.failingSince.IsZero() || a.failingProc != before:
		a.failingSince, a.failingProc = start, before
	}
}

// refusedBetween tells whether a write the API refused, capstan up
// throughout, overlapped the instants from and to.
func (a *acks) refusedBetween(from, to time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.refused {
		if w.start.Before(to) && w.end.After(from) {
			return true
		}
	}
	return false
}

// longestOutage is the longest the API refused writes while capstan was
// up: from the start of the first refused write to the acknowledgement
// of the next one that was not.
func (a *acks) longestOutage() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outage
}

// firstAfter is when the first write after t was acknowledged (zero when
// none was yet).
func (a *acks) firstAfter(t time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.acked), func(i int) bool { return a.acked[i].at.After(t) })
	if i == len(a.acked) {
		return time.Time{}
	}
	return a.acked[i].at
}

// waitAfter waits until a write after t is acknowledged and returns when;
// it gives up when stop is closed (the server went away), when the API
// refuses a write made after t because the campaign's namespace is gone
// (waiting longer only waits for the timeout), or after timeout.
func (a *acks) waitAfter(ctx context.Context, t time.Time, timeout time.Duration, stop <-chan struct{}) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		if at := a.firstAfter(t); !at.IsZero() {
			return at, nil
		}
		a.mu.Lock()
		gone := a.goneAt.After(t)
		a.mu.Unlock()
		if gone {
			return time.Time{}, fmt.Errorf("the API refuses every write: namespace %s is gone", ackNamespace)
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no write acknowledged within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-stop:
			return time.Time{}, errors.New("the server went away")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lost lists the acknowledged writes the API no longer has. A list that
// fails (a connection cut under load) is tried again for up to timeout,
// unless stop is closed (the server went away).
func (a *acks) lost(ctx context.Context, timeout time.Duration, stop <-chan struct{}) ([]string, error) {
	a.mu.Lock()
	acked := append([]ack(nil), a.acked...)
	a.mu.Unlock()
	deadline := time.Now().Add(timeout)
	var list *corev1.ConfigMapList
	for {
		var err error
		if list, err = a.kube.CoreV1().ConfigMaps(ackNamespace).List(ctx, metav1.ListOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("listing the acknowledged writes: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stop:
			return nil, fmt.Errorf("listing the acknowledged writes: the server went away: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	have := map[string]bool{}
	for _, cm := range list.Items {
		have[cm.Name] = true
	}
	var lost []string
	for _, w := range acked {
		if !have[w.name] {
			lost = append(lost, w.name)
		}
	}
	return lost, nil
}

func ensureAckNamespace(ctx context.Context, kube kubernetes.Interface) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ackNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ackNamespace, err)
	}
	return nil
}

func summarize(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:max], ", ") + fmt.Sprintf(" and %d more", len(names)-max)
}
