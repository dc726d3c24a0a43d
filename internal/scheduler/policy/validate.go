package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Names of the static predicates a Policy may list. PodFitsPorts is the
// older name of PodFitsHostPorts, still used by the documentation.
var StaticPredicates = []string{
	"NoVolumeZoneConflict", "MaxEBSVolumeCount", "MaxGCEPDVolumeCount", "MaxAzureDiskVolumeCount",
	"MatchInterPodAffinity", "NoDiskConflict", "GeneralPredicates", "PodToleratesNodeTaints",
	"CheckNodeMemoryPressure", "CheckNodeDiskPressure", "CheckNodePIDPressure", "CheckVolumeBinding",
	"CheckNodeCondition", "CheckNodeUnschedulable", "PodToleratesNodeNoExecuteTaints",
	"PodFitsResources", "PodFitsHostPorts", "PodFitsPorts", "HostName", "MatchNodeSelector",
	"EvenPodsSpread", "MaxCSIVolumeCountPred",
}

// ConfigurablePredicates are the predicate names that stand for a
// configurable kind and so need an argument.
var ConfigurablePredicates = map[string]string{
	"CheckNodeLabelPresence": "labelsPresence",
	"checkServiceAffinity":   "serviceAffinity",
}

// StaticPriorities are the priorities a Policy may list without argument.
var StaticPriorities = []string{
	"SelectorSpreadPriority", "InterPodAffinityPriority", "LeastRequestedPriority",
	"BalancedResourceAllocation", "NodePreferAvoidPodsPriority", "NodeAffinityPriority",
	"TaintTolerationPriority", "EqualPriority", "MostRequestedPriority", "ImageLocalityPriority",
	"ServiceSpreadingPriority", "EvenPodsSpreadPriority",
}

// ValidationError lists everything wrong with a Policy.
type ValidationError struct{ Problems []string }

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid policy: " + e.Problems[0]
	}
	return "invalid policy:\n  " + strings.Join(e.Problems, "\n  ")
}

// Validate checks every entry and reports all problems at once, each naming
// the entry.
func (p *Policy) Validate() error {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if p.Kind != "Policy" {
		add("kind is %q, want \"Policy\"", p.Kind)
	}
	switch {
	case p.APIVersion == "" && p.Version == "":
		add(`neither apiVersion nor version is set: want "v1"`)
	case p.APIVersion != "" && p.APIVersion != "v1":
		add("apiVersion %q is not supported, want \"v1\"", p.APIVersion)
	case p.Version != "" && p.Version != "v1":
		add("version %q is not supported, want \"v1\"", p.Version)
	}

	seen := map[string]int{}
	for i, pr := range p.Predicates {
		where := fmt.Sprintf("predicate %d (%q)", i+1, pr.Name)
		if pr.Name == "" {
			add("predicate %d has no name", i+1)
			continue
		}
		if j, dup := seen[pr.Name]; dup {
			add("%s: duplicate name, already used by predicate %d", where, j)
		}
		seen[pr.Name] = i + 1
		if pr.Weight != nil && *pr.Weight <= 0 {
			add("%s: weight %d must be positive", where, *pr.Weight)
		}
		if pr.Argument == nil {
			if kind, ok := ConfigurablePredicates[pr.Name]; ok {
				add("%s: needs an argument: {%q: {...}}", where, kind)
			} else if !contains(StaticPredicates, pr.Name) {
				add("%s: unknown predicate%s; known: %s", where, suggest(pr.Name, StaticPredicates), strings.Join(StaticPredicates, ", "))
			}
			continue
		}
		a := pr.Argument
		switch {
		case a.ServiceAffinity != nil && a.LabelsPresence != nil:
			add("%s: argument sets both serviceAffinity and labelsPresence; set one", where)
		case a.ServiceAffinity != nil:
			checkLabels(add, where+": serviceAffinity", a.ServiceAffinity.Labels)
		case a.LabelsPresence != nil:
			checkLabels(add, where+": labelsPresence", a.LabelsPresence.Labels)
		default:
			add("%s: argument is empty: set serviceAffinity or labelsPresence", where)
		}
	}

	seen = map[string]int{}
	for i, pr := range p.Priorities {
		where := fmt.Sprintf("priority %d (%q)", i+1, pr.Name)
		if pr.Name == "" {
			add("priority %d has no name", i+1)
			continue
		}
		if j, dup := seen[pr.Name]; dup {
			add("%s: duplicate name, already used by priority %d", where, j)
		}
		seen[pr.Name] = i + 1
		if pr.Weight <= 0 {
			add("%s: weight %d must be positive", where, pr.Weight)
		}
		if pr.Argument == nil {
			if !contains(StaticPriorities, pr.Name) {
				add("%s: unknown priority%s; known: %s", where, suggest(pr.Name, StaticPriorities), strings.Join(StaticPriorities, ", "))
			}
			continue
		}
		a := pr.Argument
		switch {
		case a.ServiceAntiAffinity != nil && a.LabelPreference != nil:
			add("%s: argument sets both serviceAntiAffinity and labelPreference; set one", where)
		case a.ServiceAntiAffinity != nil:
			checkLabels(add, where+": serviceAntiAffinity", []string{a.ServiceAntiAffinity.Label})
		case a.LabelPreference != nil:
			checkLabels(add, where+": labelPreference", []string{a.LabelPreference.Label})
		default:
			add("%s: argument is empty: set serviceAntiAffinity or labelPreference", where)
		}
	}
	if len(probs) > 0 {
		return &ValidationError{Problems: probs}
	}
	return nil
}

func checkLabels(add func(string, ...any), where string, labels []string) {
	if len(labels) == 0 {
		add("%s: no label given", where)
	}
	for _, l := range labels {
		if l == "" {
			add("%s: empty label", where)
			continue
		}
		if errs := validation.IsQualifiedName(l); len(errs) > 0 {
			add("%s: label %q is not a valid label key: %s", where, l, strings.Join(errs, "; "))
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest offers the known name a typo most likely meant.
func suggest(name string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
	}
	return ""
}
