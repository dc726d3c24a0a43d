// Package leader runs a component only while it holds a Lease, so that
// replicas of it can stand by. It is capstan's one wrapper of client-go's
// leader election: the work runs while the lease is held, stops when it is
// lost, and Run returns only once the work has stopped, so a new leader
// never overlaps with the old one in this process.
package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Config names the Lease and its timings.
type Config struct {
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this replica; hostname_UUID when empty.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod default to Kubernetes
	// components' 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Watchdog, when set, reports (for a /healthz) a leader that has
	// failed to renew its lease past its expiry.
	Watchdog *leaderelection.HealthzAdaptor
}

// ErrLost is returned when the lease was lost while ctx was still live.
var ErrLost = errors.New("leader lease lost")

// Run acquires the lease, runs work with a context that ends when the
// lease is lost or ctx ends, and returns after work has returned. It
// returns work's error, ErrLost (wrapped) when the lease was lost, or nil
// when ctx ended.
func Run(ctx context.Context, client kubernetes.Interface, cfg Config, work func(context.Context) error) error {
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		cfg.Identity = host + "_" + string(uuid.NewUUID())
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	lock := &acquireTracker{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// done carries work's result; it is written once, by the goroutine
	// the elector starts, and read here once the elector has returned.
	// selfStopped records, before that write, whether work returned while
	// it still led (rather than because leadership ended).
	done := make(chan error, 1)
	var selfStopped atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		WatchDog:        cfg.Watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				klog.FromContext(ctx).Info("Became leader", "lease", klog.KRef(cfg.Namespace, cfg.Name), "identity", cfg.Identity)
				err := work(lctx)
				selfStopped.Store(lctx.Err() == nil)
				done <- err
				// Work that stops by itself gives the lease up.
				cancel()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election on %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	le.Run(ctx)
	if !lock.acquired.Load() {
		// Never led: work never started.
		return nil
	}
	// The elector started work in its own goroutine and does not wait
	// for it: wait here, so that nothing of this leader outlives Run.
	workErr := <-done
	switch {
	case workErr != nil:
		return workErr
	case parent.Err() == nil && !selfStopped.Load():
		return fmt.Errorf("%s/%s: %w", cfg.Namespace, cfg.Name, ErrLost)
	}
	return nil
}

// acquireTracker records that this replica wrote the lease as its holder:
// from then on, the elector has started (or is starting) the work.
type acquireTracker struct {
	resourcelock.Interface
	acquired atomic.Bool
}

func (t *acquireTracker) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := t.Interface.Create(ctx, ler)
	if err == nil && ler.HolderIdentity == t.Identity() {
		t.acquired.Store(true)
	}
	return err
}

func (t *acquireTracker) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := t.Interface.Update(ctx, ler)
	if err == nil && ler.HolderIdentity == t.Identity() {
		t.acquired.Store(true)
	}
	return err
}
