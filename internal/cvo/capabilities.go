package cvo

import (
	"fmt"
	"slices"
	"strings"

	configv1 "github.com/openshift/api/config/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
)

// ImplicitlyEnabledCapabilities is the ClusterVersion condition that says
// whether capabilities the spec leaves out stay enabled.
const ImplicitlyEnabledCapabilities configv1.ClusterStatusConditionType = "ImplicitlyEnabledCapabilities"

// gatedCapabilities are behind feature gates the Default feature set
// leaves off (ClusterAPIMachineManagement and its requirement): the CVO
// neither knows nor enables them there, and the served ClusterVersion
// refuses them.
var gatedCapabilities = []configv1.ClusterVersionCapability{
	configv1.ClusterVersionCapabilityClusterAPI,
	configv1.ClusterVersionCapabilityCompatibilityRequirements,
}

// knownCapabilities are the capabilities of the Default feature set.
func knownCapabilities() []configv1.ClusterVersionCapability {
	return slices.DeleteFunc(slices.Clone(configv1.KnownClusterVersionCapabilities), func(c configv1.ClusterVersionCapability) bool {
		return slices.Contains(gatedCapabilities, c)
	})
}

// Capabilities are the optional components of a cluster: those enabled
// (whose manifests the CVO applies), those known, and those enabled only
// because they were before (the spec leaves them out, and a capability
// cannot be disabled once enabled).
type Capabilities struct {
	Enabled, Known    []configv1.ClusterVersionCapability
	ImplicitlyEnabled []configv1.ClusterVersionCapability
}

// CapabilitiesOf works out a ClusterVersion's capabilities as the CVO
// does: the baseline set (vCurrent when unset) and the additional ones,
// plus every capability its status says was enabled.
func CapabilitiesOf(cv *configv1.ClusterVersion) Capabilities {
	baseline := configv1.ClusterVersionCapabilitySetCurrent
	var additional []configv1.ClusterVersionCapability
	if c := cv.Spec.Capabilities; c != nil {
		if c.BaselineCapabilitySet != "" {
			baseline = c.BaselineCapabilitySet
		}
		additional = c.AdditionalEnabledCapabilities
	}
	enabled := map[configv1.ClusterVersionCapability]bool{}
	for _, c := range configv1.ClusterVersionCapabilitySets[baseline] {
		enabled[c] = !slices.Contains(gatedCapabilities, c)
	}
	for _, c := range additional {
		enabled[c] = true
	}
	var out Capabilities
	if s := cv.Status.Capabilities.EnabledCapabilities; len(s) > 0 {
		for _, c := range s {
			if !enabled[c] {
				enabled[c] = true
				out.ImplicitlyEnabled = append(out.ImplicitlyEnabled, c)
			}
		}
	}
	for c, on := range enabled {
		if on {
			out.Enabled = append(out.Enabled, c)
		}
	}
	out.Known = knownCapabilities()
	for _, l := range [][]configv1.ClusterVersionCapability{out.Enabled, out.Known, out.ImplicitlyEnabled} {
		slices.Sort(l)
	}
	return out
}

// Set is the enabled capabilities as a payload filter takes them.
func (c Capabilities) Set() map[string]bool {
	m := make(map[string]bool, len(c.Enabled))
	for _, e := range c.Enabled {
		m[string(e)] = true
	}
	return m
}

// Status is the ClusterVersion's status.capabilities.
func (c Capabilities) Status() configv1.ClusterVersionCapabilitiesStatus {
	return configv1.ClusterVersionCapabilitiesStatus{EnabledCapabilities: c.Enabled, KnownCapabilities: c.Known}
}

// Condition is the ImplicitlyEnabledCapabilities condition, worded as the
// CVO words it.
func (c Capabilities) Condition() configv1.ClusterOperatorStatusCondition {
	if len(c.ImplicitlyEnabled) == 0 {
		return configv1.ClusterOperatorStatusCondition{Type: ImplicitlyEnabledCapabilities, Status: configv1.ConditionFalse,
			Reason: "AsExpected", Message: "Capabilities match configured spec"}
	}
	return configv1.ClusterOperatorStatusCondition{Type: ImplicitlyEnabledCapabilities, Status: configv1.ConditionTrue,
		Reason: "CapabilitiesImplicitlyEnabled", Message: "The following capabilities could not be disabled: " + joinCapabilities(c.ImplicitlyEnabled)}
}

// Unmanaged reports whether an override takes a manifest's object out of
// the CVO's hands: its kind, group, namespace and name match one whose
// unmanaged is true.
func Unmanaged(overrides []configv1.ComponentOverride, m *payload.Manifest) bool {
	gv, err := schema.ParseGroupVersion(m.APIVersion)
	if err != nil {
		return false
	}
	for _, ov := range overrides {
		if ov.Unmanaged && ov.Kind == m.Kind && ov.Group == gv.Group && ov.Namespace == m.Namespace && ov.Name == m.Name {
			return true
		}
	}
	return false
}

// ParseCapabilities is an install configuration's capabilities: a
// baseline set and additional capabilities, each checked against those
// OpenShift knows. Both empty is nil (the default).
func ParseCapabilities(baseline string, additional []string) (*configv1.ClusterVersionCapabilitiesSpec, error) {
	if baseline == "" && len(additional) == 0 {
		return nil, nil
	}
	spec := &configv1.ClusterVersionCapabilitiesSpec{BaselineCapabilitySet: configv1.ClusterVersionCapabilitySet(baseline)}
	if _, ok := configv1.ClusterVersionCapabilitySets[spec.BaselineCapabilitySet]; baseline != "" && !ok {
		var sets []string
		for s := range configv1.ClusterVersionCapabilitySets {
			sets = append(sets, string(s))
		}
		slices.Sort(sets)
		return nil, fmt.Errorf("unknown capability set %q (known: %s)", baseline, strings.Join(sets, ", "))
	}
	for _, a := range additional {
		c := configv1.ClusterVersionCapability(a)
		if !slices.Contains(knownCapabilities(), c) {
			return nil, fmt.Errorf("unknown capability %q (known: %s)", a, joinCapabilities(knownCapabilities()))
		}
		spec.AdditionalEnabledCapabilities = append(spec.AdditionalEnabledCapabilities, c)
	}
	return spec, nil
}

func joinCapabilities(cs []configv1.ClusterVersionCapability) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}
