package sim

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/seeded"
)

// syncLease renews the node lease of a running kubelet, then schedules the
// next renewal at a quarter of the lease duration less up to 12% jitter,
// so that a thousand kubelets started together spread their writes.
func (s *Simulator) syncLease(ctx context.Context, name string) error {
	_, node, running := s.kubeletRunning(name)
	if !running || node == nil {
		s.kubeletStopped(name)
		return nil
	}
	s.kubeletRenewed(name)
	now := metav1.NewMicroTime(s.opts.Clock.Now())
	leases := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := s.leases.Leases(corev1.NamespaceNodeLease).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      name,
				Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(s.opts.LeaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating lease of node %s: %w", name, err)
		}
	case err != nil:
		return err
	default:
		renewed := lease.DeepCopy()
		renewed.Spec.RenewTime = &now
		renewed.Spec.HolderIdentity = ptr.To(name)
		if _, err := leases.Update(ctx, renewed, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// The cache is behind; the next attempt reads it again.
				return fmt.Errorf("renewing lease of node %s: %w", name, err)
			}
			return fmt.Errorf("renewing lease of node %s: %w", name, err)
		}
	}
	interval := s.opts.LeaseDuration / 4
	jitter := time.Duration(seeded.Float64() * 0.12 * float64(interval))
	s.leaseQueue.AddAfter(name, interval-jitter)
	return nil
}
