package registry

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushedImagesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	reg, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg)
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := name.ParseReference(host + "/ocp/release:4.10.22")
	gone, _ := name.ParseReference(host + "/ocp/release:deleted")
	for _, ref := range []name.Reference{kept, gone} {
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	if err := remote.Delete(gone); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	srv.Close()

	reg, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(reg)
	defer srv.Close()
	host = strings.TrimPrefix(srv.URL, "http://")
	for _, s := range []string{host + "/ocp/release:4.10.22", host + "/ocp/release@" + digest.String()} {
		ref, _ := name.ParseReference(s)
		got, err := remote.Image(ref)
		if err != nil {
			t.Fatalf("%s after the restart: %v", s, err)
		}
		if d, _ := got.Digest(); d != digest {
			t.Errorf("%s is %s, pushed %s", s, d, digest)
		}
		if _, err := got.Layers(); err != nil {
			t.Fatal(err)
		}
	}
	ref, _ := name.ParseReference(host + "/ocp/release:deleted")
	if _, err := remote.Image(ref); err == nil {
		t.Error("a deleted tag came back after the restart")
	}
	tags, err := remote.List(ref.Context())
	if err != nil || strings.Join(tags, ",") != "4.10.22" {
		t.Errorf("tags after the restart: %v %v", tags, err)
	}
}

func TestABrokenJournalIsReported(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "manifests", "ocp", "release", "_refs", "4.10.22")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "registry journal") {
		t.Fatalf("Open with a manifest and no media type: %v", err)
	}
}
