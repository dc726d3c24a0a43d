package algorithm

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// The node selector terms of a pod, compiled once per decision and matched
// against each NodeInfo's labels and name. The rules are those of
// k8s.io/component-helpers/scheduling/corev1/nodeaffinity (terms ORed,
// expressions ANDed, an empty term matching nothing, parse errors making a
// term fail; TestNodeSelectorsMatchUpstream holds the two together): that
// package builds a fields.Set for every node it matches, which at thousands
// of nodes per decision was most of the node-affinity workload's CPU.

// selectorTerm is one compiled NodeSelectorTerm.
type selectorTerm struct {
	labels labels.Selector // nil: no expressions
	fields fields.Selector // nil: no field expressions
	err    error
	weight int64
}

// nodeFieldName is the one node field node selectors may use.
const nodeFieldName = "metadata.name"

func compileTerm(t *corev1.NodeSelectorTerm) selectorTerm {
	var st selectorTerm
	var errs []error
	if len(t.MatchExpressions) > 0 {
		sel := labels.NewSelector()
		for i, e := range t.MatchExpressions {
			op, ok := map[corev1.NodeSelectorOperator]selection.Operator{
				corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
				corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
				corev1.NodeSelectorOpGt: selection.GreaterThan, corev1.NodeSelectorOpLt: selection.LessThan,
			}[e.Operator]
			if !ok {
				errs = append(errs, fmt.Errorf("matchExpressions[%d].operator: unsupported value %q", i, e.Operator))
				continue
			}
			r, err := labels.NewRequirement(e.Key, op, e.Values)
			if err != nil {
				errs = append(errs, fmt.Errorf("matchExpressions[%d]: %w", i, err))
				continue
			}
			sel = sel.Add(*r)
		}
		st.labels = sel
	}
	if len(t.MatchFields) > 0 {
		var sels []fields.Selector
		for i, e := range t.MatchFields {
			switch {
			case len(e.Values) != 1:
				errs = append(errs, fmt.Errorf("matchFields[%d].values: must have one element", i))
			case e.Operator == corev1.NodeSelectorOpIn:
				sels = append(sels, fields.OneTermEqualSelector(e.Key, e.Values[0]))
			case e.Operator == corev1.NodeSelectorOpNotIn:
				sels = append(sels, fields.OneTermNotEqualSelector(e.Key, e.Values[0]))
			default:
				errs = append(errs, fmt.Errorf("matchFields[%d].operator: unsupported value %q", i, e.Operator))
			}
		}
		st.fields = fields.AndSelectors(sels...)
	}
	st.err = errors.Join(errs...)
	return st
}

func emptyTerm(t *corev1.NodeSelectorTerm) bool {
	return len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0
}

// matches reports whether the node satisfies the term.
func (t *selectorTerm) matches(ni *NodeInfo) bool {
	if t.err != nil {
		return false
	}
	if t.labels != nil && !t.labels.Matches(labels.Set(ni.Labels)) {
		return false
	}
	if t.fields != nil && ni.Name != "" && !t.fields.Matches(nodeNameField(ni.Name)) {
		return false
	}
	return true
}

// nodeNameField is a node's fields as a fields.Fields, without a map.
type nodeNameField string

func (f nodeNameField) Has(field string) bool { return field == nodeFieldName }

func (f nodeNameField) Get(field string) string {
	if field == nodeFieldName {
		return string(f)
	}
	return ""
}

// requiredNodeSelector is a pod's nodeSelector and required node affinity.
type requiredNodeSelector struct {
	set   labels.Selector // nil: no nodeSelector
	terms []selectorTerm  // nil: no required node affinity
	// affinity is set when the pod has required node affinity at all (its
	// terms may all be empty: then nothing matches).
	affinity bool
}

func newRequiredNodeSelector(pod *corev1.Pod) requiredNodeSelector {
	var r requiredNodeSelector
	if len(pod.Spec.NodeSelector) > 0 {
		r.set = labels.SelectorFromSet(pod.Spec.NodeSelector)
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		r.affinity = true
		for i := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			t := &a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[i]
			if !emptyTerm(t) {
				r.terms = append(r.terms, compileTerm(t))
			}
		}
	}
	return r
}

// matches reports whether the node satisfies the nodeSelector and one of
// the required terms.
func (r *requiredNodeSelector) matches(ni *NodeInfo) bool {
	if r.set != nil && !r.set.Matches(labels.Set(ni.Labels)) {
		return false
	}
	if !r.affinity {
		return true
	}
	for i := range r.terms {
		if r.terms[i].matches(ni) {
			return true
		}
	}
	return false
}

// preferredTerms compiles a pod's preferred node affinity terms; a term
// that does not parse makes them all unusable, as upstream decides.
func preferredTerms(pod *corev1.Pod) ([]selectorTerm, error) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil, nil
	}
	var out []selectorTerm
	var errs []error
	for i := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		p := &a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i]
		if p.Weight == 0 || emptyTerm(&p.Preference) {
			continue
		}
		t := compileTerm(&p.Preference)
		t.weight = int64(p.Weight)
		if t.err != nil {
			errs = append(errs, t.err)
			continue
		}
		out = append(out, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
