package algorithm

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// topologyCounts counts per topology domain: by node label key, then
// value. The keys are few (the topology keys of the terms counted): they
// are kept in a list, so a node costs one map lookup per key, by its value.
type topologyCounts struct {
	keys   []string
	counts []map[string]int64
}

// byKey returns the counts of key, creating them when create.
func (c *topologyCounts) byKey(key string, create bool) map[string]int64 {
	for i, k := range c.keys {
		if k == key {
			return c.counts[i]
		}
	}
	if !create {
		return nil
	}
	m := map[string]int64{}
	c.keys = append(c.keys, key)
	c.counts = append(c.counts, m)
	return m
}

// add adds n to a domain's count; a count back at zero is forgotten, so
// that empty says whether anything is counted at all.
func (c *topologyCounts) add(key, value string, n int64) {
	m := c.byKey(key, true)
	if m[value] += n; m[value] == 0 {
		delete(m, value)
	}
}

// empty reports whether nothing is counted.
func (c *topologyCounts) empty() bool {
	for _, m := range c.counts {
		if len(m) > 0 {
			return false
		}
	}
	return true
}

// clone copies the counts.
func (c *topologyCounts) clone() topologyCounts {
	out := topologyCounts{keys: slices.Clone(c.keys), counts: make([]map[string]int64, len(c.counts))}
	for i, m := range c.counts {
		out.counts[i] = maps.Clone(m)
	}
	return out
}

// onNode is the count of the node's domain for key; ok is false when the
// node has no such label.
func (c *topologyCounts) onNode(ni *NodeInfo, key string) (n int64, ok bool) {
	v, ok := ni.Label(key)
	if !ok {
		return 0, false
	}
	return c.byKey(key, false)[v], true
}

// sumOnNode adds up the counts of the node's domains over every key.
func (c *topologyCounts) sumOnNode(ni *NodeInfo) int64 {
	var sum int64
	for i, k := range c.keys {
		if v, ok := ni.Label(k); ok {
			sum += c.counts[i][v]
		}
	}
	return sum
}

// addNode adds n to the node's domain for key, if it has the label.
func (c *topologyCounts) addNode(ni *NodeInfo, key string, n int64) {
	if v, ok := ni.Label(key); ok {
		c.add(key, v, n)
	}
}

// matchInterPodAffinity enforces required pod affinity and anti-affinity:
// the pod's own terms, and the anti-affinity terms of pods already running
// (symmetry).
type matchInterPodAffinity struct{}

func (matchInterPodAffinity) Name() string { return "MatchInterPodAffinity" }

const interPodKey = "MatchInterPodAffinity"

type interPodState struct {
	// existingAnti counts domains holding a pod whose required
	// anti-affinity matches the incoming pod.
	existingAnti topologyCounts
	// affinity counts, per domain, pods matching all the incoming pod's
	// required affinity terms; anti counts pods matching its anti-affinity.
	affinity topologyCounts
	anti     topologyCounts
	// selfMatch: the pod matches all its own affinity terms, so the first
	// pod of a group may go where no peer runs yet.
	selfMatch bool
}

func (matchInterPodAffinity) PreFilter(cs *CycleState, pi *PodInfo) {
	if pi.ParseError != nil {
		cs.Reject("MatchInterPodAffinity", ReasonAffinityTermParseError, true)
		return
	}
	s := cs.Snapshot
	st := &interPodState{}
	podNSLabels := s.NamespaceLabels(pi.Pod.Namespace)
	s.Pods.forEachMatchingTerm(kindRequiredAntiAffinity, pi.Pod, podNSLabels, func(g *termGroup, ni *NodeInfo, n int) {
		st.existingAnti.addNode(ni, g.term.TopologyKey, int64(n))
	})
	if len(pi.RequiredAffinity) > 0 {
		s.Pods.forEachSelected(pi.RequiredAffinity[0].Selector, func(ep *PodInfo, ni *NodeInfo) {
			if ep.Pod.UID == pi.Pod.UID || !matchesAllTerms(pi.RequiredAffinity, ep.Pod, s.NamespaceLabels(ep.Pod.Namespace)) {
				return
			}
			for i := range pi.RequiredAffinity {
				st.affinity.addNode(ni, pi.RequiredAffinity[i].TopologyKey, 1)
			}
		})
		st.selfMatch = matchesAllTerms(pi.RequiredAffinity, pi.Pod, podNSLabels)
	}
	for i := range pi.RequiredAntiAffinity {
		t := &pi.RequiredAntiAffinity[i]
		s.Pods.forEachSelected(t.Selector, func(ep *PodInfo, ni *NodeInfo) {
			if ep.Pod.UID == pi.Pod.UID {
				return
			}
			if t.Matches(ep.Pod, s.NamespaceLabels(ep.Pod.Namespace)) {
				st.anti.addNode(ni, t.TopologyKey, 1)
			}
		})
	}
	// Nothing to check: upstream skips the plugin for the cycle, so that
	// even pods put on a node later (nominated pods, a preemption's
	// reprieved victims) are not looked at.
	if st.existingAnti.empty() && len(pi.RequiredAffinity) == 0 && len(pi.RequiredAntiAffinity) == 0 {
		return
	}
	cs.Write(interPodKey, st)
}

// Clone copies the state for a preemption's dry run or nominated pods.
func (st *interPodState) Clone() any {
	out := *st
	out.existingAnti, out.affinity, out.anti = st.existingAnti.clone(), st.affinity.clone(), st.anti.clone()
	return &out
}

// update counts other, on ni, once more (n 1) or once less (n -1), as
// upstream's updateWithPod does.
func (st *interPodState) update(s *Snapshot, pi, other *PodInfo, ni *NodeInfo, n int64) {
	podNSLabels := s.NamespaceLabels(pi.Pod.Namespace)
	for i := range other.RequiredAntiAffinity {
		if t := &other.RequiredAntiAffinity[i]; t.Matches(pi.Pod, podNSLabels) {
			st.existingAnti.addNode(ni, t.TopologyKey, n)
		}
	}
	otherNSLabels := s.NamespaceLabels(other.Pod.Namespace)
	if matchesAllTerms(pi.RequiredAffinity, other.Pod, otherNSLabels) {
		for i := range pi.RequiredAffinity {
			st.affinity.addNode(ni, pi.RequiredAffinity[i].TopologyKey, n)
		}
	}
	for i := range pi.RequiredAntiAffinity {
		if t := &pi.RequiredAntiAffinity[i]; t.Matches(other.Pod, otherNSLabels) {
			st.anti.addNode(ni, t.TopologyKey, n)
		}
	}
}

func (matchInterPodAffinity) AddPod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo) {
	if st, _ := cs.Read(interPodKey).(*interPodState); st != nil {
		st.update(cs.Snapshot, pi, other, ni, 1)
	}
}

func (matchInterPodAffinity) RemovePod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo) {
	if st, _ := cs.Read(interPodKey).(*interPodState); st != nil {
		st.update(cs.Snapshot, pi, other, ni, -1)
	}
}

// resolvable: anti-affinity with pods that may be victims is; a missing
// affinity peer is not (upstream does not look for peers among victims).
func (matchInterPodAffinity) resolvable(_ *PodInfo, _ *NodeInfo, reasons []string) bool {
	return reasons[0] == ReasonPodAntiAffinityRulesNotMatch || reasons[0] == ReasonExistingPodsAntiAffinityNotOK
}

func matchesAllTerms(terms []AffinityTerm, pod *corev1.Pod, nsLabels map[string]string) bool {
	if len(terms) == 0 {
		return false
	}
	for i := range terms {
		if !terms[i].Matches(pod, nsLabels) {
			return false
		}
	}
	return true
}

func (matchInterPodAffinity) Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	if pi.ParseError != nil {
		return []string{ReasonAffinityTermParseError}
	}
	st, _ := cs.Read(interPodKey).(*interPodState)
	if st == nil {
		return nil
	}
	// In upstream's order: the pod's affinity, its anti-affinity, then the
	// anti-affinity of the pods already there.
	if len(pi.RequiredAffinity) > 0 {
		peers := true
		for i := range pi.RequiredAffinity {
			n, ok := st.affinity.onNode(ni, pi.RequiredAffinity[i].TopologyKey)
			if !ok {
				return []string{ReasonPodAffinityRulesNotMatch}
			}
			if n <= 0 {
				peers = false
			}
		}
		// No peer anywhere yet: the first pod of a group that matches its
		// own terms may start it.
		if !peers && !(st.affinity.empty() && st.selfMatch) {
			return []string{ReasonPodAffinityRulesNotMatch}
		}
	}
	for i := range pi.RequiredAntiAffinity {
		if n, _ := st.anti.onNode(ni, pi.RequiredAntiAffinity[i].TopologyKey); n > 0 {
			return []string{ReasonPodAntiAffinityRulesNotMatch}
		}
	}
	for i, key := range st.existingAnti.keys {
		if v, ok := ni.Label(key); ok && st.existingAnti.counts[i][v] > 0 {
			return []string{ReasonExistingPodsAntiAffinityNotOK}
		}
	}
	return nil
}
