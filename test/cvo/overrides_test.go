package cvo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/testenv"
)

// ocEnv names a real oc binary (built from openshift/oc) that the tests
// also run, where set, to compare what it shows with capstan's.
const ocEnv = "CAPSTAN_OC"

// The capabilities the ClusterVersion's status lists, and a capability
// left out of the spec once enabled: it stays enabled, and the
// ImplicitlyEnabledCapabilities condition says so, as OpenShift's CVO.
func TestCapabilitiesCannotBeDisabled(t *testing.T) {
	var all []string
	for _, c := range configv1.ClusterVersionCapabilitySets[configv1.ClusterVersionCapabilitySetCurrent] {
		// Those behind feature gates the Default set leaves off are
		// neither known nor enabled.
		if c != configv1.ClusterVersionCapabilityClusterAPI && c != configv1.ClusterVersionCapabilityCompatibilityRequirements {
			all = append(all, string(c))
		}
	}
	slices.Sort(all)
	enabled := func(cv *configv1.ClusterVersion) string {
		var s []string
		for _, c := range cv.Status.Capabilities.EnabledCapabilities {
			s = append(s, string(c))
		}
		return strings.Join(s, ", ")
	}
	waitCV(t, time.Minute, "status.capabilities", func(cv *configv1.ClusterVersion) bool {
		return enabled(cv) == strings.Join(all, ", ") && len(cv.Status.Capabilities.KnownCapabilities) == len(all) &&
			condition(cv.Status.Conditions, "ImplicitlyEnabledCapabilities").Reason == "AsExpected"
	})

	t.Cleanup(func() {
		patchClusterVersion(t, `{"spec":{"capabilities":null}}`)
		waitCV(t, time.Minute, "capabilities as configured again", func(cv *configv1.ClusterVersion) bool {
			return condition(cv.Status.Conditions, "ImplicitlyEnabledCapabilities").Reason == "AsExpected"
		})
	})
	patchClusterVersion(t, `{"spec":{"capabilities":{"baselineCapabilitySet":"None","additionalEnabledCapabilities":["MachineAPI"]}}}`)
	kept := slices.DeleteFunc(slices.Clone(all), func(c string) bool { return c == "MachineAPI" })
	cv := waitCV(t, time.Minute, "capabilities left out of the spec", func(cv *configv1.ClusterVersion) bool {
		c := condition(cv.Status.Conditions, "ImplicitlyEnabledCapabilities")
		return c.Status == configv1.ConditionTrue && c.Reason == "CapabilitiesImplicitlyEnabled"
	})
	if c := condition(cv.Status.Conditions, "ImplicitlyEnabledCapabilities"); c.Message != "The following capabilities could not be disabled: "+strings.Join(kept, ", ") {
		t.Errorf("ImplicitlyEnabledCapabilities says %q", c.Message)
	}
	if enabled(cv) != strings.Join(all, ", ") {
		t.Errorf("enabled capabilities %s, want all still", enabled(cv))
	}
}

// An object the admin marks unmanaged in spec.overrides is left alone by
// the CVO, which still puts back the others' drift, and minor updates
// are blocked (Upgradeable=False, ClusterVersionOverridesSet) until the
// override goes, as oc adm upgrade shows.
func TestUnmanagedOverrideIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	deployments := env.Client.AppsV1()
	const overridden, managedNS, managed = "openshift-dns-operator", "openshift-kube-scheduler-operator", "openshift-kube-scheduler-operator"
	scale := func(ns, name string, replicas int) {
		t.Helper()
		if _, err := deployments.Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	replicas := func(ns, name string) int32 {
		t.Helper()
		d, err := deployments.Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(d.Spec.Replicas, 1)
	}
	t.Cleanup(func() {
		patchClusterVersion(t, `{"spec":{"overrides":null}}`)
		waitCV(t, time.Minute, "overrides removed", func(cv *configv1.ClusterVersion) bool {
			return condition(cv.Status.Conditions, configv1.OperatorUpgradeable).Reason != "ClusterVersionOverridesSet"
		})
		// Managed again, the CVO puts the replicas back.
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			r := replicas(overridden, "dns-operator")
			return r == 1, fmt.Sprintf("dns-operator has %d replicas", r)
		})
	})
	patchClusterVersion(t, `{"spec":{"overrides":[{"kind":"Deployment","group":"apps","namespace":"`+overridden+`","name":"dns-operator","unmanaged":true}]}}`)
	cv := waitCV(t, time.Minute, "Upgradeable=False for the override", func(cv *configv1.ClusterVersion) bool {
		c := condition(cv.Status.Conditions, configv1.OperatorUpgradeable)
		return c.Status == configv1.ConditionFalse && c.Reason == "ClusterVersionOverridesSet"
	})
	if c := condition(cv.Status.Conditions, configv1.OperatorUpgradeable); c.Message != "Disabling ownership via cluster version overrides prevents upgrades. Please remove overrides before continuing." {
		t.Errorf("Upgradeable says %q", c.Message)
	}
	out := capstanOK(t, "adm", "upgrade", "--kubeconfig", env.Kubeconfig)
	want := "\nUpgradeable=False\n\n  Reason: ClusterVersionOverridesSet\n  Message: Disabling ownership via cluster version overrides prevents upgrades. Please remove overrides before continuing.\n\n"
	if !strings.Contains(out, want) {
		t.Errorf("capstan adm upgrade:\n%s\nlacks:\n%s", out, want)
	}
	// The real oc, when there is one, reads the same.
	if oc := os.Getenv(ocEnv); oc != "" {
		real, err := exec.Command(oc, "adm", "upgrade", "--kubeconfig", env.Kubeconfig).CombinedOutput()
		if err != nil || !strings.Contains(string(real), want) {
			t.Errorf("%s adm upgrade (%v):\n%s\nlacks:\n%s", oc, err, real, want)
		}
	}

	// The admin scales the operator down. Three corrections of a managed
	// Deployment's drift, each after the one before, span a whole
	// reconciling pass begun after the edit.
	scale(overridden, "dns-operator", 0)
	for range 3 {
		scale(managedNS, managed, 0)
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			r := replicas(managedNS, managed)
			return r == 1, fmt.Sprintf("the managed %s has %d replicas", managed, r)
		})
	}
	if r := replicas(overridden, "dns-operator"); r != 0 {
		t.Errorf("the unmanaged dns-operator was put back to %d replicas", r)
	}
}
