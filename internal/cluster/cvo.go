package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	configclient "github.com/openshift/client-go/config/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/cvo"
)

// CVOStoppedAnnotation on the ClusterVersion stops the cluster version
// operator, as scaling its Deployment to zero does in OpenShift: its
// metrics endpoint goes away and nothing reconciles the release until
// the annotation is removed. The operator then starts afresh, as a new
// pod would, remembering nothing (`capstan sim cvo stop|start`).
const CVOStoppedAnnotation = "sim.capstan.dev/cvo-stopped"

// cvoSupervisor runs the cluster version operator, stopping and starting
// it as the ClusterVersion's annotation says.
type cvoSupervisor struct {
	config configclient.Interface
	opts   cvo.Options

	mu      sync.Mutex
	current *cvo.Operator
	stopped atomic.Bool
}

// operator is the operator running now, nil while stopped.
func (s *cvoSupervisor) operator() *cvo.Operator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// wantStopped reads the annotation. No ClusterVersion yet: run (the
// operator makes it); another error (the API away) keeps the operator as
// it is.
func (s *cvoSupervisor) wantStopped(ctx context.Context, running bool) bool {
	cv, err := s.config.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		return !running
	}
	return cv.Annotations[CVOStoppedAnnotation] == "true"
}

func (s *cvoSupervisor) run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		if s.wantStopped(ctx, false) {
			s.stopped.Store(true)
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
			continue
		}
		s.stopped.Store(false)
		op := cvo.New(s.config, s.opts)
		s.mu.Lock()
		s.current = op
		s.mu.Unlock()
		opCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- op.Run(opCtx) }()
		var err error
	watch:
		for {
			select {
			case err = <-done:
				break watch
			case <-tick.C:
				if s.wantStopped(ctx, true) {
					log.Info("Stopping the cluster version operator", "annotation", CVOStoppedAnnotation)
					cancel()
					err = <-done
					break watch
				}
			}
		}
		cancel()
		s.mu.Lock()
		s.current = nil
		s.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			// A failed start is retried, as the Deployment restarts it.
			log.Error(err, "The cluster version operator stopped; starting it again")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}
