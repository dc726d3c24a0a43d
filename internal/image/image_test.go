package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// staticBinary builds testdata/hello with cgo off.
func staticBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./testdata/hello")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the test binary: %v\n%s", err, b)
	}
	return out
}

func TestTheSameBinaryGivesTheSameDigest(t *testing.T) {
	bin := staticBinary(t)
	a, err := Build(bin)
	if err != nil {
		t.Fatal(err)
	}
	// A copy elsewhere, written later, with another mode.
	other := filepath.Join(t.TempDir(), "capstan")
	raw, _ := os.ReadFile(bin)
	if err := os.WriteFile(other, raw, 0o700); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	_ = os.Chtimes(other, later, later)
	b, err := Build(other)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds of one binary: %s and %s", da, db)
	}
	// Another binary, another digest.
	raw = append(raw, 0)
	if err := os.WriteFile(other, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Build(other)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Fatal("a changed binary gave the same digest")
	}
}

func TestTheImageHoldsTheBinaryItsUserAndNothingElse(t *testing.T) {
	bin := staticBinary(t)
	img, err := Build(bin)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{BinaryPath}) || cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("config: user %q, entrypoint %v, platform %s/%s", cf.Config.User, cf.Config.Entrypoint, cf.OS, cf.Architecture)
	}
	if !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("created %s, want the epoch", cf.Created)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want, _ := os.ReadFile(bin)
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: modified %s, want the epoch", h.Name, h.ModTime)
		}
		if h.Name == BinaryPath[1:] {
			got, _ := io.ReadAll(tr)
			if !bytes.Equal(got, want) || h.Mode != 0o755 || h.Uid != 0 {
				t.Errorf("the binary: %d bytes, mode %o, uid %d", len(got), h.Mode, h.Uid)
			}
		}
		if h.Name == "etc/passwd" {
			got, _ := io.ReadAll(tr)
			if !strings.Contains(string(got), "nonroot:x:65532:65532:") {
				t.Errorf("passwd has no nonroot user:\n%s", got)
			}
		}
	}
	wantNames := []string{"etc/", "etc/group", "etc/passwd", "home/", "home/nonroot/", "tmp/", "usr/", "usr/bin/", "usr/bin/capstan"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("the layer holds %v, want %v (no shell, nothing else)", names, wantNames)
	}
}

func TestOnlyAStaticLinuxBinaryIsTaken(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(script); err == nil || !strings.Contains(err.Error(), "not a Linux executable") {
		t.Errorf("a shell script: %v", err)
	}
	if _, err := Build(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file was taken")
	}
	// Debian's own programs are dynamically linked.
	if _, err := Build("/bin/ls"); err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("a dynamic binary: %v", err)
	}
}

func TestPushedAndWrittenImagesKeepTheirDigest(t *testing.T) {
	img, err := Build(staticBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()

	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/capstan/capstan:test"
	pushed, err := Push(context.Background(), img, ref, authn.DefaultKeychain)
	if err != nil {
		t.Fatal(err)
	}
	if pushed.DigestStr() != digest.String() {
		t.Errorf("pushed as %s, built as %s", pushed, digest)
	}
	r, _ := name.ParseReference(ref)
	got, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d != digest {
		t.Errorf("pulled back %s, pushed %s", d, digest)
	}
	if _, err := Push(context.Background(), img, "not a reference", authn.DefaultKeychain); err == nil || !strings.Contains(err.Error(), "not a reference") {
		t.Errorf("a bad reference: %v", err)
	}

	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteDir(img, dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 || m.Manifests[0].Digest != digest {
		t.Errorf("the layout's index: %+v, %v; want %s", m, err, digest)
	}
}
