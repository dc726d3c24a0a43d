package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepareAdmissionValidatesAndKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	warnings, err := prepareAdmission(dir, AdmissionOverrides{})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("defaults: %v %v", warnings, err)
	}
	eff := filepath.Join(dir, effectiveDir, PodNodeSelectorConfigFile)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(PodNodeSelectorConfigFile, "podNodeSelectorPluginConfig:\n  clusterDefaultNodeSelector: \"k3=v3\"\n  ns1: region=west,env=test\n")
	def := "env=prod"
	if _, err := prepareAdmission(dir, AdmissionOverrides{ClusterDefaultNodeSelector: &def, ProjectNodeSelectors: map[string]string{"ns2": "team=a"}}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(eff)
	for _, want := range []string{"clusterDefaultNodeSelector: env=prod", "ns1: region=west,env=test", "ns2: team=a"} {
		if !strings.Contains(string(good), want) {
			t.Errorf("effective config lacks %q:\n%s", want, good)
		}
	}

	write(PodNodeSelectorConfigFile, "podNodeSelectorPluginConfig:\n  ns1: \"env in (test\"\n")
	warnings, err = prepareAdmission(dir, AdmissionOverrides{})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `namespace "ns1": selector "env in (test"`) || !strings.Contains(warnings[0], "keeping the last good configuration") {
		t.Errorf("warnings %v", warnings)
	}
	if kept, _ := os.ReadFile(eff); string(kept) != string(good) {
		t.Errorf("effective config changed after an invalid edit")
	}

	write(PodTolerationRestrictionConfigFile, "apiVersion: podtolerationrestriction.admission.k8s.io/v1alpha1\nkind: Configuration\nwhitelist:\n- key: dedicated\n  operator: Exists\n  value: x\n")
	warnings, _ = prepareAdmission(dir, AdmissionOverrides{})
	if len(warnings) != 2 || !strings.Contains(strings.Join(warnings, "\n"), `whitelist[0] (key "dedicated"): operator Exists takes no value`) {
		t.Errorf("warnings %v", warnings)
	}

	// A fresh data dir with a broken file has nothing to fall back to.
	fresh := t.TempDir()
	if err := os.WriteFile(filepath.Join(fresh, PodNodeSelectorConfigFile), []byte("podNodeSelectorPluginConfig: [oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareAdmission(fresh, AdmissionOverrides{}); err == nil || !strings.Contains(err.Error(), "admission/podnodeselector.yaml: does not parse") {
		t.Errorf("broken first config: %v", err)
	}
}
