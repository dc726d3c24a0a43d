package registry

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capstan-dev/capstan/internal/fuzzseed"
)

// FuzzManifestPush pushes an arbitrary manifest under an arbitrary
// repository and reference, with the credentials. Whatever is accepted
// is served again, the same, after the registry is opened anew from its
// journal; whatever is refused leaves nothing behind; nothing at all
// keeps the registry from opening.
func FuzzManifestPush(f *testing.F) {
	for _, raw := range fuzzseed.Read(f, "testdata/manifests") {
		f.Add("ocp/release", "4.10.22", "application/vnd.oci.image.manifest.v1+json", raw)
	}
	f.Add("x/_refs/y", "tag", "application/json", []byte("{}"))
	f.Add("ocp/release", "sha256:"+string(bytes.Repeat([]byte("0"), 64)), "application/vnd.oci.image.index.v1+json", []byte(`{"schemaVersion":2}`))
	f.Add("a/b", "..", "", []byte(nil))
	// A tag named as an older journal's media-type file.
	f.Add("ocp/release", "4.10.22.type", "application/vnd.oci.image.manifest.v1+json", []byte(`{"schemaVersion":2}`))
	f.Fuzz(func(t *testing.T, repo, ref, mediaType string, body []byte) {
		dir := t.TempDir()
		reg, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPut, "/v2/", bytes.NewReader(body))
		req.URL.Path = "/v2/" + repo + "/manifests/" + ref
		req.SetBasicAuth(reg.Username, reg.Password)
		req.Header.Set("Content-Type", mediaType)
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, req)

		again, err := Open(dir)
		if err != nil {
			t.Fatalf("the registry does not open after a push of %q:%q answered %d: %v", repo, ref, rec.Code, err)
		}
		if len(again.Warnings) != 0 {
			t.Fatalf("a push of %q:%q answered %d left a journal that does not replay: %v", repo, ref, rec.Code, again.Warnings)
		}
		get := httptest.NewRequest(http.MethodGet, "/v2/", nil)
		get.URL.Path = req.URL.Path
		get.SetBasicAuth(reg.Username, reg.Password)
		get.Header.Set("Accept", mediaType)
		got := httptest.NewRecorder()
		again.ServeHTTP(got, get)
		if rec.Code == http.StatusCreated {
			if got.Code != http.StatusOK || !bytes.Equal(got.Body.Bytes(), body) {
				t.Fatalf("%q:%q was accepted but is served as %d after a restart", repo, ref, got.Code)
			}
		} else if got.Code == http.StatusOK {
			t.Fatalf("%q:%q was refused (%d) but is served after a restart", repo, ref, rec.Code)
		}
	})
}
