package scheduler

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/leader"
)

// RunWithLeaderElection runs the scheduler only while it holds the Lease
// kube-system/<scheduler name>, so that replicas of one scheduler can stand
// by. It returns when ctx ends or leadership is lost, and only once the
// scheduler has stopped.
func (s *Scheduler) RunWithLeaderElection(ctx context.Context, client kubernetes.Interface) error {
	return leader.Run(ctx, client, leader.Config{Namespace: metav1.NamespaceSystem, Name: s.cfg.Name}, s.Run)
}
