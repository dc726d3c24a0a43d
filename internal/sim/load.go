package sim

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// LoadAnnotation sets the CPU and memory the simulated containers use, as
// the metrics API reports them ("cpu=750m,memory=256Mi"; either may be
// left out). On a pod it is that pod's usage. On a Deployment, ReplicaSet
// or StatefulSet it is the load of the whole workload, shared evenly by
// its running pods: add replicas and each pod uses less, as behind a load
// balancer. A pod's own annotation wins over its workload's. Change it at
// any time; the next scrape sees the new value.
const LoadAnnotation = "sim.capstan.dev/load"

// ParseLoad reads a LoadAnnotation value.
func ParseLoad(s string) (corev1.ResourceList, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%s is empty: want e.g. cpu=500m,memory=256Mi", LoadAnnotation)
	}
	out := corev1.ResourceList{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%s %q: %q is not resource=quantity", LoadAnnotation, s, part)
		}
		name := corev1.ResourceName(strings.TrimSpace(k))
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			return nil, fmt.Errorf("%s %q: unknown resource %q (want cpu or memory)", LoadAnnotation, s, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s %q: %s given twice", LoadAnnotation, s, name)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %s: %w", LoadAnnotation, s, name, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s %q: %s must not be negative", LoadAnnotation, s, name)
		}
		out[name] = q
	}
	return out, nil
}

// ShareLoad divides a workload's load evenly among n pods.
func ShareLoad(total corev1.ResourceList, n int) corev1.ResourceList {
	if n <= 1 {
		return total.DeepCopy()
	}
	out := corev1.ResourceList{}
	for name, q := range total {
		if name == corev1.ResourceCPU {
			out[name] = *resource.NewMilliQuantity(q.MilliValue()/int64(n), resource.DecimalSI)
		} else {
			// Whole KiB, as the kubelet reports working sets.
			out[name] = *resource.NewQuantity(q.Value()/int64(n)/1024*1024, resource.BinarySI)
		}
	}
	return out
}
