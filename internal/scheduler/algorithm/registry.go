package algorithm

import (
	"fmt"

	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// predicateOrder is the order predicates run in: that of the filter
// plugins of upstream's default profile they became (NodeUnschedulable,
// NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit,
// VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone,
// PodTopologySpread, InterPodAffinity). A node is rejected by the first
// that fails, and whether preemption can help there is that predicate's
// answer, as it is the first failing plugin's upstream. Configurable
// predicates run after the static ones of their rank, in Policy order.
var predicateOrder = []string{
	"CheckNodeCondition", "CheckNodeUnschedulable", "HostName", "PodToleratesNodeTaints",
	"PodToleratesNodeNoExecuteTaints", "MatchNodeSelector", "GeneralPredicates", "PodFitsHostPorts",
	"PodFitsPorts", "PodFitsResources", "NoDiskConflict", "CheckNodeLabelPresence", "checkServiceAffinity",
	"MaxEBSVolumeCount", "MaxGCEPDVolumeCount", "MaxAzureDiskVolumeCount", "MaxCSIVolumeCountPred",
	"CheckVolumeBinding", "NoVolumeZoneConflict", "CheckNodeMemoryPressure", "CheckNodePIDPressure",
	"CheckNodeDiskPressure", "EvenPodsSpread", "MatchInterPodAffinity",
}

func staticPredicate(name string) Predicate {
	switch name {
	case "NoVolumeZoneConflict":
		return noVolumeZoneConflict{}
	case "MaxEBSVolumeCount":
		return newMaxEBS()
	case "MaxGCEPDVolumeCount":
		return newMaxGCEPD()
	case "MaxAzureDiskVolumeCount":
		return newMaxAzureDisk()
	case "MatchInterPodAffinity":
		return matchInterPodAffinity{}
	case "EvenPodsSpread":
		return evenPodsSpread{}
	case "MaxCSIVolumeCountPred":
		return maxCSIVolumeCount{}
	case "NoDiskConflict":
		return noDiskConflict{}
	case "GeneralPredicates":
		return generalPredicates{}
	case "PodToleratesNodeTaints":
		return podToleratesNodeTaints{name: name}
	case "PodToleratesNodeNoExecuteTaints":
		return podToleratesNodeTaints{name: name, noExecuteOnly: true}
	case "CheckNodeMemoryPressure":
		return checkNodeMemoryPressure{}
	case "CheckNodeDiskPressure":
		return checkNodeDiskPressure{}
	case "CheckNodePIDPressure":
		return checkNodePIDPressure{}
	case "CheckVolumeBinding":
		return checkVolumeBinding{}
	case "CheckNodeCondition":
		return checkNodeCondition{}
	case "CheckNodeUnschedulable":
		return checkNodeUnschedulable{}
	case "PodFitsResources":
		return podFitsResources{}
	case "PodFitsHostPorts", "PodFitsPorts":
		return podFitsHostPorts{name: name}
	case "HostName":
		return hostName{}
	case "MatchNodeSelector":
		return matchNodeSelector{}
	}
	return nil
}

func staticPriority(name string) Priority {
	switch name {
	case "SelectorSpreadPriority":
		return &selectorSpread{name: name}
	case "ServiceSpreadingPriority":
		return &selectorSpread{name: name, servicesOnly: true}
	case "InterPodAffinityPriority":
		return interPodAffinityPriority{}
	case "LeastRequestedPriority":
		return &resourceScorer{name: name, score: leastRequested}
	case "MostRequestedPriority":
		return &resourceScorer{name: name, score: mostRequested}
	case "BalancedResourceAllocation":
		return &resourceScorer{name: name, score: balancedAllocation}
	case "NodePreferAvoidPodsPriority":
		return nodePreferAvoidPods{}
	case "NodeAffinityPriority":
		return nodeAffinityPriority{}
	case "TaintTolerationPriority":
		return taintTolerationPriority{}
	case "EqualPriority":
		return equalPriority{}
	case "ImageLocalityPriority":
		return imageLocality{}
	case "EvenPodsSpreadPriority":
		return evenPodsSpreadPriority{}
	}
	return nil
}

// WeightedPriority is a priority with its Policy weight.
type WeightedPriority struct {
	Priority
	Weight int64
}

// FromPolicy builds the predicates (in evaluation order) and weighted
// priorities a Policy names. The Policy must be valid.
func FromPolicy(p *policy.Policy) ([]Predicate, []WeightedPriority, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	rank := map[string]int{}
	for i, n := range predicateOrder {
		rank[n] = i
	}
	type ranked struct {
		p    Predicate
		rank int
	}
	var list []ranked
	for _, pp := range p.Predicates {
		var pred Predicate
		r := len(predicateOrder)
		switch {
		case pp.Argument != nil && pp.Argument.ServiceAffinity != nil:
			pred = &serviceAffinity{name: pp.Name, labels: pp.Argument.ServiceAffinity.Labels}
			r = rank["checkServiceAffinity"]
		case pp.Argument != nil && pp.Argument.LabelsPresence != nil:
			pred = &labelsPresence{name: pp.Name, labels: pp.Argument.LabelsPresence.Labels, presence: pp.Argument.LabelsPresence.Presence}
			r = rank["CheckNodeLabelPresence"]
		default:
			pred = staticPredicate(pp.Name)
			r = rank[pp.Name]
		}
		if pred == nil {
			return nil, nil, fmt.Errorf("predicate %q has no implementation", pp.Name)
		}
		list = append(list, ranked{pred, r})
	}
	// Stable insertion sort by rank keeps Policy order within a rank.
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && list[j].rank < list[j-1].rank; j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
	preds := make([]Predicate, len(list))
	for i, r := range list {
		preds[i] = r.p
	}

	var prios []WeightedPriority
	for _, pp := range p.Priorities {
		var prio Priority
		switch {
		case pp.Argument != nil && pp.Argument.ServiceAntiAffinity != nil:
			prio = &serviceAntiAffinity{name: pp.Name, label: pp.Argument.ServiceAntiAffinity.Label}
		case pp.Argument != nil && pp.Argument.LabelPreference != nil:
			prio = &labelPreference{name: pp.Name, label: pp.Argument.LabelPreference.Label, presence: pp.Argument.LabelPreference.Presence}
		default:
			prio = staticPriority(pp.Name)
		}
		if prio == nil {
			return nil, nil, fmt.Errorf("priority %q has no implementation", pp.Name)
		}
		prios = append(prios, WeightedPriority{Priority: prio, Weight: int64(pp.Weight)})
	}
	return preds, prios, nil
}
