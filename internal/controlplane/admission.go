package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/strictyaml"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/admission"
)

// Admission configuration lives in DATA_DIR/admission. The plugin files are
// the user's (and `capstan up` flags add to them for a run); capstan checks
// them at every start and hands kube-apiserver validated copies in
// admission/effective, so a file that does not parse never reaches the
// apiserver: the cluster keeps the last good configuration and capstan says
// what is wrong.
const (
	admissionConfigFile                = "admission-config.yaml"
	PodNodeSelectorConfigFile          = "podnodeselector.yaml"
	PodTolerationRestrictionConfigFile = "podtolerationrestriction.yaml"
	PodNodeConstraintsConfigFile       = "podnodeconstraints.yaml"
	effectiveDir                       = datadir.EffectiveAdmission
)

// AdmissionOverrides are `capstan up` flags layered over the files.
type AdmissionOverrides struct {
	// ClusterDefaultNodeSelector replaces the file's clusterDefaultNodeSelector.
	ClusterDefaultNodeSelector *string
	// ProjectNodeSelectors adds or replaces per-namespace whitelists.
	ProjectNodeSelectors map[string]string
}

var defaultAdmissionFiles = map[string]string{
	// An empty cluster default node selector: namespaces without the
	// scheduler.alpha.kubernetes.io/node-selector annotation add nothing.
	PodNodeSelectorConfigFile: `podNodeSelectorPluginConfig:
  clusterDefaultNodeSelector: ""
`,
	PodTolerationRestrictionConfigFile: `apiVersion: podtolerationrestriction.admission.k8s.io/v1alpha1
kind: Configuration
default: []
whitelist: []
`,
	PodNodeConstraintsConfigFile: `apiVersion: v1
kind: PodNodeConstraintsConfig
nodeSelectorLabelBlacklist:
- kubernetes.io/hostname
`,
}

// prepareAdmission writes default plugin files where none exist, validates
// them, and refreshes the effective copies the apiserver reads. Problems
// with a file that has a last good copy come back as warnings; with no
// good copy at all they are errors.
func prepareAdmission(dir string, o AdmissionOverrides) (warnings []string, err error) {
	for name, content := range defaultAdmissionFiles {
		if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			if err := atomicfile.Write(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				return nil, err
			}
		}
	}
	eff := filepath.Join(dir, effectiveDir)
	render := map[string]func([]byte) ([]byte, error){
		PodNodeSelectorConfigFile:          func(raw []byte) ([]byte, error) { return renderPodNodeSelector(raw, o) },
		PodTolerationRestrictionConfigFile: renderPodTolerationRestriction,
		PodNodeConstraintsConfigFile: func(raw []byte) ([]byte, error) {
			if _, err := admission.ParsePodNodeConstraintsConfig(raw); err != nil {
				return nil, err
			}
			return raw, nil
		},
	}
	for _, name := range []string{PodNodeSelectorConfigFile, PodTolerationRestrictionConfigFile, PodNodeConstraintsConfigFile} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out, verr := render[name](raw)
		target := filepath.Join(eff, name)
		if verr != nil {
			msg := fmt.Sprintf("admission/%s: %v", name, verr)
			if _, err := os.Stat(target); err == nil {
				warnings = append(warnings, msg+"; keeping the last good configuration")
				continue
			}
			return nil, errors.New(msg)
		}
		if err := atomicfile.Write(target, out, 0o600); err != nil {
			return nil, err
		}
	}
	cfg := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodNodeSelector
  path: %s
- name: PodTolerationRestriction
  path: %s
`, filepath.Join(eff, PodNodeSelectorConfigFile), filepath.Join(eff, PodTolerationRestrictionConfigFile))
	return warnings, atomicfile.Write(filepath.Join(dir, admissionConfigFile), []byte(cfg), 0o600)
}

type podNodeSelectorFile struct {
	PodNodeSelectorPluginConfig map[string]string `json:"podNodeSelectorPluginConfig"`
}

// renderPodNodeSelector checks that every selector is a list of key=value
// pairs (what the plugin accepts) and applies the overrides.
func renderPodNodeSelector(raw []byte, o AdmissionOverrides) ([]byte, error) {
	var f podNodeSelectorFile
	if err := strictyaml.Decode(raw, &f); err != nil {
		return nil, fmt.Errorf("does not parse: %w", err)
	}
	if f.PodNodeSelectorPluginConfig == nil {
		f.PodNodeSelectorPluginConfig = map[string]string{}
	}
	if o.ClusterDefaultNodeSelector != nil {
		f.PodNodeSelectorPluginConfig["clusterDefaultNodeSelector"] = *o.ClusterDefaultNodeSelector
	}
	for ns, sel := range o.ProjectNodeSelectors {
		f.PodNodeSelectorPluginConfig[ns] = sel
	}
	keys := make([]string, 0, len(f.PodNodeSelectorPluginConfig))
	for k := range f.PodNodeSelectorPluginConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var problems []string
	for _, k := range keys {
		sel := f.PodNodeSelectorPluginConfig[k]
		if _, err := labels.ConvertSelectorToLabelsMap(sel); err != nil {
			what := fmt.Sprintf("namespace %q", k)
			if k == "clusterDefaultNodeSelector" {
				what = "clusterDefaultNodeSelector"
			}
			problems = append(problems, fmt.Sprintf("%s: selector %q is not a list of key=value labels: %v", what, sel, err))
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return yaml.Marshal(f)
}

type podTolerationRestrictionFile struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	Default    []corev1.Toleration `json:"default"`
	Whitelist  []corev1.Toleration `json:"whitelist"`
}

func renderPodTolerationRestriction(raw []byte) ([]byte, error) {
	var f podTolerationRestrictionFile
	if err := strictyaml.Decode(raw, &f); err != nil {
		return nil, fmt.Errorf("does not parse: %w", err)
	}
	if f.Kind != "Configuration" || f.APIVersion != "podtolerationrestriction.admission.k8s.io/v1alpha1" {
		return nil, fmt.Errorf("want apiVersion podtolerationrestriction.admission.k8s.io/v1alpha1 and kind Configuration, got %q %q", f.APIVersion, f.Kind)
	}
	var problems []string
	for list, tols := range map[string][]corev1.Toleration{"default": f.Default, "whitelist": f.Whitelist} {
		for i, t := range tols {
			if err := validateToleration(t); err != nil {
				problems = append(problems, fmt.Sprintf("%s[%d] (key %q): %v", list, i, t.Key, err))
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return bytes.TrimSpace(raw), nil
}

func validateToleration(t corev1.Toleration) error {
	switch t.Operator {
	case corev1.TolerationOpExists:
		if t.Value != "" {
			return fmt.Errorf("operator Exists takes no value")
		}
	case "", corev1.TolerationOpEqual:
		if t.Key == "" {
			return fmt.Errorf("operator Equal needs a key")
		}
	default:
		return fmt.Errorf("operator %q is not Equal or Exists", t.Operator)
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return fmt.Errorf("effect %q is not NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		return fmt.Errorf("tolerationSeconds applies to NoExecute only")
	}
	return nil
}
