package machine

import (
	"fmt"
	"sort"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GetCondition returns the condition of type t among a machine's (or
// another Machine API object's) conditions, or nil.
func GetCondition(conds []machinev1.Condition, t machinev1.ConditionType) *machinev1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func conditionTrue(conds []machinev1.Condition, t machinev1.ConditionType) bool {
	c := GetCondition(conds, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// setCondition sets c in conds, keeping the transition time when the
// status does not change, and keeps the list sorted by type as OpenShift's
// condition helpers do.
func setCondition(conds []machinev1.Condition, c machinev1.Condition, now metav1.Time) []machinev1.Condition {
	if old := GetCondition(conds, c.Type); old != nil {
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		*old = c
		return conds
	}
	c.LastTransitionTime = now
	conds = append(conds, c)
	sort.SliceStable(conds, func(i, j int) bool { return conds[i].Type < conds[j].Type })
	return conds
}

func trueCondition(t machinev1.ConditionType, message string) machinev1.Condition {
	return machinev1.Condition{Type: t, Status: corev1.ConditionTrue, Message: message}
}

func falseCondition(t machinev1.ConditionType, reason string, sev machinev1.ConditionSeverity, format string, args ...any) machinev1.Condition {
	return machinev1.Condition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Severity: sev, Message: fmt.Sprintf(format, args...)}
}

// setLifecycleHookConditions sets Drainable and Terminable from the hooks
// present: False with reason HookPresent and the hooks holding, True when
// none does. Every machine carries both.
func setLifecycleHookConditions(m *machinev1.Machine, now metav1.Time) {
	if hooks := m.Spec.LifecycleHooks.PreDrain; len(hooks) > 0 {
		m.Status.Conditions = setCondition(m.Status.Conditions, falseCondition(machinev1.MachineDrainable, machinev1.MachineHookPresent,
			machinev1.ConditionSeverityWarning, "Drain operation currently blocked by: %+v", hooks), now)
	} else {
		m.Status.Conditions = setCondition(m.Status.Conditions, trueCondition(machinev1.MachineDrainable, ""), now)
	}
	if hooks := m.Spec.LifecycleHooks.PreTerminate; len(hooks) > 0 {
		m.Status.Conditions = setCondition(m.Status.Conditions, falseCondition(machinev1.MachineTerminable, machinev1.MachineHookPresent,
			machinev1.ConditionSeverityWarning, "Terminate operation currently blocked by: %+v", hooks), now)
	} else {
		m.Status.Conditions = setCondition(m.Status.Conditions, trueCondition(machinev1.MachineTerminable, ""), now)
	}
}
