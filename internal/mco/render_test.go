package mco

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	igntypes "github.com/coreos/ignition/v2/config/v3_5/types"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func mc(name, role, ignition string, edit func(*mcfgv1.MachineConfigSpec)) *mcfgv1.MachineConfig {
	m := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RoleLabel: role}},
		Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(ignition)}}}
	if edit != nil {
		edit(&m.Spec)
	}
	return m
}

func file(path, data string) string {
	return `{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"` + path + `","contents":{"source":"data:,` + data + `"}}]}}`
}

func files(t *testing.T, spec *mcfgv1.MachineConfigSpec) map[string]string {
	t.Helper()
	var cfg igntypes.Config
	if err := json.Unmarshal(spec.Config.Raw, &cfg); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range cfg.Storage.Files {
		if f.Overwrite == nil || !*f.Overwrite {
			t.Errorf("file %s does not overwrite", f.Path)
		}
		out[f.Path] = *f.Contents.Source
	}
	return out
}

func TestMergeInTheMCOsOrder(t *testing.T) {
	configs := []*mcfgv1.MachineConfig{
		mc("99-worker-custom", "worker", file("/etc/motd", "custom"), func(s *mcfgv1.MachineConfigSpec) {
			s.KernelArguments = []string{"nosmt", "audit=1"}
			s.Extensions = []string{"usbguard"}
		}),
		mc("00-worker", "worker", file("/etc/motd", "base"), func(s *mcfgv1.MachineConfigSpec) { s.KernelArguments = []string{"audit=1"} }),
		mc("50-worker-fips", "worker", "", func(s *mcfgv1.MachineConfigSpec) { s.FIPS = true; s.KernelType = KernelTypeRealtime }),
	}
	spec, err := Merge("worker", configs, "quay.io/rhcos@sha256:1", "quay.io/ext@sha256:2")
	if err != nil {
		t.Fatal(err)
	}
	if got := files(t, spec); got["/etc/motd"] != "data:,custom" {
		t.Errorf("the later config does not win: %v", got)
	}
	if strings.Join(spec.KernelArguments, " ") != "audit=1 nosmt" || strings.Join(spec.Extensions, " ") != "usbguard" {
		t.Errorf("kernel arguments %v, extensions %v", spec.KernelArguments, spec.Extensions)
	}
	if !spec.FIPS || spec.KernelType != KernelTypeRealtime || spec.OSImageURL != "quay.io/rhcos@sha256:1" || spec.BaseOSExtensionsContainerImage != "quay.io/ext@sha256:2" {
		t.Errorf("spec %+v", spec)
	}

	// The same configs in another order give the same name.
	name, err := RenderedName("worker", spec)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^rendered-worker-[0-9a-f]{32}$`).MatchString(name) {
		t.Errorf("name %q", name)
	}
	again, _ := Merge("worker", []*mcfgv1.MachineConfig{configs[2], configs[0], configs[1]}, "quay.io/rhcos@sha256:1", "quay.io/ext@sha256:2")
	if n, _ := RenderedName("worker", again); n != name {
		t.Errorf("reordered input renamed the config: %s, %s", n, name)
	}
	// A change renames it; an OS image in a config overrides the release's.
	osOverride := mc("99-worker-os", "worker", "", func(s *mcfgv1.MachineConfigSpec) { s.OSImageURL = "example.com/custom-os@sha256:3" })
	changed, err := Merge("worker", append(configs, osOverride), "quay.io/rhcos@sha256:1", "")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := RenderedName("worker", changed); n == name || changed.OSImageURL != "example.com/custom-os@sha256:3" {
		t.Errorf("a changed config kept the name %s or lost its OS image %q", n, changed.OSImageURL)
	}
}

func TestCustomPoolConfigsOverrideWorkers(t *testing.T) {
	configs := []*mcfgv1.MachineConfig{
		mc("00-infra", "infra", file("/etc/role", "infra"), nil),
		mc("99-worker", "worker", file("/etc/role", "worker"), nil),
	}
	spec, err := Merge("infra", configs, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := files(t, spec); got["/etc/role"] != "data:,infra" {
		t.Errorf("a worker config overrode the custom pool's own: %v", got)
	}
	spec, _ = Merge("worker", configs, "", "")
	if got := files(t, spec); got["/etc/role"] != "data:,worker" {
		t.Errorf("the worker pool merges by name alone: %v", got)
	}
}

func TestMergeRefusesInvalidConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		mc   *mcfgv1.MachineConfig
		want string
	}{
		{"an Ignition version this MCO cannot read", mc("50-old", "worker", `{"ignition":{"version":"2.2.0"}}`, nil), "MachineConfig 50-old: parsing Ignition config failed"},
		{"a file without a path", mc("50-nopath", "worker", `{"ignition":{"version":"3.2.0"},"storage":{"files":[{"contents":{"source":"data:,x"}}]}}`, nil), "MachineConfig 50-nopath: parsing Ignition config failed"},
		{"not JSON", mc("50-garbage", "worker", `{ignition`, nil), "MachineConfig 50-garbage: parsing Ignition config failed"},
		{"an unknown kernel type", mc("50-kernel", "worker", "", func(s *mcfgv1.MachineConfigSpec) { s.KernelType = "rt" }), `MachineConfig 50-kernel: kernelType "rt" is not one of default, realtime, 64k-pages`},
		{"kernel-devel with a realtime kernel", mc("50-rt", "worker", "", func(s *mcfgv1.MachineConfigSpec) {
			s.KernelType = KernelTypeRealtime
			s.Extensions = []string{"kernel-devel"}
		}), "installing kernel-devel extension is not supported with kernelType: realtime"},
	} {
		_, err := Merge("worker", []*mcfgv1.MachineConfig{mc("00-worker", "worker", "", nil), tc.mc}, "", "")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := Merge("worker", nil, "", ""); err == nil {
		t.Errorf("no configs: no error")
	}
}
