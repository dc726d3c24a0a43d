package controlplane

import (
	"os"
	"path/filepath"
)

// Admission configuration files kept in DATA_DIR/admission. They are written
// once with defaults and then belong to the user (and to `capstan`'s own
// placement-admission commands); restarts never overwrite them.
const (
	admissionConfigFile                = "admission-config.yaml"
	PodNodeSelectorConfigFile          = "podnodeselector.yaml"
	PodTolerationRestrictionConfigFile = "podtolerationrestriction.yaml"
)

var defaultAdmissionFiles = map[string]string{
	admissionConfigFile: `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodNodeSelector
  path: ` + PodNodeSelectorConfigFile + `
- name: PodTolerationRestriction
  path: ` + PodTolerationRestrictionConfigFile + `
`,
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
}

func ensureAdmissionConfig(dir string) error {
	for name, content := range defaultAdmissionFiles {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := writeFileAtomic(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}
