package scheduler

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// ReasonPreempted is the reason of the event a preempted pod gets, as
// upstream's.
const ReasonPreempted = "Preempted"

// startPreemption carries out a preemption the algorithm decided, as
// upstream's asynchronous preemption does: the pods nominated to the node
// with a lower priority lose their nomination (the room they counted on is
// taken), and each victim gets the DisruptionTarget condition (reason
// PreemptionByScheduler) and is deleted gracefully, with a Preempted event.
// The preemptor is not tried again until that is done.
func (s *Scheduler) startPreemption(ctx context.Context, preemptor *corev1.Pod, p *algorithm.Preemption) {
	s.preemptingMu.Lock()
	s.preempting[preemptor.UID] = true
	s.preemptingMu.Unlock()
	lower := s.cache.nominatedBelow(p.Node, corev1helpers.PodPriority(preemptor))
	s.metrics.preemptionVictims.Observe(float64(len(p.Victims)))
	s.preemptions.Add(1)
	go func() {
		defer s.preemptions.Done()
		logger := klog.FromContext(ctx)
		for _, np := range lower {
			if err := s.clearNomination(ctx, np); err != nil && !apierrors.IsNotFound(err) {
				logger.Error(err, "Clearing the nomination of a lower-priority pod", "pod", klog.KObj(np), "node", p.Node)
			}
		}
		for _, victim := range p.Victims {
			if victim.DeletionTimestamp != nil {
				// Already going.
				continue
			}
			if err := s.preemptPod(ctx, preemptor, victim, p.Node); err != nil {
				logger.Error(err, "Preempting a pod", "preemptor", klog.KObj(preemptor), "victim", klog.KObj(victim), "node", p.Node)
			}
		}
		s.preemptingMu.Lock()
		delete(s.preempting, preemptor.UID)
		s.preemptingMu.Unlock()
		// Deletions have begun: the preemptor may be tried again (it
		// waits on its nominated node until its victims are gone).
		s.queue.MoveAllToActive()
	}()
}

func (s *Scheduler) isPreempting(uid types.UID) bool {
	s.preemptingMu.Lock()
	defer s.preemptingMu.Unlock()
	return s.preempting[uid]
}

// preemptPod marks a victim and deletes it. A victim already gone is not
// an error.
func (s *Scheduler) preemptPod(ctx context.Context, preemptor, victim *corev1.Pod, node string) error {
	cond := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler,
		Message: fmt.Sprintf("%s: preempting to accommodate a higher priority pod", preemptor.Spec.SchedulerName), LastTransitionTime: metav1.NewTime(s.cfg.Clock.Now())}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	pods := s.client.CoreV1().Pods(victim.Namespace)
	if _, err := pods.Patch(ctx, victim.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("adding the DisruptionTarget condition: %w", err)
	}
	// The UID precondition keeps a pod that replaced the victim under the
	// same name from being deleted in its place.
	if err := pods.Delete(ctx, victim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &victim.UID}}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("deleting: %w", err)
	}
	s.recorder.Eventf(victim, corev1.EventTypeNormal, ReasonPreempted, "Preempted by pod %s on node %s", preemptor.UID, node)
	return nil
}

// clearNomination takes a pod's nomination away.
func (s *Scheduler) clearNomination(ctx context.Context, pod *corev1.Pod) error {
	s.cache.nominate(pod, "")
	patch := []byte(`{"status":{"nominatedNodeName":null}}`)
	_, err := s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
