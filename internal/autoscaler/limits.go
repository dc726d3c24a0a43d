package autoscaler

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
)

const gib = int64(1) << 30

// gpuResources are the extended resources counted as GPUs.
var gpuResources = []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"}

// Usage is what the cluster's nodes add up to, every node counted, control
// plane included: the totals the ClusterAutoscaler's resource limits bound.
type Usage struct {
	Nodes       int
	Cores       int64
	MemoryBytes int64
	// GPUs counts GPUs by type.
	GPUs map[string]int64
}

// nodeSize is one node's part of the totals. Cores are whole cores rounded
// up, as upstream counts them.
type nodeSize struct {
	cores, memory int64
	gpuType       string
	gpus          int64
}

func sizeOf(n *corev1.Node) nodeSize {
	s := nodeSize{cores: n.Status.Capacity.Cpu().Value(), memory: n.Status.Capacity.Memory().Value()}
	for _, r := range gpuResources {
		if q, ok := n.Status.Capacity[r]; ok && q.Value() > 0 {
			s.gpus, s.gpuType = q.Value(), string(r)
		}
	}
	if t := n.Labels[GPULabel]; t != "" && s.gpus > 0 {
		s.gpuType = t
	}
	return s
}

// Add counts count nodes like n.
func (u *Usage) Add(n *corev1.Node, count int) {
	s := sizeOf(n)
	u.Nodes += count
	u.Cores += s.cores * int64(count)
	u.MemoryBytes += s.memory * int64(count)
	if s.gpus > 0 {
		if u.GPUs == nil {
			u.GPUs = map[string]int64{}
		}
		u.GPUs[s.gpuType] += s.gpus * int64(count)
	}
}

// Limited is a limit that binds a scale-up: why, worded for a
// NotTriggerScaleUp event, and upstream's name for it
// (skipped_scale_events_count's reason).
type Limited struct {
	Why, Code string
}

// Headroom is how many more nodes like tmpl the limits allow, and when
// that is fewer than wanted, the limit that binds.
func (c *Config) Headroom(u Usage, tmpl *corev1.Node, wanted int) (int, Limited) {
	s := sizeOf(tmpl)
	allowed, why := wanted, Limited{}
	limit := func(n int64, l Limited) {
		if n < int64(allowed) {
			allowed, why = int(max(n, 0)), l
		}
	}
	if c.MaxNodesTotal > 0 {
		limit(int64(c.MaxNodesTotal-u.Nodes), Limited{"max total nodes in cluster reached", "MaxNodesTotal"})
	}
	if s.cores > 0 {
		limit((c.Cores.Max-u.Cores)/s.cores, Limited{fmt.Sprintf("would exceed cluster cores max %d", c.Cores.Max), "CpuResourceLimit"})
	}
	if s.memory > 0 {
		limit(floorDiv(c.MemoryGiB.Max, gib, u.MemoryBytes, s.memory), Limited{fmt.Sprintf("would exceed cluster memory max %d GiB", c.MemoryGiB.Max), "MemoryResourceLimit"})
	}
	if s.gpus > 0 {
		for _, g := range c.GPUs {
			if g.Type == s.gpuType {
				limit((g.Max-u.GPUs[g.Type])/s.gpus, Limited{fmt.Sprintf("would exceed cluster %s max %d", g.Type, g.Max), "GpuResourceLimit"})
			}
		}
	}
	return allowed, why
}

// floorDiv is (maxUnits*unit - used) / per without overflowing.
func floorDiv(maxUnits, unit, used, per int64) int64 {
	if maxUnits > math.MaxInt64/unit {
		return math.MaxInt64
	}
	return (maxUnits*unit - used) / per
}

// BelowMinimum says which minimum removing node n would break, or "".
func (c *Config) BelowMinimum(u Usage, n *corev1.Node) string {
	s := sizeOf(n)
	switch {
	case u.Cores-s.cores < c.Cores.Min:
		return fmt.Sprintf("would go below cluster cores min %d", c.Cores.Min)
	case u.MemoryBytes-s.memory < c.MemoryGiB.Min*gib:
		return fmt.Sprintf("would go below cluster memory min %d GiB", c.MemoryGiB.Min)
	}
	if s.gpus > 0 {
		for _, g := range c.GPUs {
			if g.Type == s.gpuType && u.GPUs[g.Type]-s.gpus < g.Min {
				return fmt.Sprintf("would go below cluster %s min %d", g.Type, g.Min)
			}
		}
	}
	return ""
}
