package controlplane

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRDsMatchModule proves the embedded CRDs are byte-for-byte the
// manifests of the pinned openshift/api module (hack/update-crds.sh).
func TestCRDsMatchModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/openshift/api").Output()
	if err != nil {
		t.Fatalf("locating the openshift/api module: %v", err)
	}
	modDir := strings.TrimSpace(string(out))
	sources, err := fs.ReadFile(crdFiles, "crds/SOURCES")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, src := range strings.Fields(string(sources)) {
		want, err := os.ReadFile(filepath.Join(modDir, src))
		if err != nil {
			t.Fatalf("module file %s: %v", src, err)
		}
		got, err := fs.ReadFile(crdFiles, "crds/"+filepath.Base(src))
		if err != nil {
			t.Fatalf("embedded copy of %s: %v", src, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the module's copy: run hack/update-crds.sh", filepath.Base(src))
		}
		n++
	}
	crds, err := OpenShiftCRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != n+4 || n != 11 {
		t.Errorf("%d CRDs embedded, %d sources, want 11 sources and 4 of capstan's own", len(crds), n)
	}
	names := map[string]bool{}
	for _, c := range crds {
		names[c.Name] = true
	}
	for _, want := range []string{"machines.machine.openshift.io", "machinesets.machine.openshift.io",
		"machinehealthchecks.machine.openshift.io", "controlplanemachinesets.machine.openshift.io", "clusterversions.config.openshift.io",
		"clusteroperators.config.openshift.io", "machineconfigs.machineconfiguration.openshift.io",
		"machineconfigpools.machineconfiguration.openshift.io", "routes.route.openshift.io",
		"clusterautoscalers.autoscaling.openshift.io", "machineautoscalers.autoscaling.openshift.io"} {
		if !names[want] {
			t.Errorf("missing CRD %s", want)
		}
	}
}
