package waitfor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// nodeSource is an informer over nodes whose list holds initial and
// whose watch delivers what the test sends.
func nodeSource(initial ...string) (cache.SharedIndexInformer, *watch.FakeWatcher) {
	w := watch.NewFake()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
			for _, n := range initial {
				list.Items = append(list.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, ResourceVersion: "1"}})
			}
			return list, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
	}
	return cache.NewSharedIndexInformer(listThenWatch{lw}, &corev1.Node{}, 0, cache.Indexers{}), w
}

// listThenWatch lists and then watches, as a server without streaming
// lists does: the fake watch sends no initial events.
type listThenWatch struct{ *cache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func countAtLeast(n int) func([]any) (bool, string) {
	return func(objs []any) (bool, string) {
		return len(objs) >= n, fmt.Sprintf("%d of %d nodes", len(objs), n)
	}
}

func TestInformedSeesTheListThenTheWatch(t *testing.T) {
	inf, w := nodeSource("a", "b")
	done := make(chan error, 1)
	go func() { done <- Informed(t.Context(), inf, 10*time.Millisecond, time.Minute, countAtLeast(3)) }()
	// The third node arrives by the watch only once the list was read.
	w.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "2"}})
	if err := <-done; err != nil {
		t.Fatalf("Informed: %v", err)
	}
	if !w.IsStopped() {
		// Informed stops the informer it ran, which stops its watch.
		if err := Poll(t.Context(), 10*time.Millisecond, time.Minute, Simple(func(context.Context) (bool, string) {
			return w.IsStopped(), "the watch still runs"
		})); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInformedTimesOutWithTheLastExplanation(t *testing.T) {
	inf, _ := nodeSource("a")
	err := Informed(t.Context(), inf, 10*time.Millisecond, 200*time.Millisecond, countAtLeast(2))
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("Informed = %v, want a *TimeoutError", err)
	}
	if !strings.Contains(te.Error(), "1 of 2 nodes") || te.Timeout > 200*time.Millisecond {
		t.Fatalf("timeout error %q (after %s) does not give the condition's last word or the wait's time", te, te.Timeout)
	}
}

func TestInformedEndsWithItsContext(t *testing.T) {
	inf, _ := nodeSource()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Informed(ctx, inf, 10*time.Millisecond, time.Minute, countAtLeast(1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Informed with an ended context = %v, want context.Canceled", err)
	}
}
