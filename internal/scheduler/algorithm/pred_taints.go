package algorithm

import (
	corev1 "k8s.io/api/core/v1"
)

// podToleratesNodeTaints: every NoSchedule and NoExecute taint of the node
// must be tolerated. noExecuteOnly restricts it to NoExecute taints
// (PodToleratesNodeNoExecuteTaints).
type podToleratesNodeTaints struct {
	name          string
	noExecuteOnly bool
}

func (p podToleratesNodeTaints) Name() string { return p.name }

func (p podToleratesNodeTaints) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	for i := range ni.Node.Spec.Taints {
		t := &ni.Node.Spec.Taints[i]
		switch t.Effect {
		case corev1.TaintEffectNoExecute:
		case corev1.TaintEffectNoSchedule:
			if p.noExecuteOnly {
				continue
			}
		default:
			continue
		}
		if !tolerates(pi.Pod.Spec.Tolerations, t) {
			return []string{untoleratedTaint(t.Key, t.Value)}
		}
	}
	return nil
}

// tolerates reports whether some toleration tolerates the taint: same key
// (an empty key with Exists matches every key), same effect (an empty
// effect matches every effect), and Equal with the same value or Exists.
func tolerates(tolerations []corev1.Toleration, t *corev1.Taint) bool {
	for i := range tolerations {
		if toleratesTaint(&tolerations[i], t) {
			return true
		}
	}
	return false
}

func toleratesTaint(tol *corev1.Toleration, t *corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Value == t.Value
	}
	return false
}

// checkNodeUnschedulable: a cordoned node takes only pods that tolerate
// node.kubernetes.io/unschedulable.
type checkNodeUnschedulable struct{}

func (checkNodeUnschedulable) Name() string { return "CheckNodeUnschedulable" }

func (checkNodeUnschedulable) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	if !ni.Node.Spec.Unschedulable {
		return nil
	}
	t := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	if tolerates(pi.Pod.Spec.Tolerations, &t) {
		return nil
	}
	return []string{ReasonNodeUnschedulable}
}
