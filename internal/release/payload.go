// Package release builds, reads and extracts OpenShift release images: OCI
// images whose one layer holds manifests/ (the Cluster Version Operator's
// own manifests) and release-manifests/ (every operator's manifests,
// image-references and release-metadata), in the layout the CVO and `oc
// adm release` use.
package release

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	imagev1 "github.com/openshift/api/image/v1"
	"sigs.k8s.io/yaml"
)

// Directories and files of a release payload.
const (
	ManifestsDir        = "manifests"
	ReleaseManifestsDir = "release-manifests"
	ImageReferencesFile = "image-references"
	MetadataFile        = "release-metadata"
	// MetadataKind is the kind of release-metadata.
	MetadataKind = "cincinnati-metadata-v0"
)

// Labels and annotations of release images and their image-references.
const (
	ReleaseLabel             = "io.openshift.release"
	BuildVersionsAnnotation  = "io.openshift.build.versions"
	DisplayNamesAnnotation   = "io.openshift.build.version-display-names"
	CommitIDAnnotation       = "io.openshift.build.commit.id"
	SourceLocationAnnotation = "io.openshift.build.source-location"
	// URLMetadata is the release-metadata key of the release's errata URL.
	URLMetadata = "url"
)

// Metadata is release-manifests/release-metadata.
type Metadata struct {
	Kind     string            `json:"kind"`
	Version  string            `json:"version"`
	Previous []string          `json:"previous,omitempty"`
	Next     []string          `json:"next,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// runLevelName is the CVO's task-graph pattern for a manifest's file name:
// 0000_<run level>_<component>_<rest>.
var runLevelName = regexp.MustCompile(`^0000_(\d+)_([a-zA-Z0-9]+(-[a-zA-Z0-9]+)*?)_`)

// RunLevel returns a manifest file name's run level and component, as the
// CVO orders them; ok is false for a name outside the pattern.
func RunLevel(file string) (level, component string, ok bool) {
	m := runLevelName.FindStringSubmatch(file)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// digestRef is a pull spec by digest.
var digestRef = regexp.MustCompile(`^[^@\s]+@sha256:[a-f0-9]{64}$`)

// Payload is the content of a release image.
type Payload struct {
	Metadata Metadata
	// ImageReferences lists the component images by digest; its name is
	// the release's version.
	ImageReferences *imagev1.ImageStream
	// Manifests are release-manifests/ files (image-references and
	// release-metadata apart) by file name; CVOManifests are manifests/.
	Manifests    map[string][]byte
	CVOManifests map[string][]byte
	// raw is the layer's files as read from an image, by path.
	raw map[string][]byte
}

// LoadDir reads a release's source directory: its top-level .yaml, .yml
// and .json files are the release manifests, an optional image-references
// lists the component images, an optional manifests/ subdirectory holds
// the CVO's own. Names must follow 0000_<runlevel>_<component>_<name>.
func LoadDir(dir string, meta Metadata) (*Payload, error) {
	if err := meta.Validate(); err != nil {
		return nil, err
	}
	p := &Payload{Metadata: meta, Manifests: map[string][]byte{}, CVOManifests: map[string][]byte{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading release directory: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case e.IsDir() && e.Name() == ManifestsDir:
			if err := readManifests(path, p.CVOManifests); err != nil {
				return nil, err
			}
		case e.IsDir():
			return nil, fmt.Errorf("%s: unexpected directory (only %s/ may be a directory)", path, ManifestsDir)
		case e.Name() == ImageReferencesFile:
			raw, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			is := &imagev1.ImageStream{}
			if err := yaml.UnmarshalStrict(raw, is); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			p.ImageReferences = is
		case isManifest(e.Name()):
			if err := addManifest(path, e.Name(), p.Manifests); err != nil {
				return nil, err
			}
		}
	}
	if len(p.Manifests) == 0 {
		return nil, fmt.Errorf("%s has no manifests (*.yaml, *.yml, *.json)", dir)
	}
	if p.ImageReferences == nil {
		p.ImageReferences = &imagev1.ImageStream{}
	}
	is := p.ImageReferences
	is.APIVersion, is.Kind = "image.openshift.io/v1", "ImageStream"
	if is.Name != "" && is.Name != meta.Version {
		return nil, fmt.Errorf("version from image-references (%s) differs from release-metadata (%s)", is.Name, meta.Version)
	}
	is.Name = meta.Version
	if err := validTags(is); err != nil {
		return nil, err
	}
	return p, nil
}

// validTags checks that every tag of image-references names a
// DockerImage by digest.
func validTags(is *imagev1.ImageStream) error {
	for _, tag := range is.Spec.Tags {
		if tag.From == nil || tag.From.Kind != "DockerImage" || !digestRef.MatchString(tag.From.Name) {
			return fmt.Errorf("image-references: tag %q must name a DockerImage by digest (repository@sha256:...)", tag.Name)
		}
	}
	return nil
}

func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

func readManifests(dir string, into map[string][]byte) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !isManifest(e.Name()) {
			continue
		}
		if err := addManifest(filepath.Join(dir, e.Name()), e.Name(), into); err != nil {
			return err
		}
	}
	return nil
}

func addManifest(path, name string, into map[string][]byte) error {
	if _, _, ok := RunLevel(name); !ok {
		return fmt.Errorf("%s: a manifest's name must be 0000_<runlevel>_<component>_<name> (e.g. 0000_50_my-operator_01_deployment.yaml)", path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := validYAMLDocuments(raw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	into[name] = raw
	return nil
}

// validYAMLDocuments checks that every document of a manifest file parses
// and names its apiVersion and kind.
func validYAMLDocuments(raw []byte) error {
	for _, doc := range Documents(raw) {
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc.Raw, &obj); err != nil {
			return fmt.Errorf("document %d: %w", doc.Index+1, err)
		}
		if obj.APIVersion == "" || obj.Kind == "" {
			return fmt.Errorf("document %d: apiVersion and kind are required", doc.Index+1)
		}
	}
	return nil
}

// Document is one document of a multi-document YAML file: its place in
// the file (counting empty ones) and its text.
type Document struct {
	Index int
	Raw   []byte
}

// documentSeparator is a line of "---", alone or followed by a comment,
// as Kubernetes' YAML reader splits documents.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t\r]*(#[^\n]*)?$`)

// Documents splits a multi-document YAML file, leaving out the documents
// that hold nothing but comments and blank lines.
func Documents(raw []byte) []Document {
	var docs []Document
	for i, d := range documentSeparator.Split(string(raw), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, Document{Index: i, Raw: []byte(d)})
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Validate checks release-metadata as the CVO does on load.
func (m *Metadata) Validate() error {
	if m.Kind == "" {
		m.Kind = MetadataKind
	}
	if m.Kind != MetadataKind {
		return fmt.Errorf("release-metadata kind %q, want %q", m.Kind, MetadataKind)
	}
	if _, err := semver.Parse(m.Version); err != nil {
		return fmt.Errorf("release version %q is not a semantic version: %w", m.Version, err)
	}
	for _, list := range [][]string{m.Previous, m.Next} {
		for _, v := range list {
			if _, err := semver.Parse(v); err != nil {
				return fmt.Errorf("release version %q in previous/next is not a semantic version: %w", v, err)
			}
		}
	}
	sortVersions(m.Previous)
	sortVersions(m.Next)
	return nil
}

// sortVersions sorts semantic versions ascending, as oc sorts --previous.
func sortVersions(vs []string) {
	sort.SliceStable(vs, func(i, j int) bool {
		a, _ := semver.Parse(vs[i])
		b, _ := semver.Parse(vs[j])
		return a.LT(b)
	})
}

// files returns the payload as the paths and contents of its layer.
func (p *Payload) files() (map[string][]byte, error) {
	if p.raw != nil {
		return p.raw, nil
	}
	out := map[string][]byte{}
	for name, raw := range p.Manifests {
		out[ReleaseManifestsDir+"/"+name] = raw
	}
	for name, raw := range p.CVOManifests {
		out[ManifestsDir+"/"+name] = raw
	}
	refs, err := yaml.Marshal(p.ImageReferences)
	if err != nil {
		return nil, err
	}
	out[ReleaseManifestsDir+"/"+ImageReferencesFile] = refs
	meta, err := json.MarshalIndent(p.Metadata, "", "  ")
	if err != nil {
		return nil, err
	}
	out[ReleaseManifestsDir+"/"+MetadataFile] = append(meta, '\n')
	return out, nil
}
