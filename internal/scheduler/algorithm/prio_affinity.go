package algorithm

// nodeAffinityPriority sums the weights of the preferred node affinity
// terms a node matches, normalised so the best node scores 10.
type nodeAffinityPriority struct{}

func (nodeAffinityPriority) Name() string { return "NodeAffinityPriority" }

func (nodeAffinityPriority) Score(_ *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	terms, err := preferredTerms(pi.Pod)
	if err != nil || len(terms) == 0 {
		clear(scores)
		return
	}
	for i, ni := range nodes {
		var sum int64
		for j := range terms {
			if terms[j].matches(ni) {
				sum += terms[j].weight
			}
		}
		scores[i] = sum
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
	domains := affinityDomains(cs.Snapshot, pi)
	if domains.empty() {
		clear(scores)
		return
	}
	// The range always includes 0, as the legacy implementation's did.
	var lo, hi int64
	for i, ni := range nodes {
		sum := domains.sumOnNode(ni)
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

// affinityDomains sums, per topology domain, the weights of the incoming
// pod's preferred terms matched by pods there and of the terms of pods there
// that select the incoming pod (anti-affinity negative).
func affinityDomains(s *Snapshot, pi *PodInfo) *topologyCounts {
	domains := &topologyCounts{}
	// The incoming pod's preferred terms, over the pods they select.
	incoming := func(terms []WeightedAffinityTerm, sign int64) {
		for i := range terms {
			t := &terms[i]
			s.Pods.forEachSelected(t.Selector, func(ep *PodInfo, ni *NodeInfo) {
				if ep.Pod.UID != pi.Pod.UID && t.Matches(ep.Pod, s.NamespaceLabels(ep.Pod.Namespace)) {
					domains.addNode(ni, t.TopologyKey, sign*int64(t.Weight))
				}
			})
		}
	}
	incoming(pi.PreferredAffinity, 1)
	incoming(pi.PreferredAntiAffinity, -1)
	// Existing pods' terms that select the incoming pod.
	podNSLabels := s.NamespaceLabels(pi.Pod.Namespace)
	existing := func(kind termKind, weight func(*termGroup) int64) {
		s.Pods.forEachMatchingTerm(kind, pi.Pod, podNSLabels, func(g *termGroup, ni *NodeInfo, n int) {
			domains.addNode(ni, g.term.TopologyKey, weight(g)*int64(n))
		})
	}
	existing(kindRequiredAffinity, func(*termGroup) int64 { return hardPodAffinityWeight })
	existing(kindPreferredAffinity, func(g *termGroup) int64 { return g.weight })
	existing(kindPreferredAntiAffinity, func(g *termGroup) int64 { return -g.weight })
	return domains
}
