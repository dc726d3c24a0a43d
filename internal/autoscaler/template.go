package autoscaler

import (
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// Prefixes of taints a new node carries only while it starts (upstream's
// startup taints, and those it ignores the same way).
const (
	startupTaintPrefix = "startup-taint.cluster-autoscaler.kubernetes.io/"
	ignoreTaintPrefix  = "ignore-taint.cluster-autoscaler.kubernetes.io/"
)

// sanitizeTemplate takes off a template node the taints that a new node
// sheds once it has started (createSanitizedNode upstream): the
// ClusterAutoscaler's startupTaints and those with the startup and
// ignore prefixes. A pod that does not tolerate them still fits.
func sanitizeTemplate(n *corev1.Node, startup []string) *corev1.Node {
	if n == nil {
		return nil
	}
	var kept []corev1.Taint
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, startupTaintPrefix) || strings.HasPrefix(t.Key, ignoreTaintPrefix) || slices.Contains(startup, t.Key) {
			continue
		}
		kept = append(kept, t)
	}
	if len(kept) == len(n.Spec.Taints) {
		return n
	}
	out := n.DeepCopy()
	out.Spec.Taints = kept
	return out
}

// daemonTolerations are what the DaemonSet controller adds to every
// daemon pod, so it runs on nodes that are not ready or under pressure.
var daemonTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// daemonPodsFor are the pods the DaemonSets would run on a new node like
// template (podsExpectedOnFreshNode upstream): each daemon pod goes there
// if the node passes its node selector, affinity and taints (with the
// tolerations every daemon pod gets) and has room for it, in turn.
func daemonPodsFor(alg *algorithm.Algorithm, template *corev1.Node, daemonSets []*appsv1.DaemonSet) []*algorithm.PodInfo {
	if template == nil || len(daemonSets) == 0 {
		return nil
	}
	ni := alg.NewNodeInfoFor(template)
	snap := algorithm.NewSnapshot([]*algorithm.NodeInfo{ni}, algorithm.Listers{})
	var out []*algorithm.PodInfo
	for _, ds := range daemonSets {
		if ds.DeletionTimestamp != nil {
			continue
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + template.Name, Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels,
				UID:             types.UID("daemon-" + string(ds.UID) + "-" + template.Name),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
			Spec: *ds.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, daemonTolerations...)
		if pod.Spec.HostNetwork {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
		}
		pi := algorithm.NewPodInfo(pod)
		if alg.Fits(alg.PreFilter(pi, snap), pi, ni) != nil {
			continue
		}
		snap.Place(pi, ni)
		out = append(out, pi)
	}
	return out
}
