package algorithm

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// zoneWeighting is how much of SelectorSpreadPriority's score comes from
// spreading over zones rather than nodes.
const zoneWeighting = 2.0 / 3.0

// zoneKey identifies a node's zone from its region and zone labels (the
// GA labels, or the beta ones), "" when it has neither.
func zoneKey(n *corev1.Node) string {
	region := n.Labels[corev1.LabelTopologyRegion]
	if region == "" {
		region = n.Labels[corev1.LabelFailureDomainBetaRegion]
	}
	zone := n.Labels[corev1.LabelTopologyZone]
	if zone == "" {
		zone = n.Labels[corev1.LabelFailureDomainBetaZone]
	}
	if region == "" && zone == "" {
		return ""
	}
	return region + ":\x00:" + zone
}

// selectorSpread spreads the pods of the same services, replication
// controllers, replica sets and stateful sets over nodes and zones:
// fewer matching pods score higher. servicesOnly makes it
// ServiceSpreadingPriority.
type selectorSpread struct {
	name         string
	servicesOnly bool
}

func (p *selectorSpread) Name() string { return p.name }

func (p *selectorSpread) Score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	sels := cs.Snapshot.podSelectors(pi.Pod, p.servicesOnly)
	counts := make([]int64, len(nodes))
	if len(sels) > 0 {
		for i, ni := range nodes {
			counts[i] = countMatching(ni, pi.Pod.Namespace, sels)
		}
	}
	var maxNode, maxZone int64
	byZone := map[string]int64{}
	for i, ni := range nodes {
		maxNode = max(maxNode, counts[i])
		if z := ni.ZoneKey; z != "" {
			byZone[z] += counts[i]
		}
	}
	for _, c := range byZone {
		maxZone = max(maxZone, c)
	}
	for i, ni := range nodes {
		f := float64(MaxPriority)
		if maxNode > 0 {
			f = MaxPriority * float64(maxNode-counts[i]) / float64(maxNode)
		}
		if len(byZone) > 0 {
			if z := ni.ZoneKey; z != "" {
				zs := float64(MaxPriority)
				if maxZone > 0 {
					zs = MaxPriority * float64(maxZone-byZone[z]) / float64(maxZone)
				}
				f = f*(1-zoneWeighting) + zoneWeighting*zs
			}
		}
		scores[i] = int64(f)
	}
}

// countMatching counts the live pods of ns on a node matched by every
// selector, as the legacy SelectorSpread did: a pod of the same service but
// another replica set is not a sibling.
func countMatching(ni *NodeInfo, ns string, sels []labels.Selector) int64 {
	var n int64
	for _, p := range ni.Pods {
		if p.Pod.Namespace != ns || p.Pod.DeletionTimestamp != nil {
			continue
		}
		l := labels.Set(p.Pod.Labels)
		all := true
		for _, s := range sels {
			if !s.Matches(l) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}

// serviceAntiAffinity (configurable) spreads the pods of a service over
// the values of a label: nodes with the same value score the same, fewer
// of the service's pods score higher, nodes without the label score 0.
type serviceAntiAffinity struct {
	name  string
	label string
}

func (p *serviceAntiAffinity) Name() string { return p.name }

func (p *serviceAntiAffinity) Score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	var sels []labels.Selector
	if sel := cs.Snapshot.firstServiceSelector(pi.Pod); sel != nil {
		sels = []labels.Selector{sel}
	}
	var total int64
	byValue := map[string]int64{}
	counts := make([]int64, len(nodes))
	values := make([]string, len(nodes))
	has := make([]bool, len(nodes))
	for i, ni := range nodes {
		values[i], has[i] = ni.Label(p.label)
		if len(sels) > 0 {
			counts[i] = countMatching(ni, pi.Pod.Namespace, sels)
		}
		total += counts[i]
		if has[i] {
			byValue[values[i]] += counts[i]
		}
	}
	for i := range nodes {
		switch {
		case !has[i]:
			scores[i] = 0
		case total == 0:
			scores[i] = MaxPriority
		default:
			scores[i] = int64(MaxPriority * float64(total-byValue[values[i]]) / float64(total))
		}
	}
}
