package algorithm

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/capstan-dev/capstan/internal/taints"
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
	for i := range ni.Taints {
		t := &ni.Taints[i]
		if p.noExecuteOnly && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !taints.Tolerated(pi.Pod.Spec.Tolerations, t) {
			return []string{untoleratedTaint(t.Key, t.Value)}
		}
	}
	return nil
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
	if taints.Tolerated(pi.Pod.Spec.Tolerations, &t) {
		return nil
	}
	return []string{ReasonNodeUnschedulable}
}
