package algorithm

// dynamicResources stands for upstream's DynamicResources filter, which
// every profile runs: a pod with spec.resourceClaims needs its devices
// allocated on the node. capstan's nodes publish no devices (no
// ResourceSlices), so such a pod fits nowhere, with the reason upstream
// gives when no node has the devices, rather than running without them.
// It runs whatever the Policy names, last, as upstream orders it.
type dynamicResources struct{}

func (dynamicResources) Name() string { return "DynamicResources" }

// ReasonCannotAllocateClaims is upstream's reason when no node's devices
// can satisfy a pod's resource claims.
const ReasonCannotAllocateClaims = "cannot allocate all claims"

// PreFilter rejects the pod outright, as upstream's PreFilter does when a
// claim cannot be had.
func (dynamicResources) PreFilter(cs *CycleState, pi *PodInfo) {
	if len(pi.Pod.Spec.ResourceClaims) > 0 {
		cs.Reject("DynamicResources", ReasonCannotAllocateClaims, true)
	}
}

func (dynamicResources) Filter(*CycleState, *PodInfo, *NodeInfo) []string { return nil }
