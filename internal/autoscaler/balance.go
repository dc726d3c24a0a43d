package autoscaler

import (
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// balancingIgnoredLabels differ between node groups that are otherwise the
// same (upstream's list): zones, regions, host names.
var balancingIgnoredLabels = []string{
	corev1.LabelHostname,
	corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
	"beta.kubernetes.io/fluentd-ds-ready", "kops.k8s.io/instancegroup",
}

// Upstream's tolerances when comparing node groups.
const (
	maxMemoryDifferenceRatio      = 0.015
	maxAllocatableDifferenceRatio = 0.05
)

// balance turns the chosen option into increases. With
// balanceSimilarNodeGroups, the nodes are spread over the chosen group and
// the similar groups that can take the same pods, one at a time to the
// smallest, each within its maximum.
func (in *ScaleUpInput) balance(best *Option, options []Option) []Increase {
	groups := []*NodeGroup{best.Group}
	if in.Config.BalanceSimilarNodeGroups {
		for i := range options {
			if g := options[i].Group; g != best.Group && similar(best.Group.Template, g.Template, in.Config.BalancingIgnoredLabels) {
				groups = append(groups, g)
			}
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].ID < groups[j].ID })
	size := map[*NodeGroup]int{}
	for _, g := range groups {
		size[g] = g.Target
	}
	for left := best.NodeCount; left > 0; left-- {
		var next *NodeGroup
		for _, g := range groups {
			if size[g] < g.Max && (next == nil || size[g] < size[next]) {
				next = g
			}
		}
		if next == nil {
			break
		}
		size[next]++
	}
	var out []Increase
	for _, g := range groups {
		if size[g] > g.Target {
			out = append(out, Increase{Group: g, From: g.Target, To: size[g]})
		}
	}
	return out
}

// similar reports whether two node groups' nodes are alike but for the
// labels that may differ: the same resources, memory within 1.5%, other
// capacities equal, allocatable within 5%, and the same other labels.
func similar(a, b *corev1.Node, ignored []string) bool {
	ca, cb := a.Status.Capacity, b.Status.Capacity
	if len(ca) != len(cb) {
		return false
	}
	for name, qa := range ca {
		qb, ok := cb[name]
		if !ok {
			return false
		}
		if name == corev1.ResourceMemory {
			if !within(float64(qa.Value()), float64(qb.Value()), maxMemoryDifferenceRatio) {
				return false
			}
			continue
		}
		if qa.Cmp(qb) != 0 {
			return false
		}
	}
	for name, qa := range a.Status.Allocatable {
		qb := b.Status.Allocatable[name]
		if !within(float64(qa.MilliValue()), float64(qb.MilliValue()), maxAllocatableDifferenceRatio) {
			return false
		}
	}
	skip := map[string]bool{}
	for _, k := range append(balancingIgnoredLabels, ignored...) {
		skip[k] = true
	}
	count := func(l map[string]string) int {
		n := 0
		for k := range l {
			if !skip[k] {
				n++
			}
		}
		return n
	}
	if count(a.Labels) != count(b.Labels) {
		return false
	}
	for k, v := range a.Labels {
		if !skip[k] && b.Labels[k] != v {
			return false
		}
	}
	return true
}

// within reports whether x and y differ by at most ratio of the larger.
func within(x, y, ratio float64) bool {
	larger := math.Max(x, y)
	return larger-math.Min(x, y) <= larger*ratio
}
