// Package policy reads, validates and defaults the scheduler Policy file of
// OpenShift 3 / legacy Kubernetes: a list of predicates (filters) and
// weighted priorities (scorers), some of them configurable through an
// argument under a name the administrator chooses.
package policy

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/capstan-dev/capstan/internal/strictyaml"
)

// Policy is the scheduler Policy file. Both shapes of the documentation are
// accepted: "kind: Policy" with "apiVersion: v1", or with "version: v1".
type Policy struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion,omitempty"`
	Version    string            `json:"version,omitempty"`
	Predicates []PredicatePolicy `json:"predicates"`
	Priorities []PriorityPolicy  `json:"priorities"`
}

// PredicatePolicy names a predicate; with an argument it configures one of
// the configurable kinds under a name of the administrator's choosing.
type PredicatePolicy struct {
	Name     string             `json:"name"`
	Argument *PredicateArgument `json:"argument,omitempty"`
	// Weight is accepted because the documentation's examples carry one on
	// predicates; predicates filter and do not score, so it is unused.
	Weight *Weight `json:"weight,omitempty"`
}

// PredicateArgument configures a predicate; exactly one field is set.
type PredicateArgument struct {
	ServiceAffinity *ServiceAffinity `json:"serviceAffinity,omitempty"`
	LabelsPresence  *LabelsPresence  `json:"labelsPresence,omitempty"`
}

// ServiceAffinity keeps the pods of a service on nodes that share the
// values of Labels.
type ServiceAffinity struct {
	Labels []string `json:"labels"`
}

// LabelsPresence requires (Presence true) or forbids (false) every label of
// Labels on a node.
type LabelsPresence struct {
	Labels   []string `json:"labels"`
	Presence bool     `json:"presence"`
}

// PriorityPolicy names a weighted priority; with an argument it configures
// one of the configurable kinds.
type PriorityPolicy struct {
	Name     string            `json:"name"`
	Weight   Weight            `json:"weight"`
	Argument *PriorityArgument `json:"argument,omitempty"`
}

// PriorityArgument configures a priority; exactly one field is set.
type PriorityArgument struct {
	ServiceAntiAffinity *ServiceAntiAffinity `json:"serviceAntiAffinity,omitempty"`
	LabelPreference     *LabelPreference     `json:"labelPreference,omitempty"`
}

// ServiceAntiAffinity spreads the pods of a service over the values of
// Label.
type ServiceAntiAffinity struct {
	Label string `json:"label"`
}

// LabelPreference prefers nodes that have (Presence true) or lack (false)
// Label.
type LabelPreference struct {
	Label    string `json:"label"`
	Presence bool   `json:"presence"`
}

// Weight is a priority weight. The documentation writes it both as a
// number and as a quoted number; both are read.
type Weight int64

// UnmarshalJSON reads 2 or "2".
func (w *Weight) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return fmt.Errorf("weight %s is not an integer", string(b))
	}
	*w = Weight(n)
	return nil
}

// Load reads and validates a Policy file.
func Load(path string) (*Policy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading policy: %w", err)
	}
	p, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// Parse decodes a Policy from JSON or YAML, rejecting unknown fields, and
// validates it.
func Parse(raw []byte) (*Policy, error) {
	p := &Policy{}
	if err := strictyaml.Decode(raw, p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Default is the default policy of the scheduling documentation (14.2.4),
// brought to what OpenShift 4's scheduler runs: pod topology spread (the
// pods' constraints and the cluster defaults) as a predicate and a
// priority, volume binding and the cordon as filters, and attach limits
// from each node's CSINode rather than the fixed in-tree counts upstream
// has removed. Preemption is not a Policy entry: every scheduler preempts
// unless told not to (Config.DisablePreemption).
func Default() *Policy {
	return &Policy{
		Kind: "Policy", APIVersion: "v1",
		Predicates: []PredicatePolicy{
			{Name: "NoVolumeZoneConflict"}, {Name: "MaxCSIVolumeCountPred"}, {Name: "MatchInterPodAffinity"},
			{Name: "NoDiskConflict"}, {Name: "GeneralPredicates"}, {Name: "PodToleratesNodeTaints"},
			{Name: "CheckNodeMemoryPressure"}, {Name: "CheckNodeDiskPressure"}, {Name: "CheckNodeUnschedulable"},
			{Name: "CheckVolumeBinding"}, {Name: "EvenPodsSpread"},
			{Name: "Region", Argument: &PredicateArgument{ServiceAffinity: &ServiceAffinity{Labels: []string{"region"}}}},
		},
		Priorities: []PriorityPolicy{
			{Name: "SelectorSpreadPriority", Weight: 1}, {Name: "InterPodAffinityPriority", Weight: 1},
			{Name: "LeastRequestedPriority", Weight: 1}, {Name: "BalancedResourceAllocation", Weight: 1},
			{Name: "NodePreferAvoidPodsPriority", Weight: 10000}, {Name: "NodeAffinityPriority", Weight: 1},
			{Name: "TaintTolerationPriority", Weight: 1}, {Name: "EvenPodsSpreadPriority", Weight: 2},
			{Name: "Zone", Weight: 2, Argument: &PriorityArgument{ServiceAntiAffinity: &ServiceAntiAffinity{Label: "zone"}}},
		},
	}
}

// UpstreamDefault is the default profile of kube-scheduler (v1.36) as a
// Policy: its filter plugins by their legacy predicate names, in its
// order, and its scoring plugins with its weights (NodeResourcesFit's
// LeastAllocated strategy is LeastRequestedPriority). It is what the
// differential tests hold capstan's predicates to, and what a simulation
// of a cluster that is not capstan's runs.
func UpstreamDefault() *Policy {
	return &Policy{
		Kind: "Policy", APIVersion: "v1",
		Predicates: []PredicatePolicy{
			{Name: "CheckNodeUnschedulable"}, {Name: "HostName"}, {Name: "PodToleratesNodeTaints"},
			{Name: "MatchNodeSelector"}, {Name: "PodFitsHostPorts"}, {Name: "PodFitsResources"},
			{Name: "NoDiskConflict"}, {Name: "MaxCSIVolumeCountPred"}, {Name: "CheckVolumeBinding"},
			{Name: "NoVolumeZoneConflict"}, {Name: "EvenPodsSpread"}, {Name: "MatchInterPodAffinity"},
		},
		Priorities: []PriorityPolicy{
			{Name: "TaintTolerationPriority", Weight: 3}, {Name: "NodeAffinityPriority", Weight: 2},
			{Name: "LeastRequestedPriority", Weight: 1}, {Name: "EvenPodsSpreadPriority", Weight: 2},
			{Name: "InterPodAffinityPriority", Weight: 2}, {Name: "BalancedResourceAllocation", Weight: 1},
			{Name: "ImageLocalityPriority", Weight: 1},
		},
	}
}
