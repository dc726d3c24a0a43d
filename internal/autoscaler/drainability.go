package autoscaler

import (
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"k8s.io/utils/clock"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/drain"
)

// Pod annotations the scale-down honours, with upstream's keys.
const (
	// SafeToEvictAnnotation "true" lets a pod move whatever else holds it;
	// "false" keeps its node.
	SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	// SafeToEvictLocalVolumesAnnotation lists local volumes that may be
	// lost ("v1,v2").
	SafeToEvictLocalVolumesAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
	// ScaleDownDisabledAnnotation "true" on a node keeps it.
	ScaleDownDisabledAnnotation = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
	mirrorPodAnnotation         = "kubernetes.io/config.mirror"
)

// BlockingReason is why a pod keeps its node, upstream's enum.
type BlockingReason string

// The blocking reasons.
const (
	ControllerNotFound       BlockingReason = "ControllerNotFound"
	NotReplicated            BlockingReason = "NotReplicated"
	LocalStorageRequested    BlockingReason = "LocalStorageRequested"
	NotSafeToEvictAnnotation BlockingReason = "NotSafeToEvictAnnotation"
	UnmovableKubeSystemPod   BlockingReason = "UnmovableKubeSystemPod"
	NotEnoughPdb             BlockingReason = "NotEnoughPdb"
)

// Blocker is a pod that keeps its node, and why.
type Blocker struct {
	Pod     *corev1.Pod
	Reason  BlockingReason
	Message string
}

// drainOutcome is what a pod means for removing its node.
type drainOutcome int

const (
	// drainSkip: the pod needs no place (mirror, terminating, finished,
	// expendable, daemon set pod).
	drainSkip drainOutcome = iota
	// drainMove: the pod must find a place elsewhere.
	drainMove
	// drainBlock: the pod keeps the node.
	drainBlock
)

// drainContext is what the rules consult besides the pod.
type drainContext struct {
	cfg   *Config
	now   time.Time
	clock clock.PassiveClock
	pdbs  []*policyv1.PodDisruptionBudget
	// controllerExists says whether a pod's controller is still there.
	controllerExists func(ns string, ref *metav1.OwnerReference) bool
}

// replicatedKinds are the controllers that recreate an evicted pod.
// isDaemonSetPod reports whether a DaemonSet controls the pod.
func isDaemonSetPod(p *corev1.Pod) bool {
	o := metav1.GetControllerOf(p)
	return o != nil && o.Kind == "DaemonSet"
}

// isMirrorPod reports whether the pod mirrors a kubelet's static pod.
func isMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[mirrorPodAnnotation]
	return ok
}

var replicatedKinds = map[string]bool{"ReplicationController": true, "ReplicaSet": true, "Job": true, "StatefulSet": true}

// drainability applies upstream's drainability rules, in their order, to
// a pod on a node the autoscaler would remove.
func (d *drainContext) drainability(p *corev1.Pod) (drainOutcome, *Blocker) {
	name := p.Namespace + "/" + p.Name
	block := func(r BlockingReason, format string, args ...any) (drainOutcome, *Blocker) {
		return drainBlock, &Blocker{Pod: p, Reason: r, Message: fmt.Sprintf(format, args...)}
	}
	if isMirrorPod(p) {
		return drainSkip, nil
	}
	if p.DeletionTimestamp != nil {
		grace := 30 * time.Second
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		// The pod's grace is real time in a simulation (the restore
		// divides it by the speed); the 30 s beyond it is the
		// autoscaler's.
		if d.now.After(simclock.Add(d.clock, p.DeletionTimestamp.Add(grace), 30*time.Second)) {
			return drainSkip, nil
		}
	}
	if p.Spec.Priority != nil && *p.Spec.Priority < d.cfg.PriorityCutoff {
		// Expendable: it may be killed without any consideration.
		return drainSkip, nil
	}
	owner := metav1.GetControllerOf(p)
	if owner != nil && (replicatedKinds[owner.Kind] || owner.Kind == "DaemonSet") && !d.controllerExists(p.Namespace, owner) {
		return block(ControllerNotFound, "pod %s: its %s %s does not exist", name, owner.Kind, owner.Name)
	}
	if isDaemonSetPod(p) {
		return drainSkip, nil
	}
	safe := p.Annotations[SafeToEvictAnnotation]
	if safe == "true" {
		return drainMove, nil
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return drainSkip, nil
	}
	if owner == nil || !replicatedKinds[owner.Kind] {
		return block(NotReplicated, "pod %s is not replicated (no controller that recreates it)", name)
	}
	if p.Namespace == metav1.NamespaceSystem && len(d.matchingPDBs(p)) == 0 {
		return block(UnmovableKubeSystemPod, "non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: %s", name)
	}
	if safe == "false" {
		return block(NotSafeToEvictAnnotation, "pod %s is annotated %s: \"false\"", name, SafeToEvictAnnotation)
	}
	if d.cfg.SkipNodesWithLocalStorage {
		if v := localVolume(p); v != "" {
			return block(LocalStorageRequested, "pod %s has local storage (volume %s)", name, v)
		}
	}
	for _, pdb := range d.matchingPDBs(p) {
		if pdb.Status.DisruptionsAllowed < 1 {
			return block(NotEnoughPdb, "not enough pod disruption budget to move pod %s (PodDisruptionBudget %s allows %d disruptions)", name, pdb.Name, pdb.Status.DisruptionsAllowed)
		}
	}
	return drainMove, nil
}

// localVolume names the pod's first emptyDir (not in memory) or hostPath
// volume not listed as safe to lose, or "".
func localVolume(p *corev1.Pod) string {
	safe := map[string]bool{}
	for _, v := range strings.Split(p.Annotations[SafeToEvictLocalVolumesAnnotation], ",") {
		safe[strings.TrimSpace(v)] = true
	}
	for _, v := range p.Spec.Volumes {
		local := v.HostPath != nil || (v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory)
		if local && !safe[v.Name] {
			return v.Name
		}
	}
	return ""
}

func (d *drainContext) matchingPDBs(p *corev1.Pod) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, pdb := range d.pdbs {
		if drain.BudgetCovers(pdb, p) {
			out = append(out, pdb)
		}
	}
	return out
}
