package algorithm

import (
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// nodeAffinityPriority sums the weights of the preferred node affinity
// terms a node matches, normalised so the best node scores 10.
type nodeAffinityPriority struct{}

func (nodeAffinityPriority) Name() string { return "NodeAffinityPriority" }

func (nodeAffinityPriority) Score(_ *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	a := pi.Pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		clear(scores)
		return
	}
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	if err != nil {
		clear(scores)
		return
	}
	for i, ni := range nodes {
		scores[i] = terms.Score(ni.Node)
	}
	normalize(scores, false)
}

// normalize scales scores to 0..10 by their maximum; reverse makes the
// highest raw value the worst.
func normalize(scores []int64, reverse bool) {
	var top int64
	for _, s := range scores {
		top = max(top, s)
	}
	if top == 0 {
		if reverse {
			for i := range scores {
				scores[i] = MaxPriority
			}
		}
		return
	}
	for i, s := range scores {
		s = MaxPriority * s / top
		if reverse {
			s = MaxPriority - s
		}
		scores[i] = s
	}
}

// hardPodAffinityWeight is the weight an existing pod's required affinity
// to the incoming pod adds, as a preference, to its domain.
const hardPodAffinityWeight = 1

// interPodAffinityPriority adds, per topology domain, the weights of the
// incoming pod's preferred (anti-)affinity terms matched by pods there, and
// of the terms of pods there that match the incoming pod; scores are
// scaled between the lowest (0) and highest (10) sums.
type interPodAffinityPriority struct{}

func (interPodAffinityPriority) Name() string { return "InterPodAffinityPriority" }

func (interPodAffinityPriority) Score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	s := cs.Snapshot
	domains := topologyCounts{}
	podNSLabels := s.NamespaceLabels(pi.Pod.Namespace)
	incoming := len(pi.PreferredAffinity)+len(pi.PreferredAntiAffinity) > 0
	add := func(nodeLabels map[string]string, key string, w int64) {
		if v, ok := nodeLabels[key]; ok {
			domains[topologyPair{key, v}] += w
		}
	}
	for _, ni := range s.Nodes {
		existing := ni.PodsWithAffinity
		if incoming {
			existing = ni.Pods
		}
		for _, ep := range existing {
			if ep.Pod.UID == pi.Pod.UID {
				continue
			}
			if incoming {
				nsl := s.NamespaceLabels(ep.Pod.Namespace)
				for i := range pi.PreferredAffinity {
					if t := &pi.PreferredAffinity[i]; t.Matches(ep.Pod, nsl) {
						add(ni.Node.Labels, t.TopologyKey, int64(t.Weight))
					}
				}
				for i := range pi.PreferredAntiAffinity {
					if t := &pi.PreferredAntiAffinity[i]; t.Matches(ep.Pod, nsl) {
						add(ni.Node.Labels, t.TopologyKey, -int64(t.Weight))
					}
				}
			}
			for i := range ep.RequiredAffinity {
				if t := &ep.RequiredAffinity[i]; t.Matches(pi.Pod, podNSLabels) {
					add(ni.Node.Labels, t.TopologyKey, hardPodAffinityWeight)
				}
			}
			for i := range ep.PreferredAffinity {
				if t := &ep.PreferredAffinity[i]; t.Matches(pi.Pod, podNSLabels) {
					add(ni.Node.Labels, t.TopologyKey, int64(t.Weight))
				}
			}
			for i := range ep.PreferredAntiAffinity {
				if t := &ep.PreferredAntiAffinity[i]; t.Matches(pi.Pod, podNSLabels) {
					add(ni.Node.Labels, t.TopologyKey, -int64(t.Weight))
				}
			}
		}
	}
	if len(domains) == 0 {
		clear(scores)
		return
	}
	keys := map[string]bool{}
	for d := range domains {
		keys[d.key] = true
	}
	// The range always includes 0, as the legacy implementation's did.
	var lo, hi int64
	for i, ni := range nodes {
		var sum int64
		for k := range keys {
			if v, ok := ni.Node.Labels[k]; ok {
				sum += domains[topologyPair{k, v}]
			}
		}
		scores[i] = sum
		lo, hi = min(lo, sum), max(hi, sum)
	}
	for i := range scores {
		if hi > lo {
			scores[i] = int64(float64(MaxPriority) * float64(scores[i]-lo) / float64(hi-lo))
		} else {
			scores[i] = 0
		}
	}
}
