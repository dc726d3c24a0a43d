// Package registry is the OCI registry capstan up embeds: the
// go-containerregistry registry, with its blobs in files and every
// manifest pushed kept in a journal that is replayed at start, so that
// what was pushed survives a restart. Pushes need the registry's
// credentials (HTTP basic); pulls need them too, except from loopback,
// as a disconnected mirror serves its own host.
package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	ggcr "github.com/google/go-containerregistry/pkg/registry"

	"github.com/capstan-dev/capstan/internal/atomicfile"
)

// Registry serves the OCI distribution API from a directory.
type Registry struct {
	handler http.Handler
	dir     string
	mu      sync.Mutex
	uploads uploads
	// Username and Password are the credentials every push needs.
	Username, Password string
	// Warnings are the journal entries Open could not restore: each was
	// set aside under rejected/ and the rest was served.
	Warnings []string
}

// maxManifest bounds a manifest pushed (the distribution spec's 4 MiB).
const maxManifest = 4 << 20

// Open serves the registry kept in dir, replaying its manifests.
func Open(dir string) (*Registry, error) {
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	r := &Registry{dir: dir, handler: ggcr.New(
		ggcr.WithBlobHandler(ggcr.NewDiskBlobHandler(blobs)),
		ggcr.Logger(log.New(io.Discard, "", 0)),
	)}
	var err error
	if r.Username, r.Password, err = loadOrCreateCredentials(filepath.Join(dir, CredentialsFile)); err != nil {
		return nil, err
	}
	if err := r.replay(); err != nil {
		return nil, err
	}
	return r, nil
}

// entry is a journaled manifest: repository, reference, media type.
type entry struct {
	repo, ref, mediaType string
	body                 []byte
}

// A manifest is journaled as manifests/REPO/_refs/REF (its body) and
// manifests/REPO/_types/REF (its media type): a valid repository has no
// component starting with "_", and a reference may end in anything a
// tag may (".type" too). Data dirs of older capstans kept the media type
// beside the body, in _refs/REF.type, which is still read.
func (r *Registry) journalPath(repo, ref string) string {
	return filepath.Join(r.dir, "manifests", filepath.FromSlash(repo), "_refs", ref)
}

func (r *Registry) typePath(repo, ref string) string {
	return filepath.Join(r.dir, "manifests", filepath.FromSlash(repo), "_types", ref)
}

// oldSidecar reports whether a _refs file is an older capstan's media
// type beside another reference's body, rather than a tag of its own.
func (r *Registry) oldSidecar(repo, ref string) bool {
	base, ok := strings.CutSuffix(ref, ".type")
	if !ok {
		return false
	}
	if _, err := os.Stat(r.typePath(repo, ref)); err == nil {
		return false
	}
	_, err := os.Stat(r.journalPath(repo, base))
	return err == nil
}

// replay pushes every journaled manifest again, those named by digest
// before tags (an index needs its manifests first).
func (r *Registry) replay() error {
	root := filepath.Join(r.dir, "manifests")
	var entries []entry
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		// A name starting with "." is a write a crash cut short
		// (atomicfile's temporary file): no reference starts so.
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		// A valid repository has no component starting with "_", so the
		// last "/_refs/" is the separator whatever the name.
		i := strings.LastIndex(rel, "/_refs/")
		if i < 0 {
			return nil
		}
		repo, ref := rel[:i], rel[i+len("/_refs/"):]
		if r.oldSidecar(repo, ref) {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mt, err := os.ReadFile(r.typePath(repo, ref))
		if errors.Is(err, fs.ErrNotExist) {
			mt, err = os.ReadFile(path + ".type")
		}
		if err != nil {
			r.reject(path, fmt.Sprintf("%s:%s has no media type: %v", repo, ref, err))
			return nil
		}
		entries = append(entries, entry{repo: repo, ref: ref, mediaType: string(mt), body: body})
		return nil
	})
	if err != nil {
		return err
	}
	sort.SliceStable(entries, func(i, j int) bool {
		return strings.HasPrefix(entries[i].ref, "sha256:") && !strings.HasPrefix(entries[j].ref, "sha256:")
	})
	var pending []entry
	for _, e := range entries {
		path := r.journalPath(e.repo, e.ref)
		if err := validName(e.repo, e.ref); err != nil {
			r.reject(path, err.Error())
			continue
		}
		if err := matchesDigest(e.ref, e.body); err != nil {
			r.reject(path, fmt.Sprintf("%s: %v", e.repo, err))
			continue
		}
		pending = append(pending, e)
	}
	// An index is refused until the manifests it lists are there, and
	// the journal's order (digests, then tags, each by name) is not the
	// order they were pushed in: entries are pushed again, pass after
	// pass, while a pass restores any; what is left is set aside.
	failed := map[string]string{}
	for len(pending) > 0 {
		var next []entry
		for _, e := range pending {
			req := httptest.NewRequest(http.MethodPut, "/v2/"+e.repo+"/manifests/"+e.ref, bytes.NewReader(e.body))
			req.Header.Set("Content-Type", e.mediaType)
			rec := httptest.NewRecorder()
			r.handler.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				failed[e.repo+":"+e.ref] = fmt.Sprintf("restoring %s:%s: %d %s", e.repo, e.ref, rec.Code, strings.TrimSpace(rec.Body.String()))
				next = append(next, e)
			}
		}
		if len(next) == len(pending) {
			break
		}
		pending = next
	}
	for _, e := range pending {
		r.reject(r.journalPath(e.repo, e.ref), failed[e.repo+":"+e.ref])
	}
	return nil
}

// reject sets a journal entry that cannot be restored aside, under
// rejected/ with its path, so that the rest of the registry opens (and
// the entry is kept for whoever wants to look at it).
func (r *Registry) reject(path, why string) {
	rel, err := filepath.Rel(filepath.Join(r.dir, "manifests"), path)
	if err != nil {
		rel = filepath.Base(path)
	}
	to := filepath.Join(r.dir, "rejected", rel)
	// Its media type goes with it: _types/REF, or an older capstan's
	// _refs/REF.type when there is no _types/REF.
	moves := map[string]string{path: to}
	if i := strings.LastIndex(path, string(filepath.Separator)+"_refs"+string(filepath.Separator)); i >= 0 {
		typ := path[:i] + string(filepath.Separator) + "_types" + path[i+len("/_refs"):]
		if _, err := os.Stat(typ); err == nil {
			moves[typ] = to + ".type"
		} else {
			moves[path+".type"] = to + ".type"
		}
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err == nil {
		for from, dest := range moves {
			if err := os.Rename(from, dest); err != nil && !errors.Is(err, fs.ErrNotExist) {
				why += fmt.Sprintf(" (and it could not be set aside: %v)", err)
			}
		}
	}
	r.Warnings = append(r.Warnings, "registry journal: "+why+"; set aside in "+to)
}

// The distribution spec's grammar of repository names, tags and digests.
var (
	repoName  = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagName   = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	digestRef = regexp.MustCompile(`^[a-z0-9]+([+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
)

// validName checks a repository name and, unless empty, a reference (a
// tag or a digest) against the distribution spec, so that nothing named
// otherwise is served, journaled or replayed.
func validName(repo, ref string) error {
	if len(repo) > 255 || !repoName.MatchString(repo) {
		return fmt.Errorf("invalid repository name %q: lowercase letters and digits in /-separated components, joined by '.', '_', '__' or '-'", repo)
	}
	if ref != "" && !tagName.MatchString(ref) && !digestRef.MatchString(ref) {
		return fmt.Errorf("invalid reference %q of %s: a tag is [A-Za-z0-9_][A-Za-z0-9._-]{0,127}, a digest algorithm:hex", ref, repo)
	}
	return nil
}

// matchesDigest checks that a manifest named by a sha256 digest hashes to
// it (the registry library stores it under the name it is given).
func matchesDigest(ref string, body []byte) error {
	hex, ok := strings.CutPrefix(ref, "sha256:")
	if !ok {
		return nil
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(body)); got != hex {
		return fmt.Errorf("manifest %s hashes to sha256:%s", ref, got)
	}
	return nil
}

// target splits /v2/<repo>/manifests/<ref>, /v2/<repo>/blobs/..., and
// /v2/<repo>/tags/list: the repository any request names, and the
// manifest reference (ref) of a manifest request.
func target(path string) (repo, ref string, manifest, ok bool) {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return "", "", false, false
	}
	// An empty repository (/v2//manifests/x) is named too, and refused
	// as a name: the library would serve it, and nothing could journal it.
	for _, kind := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if i := strings.LastIndex(rest, kind); i >= 0 {
			if kind == "/manifests/" {
				return rest[:i], rest[i+len(kind):], true, true
			}
			return rest[:i], "", false, true
		}
	}
	return "", "", false, false
}

// ServeHTTP serves the registry, journaling manifest pushes and deletes.
// A name outside the distribution grammar is refused before anything is
// served or written. A push is journaled before it is acknowledged: a
// kill before the answer loses only a push nobody was told had worked.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !r.authorized(req) {
		w.Header().Set("WWW-Authenticate", `Basic realm="capstan registry"`)
		writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required: pushes, and pulls from other hosts, need the registry's credentials")
		return
	}
	repo, ref, isManifest, named := target(req.URL.Path)
	if named {
		if isManifest && ref == "" {
			writeError(w, http.StatusBadRequest, "NAME_INVALID", "a manifest request names a tag or a digest: /v2/<name>/manifests/<reference>")
			return
		}
		if err := validName(repo, ref); err != nil {
			writeError(w, http.StatusBadRequest, "NAME_INVALID", err.Error())
			return
		}
	}
	if !isManifest {
		r.uploads.serve(w, req, r.handler)
		return
	}
	if req.Method != http.MethodPut && req.Method != http.MethodDelete {
		r.handler.ServeHTTP(w, req)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var body []byte
	if req.Method == http.MethodPut {
		var err error
		body, err = io.ReadAll(io.LimitReader(req.Body, maxManifest+1))
		if err != nil || len(body) > maxManifest {
			writeError(w, http.StatusBadRequest, "MANIFEST_INVALID", "manifest unreadable or larger than 4 MiB")
			return
		}
		if err := matchesDigest(ref, body); err != nil {
			writeError(w, http.StatusBadRequest, "DIGEST_INVALID", err.Error())
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	rec := httptest.NewRecorder()
	r.handler.ServeHTTP(rec, req)
	if rec.Code/100 == 2 {
		var err error
		if req.Method == http.MethodPut {
			err = r.journal(repo, ref, req.Header.Get("Content-Type"), body, rec.Header().Get("Docker-Content-Digest"))
		} else {
			err = r.forget(repo, ref)
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "UNKNOWN", "registry journal: "+err.Error())
			return
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// writeError answers in the distribution spec's error format.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}

// journal records a pushed manifest under its reference and its digest.
func (r *Registry) journal(repo, ref, mediaType string, body []byte, digest string) error {
	refs := []string{ref}
	if digest != "" && digest != ref {
		refs = append(refs, digest)
	}
	for _, name := range refs {
		// The media type first: a body is replayed only with one.
		if err := atomicfile.Write(r.typePath(repo, name), []byte(mediaType), 0o644); err != nil {
			return err
		}
		if err := atomicfile.Write(r.journalPath(repo, name), body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (r *Registry) forget(repo, ref string) error {
	p := r.journalPath(repo, ref)
	for _, f := range []string{p, r.typePath(repo, ref), p + ".type"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
