package scheduler

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// RunWithLeaderElection runs the scheduler only while it holds the Lease
// kube-system/<scheduler name>, so that replicas of one scheduler can stand
// by. It returns when ctx ends or leadership is lost.
func (s *Scheduler) RunWithLeaderElection(ctx context.Context, client kubernetes.Interface) error {
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: s.cfg.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runErr error
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            s.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.FromContext(ctx).Info("Became leader", "lease", s.cfg.Name, "identity", id)
				runErr = s.Run(ctx)
				cancel()
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					runErr = fmt.Errorf("scheduler %s lost its leader lease", s.cfg.Name)
				}
				cancel()
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	return runErr
}
