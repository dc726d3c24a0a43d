package payload

import (
	"fmt"
	"sort"
	"strings"

	configv1 "github.com/openshift/api/config/v1"
)

// Mode is what the CVO is doing with a payload.
type Mode int

// The CVO's modes.
const (
	// Initializing: the first install, everything in parallel, undone
	// versions and degraded operators tolerated.
	Initializing Mode = iota
	// Updating: run levels in order, 16 workers.
	Updating
	// Reconciling: after an update, putting drift back, 2 workers.
	Reconciling
)

func (m Mode) String() string {
	return [...]string{"Initializing", "Updating", "Reconciling"}[m]
}

// Effect says how an error bears on the update.
type Effect int

// The CVO's update effects.
const (
	// EffectFail fails the update at once.
	EffectFail Effect = iota
	// EffectNone is waited for: the update is progressing, not failing.
	EffectNone
	// EffectReport is reported but does not hold the update.
	EffectReport
	// EffectFailAfterInterval fails only once it has lasted 40 minutes.
	EffectFailAfterInterval
)

// UpdateError is why a task has not succeeded, with the reason and the
// message the ClusterVersion's conditions carry, and their plural forms
// for several operators of one reason.
type UpdateError struct {
	Effect              Effect
	Reason              string
	PluralReason        string
	Message             string
	PluralMessageFormat string
	// Name is the ClusterOperator (or object) concerned.
	Name   string
	Nested error
}

func (e *UpdateError) Error() string { return e.Message }

func (e *UpdateError) Unwrap() error { return e.Nested }

// OperatorHealth decides whether a ClusterOperator of the payload
// (expected: its manifest, with the versions it must reach) is done:
// Available, not Degraded (a missing Degraded counts as degraded), every
// expected version reported. nil when done.
func OperatorHealth(expected, actual *configv1.ClusterOperator, mode Mode) *UpdateError {
	name := expected.Name
	if len(expected.Status.Versions) == 0 {
		return &UpdateError{Effect: EffectFail, Reason: "ClusterOperatorNoVersions", PluralReason: "ClusterOperatorsNoVersions",
			Message: fmt.Sprintf("Cluster operator %s does not declare expected versions", name), PluralMessageFormat: "Cluster operators %s do not declare expected versions", Name: name}
	}
	var undone []string
	for _, want := range expected.Status.Versions {
		have := ""
		if actual != nil {
			for _, v := range actual.Status.Versions {
				if v.Name == want.Name {
					have = v.Version
				}
			}
		}
		switch {
		case have == want.Version:
		case have == "":
			undone = append(undone, fmt.Sprintf("%s to %s", want.Name, want.Version))
		default:
			undone = append(undone, fmt.Sprintf("%s from %s to %s", want.Name, have, want.Version))
		}
	}
	sort.Strings(undone)
	available, progressing, degraded := false, true, true
	var availableCond, degradedCond *configv1.ClusterOperatorStatusCondition
	if actual != nil {
		for i := range actual.Status.Conditions {
			c := &actual.Status.Conditions[i]
			switch c.Type {
			case configv1.OperatorAvailable:
				available, availableCond = c.Status == configv1.ConditionTrue, c
			case configv1.OperatorProgressing:
				progressing = c.Status != configv1.ConditionFalse
			case configv1.OperatorDegraded:
				degraded, degradedCond = c.Status != configv1.ConditionFalse, c
			}
		}
	}
	nested := fmt.Errorf("cluster operator %s: available=%v, progressing=%v, degraded=%v, undone=%s", name, available, progressing, degraded, strings.Join(undone, ", "))
	switch {
	case !available:
		if availableCond != nil && availableCond.Message != "" {
			nested = fmt.Errorf("cluster operator %s is %s=%s: %s: %s", name, availableCond.Type, availableCond.Status, availableCond.Reason, availableCond.Message)
		}
		return &UpdateError{Nested: nested, Effect: EffectFail, Reason: "ClusterOperatorNotAvailable", PluralReason: "ClusterOperatorsNotAvailable",
			Message: fmt.Sprintf("Cluster operator %s is not available", name), PluralMessageFormat: "Cluster operators %s are not available", Name: name}
	case degraded:
		if degradedCond != nil && degradedCond.Message != "" {
			nested = fmt.Errorf("cluster operator %s is %s=%s: %s, %s", name, degradedCond.Type, degradedCond.Status, degradedCond.Reason, degradedCond.Message)
		}
		effect := EffectFailAfterInterval
		if mode == Initializing {
			effect = EffectReport
		}
		return &UpdateError{Nested: nested, Effect: effect, Reason: "ClusterOperatorDegraded", PluralReason: "ClusterOperatorsDegraded",
			Message: fmt.Sprintf("Cluster operator %s is degraded", name), PluralMessageFormat: "Cluster operators %s are degraded", Name: name}
	case len(undone) > 0 && mode != Initializing:
		return &UpdateError{Nested: fmt.Errorf("cluster operator %s is available and not degraded but has not finished updating to target version", name),
			Effect: EffectNone, Reason: "ClusterOperatorUpdating", PluralReason: "ClusterOperatorsUpdating",
			Message: fmt.Sprintf("Cluster operator %s is updating versions", name), PluralMessageFormat: "Cluster operators %s are updating versions", Name: name}
	}
	return nil
}

// Summarize folds the errors of one pass into one, as the CVO reports
// them: errors of one reason about several operators become the plural
// form ("Cluster operators a, b are degraded"); errors of several reasons
// become MultipleErrors with one line each.
func Summarize(errs []*UpdateError) *UpdateError {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	byReason := map[string][]*UpdateError{}
	var reasons []string
	for _, e := range errs {
		if _, ok := byReason[e.Reason]; !ok {
			reasons = append(reasons, e.Reason)
		}
		byReason[e.Reason] = append(byReason[e.Reason], e)
	}
	var folded []*UpdateError
	for _, r := range reasons {
		group := byReason[r]
		if len(group) == 1 || group[0].PluralMessageFormat == "" {
			folded = append(folded, group...)
			continue
		}
		names := make([]string, len(group))
		effect := group[0].Effect
		for i, e := range group {
			names[i] = e.Name
			effect = worse(effect, e.Effect)
		}
		sort.Strings(names)
		folded = append(folded, &UpdateError{Effect: effect, Reason: group[0].PluralReason, Name: strings.Join(names, ", "),
			Message: fmt.Sprintf(group[0].PluralMessageFormat, strings.Join(names, ", "))})
	}
	if len(folded) == 1 {
		return folded[0]
	}
	lines := make([]string, len(folded))
	effect := folded[0].Effect
	for i, e := range folded {
		lines[i] = "* " + e.Message
		effect = worse(effect, e.Effect)
	}
	return &UpdateError{Effect: effect, Reason: "MultipleErrors", Message: "Multiple errors are preventing progress:\n" + strings.Join(lines, "\n")}
}

// severity ranks effects: a failure now, then one after an interval,
// then waiting, then a report.
var severity = map[Effect]int{EffectFail: 3, EffectFailAfterInterval: 2, EffectNone: 1, EffectReport: 0}

func worse(a, b Effect) Effect {
	if severity[b] > severity[a] {
		return b
	}
	return a
}
