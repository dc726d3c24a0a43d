package algorithm

import "math"

// resourceScorer scores each node from its cpu and memory requests
// (including the pod's, with the default requests for containers that set
// none) against allocatable.
type resourceScorer struct {
	name  string
	score func(reqCPU, capCPU, reqMem, capMem int64) int64
}

func (r *resourceScorer) Name() string { return r.name }

func (r *resourceScorer) Score(_ *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	for i, ni := range nodes {
		scores[i] = r.score(ni.NonZeroRequested.MilliCPU+pi.NonZeroCPU, ni.Allocatable.MilliCPU,
			ni.NonZeroRequested.Memory+pi.NonZeroMem, ni.Allocatable.Memory)
	}
}

// leastRequested favours free nodes: the average over cpu and memory of
// (capacity - requested) * 10 / capacity.
func leastRequested(reqCPU, capCPU, reqMem, capMem int64) int64 {
	return (unused(reqCPU, capCPU) + unused(reqMem, capMem)) / 2
}

func unused(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * MaxPriority / capacity
}

// mostRequested favours full nodes: the average of requested * 10 /
// capacity.
func mostRequested(reqCPU, capCPU, reqMem, capMem int64) int64 {
	return (used(reqCPU, capCPU) + used(reqMem, capMem)) / 2
}

func used(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return requested * MaxPriority / capacity
}

// balancedAllocation favours nodes whose cpu and memory fractions stay
// close: (1 - |cpu fraction - memory fraction|) * 10; a node that would be
// full in either scores 0.
func balancedAllocation(reqCPU, capCPU, reqMem, capMem int64) int64 {
	cpu, mem := fraction(reqCPU, capCPU), fraction(reqMem, capMem)
	if cpu >= 1 || mem >= 1 {
		return 0
	}
	return int64((1 - math.Abs(cpu-mem)) * MaxPriority)
}

func fraction(requested, capacity int64) float64 {
	if capacity == 0 {
		return 1
	}
	return float64(requested) / float64(capacity)
}
