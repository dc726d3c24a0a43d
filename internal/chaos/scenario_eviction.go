package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
)

// The eviction scenario's workload.
const (
	evictApp        = "chaos-evict"
	evictReplicas   = 3
	evictToleration = 15
	keepPod         = "chaos-keep"
)

// evictionScenario stops a worker's kubelet with pods on it: the node
// lifecycle controller taints it, the taint eviction controller evicts
// the pods whose toleration runs out, their ReplicaSet replaces them on
// the other workers, and a pod that tolerates the taint for ever stays.
func evictionScenario() *Scenario {
	return &Scenario{
		Name: "eviction",
		Doc: "a worker's kubelet stopped with 3 pods of a Deployment tolerating unreachable for 15s and a pod tolerating it for ever: " +
			"no pod evicted before its toleration ran out, the tolerating pod never evicted, each evicted pod replaced once on another worker",
		Args: []string{"--control-plane-nodes", "1", "--nodes", "3", "--node-monitor-grace-period", "20s", "--node-lease-duration", "8s",
			"--default-unreachable-toleration-seconds", "30", "--default-not-ready-toleration-seconds", "30"},
		Span:     40 * time.Second,
		Timeout:  settleTime,
		Progress: evictionProgress,
		Check:    checkEviction,
	}
}

// workers are the worker nodes by name; the first is the one stopped.
func workers(ctx context.Context, r *Run) ([]corev1.Node, error) {
	list, err := r.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.LabelRoleWorker})
	if err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

func cordon(ctx context.Context, r *Run, node string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	_, err := r.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func evictionProgress(ctx context.Context, r *Run) (bool, string, error) {
	ws, err := workers(ctx, r)
	if err != nil || len(ws) < 2 {
		return false, fmt.Sprintf("%d workers", len(ws)), err
	}
	victim := ws[0].Name
	ph, err := phase(ctx, r)
	if err != nil {
		return false, "", err
	}
	switch ph {
	case "":
		// Only the victim takes the workload.
		for _, w := range ws[1:] {
			if err := cordon(ctx, r, w.Name, true); err != nil {
				return false, "", err
			}
		}
		tolerate := func(secs *int64) []corev1.Toleration {
			return []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs},
			}
		}
		spec := corev1.PodSpec{
			Tolerations: tolerate(ptr.To[int64](evictToleration)),
			// Graceful: an evicted pod stays Terminating on the stopped
			// node, and says when it was evicted.
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: evictApp, Namespace: ackNamespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(evictReplicas)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": evictApp}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": evictApp}}, Spec: spec},
			},
		}
		if _, err := r.Kube.AppsV1().Deployments(ackNamespace).Create(ctx, dep, metav1.CreateOptions{}); created(err) != nil {
			return false, "", err
		}
		keep := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: keepPod, Namespace: ackNamespace, Labels: map[string]string{"app": keepPod}},
			Spec: corev1.PodSpec{NodeName: victim, Tolerations: tolerate(nil), TerminationGracePeriodSeconds: ptr.To[int64](30),
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		if _, err := r.Kube.CoreV1().Pods(ackNamespace).Create(ctx, keep, metav1.CreateOptions{}); created(err) != nil {
			return false, "", err
		}
		_, pods, err := runningPods(ctx, r, evictApp)
		if err != nil {
			return false, "", err
		}
		onVictim := 0
		for _, p := range pods {
			switch {
			case p.DeletionTimestamp != nil || p.Spec.NodeName == "":
			case p.Spec.NodeName != victim:
				// The scheduler placed it before its cache saw the
				// cordon (as kube-scheduler may): it goes, and its
				// ReplicaSet makes another.
				if err := r.Kube.CoreV1().Pods(ackNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
					return false, "", err
				}
			case p.Status.Phase == corev1.PodRunning:
				onVictim++
			}
		}
		if onVictim < evictReplicas || len(pods) != evictReplicas {
			return false, fmt.Sprintf("%d of %d pods running on %s (%d pods)", onVictim, evictReplicas, victim, len(pods)), nil
		}
		if k, _, err := runningPods(ctx, r, keepPod); err != nil || k != 1 {
			return false, "the tolerating pod is not running", err
		}
		// Room elsewhere for the replacements, then the kubelet stops.
		for _, w := range ws[1:] {
			if err := cordon(ctx, r, w.Name, false); err != nil {
				return false, "", err
			}
		}
		if err := sim.StopNode(ctx, r.Kube, victim); err != nil {
			return false, "", err
		}
		return false, "stopped " + victim, setPhase(ctx, r, "stopped")
	}
	_, pods, err := runningPods(ctx, r, evictApp)
	if err != nil {
		return false, "", err
	}
	replaced, left := 0, 0
	for _, p := range pods {
		switch {
		case p.Spec.NodeName == victim && p.DeletionTimestamp == nil:
			left++
		case p.Spec.NodeName != victim && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning:
			replaced++
		}
	}
	if left > 0 || replaced < evictReplicas {
		return false, fmt.Sprintf("%d pods not evicted from %s, %d replacements running", left, victim, replaced), nil
	}
	// The tolerating pod stays (the check says so if it went).
	if _, err := r.Kube.CoreV1().Pods(ackNamespace).Get(ctx, keepPod, metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return false, "", err
	}
	return true, "", nil
}

// checkEviction replays the pods and the stopped node.
func checkEviction(ctx context.Context, r *Run) []Violation {
	ws, err := workers(ctx, r)
	if err != nil || len(ws) == 0 {
		return []Violation{{"completes", fmt.Sprintf("no workers: %v", err)}}
	}
	return evictionViolations(r.History, ws[0].Name)
}

// evictionViolations checks the evictions from victim.
func evictionViolations(h *History, victim string) []Violation {
	var out []Violation
	add := func(inv, format string, a ...any) { out = append(out, Violation{inv, fmt.Sprintf(format, a...)}) }
	// The first NoExecute taint of the stopped node.
	var tainted time.Time
	nodeStates(h, func(_ int64, n, _ *corev1.Node, _ map[string]*corev1.Node) {
		if n == nil || n.Name != victim || !tainted.IsZero() {
			return
		}
		for _, t := range n.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) && t.TimeAdded != nil {
				tainted = t.TimeAdded.Time
			}
		}
	})
	if tainted.IsZero() {
		add("completes", "node %s was never tainted NoExecute", victim)
		return out
	}
	// Replacements are the pods made after the taint (those made before,
	// for a pod the scenario moved off another worker, are not).
	replacements := map[string]bool{}
	evicted := map[string]time.Time{}
	for _, e := range h.Events(podsKey + ackNamespace + "/") {
		p, ok := e.Obj.(*corev1.Pod)
		if !ok {
			if prev, ok := e.Prev.(*corev1.Pod); ok && prev.Name == keepPod {
				add("tolerations", "pod %s, which tolerates %s for ever, was deleted (revision %d)", keepPod, victim, e.Rev)
			}
			continue
		}
		if p.Labels["app"] == evictApp && e.Prev == nil && p.CreationTimestamp.After(tainted) {
			replacements[p.Name] = true
		}
		if p.DeletionTimestamp == nil || (e.Prev != nil && e.Prev.(*corev1.Pod).DeletionTimestamp != nil) {
			continue
		}
		at := p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second)
		switch {
		case p.Name == keepPod:
			add("tolerations", "pod %s, which tolerates %s for ever, was evicted at %s", keepPod, victim, at.Format(time.RFC3339))
		case p.Labels["app"] == evictApp && p.Spec.NodeName == victim:
			evicted[p.Name] = at
			// Timestamps are whole seconds: a second of slack.
			if earliest := tainted.Add(evictToleration * time.Second); at.Add(time.Second).Before(earliest) {
				add("tolerations", "pod %s was evicted at %s, before its %ds toleration of the taint added at %s ran out",
					p.Name, at.Format(time.RFC3339), evictToleration, tainted.Format(time.RFC3339))
			}
		}
	}
	if len(evicted) != evictReplicas {
		add("completes", "%d pods evicted from %s, want %d", len(evicted), victim, evictReplicas)
	}
	if len(replacements) != len(evicted) {
		add("replacements", "%d pods of %s were created after the taint for %d evictions: each evicted pod is replaced once", len(replacements), evictApp, len(evicted))
	}
	return out
}
