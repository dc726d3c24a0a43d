// Package mco is the Machine Config Operator's part of capstan: rendering
// a pool's MachineConfigs into one rendered-<pool>-<hash> configuration,
// as the MCO's render controller does.
package mco

import (
	"crypto/md5" //nolint:gosec // the MCO names rendered configs by an MD5 digest
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	ign "github.com/coreos/ignition/v2/config/v3_5"
	igntypes "github.com/coreos/ignition/v2/config/v3_5/types"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Labels, annotations and values of the MachineConfig API.
const (
	// RoleLabel on a MachineConfig names the pool role it is for.
	RoleLabel = "machineconfiguration.openshift.io/role"
	// GeneratedByAnnotation marks a MachineConfig the controller made.
	GeneratedByAnnotation = "machineconfiguration.openshift.io/generated-by-controller-version"
	// ReleaseImageVersionAnnotation on a rendered MachineConfig is the
	// release it was rendered for.
	ReleaseImageVersionAnnotation = "machineconfiguration.openshift.io/release-image-version"

	KernelTypeDefault  = "default"
	KernelTypeRealtime = "realtime"
	KernelType64kPages = "64k-pages"
)

// renderSalt prefixes the digest of a rendered configuration: the MCO's
// own 80 bytes, so the same configurations give the same name.
var renderSalt = []byte{
	16, 124, 206, 228, 139, 56, 175, 175, 79, 229, 134, 118, 157, 154, 211, 110,
	25, 93, 47, 253, 172, 106, 37, 7, 174, 13, 160, 185, 110, 17, 87, 52,
	219, 131, 12, 206, 218, 141, 116, 135, 188, 181, 192, 151, 233, 62, 126, 165,
	64, 83, 179, 119, 15, 168, 208, 197, 146, 107, 58, 227, 133, 188, 238, 26,
	33, 26, 235, 202, 32, 173, 31, 234, 41, 144, 148, 79, 6, 206, 23, 22,
}

// ParseIgnition reads a MachineConfig's Ignition config (spec 3.0 to 3.5,
// translated to 3.5); an empty one is an empty config.
func ParseIgnition(raw []byte) (igntypes.Config, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return igntypes.Config{Ignition: igntypes.Ignition{Version: igntypes.MaxVersion.String()}}, nil
	}
	cfg, rpt, err := ign.ParseCompatibleVersion(raw)
	if err != nil {
		if rpt.IsFatal() {
			return igntypes.Config{}, fmt.Errorf("parsing Ignition config failed with error: %w\nReport: %v", err, rpt)
		}
		return igntypes.Config{}, fmt.Errorf("parsing Ignition config failed with error: %w", err)
	}
	if rpt.IsFatal() {
		return igntypes.Config{}, fmt.Errorf("parsing Ignition config failed: %v", rpt)
	}
	return cfg, nil
}

// mergeOrder sorts a pool's configs as the MCO merges them: by name, the
// worker role's first so a custom pool's own configs override them.
func mergeOrder(pool string, configs []*mcfgv1.MachineConfig) []*mcfgv1.MachineConfig {
	out := append([]*mcfgv1.MachineConfig(nil), configs...)
	sort.SliceStable(out, func(i, j int) bool {
		wi, wj := pool != "worker" && out[i].Labels[RoleLabel] == "worker", pool != "worker" && out[j].Labels[RoleLabel] == "worker"
		if wi != wj {
			return wi
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Merge renders a pool's MachineConfigs into one spec: the Ignition
// configs merged in order (a later one wins; files overwrite unless they
// say otherwise), kernel arguments in order without repeats, extensions
// appended, FIPS if any asks for it, the kernel type a non-default one
// asks for, and osImageURL and the extensions image the release's unless
// a config overrides them (the last one wins). Errors name the config.
func Merge(pool string, configs []*mcfgv1.MachineConfig, osImageURL, extensionsImage string) (*mcfgv1.MachineConfigSpec, error) {
	if len(configs) == 0 {
		return nil, errors.New("no MachineConfigs selected")
	}
	ordered := mergeOrder(pool, configs)
	var out igntypes.Config
	for i, mc := range ordered {
		cfg, err := ParseIgnition(mc.Spec.Config.Raw)
		if err != nil {
			return nil, fmt.Errorf("MachineConfig %s: %w", mc.Name, err)
		}
		if i == 0 {
			out = cfg
			continue
		}
		out = ign.Merge(out, cfg)
	}
	// Files overwrite what is on the node unless they say otherwise; a
	// file without contents only makes sure the file exists, and
	// Ignition requires it not to overwrite.
	for i := range out.Storage.Files {
		f := &out.Storage.Files[i]
		if f.Overwrite == nil && f.Contents.Source != nil {
			yes := true
			f.Overwrite = &yes
		}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	spec := &mcfgv1.MachineConfigSpec{OSImageURL: osImageURL, BaseOSExtensionsContainerImage: extensionsImage,
		Config: runtime.RawExtension{Raw: raw}, KernelArguments: []string{}, Extensions: []string{}, KernelType: KernelTypeDefault}
	seen := map[string]bool{}
	for _, mc := range ordered {
		s := mc.Spec
		spec.FIPS = spec.FIPS || s.FIPS
		switch s.KernelType {
		case "", KernelTypeDefault:
		case KernelTypeRealtime, KernelType64kPages:
			spec.KernelType = s.KernelType
		default:
			return nil, fmt.Errorf("MachineConfig %s: kernelType %q is not one of %s, %s, %s", mc.Name, s.KernelType, KernelTypeDefault, KernelTypeRealtime, KernelType64kPages)
		}
		for _, a := range s.KernelArguments {
			if !seen[a] {
				seen[a] = true
				spec.KernelArguments = append(spec.KernelArguments, a)
			}
		}
		spec.Extensions = append(spec.Extensions, s.Extensions...)
		if s.OSImageURL != "" {
			spec.OSImageURL = s.OSImageURL
		}
		if s.BaseOSExtensionsContainerImage != "" {
			spec.BaseOSExtensionsContainerImage = s.BaseOSExtensionsContainerImage
		}
	}
	if spec.KernelType != KernelTypeDefault {
		for _, e := range spec.Extensions {
			if e == "kernel-devel" {
				return nil, fmt.Errorf("installing kernel-devel extension is not supported with kernelType: %s", spec.KernelType)
			}
		}
	}
	return spec, nil
}

// RenderedName names a pool's rendered configuration as the MCO does:
// rendered-<pool>-<md5 of the salt and the spec's YAML>.
func RenderedName(pool string, spec *mcfgv1.MachineConfigSpec) (string, error) {
	data, err := yaml.Marshal(spec)
	if err != nil {
		return "", err
	}
	h := md5.New() //nolint:gosec
	h.Write(renderSalt)
	h.Write(data)
	return fmt.Sprintf("rendered-%s-%x", pool, h.Sum(nil)), nil
}
