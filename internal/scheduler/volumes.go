package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// bindVolumes carries out a decision's volume bindings before the pod is
// bound, as kube-scheduler's VolumeBinding plugin does: a chosen volume
// gets the claim in its claimRef (the persistent volume controller then
// binds the claim to it), a claim to provision gets the node in its
// volume.kubernetes.io/selected-node annotation (its provisioner then
// creates a volume there). It returns once every claim is bound.
func (s *Scheduler) bindVolumes(ctx context.Context, pod *corev1.Pod, bindings []algorithm.VolumeBinding) error {
	for _, b := range bindings {
		var err error
		if b.Volume != "" {
			err = s.claimVolume(ctx, b)
		} else {
			err = s.selectNode(ctx, b)
		}
		if err != nil {
			return err
		}
	}
	return waitfor.Poll(ctx, 100*time.Millisecond, s.cfg.VolumeBindTimeout, func(ctx context.Context) (bool, string, error) {
		for _, b := range bindings {
			pvc, err := s.listers.PersistentVolumeClaims.PersistentVolumeClaims(b.Claim.Namespace).Get(b.Claim.Name)
			if err != nil {
				return false, "", fmt.Errorf("claim %s: %w", algorithm.ClaimKey(b.Claim), err)
			}
			if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
				return false, fmt.Sprintf("claim %s is %s", algorithm.ClaimKey(b.Claim), pvc.Status.Phase), nil
			}
		}
		return true, "", nil
	})
}

// claimVolume points a volume's claimRef at the claim, unless another
// claim got it first.
func (s *Scheduler) claimVolume(ctx context.Context, b algorithm.VolumeBinding) error {
	pvs := s.client.CoreV1().PersistentVolumes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := pvs.Get(ctx, b.Volume, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("volume %s for claim %s: %w", b.Volume, algorithm.ClaimKey(b.Claim), err)
		}
		if ref := pv.Spec.ClaimRef; ref != nil {
			if ref.Namespace == b.Claim.Namespace && ref.Name == b.Claim.Name && (ref.UID == "" || ref.UID == b.Claim.UID) {
				return nil
			}
			return fmt.Errorf("volume %s was taken by claim %s/%s", b.Volume, ref.Namespace, ref.Name)
		}
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
			Namespace: b.Claim.Namespace, Name: b.Claim.Name, UID: b.Claim.UID, ResourceVersion: b.Claim.ResourceVersion}
		if pv.Annotations == nil {
			pv.Annotations = map[string]string{}
		}
		pv.Annotations[algorithm.AnnBoundByController] = "yes"
		_, err = pvs.Update(ctx, pv, metav1.UpdateOptions{})
		return err
	})
}

// selectNode asks the claim's provisioner for a volume on the node.
func (s *Scheduler) selectNode(ctx context.Context, b algorithm.VolumeBinding) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{algorithm.AnnSelectedNode: b.Node},
		"uid":         b.Claim.UID,
	}})
	if err != nil {
		return err
	}
	_, err = s.client.CoreV1().PersistentVolumeClaims(b.Claim.Namespace).Patch(ctx, b.Claim.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("selecting node %s for claim %s: %w", b.Node, algorithm.ClaimKey(b.Claim), err)
	}
	return nil
}
