package algorithm

import (
	"maps"

	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Nominated pods are pods that preemption made room for on a node and that
// wait there for their victims to go (status.nominatedNodeName). Until they
// bind, the room is theirs against pods of lower or equal priority: a
// decision for such a pod runs the predicates on the node twice, as
// upstream's RunFilterPluginsWithNominatedPods does, once with the
// nominated pods of higher or equal priority counted as running (so it does
// not take their room) and once without (so that pod affinity to them does
// not count before they run), and the node fits only if both pass.

// nominatedFor returns the pods nominated to node that pod must leave room
// for: those of its priority or higher, other than itself.
func (s *Snapshot) nominatedFor(node string, pi *PodInfo) []*PodInfo {
	nominated := s.Nominated[node]
	if len(nominated) == 0 {
		return nil
	}
	prio := corev1helpers.PodPriority(pi.Pod)
	var out []*PodInfo
	for _, np := range nominated {
		if np.Pod.UID != pi.Pod.UID && corev1helpers.PodPriority(np.Pod) >= prio {
			out = append(out, np)
		}
	}
	return out
}

// filterNode runs the predicates for pi on ni, the node's nominated pods
// counted (see above); nil means the pod fits.
func (a *Algorithm) filterNode(cs *CycleState, pi *PodInfo, ni *NodeInfo, all bool) *Failure {
	if nominated := cs.Snapshot.nominatedFor(ni.Name, pi); len(nominated) > 0 {
		withThem, on := cs.Clone(), ni.Clone()
		for _, np := range nominated {
			on.AddPod(np)
			a.addPod(withThem, pi, np, on)
		}
		if f := a.runPredicates(withThem, pi, on, all); f != nil {
			return f
		}
	}
	return a.runPredicates(cs, pi, ni, all)
}

// addPod tells the predicates' cycle state that other is now on ni.
func (a *Algorithm) addPod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo) {
	for _, p := range a.predicates {
		if ext, ok := p.(PreFilterExtensions); ok {
			ext.AddPod(cs, pi, other, ni)
		}
	}
}

// removePod tells the predicates' cycle state that other left ni.
func (a *Algorithm) removePod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo) {
	for _, p := range a.predicates {
		if ext, ok := p.(PreFilterExtensions); ok {
			ext.RemovePod(cs, pi, other, ni)
		}
	}
}

// UseNodeIndex gives the snapshot its nodes by name, a cache's own index
// that holds as long as the nodes do: node() then builds none.
func (s *Snapshot) UseNodeIndex(byName map[string]*NodeInfo) {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	s.byName = byName
}

// node returns the snapshot's node of that name, nil when there is none.
func (s *Snapshot) node(name string) *NodeInfo {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if s.byName == nil {
		s.byName = make(map[string]*NodeInfo, len(s.Nodes))
		for _, ni := range s.Nodes {
			s.byName[ni.Name] = ni
		}
	}
	return s.byName[name]
}

// Clone copies the NodeInfo so that pods can be added to and removed from
// the copy (a preemption's dry run, nominated pods): the pod lists, the
// sums and the ports are its own, the node object and pod infos shared.
func (ni *NodeInfo) Clone() *NodeInfo {
	out := *ni
	out.Pods = append([]*PodInfo(nil), ni.Pods...)
	out.PodsWithAffinity = append([]*PodInfo(nil), ni.PodsWithAffinity...)
	out.PodsWithRequiredAntiAffinity = append([]*PodInfo(nil), ni.PodsWithRequiredAntiAffinity...)
	out.Requested = ni.Requested.clone()
	out.NonZeroRequested = ni.NonZeroRequested.clone()
	out.UsedPorts = maps.Clone(ni.UsedPorts)
	return &out
}

// clone copies r, scalars included.
func (r Resource) clone() Resource {
	out := r
	out.Scalar = maps.Clone(r.Scalar)
	return out
}
