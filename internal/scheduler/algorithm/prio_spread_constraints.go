package algorithm

import (
	"math"

	corev1 "k8s.io/api/core/v1"
)

// evenPodsSpreadPriority scores by the pod's ScheduleAnyway constraints (or
// the cluster defaults), as upstream's PodTopologySpread scores: each node
// gets, per constraint, the matching pods of its domain weighted by
// log(domains + 2) plus maxSkew - 1; fewer is better, and the sums are
// normalised the way upstream normalises them, to 0-100, then read on the
// Policy's 0-10 scale.
type evenPodsSpreadPriority struct{}

func (evenPodsSpreadPriority) Name() string { return "EvenPodsSpreadPriority" }

func (evenPodsSpreadPriority) Score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	s := cs.Snapshot
	constraints, defaulted, err := spreadConstraints(s, pi.Pod, corev1.ScheduleAnyway)
	if err != nil || len(constraints) == 0 || len(s.Nodes) == 0 {
		clear(scores)
		return
	}
	// Only the pod's own constraints need every key on a node: with the
	// defaults, a node without a zone still spreads by hostname.
	requireAll := !defaulted
	ignored := make([]bool, len(nodes))
	// domains[i] maps each domain of the feasible nodes to its count.
	domains := make([]map[string]int64, len(constraints))
	for i := range constraints {
		domains[i] = map[string]int64{}
	}
	nIgnored := 0
	for j, ni := range nodes {
		if requireAll && !hasTopologyKeys(ni, constraints) {
			ignored[j] = true
			nIgnored++
			continue
		}
		for i := range constraints {
			if constraints[i].topologyKey == corev1.LabelHostname {
				continue
			}
			v, _ := ni.Label(constraints[i].topologyKey)
			domains[i][v] += 0
		}
	}
	weights := make([]float64, len(constraints))
	for i := range constraints {
		size := len(domains[i])
		if constraints[i].topologyKey == corev1.LabelHostname {
			size = len(nodes) - nIgnored
		}
		weights[i] = math.Log(float64(size + 2))
	}
	// Count matching pods in the domains of the feasible nodes, over every
	// node of the cluster the policies include.
	for i := range constraints {
		c := &constraints[i]
		if c.topologyKey == corev1.LabelHostname || c.selector.Empty() {
			continue
		}
		s.Pods.forEachSelected(c.selector, func(ep *PodInfo, ni *NodeInfo) {
			if requireAll && !hasTopologyKeys(ni, constraints) {
				return
			}
			v, _ := ni.Label(c.topologyKey)
			if _, counted := domains[i][v]; !counted || !c.countable(pi.Pod.Namespace, ep.Pod) || !c.includes(pi, ni) {
				return
			}
			domains[i][v]++
		})
	}
	raw := make([]int64, len(nodes))
	for j, ni := range nodes {
		if ignored[j] {
			continue
		}
		var score float64
		for i := range constraints {
			c := &constraints[i]
			v, ok := ni.Label(c.topologyKey)
			if !ok {
				continue
			}
			var n int64
			if c.topologyKey == corev1.LabelHostname {
				for _, ep := range ni.Pods {
					if c.countable(pi.Pod.Namespace, ep.Pod) {
						n++
					}
				}
			} else {
				n = domains[i][v]
			}
			score += float64(n)*weights[i] + float64(c.maxSkew-1)
		}
		raw[j] = int64(math.Round(score))
	}
	var lo, hi int64 = math.MaxInt64, 0
	for j := range nodes {
		if ignored[j] {
			continue
		}
		lo, hi = min(lo, raw[j]), max(hi, raw[j])
	}
	for j := range nodes {
		switch {
		case ignored[j]:
			scores[j] = 0
		case hi == 0:
			scores[j] = MaxPriority
		default:
			// Upstream's 0-100, rounded to the Policy's 0-10.
			scores[j] = (100*(hi+lo-raw[j])/hi + 5) / 10
		}
	}
}
