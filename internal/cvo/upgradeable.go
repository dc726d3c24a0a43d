package cvo

import (
	"context"
	"fmt"
	"sort"
	"strings"

	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// syncUpgradeable sets the ClusterVersion's Upgradeable condition from
// its checks: the cluster operators that say they must not be updated to
// another minor version, and the ClusterVersion's unmanaged overrides. It
// is absent while none fails.
func (o *Operator) syncUpgradeable(ctx context.Context) error {
	list, err := o.client.ConfigV1().ClusterOperators().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	return o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) {
		cond := CombineUpgradeable(Upgradeable(list.Items), OverridesUpgradeable(cv.Spec.Overrides))
		if cond == nil {
			removeCondition(&cv.Status.Conditions, configv1.OperatorUpgradeable)
			return
		}
		SetCondition(&cv.Status.Conditions, *cond, now)
	})
}

// OverridesUpgradeable is the CVO's overrides check: an object taken out
// of its hands (an unmanaged override) blocks minor updates. nil without
// one.
func OverridesUpgradeable(overrides []configv1.ComponentOverride) *configv1.ClusterOperatorStatusCondition {
	for _, ov := range overrides {
		if ov.Unmanaged {
			return &configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse,
				Reason:  "ClusterVersionOverridesSet",
				Message: "Disabling ownership via cluster version overrides prevents upgrades. Please remove overrides before continuing."}
		}
	}
	return nil
}

// CombineUpgradeable folds the failed Upgradeable checks (nil entries
// passed) as the CVO does: one gives its reason and message; several give
// MultipleReasons, their reasons listed and a message line each.
func CombineUpgradeable(checks ...*configv1.ClusterOperatorStatusCondition) *configv1.ClusterOperatorStatusCondition {
	var failed []*configv1.ClusterOperatorStatusCondition
	for _, c := range checks {
		if c != nil {
			failed = append(failed, c)
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return failed[0]
	}
	reasons := make([]string, len(failed))
	lines := make([]string, len(failed))
	for i, c := range failed {
		reasons[i] = c.Reason
		lines[i] = "* " + c.Message
	}
	return &configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse, Reason: "MultipleReasons",
		Message: fmt.Sprintf("Cluster should not be upgraded between minor or major versions for multiple reasons: %s\n%s",
			strings.Join(reasons, ","), strings.Join(lines, "\n"))}
}

// Upgradeable words the operators' Upgradeable=False as the CVO does:
// one operator gives its reason; several give ClusterOperatorsNotUpgradeable
// with a line each. nil when every operator may be updated.
func Upgradeable(cos []configv1.ClusterOperator) *configv1.ClusterOperatorStatusCondition {
	var blocked []configv1.ClusterOperator
	for _, co := range cos {
		if c := FindCondition(co.Status.Conditions, configv1.OperatorUpgradeable); c != nil && c.Status == configv1.ConditionFalse {
			blocked = append(blocked, co)
		}
	}
	sort.Slice(blocked, func(i, j int) bool { return blocked[i].Name < blocked[j].Name })
	switch len(blocked) {
	case 0:
		return nil
	case 1:
		c := FindCondition(blocked[0].Status.Conditions, configv1.OperatorUpgradeable)
		return &configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse, Reason: c.Reason,
			Message: fmt.Sprintf("Cluster operator %s should not be upgraded between minor or major versions: %s", blocked[0].Name, c.Message)}
	}
	lines := make([]string, len(blocked))
	for i, co := range blocked {
		c := FindCondition(co.Status.Conditions, configv1.OperatorUpgradeable)
		lines[i] = fmt.Sprintf("* Cluster operator %s should not be upgraded between minor or major versions: %s: %s", co.Name, c.Reason, c.Message)
	}
	return &configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse, Reason: "ClusterOperatorsNotUpgradeable",
		Message: "Multiple cluster operators should not be upgraded between minor or major versions:\n" + strings.Join(lines, "\n")}
}
