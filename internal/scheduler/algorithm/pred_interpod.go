package algorithm

import (
	corev1 "k8s.io/api/core/v1"
)

// topologyPair is a topology domain: a node label key and value.
type topologyPair struct{ key, value string }

type topologyCounts map[topologyPair]int64

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
	s := cs.Snapshot
	st := &interPodState{existingAnti: topologyCounts{}, affinity: topologyCounts{}, anti: topologyCounts{}}
	podNSLabels := s.NamespaceLabels(pi.Pod.Namespace)
	s.Pods.forEachMatchingTerm(kindRequiredAntiAffinity, pi.Pod, podNSLabels, func(g *termGroup, ni *NodeInfo, n int) {
		if v, ok := ni.Labels[g.term.TopologyKey]; ok {
			st.existingAnti[topologyPair{g.term.TopologyKey, v}] += int64(n)
		}
	})
	if len(pi.RequiredAffinity) > 0 {
		s.Pods.forEachSelected(pi.RequiredAffinity[0].Selector, func(ep *PodInfo, ni *NodeInfo) {
			if ep.Pod.UID == pi.Pod.UID || !matchesAllTerms(pi.RequiredAffinity, ep.Pod, s.NamespaceLabels(ep.Pod.Namespace)) {
				return
			}
			for i := range pi.RequiredAffinity {
				if v, ok := ni.Labels[pi.RequiredAffinity[i].TopologyKey]; ok {
					st.affinity[topologyPair{pi.RequiredAffinity[i].TopologyKey, v}]++
				}
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
			if v, ok := ni.Labels[t.TopologyKey]; ok && t.Matches(ep.Pod, s.NamespaceLabels(ep.Pod.Namespace)) {
				st.anti[topologyPair{t.TopologyKey, v}]++
			}
		})
	}
	cs.Write(interPodKey, st)
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
	nodeLabels := ni.Labels
	if len(st.existingAnti) > 0 {
		for k, v := range nodeLabels {
			if st.existingAnti[topologyPair{k, v}] > 0 {
				return []string{ReasonExistingPodsAntiAffinityNotOK}
			}
		}
	}
	if len(pi.RequiredAffinity) > 0 {
		peers := true
		for i := range pi.RequiredAffinity {
			v, ok := nodeLabels[pi.RequiredAffinity[i].TopologyKey]
			if !ok {
				return []string{ReasonPodAffinityRulesNotMatch}
			}
			if st.affinity[topologyPair{pi.RequiredAffinity[i].TopologyKey, v}] <= 0 {
				peers = false
			}
		}
		// No peer anywhere yet: the first pod of a group that matches its
		// own terms may start it.
		if !peers && !(len(st.affinity) == 0 && st.selfMatch) {
			return []string{ReasonPodAffinityRulesNotMatch}
		}
	}
	for i := range pi.RequiredAntiAffinity {
		t := &pi.RequiredAntiAffinity[i]
		if v, ok := nodeLabels[t.TopologyKey]; ok && st.anti[topologyPair{t.TopologyKey, v}] > 0 {
			return []string{ReasonPodAntiAffinityRulesNotMatch}
		}
	}
	return nil
}
