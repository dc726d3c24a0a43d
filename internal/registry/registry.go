// Package registry is the OCI registry capstan up embeds: the
// go-containerregistry registry, with its blobs in files and every
// manifest pushed kept in a journal that is replayed at start, so that
// what was pushed survives a restart.
package registry

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
)

// Registry serves the OCI distribution API from a directory.
type Registry struct {
	handler http.Handler
	dir     string
	mu      sync.Mutex
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

func (r *Registry) journalPath(repo, ref string) string {
	return filepath.Join(r.dir, "manifests", filepath.FromSlash(repo), "_refs", ref)
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
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".type") || strings.HasSuffix(path, ".tmp") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		repo, ref, ok := strings.Cut(filepath.ToSlash(rel), "/_refs/")
		if !ok {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mt, err := os.ReadFile(path + ".type")
		if err != nil {
			return fmt.Errorf("registry journal %s: %w", path, err)
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
	for _, e := range entries {
		req := httptest.NewRequest(http.MethodPut, "/v2/"+e.repo+"/manifests/"+e.ref, bytes.NewReader(e.body))
		req.Header.Set("Content-Type", e.mediaType)
		rec := httptest.NewRecorder()
		r.handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			return fmt.Errorf("registry journal: restoring %s:%s: %d %s", e.repo, e.ref, rec.Code, rec.Body.String())
		}
	}
	return nil
}

// manifestTarget splits /v2/<repo>/manifests/<ref>.
func manifestTarget(path string) (repo, ref string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndex(rest, "/manifests/")
	if i <= 0 {
		return "", "", false
	}
	repo, ref = rest[:i], rest[i+len("/manifests/"):]
	if ref == "" || strings.Contains(ref, "/") || strings.Contains(repo, "..") || strings.Contains(ref, "..") {
		return "", "", false
	}
	return repo, ref, true
}

// ServeHTTP serves the registry, journaling manifest pushes and deletes.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	repo, ref, isManifest := manifestTarget(req.URL.Path)
	if !isManifest || (req.Method != http.MethodPut && req.Method != http.MethodDelete) {
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
			http.Error(w, "manifest unreadable or larger than 4 MiB", http.StatusBadRequest)
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
			http.Error(w, "registry journal: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// journal records a pushed manifest under its reference and its digest.
func (r *Registry) journal(repo, ref, mediaType string, body []byte, digest string) error {
	refs := []string{ref}
	if digest != "" && digest != ref {
		refs = append(refs, digest)
	}
	for _, name := range refs {
		p := r.journalPath(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writeAtomic(p+".type", []byte(mediaType)); err != nil {
			return err
		}
		if err := writeAtomic(p, body); err != nil {
			return err
		}
	}
	return nil
}

func (r *Registry) forget(repo, ref string) error {
	p := r.journalPath(repo, ref)
	for _, f := range []string{p, p + ".type"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
