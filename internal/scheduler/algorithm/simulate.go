package algorithm

import corev1 "k8s.io/api/core/v1"

// The autoscaler's simulations change a snapshot as they go: pods placed
// on nodes, nodes added from a template and taken away again. They work on
// snapshots of their own (NewSnapshot); the scheduler never changes one.

// AddNode adds a node, with its pods, to the snapshot.
func (s *Snapshot) AddNode(ni *NodeInfo) {
	s.Nodes = append(s.Nodes, ni)
	for _, p := range ni.Pods {
		s.Pods.Add(p, ni)
	}
}

// RemoveNode takes a node, with its pods, out of the snapshot.
func (s *Snapshot) RemoveNode(ni *NodeInfo) {
	for i, n := range s.Nodes {
		if n == ni {
			s.Nodes = append(s.Nodes[:i], s.Nodes[i+1:]...)
			break
		}
	}
	for _, p := range ni.Pods {
		s.Pods.Remove(p)
	}
}

// Place puts a pod on a node of the snapshot.
func (s *Snapshot) Place(pi *PodInfo, ni *NodeInfo) {
	ni.AddPod(pi)
	s.Pods.Add(pi, ni)
}

// Unplace takes a pod Place put on a node off it again.
func (s *Snapshot) Unplace(pi *PodInfo, ni *NodeInfo) {
	if ni.RemovePod(pi.Pod) != nil {
		s.Pods.Remove(pi)
	}
}

// FirstFit runs the Policy's predicates for a pod on the given nodes of the
// snapshot, in order, and returns the first that fits, or nil. When
// failures is not nil it records why each node evaluated did not fit
// (every failing predicate, as an explanation does).
func (a *Algorithm) FirstFit(pi *PodInfo, snap *Snapshot, nodes []*NodeInfo, failures map[string]*Failure) *NodeInfo {
	if len(nodes) == 0 {
		return nil
	}
	cs := a.PreFilter(pi, snap)
	for _, ni := range nodes {
		f := a.runPredicates(cs, pi, ni, failures != nil)
		if f == nil {
			return ni
		}
		if failures != nil {
			failures[ni.Name] = f
		}
	}
	return nil
}

// PreFilter starts a cycle for pi on snap: what the predicates compute once
// per pod. The state holds until the snapshot changes.
func (a *Algorithm) PreFilter(pi *PodInfo, snap *Snapshot) *CycleState {
	cs := NewCycleState(snap)
	for _, p := range a.predicates {
		if pf, ok := p.(PreFilter); ok {
			pf.PreFilter(cs, pi)
		}
	}
	return cs
}

// Fits runs the predicates of a started cycle on one node; nil means the
// pod fits.
func (a *Algorithm) Fits(cs *CycleState, pi *PodInfo, ni *NodeInfo) *Failure {
	return a.runPredicates(cs, pi, ni, false)
}

// NewNodeInfoFor builds a NodeInfo that keeps the label values this
// algorithm's Policy reads, as the scheduler's own cache does.
func (a *Algorithm) NewNodeInfoFor(node *corev1.Node) *NodeInfo {
	ni := &NodeInfo{}
	ni.UseLabelKeys(a.LabelKeys())
	ni.SetNode(node)
	return ni
}
