package cvo

import (
	"slices"
	"strings"
	"testing"

	configv1 "github.com/openshift/api/config/v1"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
)

func TestCapabilitiesOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       *configv1.ClusterVersionCapabilitiesSpec
		was        []configv1.ClusterVersionCapability
		enabled    string
		implicitly string
	}{
		{name: "default is vCurrent", enabled: strings.Join(slices.Sorted(slices.Values(capNames(knownCapabilities()))), ",")},
		{name: "None", spec: &configv1.ClusterVersionCapabilitiesSpec{BaselineCapabilitySet: "None"}, enabled: ""},
		{name: "a baseline and more", spec: &configv1.ClusterVersionCapabilitiesSpec{BaselineCapabilitySet: "v4.11", AdditionalEnabledCapabilities: []configv1.ClusterVersionCapability{"Console"}},
			enabled: "Console,MachineAPI,baremetal,marketplace,openshift-samples"},
		{name: "once enabled, kept", spec: &configv1.ClusterVersionCapabilitiesSpec{BaselineCapabilitySet: "None", AdditionalEnabledCapabilities: []configv1.ClusterVersionCapability{"MachineAPI"}},
			was: []configv1.ClusterVersionCapability{"Console", "MachineAPI"}, enabled: "Console,MachineAPI", implicitly: "Console"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cv := &configv1.ClusterVersion{Spec: configv1.ClusterVersionSpec{Capabilities: tc.spec}}
			cv.Status.Capabilities.EnabledCapabilities = tc.was
			c := CapabilitiesOf(cv)
			if got := strings.Join(capNames(c.Enabled), ","); got != tc.enabled {
				t.Errorf("enabled %s, want %s", got, tc.enabled)
			}
			if got := strings.Join(capNames(c.ImplicitlyEnabled), ","); got != tc.implicitly {
				t.Errorf("implicitly enabled %s, want %s", got, tc.implicitly)
			}
			if len(c.Known) != len(configv1.KnownClusterVersionCapabilities)-2 || slices.Contains(c.Known, "ClusterAPI") {
				t.Errorf("%d known", len(c.Known))
			}
			cond := c.Condition()
			if want := map[bool]string{true: "True CapabilitiesImplicitlyEnabled The following capabilities could not be disabled: " + strings.ReplaceAll(tc.implicitly, ",", ", "),
				false: "False AsExpected Capabilities match configured spec"}[tc.implicitly != ""]; string(cond.Status)+" "+cond.Reason+" "+cond.Message != want {
				t.Errorf("condition %+v, want %s", cond, want)
			}
		})
	}
}

func capNames(cs []configv1.ClusterVersionCapability) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

func TestParseCapabilities(t *testing.T) {
	if s, err := ParseCapabilities("", nil); s != nil || err != nil {
		t.Errorf("nothing set: %v %v", s, err)
	}
	if s, err := ParseCapabilities("v4.11", []string{"Console"}); err != nil || s.BaselineCapabilitySet != "v4.11" || len(s.AdditionalEnabledCapabilities) != 1 {
		t.Errorf("v4.11+Console: %+v %v", s, err)
	}
	if _, err := ParseCapabilities("v9", nil); err == nil || !strings.Contains(err.Error(), `unknown capability set "v9" (known: None, v4.11,`) {
		t.Errorf("an unknown set: %v", err)
	}
	if _, err := ParseCapabilities("", []string{"ClusterAPI"}); err == nil {
		t.Error("a capability behind a feature gate was taken")
	}
	if _, err := ParseCapabilities("", []string{"Consoel"}); err == nil || !strings.Contains(err.Error(), `unknown capability "Consoel" (known: baremetal, Console,`) {
		t.Errorf("an unknown capability: %v", err)
	}
}

func TestUnmanagedAndUpgradeable(t *testing.T) {
	m := &payload.Manifest{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "openshift-dns-operator", Name: "dns-operator"}
	ov := []configv1.ComponentOverride{{Kind: "Deployment", Group: "apps", Namespace: "openshift-dns-operator", Name: "dns-operator", Unmanaged: true}}
	if !Unmanaged(ov, m) {
		t.Error("an unmanaged override of the manifest's object did not match")
	}
	for _, other := range []configv1.ComponentOverride{
		{Kind: "Deployment", Group: "", Namespace: "openshift-dns-operator", Name: "dns-operator", Unmanaged: true},
		{Kind: "Deployment", Group: "apps", Namespace: "openshift-dns-operator", Name: "dns-operator"},
		{Kind: "Deployment", Group: "apps", Namespace: "other", Name: "dns-operator", Unmanaged: true},
	} {
		if Unmanaged([]configv1.ComponentOverride{other}, m) {
			t.Errorf("%+v matched", other)
		}
	}
	if OverridesUpgradeable([]configv1.ComponentOverride{{Kind: "Deployment", Unmanaged: false}}) != nil {
		t.Error("a managed override blocks updates")
	}
	co := &configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse, Reason: "AdminAckRequired", Message: "ack it"}
	if c := CombineUpgradeable(nil, co); c != co {
		t.Errorf("one check: %+v", c)
	}
	c := CombineUpgradeable(co, OverridesUpgradeable(ov))
	want := "Cluster should not be upgraded between minor or major versions for multiple reasons: AdminAckRequired,ClusterVersionOverridesSet\n* ack it\n* Disabling ownership via cluster version overrides prevents upgrades. Please remove overrides before continuing."
	if c.Reason != "MultipleReasons" || c.Message != want {
		t.Errorf("two checks: %s %q", c.Reason, c.Message)
	}
}
