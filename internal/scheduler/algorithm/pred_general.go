package algorithm

// podFitsResources: the node's allocatable must hold the pod's requests on
// top of what its pods request; one more pod must fit its pod count.
type podFitsResources struct{}

func (podFitsResources) Name() string { return "PodFitsResources" }

func (podFitsResources) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	return fitsResources(pi, ni)
}

// resolvable: preemption can free what the pod asks for unless it asks
// for more of something than the node allocates at all.
func (podFitsResources) resolvable(pi *PodInfo, ni *NodeInfo, _ []string) bool {
	return !exceedsAllocatable(pi, ni)
}

// exceedsAllocatable reports a request no pod removed could make room for:
// more of a resource than the node allocates.
func exceedsAllocatable(pi *PodInfo, ni *NodeInfo) bool {
	r := &pi.Requests
	if r.MilliCPU > ni.Allocatable.MilliCPU || r.Memory > ni.Allocatable.Memory || r.EphemeralStorage > ni.Allocatable.EphemeralStorage {
		return true
	}
	for name, q := range r.Scalar {
		if q > ni.Allocatable.Scalar[name] {
			return true
		}
	}
	return false
}

func fitsResources(pi *PodInfo, ni *NodeInfo) []string {
	var out []string
	if ni.Requested.Pods+1 > ni.Allocatable.Pods {
		out = append(out, ReasonTooManyPods)
	}
	r := &pi.Requests
	if r.MilliCPU > 0 && ni.Requested.MilliCPU+r.MilliCPU > ni.Allocatable.MilliCPU {
		out = append(out, insufficient("cpu"))
	}
	if r.Memory > 0 && ni.Requested.Memory+r.Memory > ni.Allocatable.Memory {
		out = append(out, insufficient("memory"))
	}
	if r.EphemeralStorage > 0 && ni.Requested.EphemeralStorage+r.EphemeralStorage > ni.Allocatable.EphemeralStorage {
		out = append(out, insufficient("ephemeral-storage"))
	}
	for name, q := range r.Scalar {
		if q > 0 && ni.Requested.Scalar[name]+q > ni.Allocatable.Scalar[name] {
			out = append(out, insufficient(string(name)))
		}
	}
	return out
}

// podFitsHostPorts: no host port of the pod may be in use on the node.
type podFitsHostPorts struct{ name string }

func (p podFitsHostPorts) Name() string { return p.name }

func (podFitsHostPorts) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	return fitsHostPorts(pi, ni)
}

// resolvable: the pod holding the port may be a victim.
func (podFitsHostPorts) resolvable(*PodInfo, *NodeInfo, []string) bool { return true }

func fitsHostPorts(pi *PodInfo, ni *NodeInfo) []string {
	for _, p := range pi.HostPorts {
		if ni.UsedPorts.conflicts(p) {
			return []string{ReasonHostPortsNotFree}
		}
	}
	return nil
}

// hostName: a pod that names a node fits only that node.
type hostName struct{}

func (hostName) Name() string { return "HostName" }

func (hostName) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	return fitsHostName(pi, ni)
}

func fitsHostName(pi *PodInfo, ni *NodeInfo) []string {
	if pi.Pod.Spec.NodeName != "" && pi.Pod.Spec.NodeName != ni.Name {
		return []string{ReasonHostNameNotMatch}
	}
	return nil
}

// matchNodeSelector: the pod's nodeSelector AND its required node affinity
// (terms OR'd, expressions and fields within a term AND'd).
type matchNodeSelector struct{}

func (matchNodeSelector) Name() string { return "MatchNodeSelector" }

func (matchNodeSelector) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	return fitsNodeSelector(pi, ni)
}

func fitsNodeSelector(pi *PodInfo, ni *NodeInfo) []string {
	if pi.hasNodeSelector && !pi.nodeSelector.matches(ni) {
		return []string{ReasonNodeSelectorNotMatch}
	}
	return nil
}

// generalPredicates bundles the checks every node agent also runs:
// resources, host ports, host name and node selector. Every pod must pass
// all of them: upstream's NodeResourcesFit checks critical pods too (only
// the kubelet's admission is lenient with them).
type generalPredicates struct{}

func (generalPredicates) Name() string { return "GeneralPredicates" }

func (generalPredicates) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	var out []string
	out = append(out, fitsResources(pi, ni)...)
	out = append(out, fitsHostPorts(pi, ni)...)
	out = append(out, fitsHostName(pi, ni)...)
	out = append(out, fitsNodeSelector(pi, ni)...)
	return out
}

// resolvable: only resources and ports can be freed, and only when the
// node is the right one.
func (generalPredicates) resolvable(pi *PodInfo, ni *NodeInfo, _ []string) bool {
	return fitsHostName(pi, ni) == nil && fitsNodeSelector(pi, ni) == nil && !exceedsAllocatable(pi, ni)
}
