package sim

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Prober runs a container's readiness probe for a simulated kubelet, when
// what the probe reaches is something capstan runs for the node for real
// (an etcd member's /readyz, on the port of its machine): handled is false
// for any other probe, and such a container is ready as soon as it runs,
// as every simulated container is.
type Prober func(ctx context.Context, node string, probe *corev1.Probe) (ready, handled bool)

// notReadyReason is the reason of a pod's Ready condition that a failing
// readiness probe turned False, as the kubelet words it.
const notReadyReason = "ContainersNotReady"

// probeState is a pod's readiness as its kubelet's prober tracks it.
type probeState struct {
	ready                bool
	successes, failures  int
	next                 time.Time
	handled, initialized bool
}

// probed reports whether a pod has readiness probes the simulation may
// run (a Prober is set and a container has one).
func (s *Simulator) probed(pod *corev1.Pod) bool {
	if s.opts.Prober == nil {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe != nil {
			return true
		}
	}
	return false
}

// trackProbes starts following a bound pod's readiness probes.
func (s *Simulator) trackProbes(key string, pod *corev1.Pod) {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if _, ok := s.probes[key]; ok {
		return
	}
	delay := time.Duration(0)
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe != nil {
			delay = max(delay, time.Duration(c.ReadinessProbe.InitialDelaySeconds)*time.Second)
		}
	}
	s.probes[key] = &probeState{next: s.opts.Clock.Now().Add(delay)}
}

func (s *Simulator) untrackProbes(key string) {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	delete(s.probes, key)
}

// probeReady is what a started pod's Ready condition should be: true for
// a pod without probes the simulation runs, else the probes' verdict.
func (s *Simulator) probeReady(key string) bool {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	st, ok := s.probes[key]
	return !ok || (st.initialized && !st.handled) || st.ready
}

// runProbes probes each followed pod when its period comes, as the
// kubelet's prober workers do, and reports a change of readiness.
func (s *Simulator) runProbes(ctx context.Context) {
	tick := s.opts.Clock.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		now := s.opts.Clock.Now()
		s.probeMu.Lock()
		var due []string
		for key, st := range s.probes {
			if !now.Before(st.next) {
				due = append(due, key)
			}
		}
		s.probeMu.Unlock()
		for _, key := range due {
			s.probePod(ctx, key, now)
		}
	}
}

func (s *Simulator) probePod(ctx context.Context, key string, now time.Time) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := s.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.untrackProbes(key)
		return
	}
	if err != nil || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return
	}
	if _, _, running := s.kubeletRunning(pod.Spec.NodeName); !running {
		// A stopped kubelet probes nothing; the node lifecycle
		// controller marks its pods not ready.
		return
	}
	ready, handled, period, success, failure := true, false, 10*time.Second, 1, 3
	for _, c := range pod.Spec.Containers {
		p := c.ReadinessProbe
		if p == nil {
			continue
		}
		ok, h := s.opts.Prober(ctx, pod.Spec.NodeName, p)
		if !h {
			continue
		}
		handled = true
		ready = ready && ok
		if p.PeriodSeconds > 0 {
			period = min(period, time.Duration(p.PeriodSeconds)*time.Second)
		}
		if p.SuccessThreshold > 0 {
			success = int(p.SuccessThreshold)
		}
		if p.FailureThreshold > 0 {
			failure = int(p.FailureThreshold)
		}
	}
	s.probeMu.Lock()
	st, ok := s.probes[key]
	if !ok {
		s.probeMu.Unlock()
		return
	}
	st.initialized, st.handled, st.next = true, handled, now.Add(period)
	if ready {
		st.successes, st.failures = st.successes+1, 0
		if st.successes >= success {
			st.ready = true
		}
	} else {
		st.successes, st.failures = 0, st.failures+1
		// A container is not ready until its first success; a ready one
		// turns unready after failureThreshold failures in a row.
		if !st.ready || st.failures >= failure {
			st.ready = false
		}
	}
	want := !handled || st.ready
	s.probeMu.Unlock()
	if !handled || podReady(pod) == want || !podStarted(pod) {
		return
	}
	if err := s.setReady(ctx, pod, want); err != nil {
		klog.FromContext(ctx).V(2).Info("Reporting a pod's readiness", "pod", key, "err", err)
	}
}

// setReady reports a running pod's containers ready or not, as the
// kubelet does when a readiness probe changes its verdict.
func (s *Simulator) setReady(ctx context.Context, pod *corev1.Pod, ready bool) error {
	updated := pod.DeepCopy()
	now := metav1.NewTime(s.opts.Clock.Now().Truncate(time.Second))
	setReadiness(&updated.Status, ready, now)
	for i := range updated.Status.ContainerStatuses {
		cs := &updated.Status.ContainerStatuses[i]
		if cs.State.Running != nil {
			cs.Ready = ready
		}
	}
	kctx, kube := s.kubelet(ctx, pod.Spec.NodeName)
	_, err := kube.CoreV1().Pods(pod.Namespace).UpdateStatus(kctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// setReadiness sets the Ready and ContainersReady conditions.
func setReadiness(st *corev1.PodStatus, ready bool, now metav1.Time) {
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		if ready {
			setPodCondition(st, t, now)
			continue
		}
		found := false
		for i := range st.Conditions {
			c := &st.Conditions[i]
			if c.Type != t {
				continue
			}
			found = true
			if c.Status != corev1.ConditionFalse || c.Reason != notReadyReason {
				c.Status, c.Reason, c.LastTransitionTime = corev1.ConditionFalse, notReadyReason, now
				c.Message = "containers with unready status: a readiness probe failed"
			}
		}
		if !found {
			st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: notReadyReason,
				Message: "containers with unready status: a readiness probe failed", LastTransitionTime: now})
		}
	}
}
