package algorithm

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// labelsPresence (configurable): with presence, the node must have every
// label; without, it must have none of them. Values do not matter.
type labelsPresence struct {
	name     string
	labels   []string
	presence bool
}

func (p *labelsPresence) Name() string { return p.name }

func (p *labelsPresence) Filter(_ *CycleState, _ *PodInfo, ni *NodeInfo) []string {
	for _, l := range p.labels {
		_, has := ni.Label(l)
		if has != p.presence {
			return []string{ReasonNodeLabelPresenceViolated}
		}
	}
	return nil
}

// serviceAffinity (configurable) keeps the pods of a service on nodes that
// share the values of its labels. Values come from the pod's nodeSelector;
// labels it leaves open take the values of the node that runs the
// service's first pod. The first pod of a service goes anywhere.
type serviceAffinity struct {
	name   string
	labels []string
}

func (p *serviceAffinity) Name() string { return p.name }

// serviceAffinityState is the label values one pod is bound to.
type serviceAffinityState struct {
	selector labels.Selector
}

func (p *serviceAffinity) PreFilter(cs *CycleState, pi *PodInfo) {
	pod := pi.Pod
	want := labels.Set{}
	for _, l := range p.labels {
		if v, ok := pod.Spec.NodeSelector[l]; ok {
			want[l] = v
		}
	}
	if len(want) < len(p.labels) {
		if peer := firstServicePeer(cs.Snapshot, pod); peer != nil {
			for _, l := range p.labels {
				if _, set := want[l]; set {
					continue
				}
				if v, ok := peer.Labels[l]; ok {
					want[l] = v
				}
			}
		}
	}
	cs.Write(p.name, &serviceAffinityState{selector: labels.SelectorFromSet(want)})
}

// firstServicePeer returns the node of the oldest scheduled pod of the
// pod's first service, in the pod's namespace.
func firstServicePeer(s *Snapshot, pod *corev1.Pod) *corev1.Node {
	sel := s.firstServiceSelector(pod)
	if sel == nil {
		return nil
	}
	var first *corev1.Pod
	var node *corev1.Node
	for _, ni := range s.Nodes {
		for _, p := range ni.Pods {
			q := p.Pod
			if q.Namespace != pod.Namespace || q.UID == pod.UID || !sel.Matches(labels.Set(q.Labels)) {
				continue
			}
			if first == nil || q.CreationTimestamp.Before(&first.CreationTimestamp) ||
				(q.CreationTimestamp.Equal(&first.CreationTimestamp) && q.Name < first.Name) {
				first, node = q, ni.Node
			}
		}
	}
	return node
}

func (p *serviceAffinity) Filter(cs *CycleState, _ *PodInfo, ni *NodeInfo) []string {
	st, _ := cs.Read(p.name).(*serviceAffinityState)
	if st == nil || st.selector.Empty() || st.selector.Matches(labels.Set(ni.Labels)) {
		return nil
	}
	return []string{ReasonServiceAffinityViolated}
}
