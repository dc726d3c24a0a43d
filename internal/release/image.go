package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	imagev1 "github.com/openshift/api/image/v1"
	"sigs.k8s.io/yaml"
)

// BuildOptions say what goes around the payload in the image.
type BuildOptions struct {
	// Created is the image's creation time (and every file's); fixed, the
	// same payload gives the same digest.
	Created time.Time
	// OS and Architecture of the image (default linux/amd64).
	OS, Architecture string
}

// Build makes the release image of a payload: one layer holding
// manifests/ and release-manifests/ (files read-only, as oc writes them),
// and a config labelled io.openshift.release=<version>.
func Build(p *Payload, opts BuildOptions) (v1.Image, error) {
	if opts.OS == "" {
		opts.OS = "linux"
	}
	if opts.Architecture == "" {
		opts.Architecture = "amd64"
	}
	if opts.Created.IsZero() {
		opts.Created = time.Now()
	}
	opts.Created = opts.Created.UTC().Truncate(time.Second)
	files, err := p.files()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, dir := range []string{ManifestsDir, ReleaseManifestsDir} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: opts.Created}); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o444, Size: int64(len(files[n])), ModTime: opts.Created}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: opts.Created}, CreatedBy: "capstan adm release new", Comment: "Release image for OpenShift"}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: opts.Created}
	cfg.OS, cfg.Architecture = opts.OS, opts.Architecture
	cfg.Config.Labels = map[string]string{ReleaseLabel: p.Metadata.Version}
	return mutate.ConfigFile(img, cfg)
}

// Ref is where a release image is: a registry reference, or an OCI layout
// directory written as oci:PATH[:TAG] or oci:PATH@sha256:HEX.
type Ref struct {
	Registry name.Reference
	Layout   string
	// Tag names an image of the layout by its ref.name annotation;
	// LayoutDigest names it by the digest of its manifest.
	Tag          string
	LayoutDigest string
}

// ParseRef reads a release image reference.
func ParseRef(s string) (Ref, error) {
	if rest, ok := strings.CutPrefix(s, "oci:"); ok {
		// A digest is the text after the last "@": a path may hold ":"
		// and "@", a digest never does.
		if i := strings.LastIndex(rest, "@"); i >= 0 && strings.HasPrefix(rest[i+1:], "sha256:") {
			dir, digest := rest[:i], rest[i+1:]
			if _, err := v1.NewHash(digest); err != nil {
				return Ref{}, fmt.Errorf("%q: the digest %q: %w", s, digest, err)
			}
			if dir == "" {
				return Ref{}, fmt.Errorf("%q: an OCI layout reference is oci:PATH[:TAG] or oci:PATH@sha256:HEX", s)
			}
			return Ref{Layout: dir, LayoutDigest: digest}, nil
		}
		dir, tag := rest, ""
		if i := strings.LastIndex(rest, ":"); i > 0 && !strings.Contains(rest[i:], "/") {
			dir, tag = rest[:i], rest[i+1:]
		}
		if dir == "" {
			return Ref{}, fmt.Errorf("%q: an OCI layout reference is oci:PATH[:TAG] or oci:PATH@sha256:HEX", s)
		}
		return Ref{Layout: dir, Tag: tag}, nil
	}
	r, err := name.ParseReference(s, name.WeakValidation)
	if err != nil {
		return Ref{}, fmt.Errorf("%q is not an image reference: %w", s, err)
	}
	return Ref{Registry: r}, nil
}

func (r Ref) String() string {
	switch {
	case r.Registry != nil:
		return r.Registry.String()
	case r.LayoutDigest != "":
		return "oci:" + r.Layout + "@" + r.LayoutDigest
	case r.Tag != "":
		return "oci:" + r.Layout + ":" + r.Tag
	}
	return "oci:" + r.Layout
}

// Digest is the digest the reference names the image by, or "" for a
// reference by tag.
func (r Ref) Digest() string {
	if d, ok := r.Registry.(name.Digest); ok {
		return d.DigestStr()
	}
	return r.LayoutDigest
}

// ByDigest is the reference to the same repository or layout naming the
// image by digest d.
func (r Ref) ByDigest(d string) Ref {
	if r.Registry != nil {
		return Ref{Registry: r.Registry.Context().Digest(d)}
	}
	return Ref{Layout: r.Layout, LayoutDigest: d}
}

// refNameAnnotation names an image in an OCI layout's index.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// Write stores a release image at ref and returns its digest.
func Write(ctx context.Context, ref Ref, img v1.Image) (v1.Hash, error) {
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if ref.Registry != nil {
		if err := remote.Write(ref.Registry, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(Keychain(ctx))); err != nil {
			return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
		}
		return digest, nil
	}
	if ref.LayoutDigest != "" {
		return v1.Hash{}, fmt.Errorf("%s: an image is written to a layout by tag (oci:PATH:TAG) or unnamed (oci:PATH), not by digest", ref)
	}
	p, err := layout.FromPath(ref.Layout)
	if err != nil {
		if p, err = layout.Write(ref.Layout, empty.Index); err != nil {
			return v1.Hash{}, fmt.Errorf("creating OCI layout %s: %w", ref.Layout, err)
		}
	}
	var opts []layout.Option
	if ref.Tag != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{refNameAnnotation: ref.Tag}))
		// One image per tag: a new one replaces the old.
		if err := p.ReplaceImage(img, matchRefName(ref.Tag), opts...); err != nil {
			return v1.Hash{}, fmt.Errorf("writing %s: %w", ref, err)
		}
		return digest, nil
	}
	if err := p.AppendImage(img); err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", ref, err)
	}
	return digest, nil
}

func matchRefName(tag string) func(v1.Descriptor) bool {
	return func(d v1.Descriptor) bool { return d.Annotations[refNameAnnotation] == tag }
}

// Image is a release image read back.
type Image struct {
	Ref Ref
	// Digest is the sha256 of the manifest bytes read, computed here.
	Digest   v1.Hash
	Config   *v1.ConfigFile
	Payload  *Payload
	PullSpec string
}

// DigestMismatchError is content whose bytes do not hash to the digest
// that names it: a manifest, a config or a layer altered after it was
// written, or a reference by digest answered with another image.
type DigestMismatchError struct {
	// What names the content: "the manifest of REF", "layer N of REF".
	What string
	// Want is the digest it was asked for by, Got what its bytes hash to.
	Want, Got v1.Hash
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("%s hashes to %s, not the %s it was asked for by", e.What, e.Got, e.Want)
}

// Bounds of what a release image may make capstan hold in memory (the
// update service reads every tag of a repository, unverified): a payload
// is a few megabytes. A blob is hashed whole before it is read; the
// layers are kept uncompressed until the payload is parsed.
const (
	maxBlob = 256 << 20
	// MaxLayers is how many layers a release image may have.
	MaxLayers = 16
	// MaxPayloadBytes is how much all its layers may hold uncompressed.
	MaxPayloadBytes = 512 << 20
)

// Read fetches a release image and its payload. Every byte it returns is
// hashed against the digest that names it, whatever the source: the
// manifest against the reference's digest (or, for a tag, the digest the
// source lists it under), the config and each layer against the manifest
// read. An OCI layout's files are not trusted to match their names.
func Read(ctx context.Context, ref Ref) (*Image, error) {
	var (
		img v1.Image
		// listed is the digest the source gives the image under.
		listed v1.Hash
		err    error
	)
	if ref.Registry != nil {
		img, err = remote.Image(ref.Registry, remote.WithContext(ctx), remote.WithAuthFromKeychain(Keychain(ctx)))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", ref, err)
		}
		if listed, err = img.Digest(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", ref, err)
		}
	} else {
		img, listed, err = readLayout(ref)
		if err != nil {
			return nil, err
		}
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the manifest of %s: %w", ref, err)
	}
	digest, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	want := listed
	if d := ref.Digest(); d != "" {
		if want, err = v1.NewHash(d); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
	}
	// The bytes must hash to the digest asked for, and to the one the
	// source lists them under.
	for _, w := range []v1.Hash{want, listed} {
		if digest != w {
			return nil, &DigestMismatchError{What: "the manifest of " + ref.String(), Want: w, Got: digest}
		}
	}
	// Everything else is found through the manifest just hashed, never
	// through one read again.
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("the manifest of %s: %w", ref, err)
	}
	pull := "oci:" + ref.Layout + "@" + digest.String()
	if ref.Registry != nil {
		pull = ref.Registry.Context().Digest(digest.String()).String()
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the config of %s: %w", ref, err)
	}
	if got, _, err := v1.SHA256(bytes.NewReader(rawCfg)); err != nil || got != m.Config.Digest {
		return nil, &DigestMismatchError{What: "the config of " + ref.String(), Want: m.Config.Digest, Got: got}
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return nil, fmt.Errorf("the config of %s: %w", ref, err)
	}
	p, err := payloadOf(img, ref, m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return &Image{Ref: ref, Digest: digest, Config: cfg, Payload: p, PullSpec: pull}, nil
}

// layoutIndex reads an OCI layout's index and what it lists.
func layoutIndex(dir string) (v1.ImageIndex, []v1.Descriptor, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s is not an OCI layout: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	return idx, m.Manifests, nil
}

// LayoutRefs lists every image of an OCI layout, by digest.
func LayoutRefs(dir string) ([]Ref, error) {
	_, descs, err := layoutIndex(dir)
	if err != nil {
		return nil, err
	}
	refs := make([]Ref, 0, len(descs))
	for _, d := range descs {
		refs = append(refs, Ref{Layout: dir, LayoutDigest: d.Digest.String()})
	}
	return refs, nil
}

// readLayout finds the image a layout reference names: by digest, the
// one listed under that digest (never one whose name looks like it); by
// tag, the one whose ref.name annotation is the tag.
func readLayout(ref Ref) (v1.Image, v1.Hash, error) {
	idx, descs, err := layoutIndex(ref.Layout)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	var found []v1.Descriptor
	for _, d := range descs {
		switch {
		case ref.LayoutDigest != "":
			if d.Digest.String() == ref.LayoutDigest {
				found = append(found, d)
			}
		case ref.Tag == "" || d.Annotations[refNameAnnotation] == ref.Tag:
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0 && ref.LayoutDigest != "":
		return nil, v1.Hash{}, fmt.Errorf("OCI layout %s has no image %s", ref.Layout, ref.LayoutDigest)
	case len(found) == 0 && ref.Tag != "":
		return nil, v1.Hash{}, fmt.Errorf("OCI layout %s has no image %q", ref.Layout, ref.Tag)
	case len(found) == 0:
		return nil, v1.Hash{}, fmt.Errorf("OCI layout %s holds no image", ref.Layout)
	case len(found) > 1 && ref.LayoutDigest == "":
		return nil, v1.Hash{}, fmt.Errorf("OCI layout %s holds %d images: name one as oci:%s:TAG", ref.Layout, len(found), ref.Layout)
	}
	img, err := idx.Image(found[0].Digest)
	return img, found[0].Digest, err
}

// layerBytes reads a layer whole, checks that it hashes to the digest
// the manifest gives it, and returns it uncompressed.
func layerBytes(img v1.Image, ref Ref, i int, d v1.Descriptor) ([]byte, error) {
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", i, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", i, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxBlob+1))
	if err != nil {
		return nil, fmt.Errorf("reading layer %d: %w", i, err)
	}
	if len(raw) > maxBlob {
		return nil, fmt.Errorf("layer %d is larger than %d MiB", i, maxBlob>>20)
	}
	got, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if got != d.Digest {
		return nil, &DigestMismatchError{What: fmt.Sprintf("layer %d of %s", i, ref), Want: d.Digest, Got: got}
	}
	if !bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		return raw, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", i, err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxBlob+1))
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", i, err)
	}
	if len(out) > maxBlob {
		return nil, fmt.Errorf("layer %d is larger than %d MiB uncompressed", i, maxBlob>>20)
	}
	return out, nil
}

// payloadOf reads the payload out of a release image's layers, as its
// manifest m lists them.
func payloadOf(img v1.Image, ref Ref, m *v1.Manifest) (*Payload, error) {
	if len(m.Layers) > MaxLayers {
		return nil, fmt.Errorf("%s has %d layers, more than a release image may have (%d)", ref, len(m.Layers), MaxLayers)
	}
	layers := make([][]byte, 0, len(m.Layers))
	total := 0
	for i, d := range m.Layers {
		if d.Size > maxBlob {
			return nil, fmt.Errorf("layer %d of %s is %d MiB, larger than %d MiB", i, ref, d.Size>>20, maxBlob>>20)
		}
		layer, err := layerBytes(img, ref, i, d)
		if err != nil {
			return nil, err
		}
		if total += len(layer); total > MaxPayloadBytes {
			return nil, fmt.Errorf("the layers of %s hold more than %d MiB uncompressed, more than a release image may", ref, MaxPayloadBytes>>20)
		}
		layers = append(layers, layer)
	}
	return ParseLayers(layers)
}

// ParseLayers reads a release payload out of a release image's
// uncompressed layers (tar archives), in the manifest's order: a later
// layer's file replaces an earlier one's.
func ParseLayers(layers [][]byte) (*Payload, error) {
	files := map[string][]byte{}
	for _, layer := range layers {
		tr := tar.NewReader(bytes.NewReader(layer))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading a layer: %w", err)
			}
			n := path.Clean(strings.TrimPrefix(h.Name, "/"))
			if h.Typeflag != tar.TypeReg || (!strings.HasPrefix(n, ReleaseManifestsDir+"/") && !strings.HasPrefix(n, ManifestsDir+"/")) {
				continue
			}
			raw, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			files[n] = raw
		}
	}
	p := &Payload{Manifests: map[string][]byte{}, CVOManifests: map[string][]byte{}, raw: files}
	meta, ok := files[ReleaseManifestsDir+"/"+MetadataFile]
	if !ok {
		return nil, errors.New("not a release image: no release-manifests/release-metadata")
	}
	if err := json.Unmarshal(meta, &p.Metadata); err != nil {
		return nil, fmt.Errorf("release-metadata: %w", err)
	}
	if err := p.Metadata.Validate(); err != nil {
		return nil, err
	}
	refs, ok := files[ReleaseManifestsDir+"/"+ImageReferencesFile]
	if !ok {
		return nil, errors.New("not a release image: no release-manifests/image-references")
	}
	p.ImageReferences = &imagev1.ImageStream{}
	if err := yaml.Unmarshal(refs, p.ImageReferences); err != nil {
		return nil, fmt.Errorf("image-references: %w", err)
	}
	if p.ImageReferences.Name != p.Metadata.Version {
		return nil, fmt.Errorf("version from image-references (%s) differs from release-metadata (%s)", p.ImageReferences.Name, p.Metadata.Version)
	}
	if err := validTags(p.ImageReferences); err != nil {
		return nil, err
	}
	for n, raw := range files {
		dir, file := path.Split(n)
		switch {
		case dir == ReleaseManifestsDir+"/" && (file == MetadataFile || file == ImageReferencesFile):
		case dir == ReleaseManifestsDir+"/":
			p.Manifests[file] = raw
		case dir == ManifestsDir+"/":
			p.CVOManifests[file] = raw
		}
	}
	return p, nil
}
