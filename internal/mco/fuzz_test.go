package mco

import (
	"encoding/json"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/capstan-dev/capstan/internal/fuzzseed"
)

// FuzzMachineConfig renders a pool from a base config and an arbitrary
// MachineConfig spec: the result is an error naming the config, or a
// rendered spec whose Ignition parses again and whose name is the same
// every time.
func FuzzMachineConfig(f *testing.F) {
	fuzzseed.Files(f, "testdata/machineconfig-specs")
	base := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: "00-worker", Labels: map[string]string{RoleLabel: "worker"}},
		Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(`{"ignition":{"version":"3.5.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hello"}}]}}`)}}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec mcfgv1.MachineConfigSpec
		if err := json.Unmarshal(raw, &spec); err != nil {
			return
		}
		mc := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: "99-worker-fuzz", Labels: map[string]string{RoleLabel: "worker"}}, Spec: spec}
		out, err := Merge("worker", []*mcfgv1.MachineConfig{base, mc}, "os@sha256:1", "ext@sha256:2")
		if err != nil {
			if out != nil {
				t.Fatalf("Merge returned a spec with its error %v", err)
			}
			return
		}
		if _, err := ParseIgnition(out.Config.Raw); err != nil {
			t.Fatalf("the rendered Ignition does not parse: %v\n%s", err, out.Config.Raw)
		}
		name, err := RenderedName("worker", out)
		if err != nil {
			t.Fatalf("RenderedName: %v", err)
		}
		again, err := Merge("worker", []*mcfgv1.MachineConfig{base, mc.DeepCopy()}, "os@sha256:1", "ext@sha256:2")
		if err != nil {
			t.Fatalf("the second render fails: %v", err)
		}
		if name2, _ := RenderedName("worker", again); name2 != name {
			t.Fatalf("the same configs render as %s, then %s", name, name2)
		}
	})
}
