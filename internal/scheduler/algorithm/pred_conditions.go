package algorithm

import (
	corev1 "k8s.io/api/core/v1"
)

// isBestEffort reports the BestEffort QoS class: the one the apiserver
// recorded, else computed as it does (no requests or limits anywhere,
// pod-level resources included).
func isBestEffort(pod *corev1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == corev1.PodQOSBestEffort
	}
	if r := pod.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		return false
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if len(cs[i].Resources.Requests) > 0 || len(cs[i].Resources.Limits) > 0 {
				return false
			}
		}
	}
	return true
}

// checkNodeMemoryPressure: a node under memory pressure takes no
// best-effort pods (the first the kubelet would evict).
type checkNodeMemoryPressure struct{}

func (checkNodeMemoryPressure) Name() string { return "CheckNodeMemoryPressure" }

func (checkNodeMemoryPressure) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	if ni.MemoryPressure && pi.BestEffort {
		return []string{ReasonMemoryPressure}
	}
	return nil
}

// checkNodeDiskPressure: a node under disk pressure takes no pods.
type checkNodeDiskPressure struct{}

func (checkNodeDiskPressure) Name() string { return "CheckNodeDiskPressure" }

func (checkNodeDiskPressure) Filter(_ *CycleState, _ *PodInfo, ni *NodeInfo) []string {
	if ni.DiskPressure {
		return []string{ReasonDiskPressure}
	}
	return nil
}

// checkNodePIDPressure: a node under PID pressure takes no pods.
type checkNodePIDPressure struct{}

func (checkNodePIDPressure) Name() string { return "CheckNodePIDPressure" }

func (checkNodePIDPressure) Filter(_ *CycleState, _ *PodInfo, ni *NodeInfo) []string {
	if ni.PIDPressure {
		return []string{ReasonPIDPressure}
	}
	return nil
}

// checkNodeCondition: the node must be Ready, have its network, and not be
// cordoned.
type checkNodeCondition struct{}

func (checkNodeCondition) Name() string { return "CheckNodeCondition" }

func (checkNodeCondition) Filter(_ *CycleState, _ *PodInfo, ni *NodeInfo) []string {
	var out []string
	if !ni.Ready {
		out = append(out, ReasonNodeNotReady)
	}
	if ni.NetworkUnavailable {
		out = append(out, ReasonNetworkUnavailable)
	}
	if ni.Node.Spec.Unschedulable {
		out = append(out, ReasonNodeUnschedulable)
	}
	return out
}
