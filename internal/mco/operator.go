package mco

import (
	"fmt"
	"sort"
	"strings"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// OperatorState is what the MCO says on its ClusterOperator about a
// release version.
type OperatorState struct {
	// Done: every pool required for an update (master) runs the
	// configuration rendered for the version. Workers are not waited
	// for, as in OpenShift: an update completes while they still roll.
	Done bool
	// Progressing says what is left while not Done.
	Progressing string
	// Degraded (reason and message) when a required pool is degraded.
	DegradedReason, DegradedMessage string
	// NotUpgradeable (reason and message) when any pool is degraded.
	NotUpgradeableReason, NotUpgradeableMessage string
}

// Operator reports the MCO's part of version, as its operator syncs the
// required pools: each must target a configuration rendered for the
// version and have all its nodes updated to it.
func (c *Controller) Operator(version string) OperatorState {
	if !c.synced.Load() {
		return OperatorState{Progressing: "Working towards " + version + ": the machine config controllers are starting"}
	}
	pools, err := c.pools.List(labels.Everything())
	if err != nil {
		return OperatorState{Progressing: err.Error()}
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	st := OperatorState{Done: true}
	var waiting, degraded []string
	for _, p := range pools {
		if conditionTrue(p.Status.Conditions, mcfgv1.MachineConfigPoolDegraded) {
			degraded = append(degraded, p.Name)
		}
		if _, required := p.Labels[RequiredForUpgradeLabel]; !required {
			continue
		}
		if why := c.requiredPoolWaits(p, version); why != "" {
			st.Done = false
			waiting = append(waiting, why)
			if conditionTrue(p.Status.Conditions, mcfgv1.MachineConfigPoolDegraded) {
				st.DegradedReason = "RequiredPoolsFailed"
				st.DegradedMessage = fmt.Sprintf("Unable to apply %s: error during syncRequiredMachineConfigPools: %s", version, why)
			}
		}
	}
	if !st.Done {
		st.Progressing = fmt.Sprintf("Working towards %s: %s", version, strings.Join(waiting, "; "))
	}
	if len(degraded) > 0 {
		st.NotUpgradeableReason = "DegradedPool"
		st.NotUpgradeableMessage = "One or more machine config pools are degraded, please see `oc get mcp` for further details and resolve before upgrading"
	}
	return st
}

// requiredPoolWaits says why a required pool is not yet at version, ""
// when it is.
func (c *Controller) requiredPoolWaits(p *mcfgv1.MachineConfigPool, version string) string {
	target := p.Spec.Configuration.Name
	if target == "" {
		return fmt.Sprintf("MachineConfigPool %s has no rendered configuration yet", p.Name)
	}
	mc, err := c.configs.Get(target)
	if err != nil || mc.Annotations[ReleaseImageVersionAnnotation] != version {
		return fmt.Sprintf("MachineConfigPool %s is not yet targeting the configuration of %s", p.Name, version)
	}
	s := p.Status
	if s.Configuration.Name == target && conditionTrue(s.Conditions, mcfgv1.MachineConfigPoolUpdated) && s.ObservedGeneration >= p.Generation {
		return ""
	}
	reason := ""
	for _, cond := range s.Conditions {
		if cond.Type == mcfgv1.MachineConfigPoolDegraded && cond.Status == corev1.ConditionTrue {
			reason = cond.Message
		}
	}
	return fmt.Sprintf("MachineConfigPool %s is not ready, retrying. Status: (pool degraded: %t total: %d, ready %d, updated: %d, unavailable: %d, reason: %s)",
		p.Name, conditionTrue(s.Conditions, mcfgv1.MachineConfigPoolDegraded), s.MachineCount, s.ReadyMachineCount, s.UpdatedMachineCount, s.UnavailableMachineCount, reason)
}
