package algorithm

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Default requests the priorities assume for containers that request
// nothing, as the legacy scheduler did: without them every best-effort pod
// would look free and pile onto one node.
const (
	DefaultMilliCPURequest int64 = 100
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024
)

// Resource is an amount of the resources the scheduler accounts for.
type Resource struct {
	MilliCPU         int64
	Memory           int64
	EphemeralStorage int64
	Pods             int64
	// Scalar holds extended resources (nvidia.com/gpu, example.com/foo)
	// and hugepages.
	Scalar map[corev1.ResourceName]int64
}

// Add adds r2 to r.
func (r *Resource) Add(r2 *Resource) {
	r.MilliCPU += r2.MilliCPU
	r.Memory += r2.Memory
	r.EphemeralStorage += r2.EphemeralStorage
	r.Pods += r2.Pods
	for k, v := range r2.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[k] += v
	}
}

// Sub subtracts r2 from r.
func (r *Resource) Sub(r2 *Resource) {
	r.MilliCPU -= r2.MilliCPU
	r.Memory -= r2.Memory
	r.EphemeralStorage -= r2.EphemeralStorage
	r.Pods -= r2.Pods
	for k, v := range r2.Scalar {
		if r.Scalar != nil {
			r.Scalar[k] -= v
		}
	}
}

// resourceFromList reads a ResourceList.
func resourceFromList(rl corev1.ResourceList) Resource {
	var r Resource
	for name, q := range rl {
		switch name {
		case corev1.ResourceCPU:
			r.MilliCPU = q.MilliValue()
		case corev1.ResourceMemory:
			r.Memory = q.Value()
		case corev1.ResourceEphemeralStorage:
			r.EphemeralStorage = q.Value()
		case corev1.ResourcePods:
			r.Pods = q.Value()
		default:
			if isScalarResource(name) {
				if r.Scalar == nil {
					r.Scalar = map[corev1.ResourceName]int64{}
				}
				r.Scalar[name] = q.Value()
			}
		}
	}
	return r
}

// isScalarResource reports whether the scheduler accounts for a resource
// by count: every domain-prefixed resource (extended resources such as
// nvidia.com/gpu, and prefixed native ones), hugepages, and the
// attachable-volumes-* limits nodes report.
func isScalarResource(name corev1.ResourceName) bool {
	return strings.Contains(string(name), "/") || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) ||
		strings.HasPrefix(string(name), "attachable-volumes-")
}

// podRequests computes what a pod asks for, with upstream's helper
// (k8s.io/component-helpers/resource), as kube-scheduler does: the larger
// of its regular and restartable init ("sidecar") containers together and
// each plain init container with the sidecars started before it, or its
// pod-level requests where set, plus its overhead. nonZero applies the
// default requests where neither the containers nor the pod set one, for
// the scoring functions.
func podRequests(pod *corev1.Pod) (req Resource, nonZeroCPU, nonZeroMem int64) {
	opts := resourcehelper.PodResourcesOptions{
		// In-place resize is GA: a resized pod holds what its status says.
		UseStatusResources: true,
		// Pod-level resources are on by default (beta) upstream.
		SkipPodLevelResources: false,
	}
	requests := resourcehelper.PodRequests(pod, opts)
	nonZero := requests
	if defaults := nonMissingRequests(pod, requests); len(defaults) > 0 {
		opts.NonMissingContainerRequests = defaults
		nonZero = resourcehelper.PodRequests(pod, opts)
	}
	return resourceFromList(requests), nonZero.Cpu().MilliValue(), nonZero.Memory().Value()
}

// nonMissingRequests are the defaults the scoring functions assume: for
// every container without its own, unless the pod sets the resource at
// pod level.
func nonMissingRequests(pod *corev1.Pod, requests corev1.ResourceList) corev1.ResourceList {
	cpu := *resource.NewMilliQuantity(DefaultMilliCPURequest, resource.DecimalSI)
	mem := *resource.NewQuantity(DefaultMemoryRequest, resource.DecimalSI)
	if !resourcehelper.IsPodLevelRequestsSet(pod) {
		return corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}
	}
	out := corev1.ResourceList{}
	if _, ok := requests[corev1.ResourceCPU]; !ok {
		out[corev1.ResourceCPU] = cpu
	}
	if _, ok := requests[corev1.ResourceMemory]; !ok {
		out[corev1.ResourceMemory] = mem
	}
	return out
}
