package leader

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

var fast = Config{Namespace: "kube-system", Name: "test", Identity: "me",
	LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 50 * time.Millisecond}

// When the lease is lost, Run returns only after the work has stopped:
// nothing of the old leader runs beside the new one.
func TestRunWaitsForWorkWhenTheLeaseIsLost(t *testing.T) {
	client := fake.NewClientset()
	var unreachable atomic.Bool
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if unreachable.Load() {
			return true, nil, errors.New("injected: apiserver unreachable")
		}
		return false, nil, nil
	})
	running, sawCancel, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var stopped atomic.Bool
	result := make(chan error, 1)
	stoppedAtReturn := make(chan bool, 1)
	go func() {
		err := Run(t.Context(), client, fast, func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			close(sawCancel)
			<-release
			stopped.Store(true)
			return nil
		})
		stoppedAtReturn <- stopped.Load()
		result <- err
	}()
	<-running
	// The apiserver refuses every renewal from now on: the lease runs out.
	unreachable.Store(true)
	<-sawCancel
	close(release)
	if !<-stoppedAtReturn {
		t.Fatal("Run returned before the work stopped")
	}
	if err := <-result; !errors.Is(err, ErrLost) {
		t.Fatalf("Run returned %v, want ErrLost", err)
	}
}

// Work that fails ends Run with its error and gives the lease up.
func TestRunReturnsTheWorksError(t *testing.T) {
	client := fake.NewClientset()
	boom := errors.New("boom")
	if err := Run(t.Context(), client, fast, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	l, err := client.CoordinationV1().Leases("kube-system").Get(t.Context(), "test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("lease still held by %q", h)
	}
}

// A replica that never gets the lease never runs the work; it returns when
// its context ends.
func TestRunNeverLeadsWhileAnotherHolds(t *testing.T) {
	client := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "test"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime: &metav1.MicroTime{Time: time.Now()}, AcquireTime: &metav1.MicroTime{Time: time.Now()}}})
	ctx, cancel := context.WithCancel(t.Context())
	var gets atomic.Int32
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		// Stop after the replica has looked at the lease twice.
		if gets.Add(1) == 2 {
			cancel()
		}
		return false, nil, nil
	})
	var ran atomic.Bool
	if err := Run(ctx, client, fast, func(context.Context) error { ran.Store(true); return nil }); err != nil {
		t.Fatal(err)
	}
	if ran.Load() {
		t.Fatal("work ran without the lease")
	}
}
