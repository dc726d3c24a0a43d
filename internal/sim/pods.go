package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func (s *Simulator) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	if s.probed(pod) {
		if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			s.trackProbes(key, pod)
		}
	}
	if !s.needsWork(pod) {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		s.podQueue.Add(key)
	}
}

// needsWork is a cheap pre-filter: a running, ready, undeleted pod needs
// nothing from its kubelet.
func (s *Simulator) needsWork(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return true
	}
	return !podStarted(pod) || (runsToCompletion(pod) && pod.Status.Phase == corev1.PodRunning)
}

// runsToCompletion reports whether a pod's containers exit when their
// work is done (restartPolicy Never or OnFailure, as a Job's pods have),
// rather than running until stopped.
func runsToCompletion(pod *corev1.Pod) bool {
	return pod.Spec.RestartPolicy == corev1.RestartPolicyNever || pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure
}

func podStarted(pod *corev1.Pod) bool {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return true
	case corev1.PodRunning:
		// The node lifecycle controller marks pods of a lost node not
		// ready; a kubelet that comes back reports them ready again. A
		// pod its readiness probe keeps not ready runs all the same.
		return pod.Status.PodIP != "" && pod.Status.StartTime != nil && (podReady(pod) || notReadyByProbe(pod))
	}
	return false
}

// notReadyByProbe reports whether the pod's readiness probe, not a lost
// node, made it not ready.
func notReadyByProbe(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionFalse && c.Reason == notReadyReason
		}
	}
	return false
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *Simulator) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		s.untrackProbes(key)
	}
	if pod.Spec.NodeName == "" || pod.Status.PodIP == "" {
		return
	}
	s.ipMu.Lock()
	defer s.ipMu.Unlock()
	if a := s.ips[pod.Spec.NodeName]; a != nil {
		a.release(pod.Status.PodIP, string(pod.UID))
	}
}

// syncPod does for one pod what the kubelet of its node would: start its
// containers and report it Running, or stop them when it is deleted.
func (s *Simulator) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := s.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	inst, node, running := s.kubeletRunning(pod.Spec.NodeName)
	if !running {
		// A stopped kubelet does nothing; it is queued again when it starts.
		return nil
	}
	if pod.DeletionTimestamp != nil {
		return s.terminatePod(ctx, key, pod)
	}
	boot := Boot(node)
	if podStarted(pod) && (pod.Status.Phase != corev1.PodRunning || startedInBoot(pod, boot)) {
		if runsToCompletion(pod) && pod.Status.Phase == corev1.PodRunning {
			return s.completePod(ctx, key, pod)
		}
		return nil
	}
	return s.startPod(ctx, pod, inst, boot)
}

// startedInBoot reports whether the pod's containers were started in
// this boot of its node (and need no restart).
func startedInBoot(pod *corev1.Pod, boot int) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.ContainerID != containerID(pod, cs.Name, boot) {
			return false
		}
	}
	return true
}

// completePod reports a run-to-completion pod Succeeded once its
// containers have run for the pod's run-seconds annotation.
func (s *Simulator) completePod(ctx context.Context, key string, pod *corev1.Pod) error {
	now := s.opts.Clock.Now()
	run, err := RunDuration(pod)
	if err != nil {
		s.reportInvalid(pod, pod.Spec.NodeName, err)
	}
	started := pod.Status.StartTime.Time
	if done := started.Add(run); now.Before(done) {
		s.podQueue.AddAfter(key, done.Sub(now))
		return nil
	}
	finished := metav1.NewTime(now.Truncate(time.Second))
	updated := pod.DeepCopy()
	st := &updated.Status
	st.Phase = corev1.PodSucceeded
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		cs.Ready, cs.Started = false, ptr.To(false)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: *pod.Status.StartTime, FinishedAt: finished, ContainerID: cs.ContainerID}}
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.Reason, c.LastTransitionTime = corev1.ConditionFalse, "PodCompleted", finished
		}
	}
	kctx, kube := s.kubelet(ctx, pod.Spec.NodeName)
	_, err = kube.CoreV1().Pods(pod.Namespace).UpdateStatus(kctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reporting pod %s succeeded: %w", key, err)
	}
	return nil
}

// terminatePod removes a deleted pod once its simulated containers have
// exited. Like a kubelet, it starts the grace period when it sees the
// deletion: the containers exit after the pod's shutdown annotation, or are
// killed when the grace period ends.
func (s *Simulator) terminatePod(ctx context.Context, key string, pod *corev1.Pod) error {
	now := s.opts.Clock.Now()
	seen := s.terminationSeen(pod.UID, now)
	grace := time.Duration(0)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	switch d, ok, err := ShutdownDelay(pod); {
	case err != nil:
		s.reportInvalid(pod, pod.Spec.NodeName, err)
	case ok:
		grace = min(grace, d)
	}
	exitAt := seen.Add(grace)
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || !podStarted(pod) {
		exitAt = now
	}
	if now.Before(exitAt) {
		s.podQueue.AddAfter(key, exitAt.Sub(now))
		return nil
	}
	uid := pod.UID
	kctx, kube := s.kubelet(ctx, pod.Spec.NodeName)
	err := kube.CoreV1().Pods(pod.Namespace).Delete(kctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("removing terminated pod %s: %w", key, err)
	}
	s.termMu.Lock()
	delete(s.terminating, pod.UID)
	s.termMu.Unlock()
	return nil
}

// terminationSeen returns when the simulator first saw the pod deleted.
func (s *Simulator) terminationSeen(uid types.UID, now time.Time) time.Time {
	s.termMu.Lock()
	defer s.termMu.Unlock()
	if t, ok := s.terminating[uid]; ok {
		return t
	}
	s.terminating[uid] = now
	return now
}

// RestoredStatusAnnotation on a pod carries, as JSON (RestoredStatus),
// what the pod's status was in the snapshot a simulation restored it
// from: the API server makes every pod without a status, and its kubelet
// starts it so.
const RestoredStatusAnnotation = "sim.capstan.dev/restored-status"

// RestoredStatus is what a restored pod's kubelet keeps of its snapshot.
type RestoredStatus struct {
	// StartedAgoSeconds is how long before its start here the pod had
	// started, in the simulation's real time (the snapshot's age divided
	// by its speed).
	StartedAgoSeconds float64 `json:"startedAgoSeconds"`
	// Restarts are its containers' restart counts, by name.
	Restarts map[string]int32 `json:"restarts,omitempty"`
	// NotReady says it was running but not ready: it stays so, as a
	// readiness probe that keeps failing keeps it (unless the simulation
	// runs its probes: a Prober answers them).
	NotReady bool `json:"notReady,omitempty"`
}

// restoredStatus is the pod's RestoredStatusAnnotation, nil without one
// (or with one that does not parse: the pod then starts as any other).
func restoredStatus(pod *corev1.Pod) *RestoredStatus {
	raw := pod.Annotations[RestoredStatusAnnotation]
	if raw == "" {
		return nil
	}
	var rs RestoredStatus
	if json.Unmarshal([]byte(raw), &rs) != nil {
		return nil
	}
	return &rs
}

// startPod reports the pod's containers running and ready.
func (s *Simulator) startPod(ctx context.Context, pod *corev1.Pod, inst *Instance, boot int) error {
	podIP := inst.InternalIP
	if !pod.Spec.HostNetwork {
		ip, err := s.allocateIP(pod, inst)
		if err != nil {
			return err
		}
		podIP = ip
	}
	now := metav1.NewTime(s.opts.Clock.Now().Truncate(time.Second))
	started := now
	restored := restoredStatus(pod)
	have := pod.Status.ContainerStatuses
	switch {
	case pod.Status.StartTime != nil:
		started = *pod.Status.StartTime
	case restored != nil:
		// A pod a simulation restored starts as it ran in the snapshot.
		started = metav1.NewTime(now.Add(-time.Duration(restored.StartedAgoSeconds * float64(time.Second))).Truncate(time.Second))
		for name, n := range restored.Restarts {
			have = append(have, corev1.ContainerStatus{Name: name, RestartCount: n})
		}
	}
	// A full status update from the cached pod costs the apiserver far
	// less than a patch; a stale cache only means a conflict and a retry.
	updated := pod.DeepCopy()
	st := &updated.Status
	st.Phase = corev1.PodRunning
	st.HostIP, st.HostIPs = inst.InternalIP, []corev1.HostIP{{IP: inst.InternalIP}}
	st.PodIP, st.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	st.StartTime = &started
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		setPodCondition(st, t, now)
	}
	st.ContainerStatuses = containerStatuses(pod, have, pod.Spec.Containers, started, now, boot, false)
	// A restored pod that was not ready stays so, unless the simulation
	// runs its readiness probes: they decide, as the kubelet's would.
	keptUnready := restored != nil && restored.NotReady && !s.probed(pod)
	if key, err := cache.MetaNamespaceKeyFunc(pod); (err == nil && !s.probeReady(key)) || keptUnready {
		// Running, not ready until its readiness probe says so.
		setReadiness(st, false, now)
		for i := range st.ContainerStatuses {
			st.ContainerStatuses[i].Ready = false
		}
	}
	if len(pod.Spec.InitContainers) > 0 {
		st.InitContainerStatuses = containerStatuses(pod, pod.Status.InitContainerStatuses, pod.Spec.InitContainers, started, now, boot, true)
	} else {
		st.InitContainerStatuses = nil
	}
	kctx, kube := s.kubelet(ctx, pod.Spec.NodeName)
	_, err := kube.CoreV1().Pods(pod.Namespace).UpdateStatus(kctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reporting pod %s/%s running: %w", pod.Namespace, pod.Name, err)
	}
	// Its images are on the node now: the node reports them.
	if s.recordImages(pod) {
		s.nodeQueue.Add(pod.Spec.NodeName)
	}
	return nil
}

// setPodCondition sets a condition True, keeping its transition time when
// it already was.
func setPodCondition(st *corev1.PodStatus, t corev1.PodConditionType, now metav1.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != corev1.ConditionTrue {
				st.Conditions[i].Status = corev1.ConditionTrue
				st.Conditions[i].LastTransitionTime = now
				st.Conditions[i].Reason, st.Conditions[i].Message = "", ""
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
}

// containerStatuses reports containers running since started; a
// container that ran in an earlier boot of the node was restarted now,
// after the reboot, and says so as the kubelet does (its restart count,
// and its last state terminated with exit code 255, reason Unknown).
func containerStatuses(pod *corev1.Pod, have []corev1.ContainerStatus, containers []corev1.Container, started, now metav1.Time, boot int, init bool) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		st := corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     c.Image,
			ContainerID: containerID(pod, c.Name, boot),
		}
		runningSince := started
		for _, old := range have {
			if old.Name != c.Name {
				continue
			}
			st.RestartCount, st.LastTerminationState = old.RestartCount, old.LastTerminationState
			if old.ContainerID != "" && old.ContainerID != st.ContainerID {
				st.RestartCount++
				last := &corev1.ContainerStateTerminated{ExitCode: 255, Reason: "Unknown", FinishedAt: now, ContainerID: old.ContainerID}
				if old.State.Running != nil {
					last.StartedAt = old.State.Running.StartedAt
				}
				st.LastTerminationState = corev1.ContainerState{Terminated: last}
				runningSince = now
			} else if old.State.Running != nil {
				runningSince = old.State.Running.StartedAt
			}
		}
		if init && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			st.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: runningSince, FinishedAt: runningSince}
		} else {
			st.Ready = true
			st.Started = ptr.To(true)
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: runningSince}
		}
		out = append(out, st)
	}
	return out
}

// ipAllocator hands out the pod addresses of one node's /23.
type ipAllocator struct {
	prefix netip.Prefix
	used   map[netip.Addr]string // address -> pod UID
}

func (s *Simulator) allocateIP(pod *corev1.Pod, inst *Instance) (string, error) {
	s.ipMu.Lock()
	defer s.ipMu.Unlock()
	a := s.ips[pod.Spec.NodeName]
	if a == nil || a.prefix.String() != inst.PodCIDR {
		prefix, err := netip.ParsePrefix(inst.PodCIDR)
		if err != nil {
			return "", fmt.Errorf("instance %s has a bad pod CIDR: %w", inst.Name(), err)
		}
		a = &ipAllocator{prefix: prefix, used: map[netip.Addr]string{}}
		// Pods already running on the node keep their addresses.
		objs, _ := s.podIndex.ByIndex(podsByNodeIndex, pod.Spec.NodeName)
		for _, o := range objs {
			p := o.(*corev1.Pod)
			if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil && prefix.Contains(ip) {
				a.used[ip] = string(p.UID)
			}
		}
		s.ips[pod.Spec.NodeName] = a
	}
	for ip, uid := range a.used {
		if uid == string(pod.UID) {
			return ip.String(), nil
		}
	}
	// Skip the network address; the gateway takes the first host address.
	ip := a.prefix.Addr().Next().Next()
	for a.prefix.Contains(ip) {
		if _, taken := a.used[ip]; !taken {
			a.used[ip] = string(pod.UID)
			return ip.String(), nil
		}
		ip = ip.Next()
	}
	return "", fmt.Errorf("node %s has no free pod address in %s", pod.Spec.NodeName, inst.PodCIDR)
}

func (a *ipAllocator) release(ip, uid string) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return
	}
	if a.used[addr] == uid {
		delete(a.used, addr)
	}
}
