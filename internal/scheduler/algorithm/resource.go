package algorithm

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
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

// podRequests computes what a pod asks for: the larger of the sum of its
// regular containers (restartable init containers included) and each
// init container, plus its overhead. nonZero applies the default requests
// to containers that set none, for the scoring functions.
func podRequests(pod *corev1.Pod) (req Resource, nonZeroCPU, nonZeroMem int64) {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		r := resourceFromList(c.Resources.Requests)
		req.Add(&r)
		cpu, mem := nonZero(c.Resources.Requests)
		nonZeroCPU += cpu
		nonZeroMem += mem
	}
	var sidecars Resource
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := resourceFromList(c.Resources.Requests)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			req.Add(&r)
			sidecars.Add(&r)
			continue
		}
		// A plain init container runs alone (with the sidecars before it).
		r.Add(&sidecars)
		maxInto(&req, &r)
		cpu, mem := nonZero(c.Resources.Requests)
		nonZeroCPU, nonZeroMem = max(nonZeroCPU, cpu), max(nonZeroMem, mem)
	}
	if pod.Spec.Overhead != nil {
		o := resourceFromList(pod.Spec.Overhead)
		req.Add(&o)
		nonZeroCPU += o.MilliCPU
		nonZeroMem += o.Memory
	}
	return req, nonZeroCPU, nonZeroMem
}

func maxInto(dst, src *Resource) {
	dst.MilliCPU = max(dst.MilliCPU, src.MilliCPU)
	dst.Memory = max(dst.Memory, src.Memory)
	dst.EphemeralStorage = max(dst.EphemeralStorage, src.EphemeralStorage)
	for k, v := range src.Scalar {
		if dst.Scalar == nil {
			dst.Scalar = map[corev1.ResourceName]int64{}
		}
		dst.Scalar[k] = max(dst.Scalar[k], v)
	}
}

func nonZero(rl corev1.ResourceList) (cpu, mem int64) {
	cpu, mem = DefaultMilliCPURequest, DefaultMemoryRequest
	if q, ok := rl[corev1.ResourceCPU]; ok {
		cpu = q.MilliValue()
	}
	if q, ok := rl[corev1.ResourceMemory]; ok {
		mem = q.Value()
	}
	return cpu, mem
}
