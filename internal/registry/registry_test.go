package registry

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// serve opens the registry kept in dir and serves it until the test ends;
// it returns the registry, its server and the server's host:port.
func serve(t *testing.T, dir string) (*Registry, *httptest.Server, string) {
	t.Helper()
	reg, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg)
	t.Cleanup(srv.Close)
	return reg, srv, strings.TrimPrefix(srv.URL, "http://")
}

// pusher authenticates as the registry's own user.
func pusher(reg *Registry) remote.Option {
	return remote.WithAuth(&authn.Basic{Username: reg.Username, Password: reg.Password})
}

func TestPushedImagesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	reg, srv, host := serve(t, dir)
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := name.ParseReference(host + "/ocp/release:4.10.22")
	gone, _ := name.ParseReference(host + "/ocp/release:deleted")
	for _, ref := range []name.Reference{kept, gone} {
		if err := remote.Write(ref, img, pusher(reg)); err != nil {
			t.Fatal(err)
		}
	}
	if err := remote.Delete(gone, pusher(reg)); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	srv.Close()

	_, _, host = serve(t, dir)
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

// A journal entry that cannot be restored (no media type, or a manifest
// the registry refuses) is set aside and reported; the rest opens.
func TestABrokenJournalEntryIsSetAsideAndReported(t *testing.T) {
	dir := t.TempDir()
	reg, srv, host := serve(t, dir)
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := name.ParseReference(host + "/ocp/release:4.10.22")
	if err := remote.Write(good, img, pusher(reg)); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	zeros := "sha256:" + strings.Repeat("0", 64)
	for file, content := range map[string]string{
		"manifests/ocp/release/_refs/no-type": "{}",
		// Under a digest its bytes do not hash to.
		"manifests/ocp/release/_refs/" + zeros:           "{}",
		"manifests/ocp/release/_refs/" + zeros + ".type": "application/vnd.oci.image.manifest.v1+json",
		"manifests/ocp/Bad_Name/_refs/4.10.22":           "{}",
		"manifests/ocp/Bad_Name/_refs/4.10.22.type":      "application/vnd.oci.image.manifest.v1+json",
		"manifests/ocp/release/_refs/.v9.tmp-1234":       "{",
	} {
		p := filepath.Join(dir, filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg, srv, host = serve(t, dir)
	warnings := strings.Join(reg.Warnings, "\n")
	for _, want := range []string{"release:no-type has no media type", "ocp/release: manifest " + zeros + " hashes to sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", `invalid repository name "ocp/Bad_Name"`} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings lack %q:\n%s", want, warnings)
		}
	}
	if len(reg.Warnings) != 3 {
		t.Errorf("%d warnings, want 3:\n%s", len(reg.Warnings), warnings)
	}
	for _, f := range []string{"rejected/ocp/release/_refs/" + zeros, "rejected/ocp/release/_refs/" + zeros + ".type", "rejected/ocp/release/_refs/no-type"} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			t.Errorf("not set aside: %v", err)
		}
	}
	good, _ = name.ParseReference(host + "/ocp/release:4.10.22")
	if _, err := remote.Image(good); err != nil {
		t.Errorf("the good entry was not restored: %v", err)
	}
	// Set aside, the broken entries are not met again.
	if again, err := Open(dir); err != nil || len(again.Warnings) != 0 {
		t.Errorf("opened again: %v, warnings %v", err, again.Warnings)
	}
}

// Names outside the distribution grammar are refused before anything is
// served or written (review M6: a push to x/_refs/y was journaled where
// the replay read another name, and the registry never opened again);
// every valid tag survives a restart, ".." in it included.
func TestNamesAreValidatedBeforeAnythingIsWritten(t *testing.T) {
	dir := t.TempDir()
	reg, srv, host := serve(t, dir)
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"/x/_refs/y:tag", "/UPPER/case:tag", "/ocp/release:-leading-dash", "/a//b:tag", "/:0", "/ocp/release:"} {
		ref, err := name.ParseReference(host+bad, name.WeakValidation)
		if err != nil {
			// go-containerregistry's client refuses some names itself:
			// ask the registry directly.
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v2"+strings.Replace(bad, ":", "/manifests/", 1), strings.NewReader("{}"))
			req.SetBasicAuth(reg.Username, reg.Password)
			req.Header.Set("Content-Type", "application/json")
			resp, herr := http.DefaultClient.Do(req)
			if herr != nil {
				t.Fatal(herr)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", bad, resp.StatusCode)
			}
			continue
		}
		if err := remote.Write(ref, img, pusher(reg)); err == nil || !strings.Contains(err.Error(), "400 Bad Request") {
			t.Errorf("pushing %s: %v, want 400 Bad Request", bad, err)
		}
	}
	// A manifest pushed under a digest it does not hash to.
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v2/ocp/release/manifests/sha256:"+strings.Repeat("0", 64), strings.NewReader("{}"))
	req.SetBasicAuth(reg.Username, reg.Password)
	req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a manifest under a digest it does not hash to: %d, want 400", resp.StatusCode)
	}
	dots, _ := name.ParseReference(host + "/ocp/release:4.10..22")
	if err := remote.Write(dots, img, pusher(reg)); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if _, err := os.Stat(filepath.Join(dir, "manifests", "x")); err == nil {
		t.Error("a refused name was journaled")
	}
	reg, _, host = serve(t, dir)
	if len(reg.Warnings) != 0 {
		t.Fatalf("warnings after the refused pushes: %v", reg.Warnings)
	}
	dots, _ = name.ParseReference(host + "/ocp/release:4.10..22")
	if _, err := remote.Image(dots); err != nil {
		t.Errorf("a tag with .. after the restart: %v", err)
	}
}

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		repo, ref string
		ok        bool
	}{
		{"ocp/release", "4.10.22-x86_64", true},
		{"ocp/release", "sha256:" + strings.Repeat("a", 64), true},
		{"a.b/c__d/e-f", "", true},
		{"x/_refs/y", "tag", false},
		{"Upper", "tag", false},
		{"ocp/release", "../../etc", false},
		{"ocp/release", "a/b", false},
		{"ocp/release", strings.Repeat("t", 129), false},
		{"", "tag", false},
		{"ocp//release", "tag", false},
	} {
		if err := validName(tc.repo, tc.ref); (err == nil) != tc.ok {
			t.Errorf("validName(%q, %q) = %v, want ok %v", tc.repo, tc.ref, err, tc.ok)
		}
	}
}

// Pushes need the registry's credentials; pulls need them only from
// another host (review: the registry accepted pushes from anyone who
// could reach it). The credentials are made once and kept.
func TestPushesNeedCredentials(t *testing.T) {
	dir := t.TempDir()
	reg, _, host := serve(t, dir)
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host + "/ocp/release:4.10.22")
	for what, opts := range map[string][]remote.Option{
		"anonymously":           nil,
		"with a wrong password": {remote.WithAuth(&authn.Basic{Username: reg.Username, Password: reg.Password + "x"})},
	} {
		if err := remote.Write(ref, img, opts...); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(err.Error(), "UNAUTHORIZED") {
			t.Errorf("pushing %s: %v, want it unauthorized", what, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "manifests", "ocp")); err == nil {
		t.Error("a refused push was journaled")
	}
	if err := remote.Write(ref, img, pusher(reg)); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(ref); err != nil {
		t.Errorf("an anonymous pull on loopback: %v", err)
	}
	// The same pull from another host.
	for what, auth := range map[string]bool{"anonymously": false, "with the credentials": true} {
		req := httptest.NewRequest(http.MethodGet, "/v2/ocp/release/manifests/4.10.22", nil)
		req.RemoteAddr = "192.0.2.7:40000"
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.v2+json")
		if auth {
			req.SetBasicAuth(reg.Username, reg.Password)
		}
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, req)
		want := http.StatusUnauthorized
		if auth {
			want = http.StatusOK
		}
		if rec.Code != want {
			t.Errorf("a pull from another host %s: %d, want %d", what, rec.Code, want)
		}
		if !auth && rec.Header().Get("WWW-Authenticate") != `Basic realm="capstan registry"` {
			t.Errorf("no basic challenge: %q", rec.Header().Get("WWW-Authenticate"))
		}
	}
	st, err := os.Stat(filepath.Join(dir, CredentialsFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v, want mode 0600", st, err)
	}
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Username != reg.Username || again.Password != reg.Password || len(reg.Password) < 24 {
		t.Error("the credentials changed when the registry reopened, or are short")
	}
	if err := os.WriteFile(filepath.Join(dir, CredentialsFile), []byte(`{"username":"capstan"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("credentials without a password: %v", err)
	}
}

// An upload that would hold more than a blob may is refused before its
// body is read, and one of unknown length is cut there: the registry's
// memory stays bounded. A push of a normal image goes through.
func TestOversizedBlobUploadsAreRefused(t *testing.T) {
	reg, _, host := serve(t, t.TempDir())
	img, err := random.Image(4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host + "/ocp/release:small")
	if err := remote.Write(ref, img, pusher(reg)); err != nil {
		t.Fatal(err)
	}
	do := pushRequest(reg)
	start := do(http.MethodPost, "/v2/ocp/big/blobs/uploads/", nil, 0)
	loc := start.Header().Get("Location")
	if start.Code != http.StatusAccepted || loc == "" {
		t.Fatalf("starting an upload: %d %s", start.Code, start.Body.String())
	}
	read := &countingReader{r: io.LimitReader(zeros{}, MaxBlobUpload+1<<20)}
	if rec := do(http.MethodPatch, loc, read, MaxBlobUpload+1); rec.Code != http.StatusRequestEntityTooLarge || read.n != 0 {
		t.Errorf("a declared 256 MiB + 1: %d %s after reading %d bytes, want 413 before the body", rec.Code, rec.Body.String(), read.n)
	}
	read = &countingReader{r: io.LimitReader(zeros{}, MaxBlobUpload+1<<20)}
	if rec := do(http.MethodPatch, loc, read, -1); rec.Code/100 == 2 || read.n > MaxBlobUpload+64<<10 {
		t.Errorf("an unbounded chunk: %d after reading %d bytes, want a refusal by 256 MiB", rec.Code, read.n)
	}
}

// L4: concurrent uploads share the bound, not each the whole of it: what
// a body may hold is reserved before it is read. With four chunks of
// unknown length under way (256 MiB each reserved, 1 GiB in all; the
// library reads them one at a time), a fifth upload's first byte is
// refused before its body is read.
func TestConcurrentUploadsShareTheBound(t *testing.T) {
	reg, _, _ := serve(t, t.TempDir())
	do := pushRequest(reg)
	start := func() string {
		rec := do(http.MethodPost, "/v2/ocp/big/blobs/uploads/", nil, 0)
		if rec.Code != http.StatusAccepted || rec.Header().Get("Location") == "" {
			t.Fatalf("starting an upload: %d %s", rec.Code, rec.Body.String())
		}
		return rec.Header().Get("Location")
	}
	const held = MaxOpenUploads / MaxBlobUpload
	var writers []*io.PipeWriter
	var wg sync.WaitGroup
	for range held {
		loc := start()
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		wg.Go(func() { do(http.MethodPatch, loc, pr, -1) })
	}
	reserved := func() int64 {
		reg.uploads.mu.Lock()
		defer reg.uploads.mu.Unlock()
		return reg.uploads.total
	}
	for deadline := time.Now().Add(time.Minute); reserved() != MaxOpenUploads; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d uploads under way reserved %d bytes, want %d", held, reserved(), MaxOpenUploads)
		}
	}
	read := &countingReader{r: strings.NewReader("x")}
	if rec := do(http.MethodPatch, start(), read, 1); rec.Code != http.StatusRequestEntityTooLarge || read.n != 0 {
		t.Errorf("a byte beside %d uploads under way that reserved 1 GiB: %d %s after reading %d bytes, want 413 before the body", held, rec.Code, rec.Body.String(), read.n)
	}
	for _, pw := range writers {
		pw.Close()
	}
	wg.Wait()
	// The held uploads read nothing: their reservations are given back.
	if rec := do(http.MethodPatch, start(), strings.NewReader("x"), 1); rec.Code != http.StatusAccepted {
		t.Errorf("a byte once the uploads ended empty: %d %s", rec.Code, rec.Body.String())
	}
}

// pushRequest serves a request with the registry's push credentials and
// the body length declared.
func pushRequest(reg *Registry) func(method, path string, body io.Reader, length int64) *httptest.ResponseRecorder {
	return func(method, path string, body io.Reader, length int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, body)
		req.ContentLength = length
		req.SetBasicAuth(reg.Username, reg.Password)
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, req)
		return rec
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// An image index journaled under its digest, which sorts before one of
// its children's, survives a restart: the journal is replayed in passes
// until no entry is left that a pass could restore.
func TestAnIndexSurvivesARestartWhateverItsDigest(t *testing.T) {
	dir := t.TempDir()
	reg, srv, host := serve(t, dir)
	var idx v1.ImageIndex
	for idx == nil {
		candidate, err := random.Index(512, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := candidate.Digest()
		m, err := candidate.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, child := range m.Manifests {
			if d.String() < child.Digest.String() {
				idx = candidate
			}
		}
	}
	digest, _ := idx.Digest()
	ref, _ := name.ParseReference(host + "/ocp/multi@" + digest.String())
	if err := remote.WriteIndex(ref, idx, pusher(reg)); err != nil {
		t.Fatal(err)
	}
	srv.Close()

	again, _, host := serve(t, dir)
	if len(again.Warnings) > 0 {
		t.Errorf("the restart set entries aside: %v", again.Warnings)
	}
	ref, _ = name.ParseReference(host + "/ocp/multi@" + digest.String())
	got, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("the index after the restart: %v", err)
	}
	if d, _ := got.Digest(); d != digest {
		t.Errorf("the index is %s after the restart, pushed %s", d, digest)
	}
}

// A tag may end in ".type", as an older journal's media-type file did:
// a tag v1 and a tag v1.type, two images, both come back after a
// restart, each with its own manifest.
func TestATagEndingInTypeSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	reg, srv, host := serve(t, dir)
	digests := map[string]v1.Hash{}
	for _, tag := range []string{"v1", "v1.type"} {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := name.ParseReference(host + "/ocp/release:" + tag)
		if err := remote.Write(ref, img, pusher(reg)); err != nil {
			t.Fatal(err)
		}
		digests[tag], _ = img.Digest()
	}
	srv.Close()
	again, _, host := serve(t, dir)
	if len(again.Warnings) > 0 {
		t.Errorf("the restart set entries aside: %v", again.Warnings)
	}
	for tag, want := range digests {
		ref, _ := name.ParseReference(host + "/ocp/release:" + tag)
		desc, err := remote.Get(ref)
		if err != nil {
			t.Fatalf("%s after the restart: %v", tag, err)
		}
		if desc.Digest != want || !strings.Contains(string(desc.MediaType), "manifest") {
			t.Errorf("%s after the restart: %s (%s), want %s", tag, desc.Digest, desc.MediaType, want)
		}
	}
}
