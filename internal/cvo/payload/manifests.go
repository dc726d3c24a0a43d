package payload

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/release"
)

// Annotations the CVO reads on a manifest.
const (
	IncludePrefix        = "include.release.openshift.io/"
	ExcludePrefix        = "exclude.release.openshift.io/"
	FeatureSetAnnotation = "release.openshift.io/feature-set"
	CapabilityAnnotation = "capability.openshift.io/name"
	CreateOnlyAnnotation = "release.openshift.io/create-only"
	DeleteAnnotation     = "release.openshift.io/delete"
	// DefaultProfile is the cluster profile of a standalone cluster.
	DefaultProfile = "self-managed-high-availability"
)

// dirOrder puts the CVO's own manifests/ before release-manifests/.
var dirOrder = map[string]int{release.ManifestsDir: 0, release.ReleaseManifestsDir: 1}

// Load reads every document of a payload's manifests: manifests/ first,
// then release-manifests/, each in file order.
func Load(p *release.Payload) ([]*Manifest, error) {
	var out []*Manifest
	for _, set := range []struct {
		dir   string
		files map[string][]byte
	}{{release.ManifestsDir, p.CVOManifests}, {release.ReleaseManifestsDir, p.Manifests}} {
		names := make([]string, 0, len(set.files))
		for n := range set.files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			for _, doc := range release.Documents(set.files[name]) {
				m, err := parseManifest(set.dir, name, doc.Index, doc.Raw)
				if err != nil {
					return nil, err
				}
				out = append(out, m)
			}
		}
	}
	return out, nil
}

func parseManifest(dir, file string, index int, raw []byte) (*Manifest, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%s/%s document %d: %w", dir, file, index+1, err)
	}
	if head.APIVersion == "" || head.Kind == "" || head.Metadata.Name == "" {
		return nil, fmt.Errorf("%s/%s document %d: apiVersion, kind and metadata.name are required", dir, file, index+1)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s/%s document %d: %w", dir, file, index+1, err)
	}
	return &Manifest{Dir: dir, File: file, Index: index, APIVersion: head.APIVersion, Kind: head.Kind,
		Namespace: head.Metadata.Namespace, Name: head.Metadata.Name, Annotations: head.Metadata.Annotations, Raw: js}, nil
}

// Filter is what decides whether a manifest applies to this cluster.
type Filter struct {
	// Profile is the cluster profile (DefaultProfile when empty).
	Profile string
	// FeatureSet is the cluster's feature set ("" is Default).
	FeatureSet string
	// Capabilities enabled on the cluster; nil means all.
	Capabilities map[string]bool
	// Exclude is the CVO's EXCLUDE_MANIFESTS identifier, if any.
	Exclude string
}

// Include returns nil when a manifest applies, else why it does not, as
// the CVO's library decides it.
func (f Filter) Include(m *Manifest) error {
	if len(m.Annotations) == 0 {
		return fmt.Errorf("%s: no annotations", m)
	}
	if f.Exclude != "" && m.Annotations[ExcludePrefix+f.Exclude] == "true" {
		return fmt.Errorf("%s: %s%s=true", m, ExcludePrefix, f.Exclude)
	}
	if sets, ok := m.Annotations[FeatureSetAnnotation]; ok {
		want := f.FeatureSet
		if want == "" {
			want = "Default"
		}
		found := false
		for _, s := range strings.Split(sets, ",") {
			found = found || strings.TrimSpace(s) == want
		}
		if !found {
			return fmt.Errorf("%s: %s=%s does not include the cluster's feature set %s", m, FeatureSetAnnotation, sets, want)
		}
	}
	profile := f.Profile
	if profile == "" {
		profile = DefaultProfile
	}
	switch v, ok := m.Annotations[IncludePrefix+profile]; {
	case !ok:
		return fmt.Errorf("%s: %s%s unset", m, IncludePrefix, profile)
	case v != "true":
		return fmt.Errorf("%s: %s%s=%s", m, IncludePrefix, profile, v)
	}
	if caps, ok := m.Annotations[CapabilityAnnotation]; ok && f.Capabilities != nil {
		var disabled []string
		for _, c := range strings.Split(caps, "+") {
			if !f.Capabilities[strings.TrimSpace(c)] {
				disabled = append(disabled, c)
			}
		}
		if len(disabled) > 0 {
			return fmt.Errorf("%s: disabled capabilities: %s", m, strings.Join(disabled, ", "))
		}
	}
	return nil
}

// CreateOnly reports whether a manifest is created but never updated.
func (m *Manifest) CreateOnly() bool {
	return strings.EqualFold(m.Annotations[CreateOnlyAnnotation], "true")
}

// Deletion reports whether a manifest asks the CVO to delete its object;
// any value but "true" is an error.
func (m *Manifest) Deletion() (bool, error) {
	v, ok := m.Annotations[DeleteAnnotation]
	switch {
	case !ok:
		return false, nil
	case v == "true":
		return true, nil
	}
	return false, fmt.Errorf("%s: %s=%q, only \"true\" is valid", m, DeleteAnnotation, v)
}
