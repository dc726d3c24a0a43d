package release

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: demo-operator
  namespace: openshift-demo
`

const imageRefs = `apiVersion: image.openshift.io/v1
kind: ImageStream
metadata:
  annotations:
    io.openshift.build.versions: kubernetes=1.36.3,machine-os=410.84.202207061638-0
    io.openshift.build.version-display-names: machine-os=Red Hat Enterprise Linux CoreOS
spec:
  tags:
  - name: demo-operator
    from:
      kind: DockerImage
      name: quay.io/capstan/demo-operator@sha256:1111111111111111111111111111111111111111111111111111111111111111
  - name: cluster-version-operator
    from:
      kind: DockerImage
      name: quay.io/capstan/cvo@sha256:2222222222222222222222222222222222222222222222222222222222222222
`

func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func demoPayload(t testing.TB) *Payload {
	t.Helper()
	dir := writeFiles(t, map[string]string{
		"0000_50_demo-operator_01_deployment.yaml":                      deployment,
		"0000_50_demo-operator_00_namespace.yaml":                       "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: openshift-demo\n---\n# trailing comment only\n",
		"image-references":                                              imageRefs,
		"manifests/0000_00_cluster-version-operator_03_deployment.yaml": deployment,
		"README.md": "not a manifest",
	})
	p, err := LoadDir(dir, Metadata{Version: "4.10.23", Previous: []string{"4.10.22", "4.10.3"},
		Metadata: map[string]string{URLMetadata: "https://example.com/errata/4.10.23"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReleaseRoundTripThroughAnOCILayout(t *testing.T) {
	ctx := context.Background()
	p := demoPayload(t)
	created := time.Date(2022, 7, 20, 10, 30, 0, 0, time.UTC)
	img, err := Build(p, BuildOptions{Created: created})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Build(demoPayload(t), BuildOptions{Created: created})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("the same payload built twice has digests %s and %s", d1, d2)
	}
	ref, err := ParseRef("oci:" + filepath.Join(t.TempDir(), "layout") + ":4.10.23")
	if err != nil {
		t.Fatal(err)
	}
	digest, err := Write(ctx, ref, img)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != digest {
		t.Fatalf("read back %s, wrote %s", got.Digest, digest)
	}
	if got.Payload.Metadata.Version != "4.10.23" || strings.Join(got.Payload.Metadata.Previous, ",") != "4.10.3,4.10.22" {
		t.Errorf("metadata read back: %+v", got.Payload.Metadata)
	}
	if len(got.Payload.Manifests) != 2 || len(got.Payload.CVOManifests) != 1 {
		t.Errorf("manifests read back: %d release, %d CVO", len(got.Payload.Manifests), len(got.Payload.CVOManifests))
	}
	var out bytes.Buffer
	if err := Describe(&out, got); err != nil {
		t.Fatal(err)
	}
	want := `Name:      4.10.23
Digest:    ` + digest.String() + `
Created:   2022-07-20T10:30:00Z
OS/Arch:   linux/amd64
Manifests: 2

Pull From: ` + got.PullSpec + `

Release Metadata:
  Version:  4.10.23
  Upgrades: 4.10.3, 4.10.22
  Metadata:
    url: https://example.com/errata/4.10.23

Component Versions:
  kubernetes 1.36.3                
  machine-os 410.84.202207061638-0 Red Hat Enterprise Linux CoreOS

Images:
  NAME                     DIGEST
  demo-operator            sha256:1111111111111111111111111111111111111111111111111111111111111111
  cluster-version-operator sha256:2222222222222222222222222222222222222222222222222222222222222222

`
	if out.String() != want {
		t.Errorf("release info:\n%s\nwant:\n%s", out.String(), want)
	}
	to := t.TempDir()
	out.Reset()
	if err := Extract(&out, got, to); err != nil {
		t.Fatal(err)
	}
	if want := "Extracted release payload from digest " + digest.String() + " created at 2022-07-20T10:30:00Z\n"; out.String() != want {
		t.Errorf("extract said %q, want %q", out.String(), want)
	}
	for _, f := range []string{"0000_50_demo-operator_01_deployment.yaml", "0000_50_demo-operator_00_namespace.yaml", ImageReferencesFile, MetadataFile} {
		if _, err := os.Stat(filepath.Join(to, f)); err != nil {
			t.Errorf("extracted payload lacks %s: %v", f, err)
		}
	}
	if raw, _ := os.ReadFile(filepath.Join(to, "0000_50_demo-operator_01_deployment.yaml")); string(raw) != deployment {
		t.Errorf("extracted manifest differs: %q", raw)
	}
	if _, err := File(got, "nope.yaml"); err == nil || err.Error() != "image did not contain nope.yaml" {
		t.Errorf("File of a missing file: %v", err)
	}
}

func TestReleasePushedToARegistry(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	img, err := Build(demoPayload(t), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, err := ParseRef(host + "/ocp/release:4.10.23-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	digest, err := Write(ctx, ref, img)
	if err != nil {
		t.Fatal(err)
	}
	byDigest, err := ParseRef(host + "/ocp/release@" + digest.String())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(ctx, byDigest)
	if err != nil {
		t.Fatal(err)
	}
	if got.PullSpec != host+"/ocp/release@"+digest.String() || got.Payload.Metadata.Version != "4.10.23" {
		t.Errorf("read back %s version %s", got.PullSpec, got.Payload.Metadata.Version)
	}
}

func TestLoadDirRefusesBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		files   map[string]string
		version string
		want    string
	}{
		"bad version":       {map[string]string{"0000_50_a_x.yaml": deployment}, "4.10", "release version \"4.10\" is not a semantic version"},
		"no manifests":      {map[string]string{"notes.txt": "x"}, "4.10.1", "has no manifests"},
		"misnamed":          {map[string]string{"deployment.yaml": deployment}, "4.10.1", "a manifest's name must be 0000_<runlevel>_<component>_<name>"},
		"no kind":           {map[string]string{"0000_50_a_x.yaml": "apiVersion: v1\n"}, "4.10.1", "document 1: apiVersion and kind are required"},
		"bad yaml":          {map[string]string{"0000_50_a_x.yaml": "kind: [\n"}, "4.10.1", "document 1:"},
		"other version":     {map[string]string{"0000_50_a_x.yaml": deployment, "image-references": "kind: ImageStream\napiVersion: image.openshift.io/v1\nmetadata:\n  name: 4.9.0\n"}, "4.10.1", "version from image-references (4.9.0) differs from release-metadata (4.10.1)"},
		"image by tag":      {map[string]string{"0000_50_a_x.yaml": deployment, "image-references": "kind: ImageStream\napiVersion: image.openshift.io/v1\nspec:\n  tags:\n  - name: a\n    from: {kind: DockerImage, name: quay.io/a:latest}\n"}, "4.10.1", `tag "a" must name a DockerImage by digest`},
		"stray directory":   {map[string]string{"0000_50_a_x.yaml": deployment, "extra/0000_50_a_y.yaml": deployment}, "4.10.1", "unexpected directory"},
		"bad previous":      {map[string]string{"0000_50_a_x.yaml": deployment}, "4.10.1;previous=x", "in previous/next is not a semantic version"},
		"unknown ref field": {map[string]string{"0000_50_a_x.yaml": deployment, "image-references": "kind: ImageStream\napiVersion: image.openshift.io/v1\nspecs: {}\n"}, "4.10.1", "unknown field"},
	} {
		t.Run(name, func(t *testing.T) {
			meta := Metadata{Version: tc.version}
			if v, prev, ok := strings.Cut(tc.version, ";previous="); ok {
				meta = Metadata{Version: v, Previous: []string{prev}}
			}
			_, err := LoadDir(writeFiles(t, tc.files), meta)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadDir: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// writeLayout builds the demo payload at version into a new OCI layout
// under dir, tagged tag, and returns the layout's path and the image's
// digest.
func writeLayout(t *testing.T, dir, tag, version string) (string, v1.Hash) {
	t.Helper()
	p := demoPayload(t)
	p.Metadata.Version = version
	p.ImageReferences.Name = version
	// A fixed creation time: the same payload built twice is the same
	// image, whichever second each build falls in.
	img, err := Build(p, BuildOptions{Created: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Write(context.Background(), Ref{Layout: dir, Tag: tag}, img)
	if err != nil {
		t.Fatal(err)
	}
	return dir, d
}

// A reference by digest reads the image listed under that digest, never
// one whose ref.name merely reads like it (review S2: oci:DIR:x@sha256:H
// was a layout "DIR:x@sha256" and a tag H, so a signed digest H named an
// image of anyone's making).
func TestALayoutReferenceByDigestIsReadByDigest(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	_, signed := writeLayout(t, filepath.Join(tmp, "signed"), "4.10.23", "4.10.23")
	// Someone else's release, in a layout whose path ends in "x@sha256"
	// and whose image is named with the hex of the signed digest.
	evil := filepath.Join(tmp, "l:x@sha256")
	writeLayout(t, evil, signed.Hex, "6.6.6")
	ref, err := ParseRef("oci:" + filepath.Join(tmp, "l:x") + "@" + signed.String())
	if err != nil {
		t.Fatal(err)
	}
	if ref.Layout != filepath.Join(tmp, "l:x") || ref.Digest() != signed.String() || ref.Tag != "" {
		t.Fatalf("parsed as layout %q, digest %q, tag %q", ref.Layout, ref.Digest(), ref.Tag)
	}
	if img, err := Read(ctx, ref); err == nil {
		t.Fatalf("read %s (version %s) by a digest it does not have", ref, img.Payload.Metadata.Version)
	}
	// A layout that holds the image under that digest: read, and only it.
	writeLayout(t, filepath.Join(tmp, "both"), signed.Hex, "6.6.6")
	_, d := writeLayout(t, filepath.Join(tmp, "both"), "4.10.23", "4.10.23")
	if d != signed {
		t.Fatalf("the same payload built twice: %s and %s", d, signed)
	}
	img, err := Read(ctx, Ref{Layout: filepath.Join(tmp, "both"), LayoutDigest: signed.String()})
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != signed || img.Payload.Metadata.Version != "4.10.23" {
		t.Errorf("read %s version %s, want %s version 4.10.23", img.Digest, img.Payload.Metadata.Version, signed)
	}
	if again, err := ParseRef(img.PullSpec); err != nil || again.Digest() != signed.String() || again.Layout != filepath.Join(tmp, "both") {
		t.Errorf("the pull spec %s parses as %+v (%v)", img.PullSpec, again, err)
	}
	for _, bad := range []string{"oci:@" + signed.String(), "oci:/d@sha256:12", "oci:/d@sha256:" + strings.Repeat("g", 64)} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) took it", bad)
		}
	}
	if _, err := Write(ctx, Ref{Layout: tmp, LayoutDigest: signed.String()}, empty.Image); err == nil || !strings.Contains(err.Error(), "not by digest") {
		t.Errorf("writing to a layout by digest: %v", err)
	}
}

// Every blob of a layout is hashed as it is read: a manifest, config or
// layer file changed after it was written is a DigestMismatchError that
// names both digests, whether the image is asked for by digest or by tag.
func TestAlteredLayoutBlobsAreRefused(t *testing.T) {
	ctx := context.Background()
	for _, which := range []string{"manifest", "config", "layer"} {
		t.Run(which, func(t *testing.T) {
			dir, digest := writeLayout(t, filepath.Join(t.TempDir(), "l"), "4.10.23", "4.10.23")
			p, err := layout.FromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			img, err := p.Image(digest)
			if err != nil {
				t.Fatal(err)
			}
			m, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			blob := map[string]v1.Hash{"manifest": digest, "config": m.Config.Digest, "layer": m.Layers[0].Digest}[which]
			file := filepath.Join(dir, "blobs", blob.Algorithm, blob.Hex)
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			// One byte changed; the size stays.
			raw[len(raw)/2] ^= 0x01
			if err := os.WriteFile(file, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			changed, _, _ := v1.SHA256(bytes.NewReader(raw))
			for _, ref := range []Ref{{Layout: dir, LayoutDigest: digest.String()}, {Layout: dir, Tag: "4.10.23"}} {
				_, err := Read(ctx, ref)
				var mismatch *DigestMismatchError
				if !errors.As(err, &mismatch) {
					t.Fatalf("%s: read with its %s changed: %v", ref, which, err)
				}
				if mismatch.Want != blob || mismatch.Got != changed || !strings.Contains(err.Error(), blob.String()) || !strings.Contains(err.Error(), changed.String()) {
					t.Errorf("%s: %v; want %s asked for and %s read", ref, err, blob, changed)
				}
			}
		})
	}
}

// A release image that would make capstan hold more than a release ever
// needs is refused before its payload is parsed: too many layers, or
// layers (gzip bombs: a few KiB each, 40 MiB unpacked) that unpack to
// more than MaxPayloadBytes together.
func TestAnOversizedReleaseIsRefused(t *testing.T) {
	ctx := context.Background()
	bomb := func() v1.Layer {
		var tarBytes bytes.Buffer
		tw := tar.NewWriter(&tarBytes)
		content := make([]byte, 40<<20)
		if err := tw.WriteHeader(&tar.Header{Name: "release-manifests/zeros", Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		l, err := tarball.LayerFromReader(bytes.NewReader(tarBytes.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}()
	for _, tc := range []struct {
		layers int
		want   string
	}{
		{MaxLayers + 1, "layers, more than a release image may have"},
		{MaxPayloadBytes/(40<<20) + 1, "uncompressed, more than a release image may"},
	} {
		layers := make([]v1.Layer, tc.layers)
		for i := range layers {
			layers[i] = bomb
		}
		img, err := mutate.AppendLayers(empty.Image, layers...)
		if err != nil {
			t.Fatal(err)
		}
		ref := Ref{Layout: filepath.Join(t.TempDir(), "big"), Tag: "big"}
		if _, err := Write(ctx, ref, img); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(ctx, ref); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d layers of 40 MiB: %v, want an error with %q", tc.layers, err, tc.want)
		}
	}
}
