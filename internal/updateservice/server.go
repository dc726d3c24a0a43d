package updateservice

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver/v4"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/release"
)

// GraphPaths are where the graph API answers: Cincinnati's own paths and
// the api.openshift.com ones the CVO defaults to.
var GraphPaths = []string{"/graph", "/v1/graph", "/api/upgrades_info/graph", "/api/upgrades_info/v1/graph"}

// Media types the graph is served as.
const (
	mediaJSON        = "application/json"
	mediaCincinnati  = "application/vnd.redhat.cincinnati.v1+json"
	defaultArch      = "amd64"
	mandatoryChannel = "channel"
)

// SkippedImageReason is the reason of the warning event for an image of
// the release repository that is not a release.
const SkippedImageReason = "ReleaseImageSkipped"

// ReadReleases reads every release image of a repository (a registry
// repository, or an OCI layout as oci:DIR): its version, previous, next,
// metadata and digest. An image that cannot be read as a release is
// skipped, as Cincinnati's graph-builder skips it: each is one error of
// skipped, naming the image. known holds releases read before, by digest:
// an image listed under a known digest is not read again.
func ReadReleases(ctx context.Context, repo string, known map[string]Release) (releases []Release, skipped []error, err error) {
	type listed struct {
		ref    release.Ref
		digest string
	}
	var refs []listed
	if dir, ok := strings.CutPrefix(repo, "oci:"); ok {
		layoutRefs, err := release.LayoutRefs(dir)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range layoutRefs {
			refs = append(refs, listed{ref: r, digest: r.Digest()})
		}
	} else {
		r, err := name.NewRepository(repo, name.WeakValidation)
		if err != nil {
			return nil, nil, fmt.Errorf("%q is not a repository: %w", repo, err)
		}
		opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(release.Keychain(ctx))}
		tags, err := remote.List(r, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", repo, err)
		}
		for _, t := range tags {
			l := listed{ref: release.Ref{Registry: r.Tag(t)}}
			if d, err := remote.Head(r.Tag(t), opts...); err == nil {
				l.digest = d.Digest.String()
			}
			refs = append(refs, l)
		}
	}
	byDigest := map[string]bool{}
	for _, l := range refs {
		if r, ok := known[l.digest]; ok && l.digest != "" {
			if !byDigest[l.digest] {
				byDigest[l.digest] = true
				releases = append(releases, r)
			}
			continue
		}
		r, err := readRelease(ctx, l.ref)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			what := l.ref.String()
			if l.ref.Digest() == "" && l.digest != "" {
				what += " (" + l.digest + ")"
			}
			skipped = append(skipped, fmt.Errorf("skipping %s: %w", what, err))
			continue
		}
		if byDigest[r.Digest] {
			continue
		}
		byDigest[r.Digest] = true
		releases = append(releases, r)
	}
	return releases, skipped, nil
}

// readRelease reads one release image's metadata.
func readRelease(ctx context.Context, ref release.Ref) (Release, error) {
	img, err := release.Read(ctx, ref)
	if err != nil {
		return Release{}, err
	}
	m := img.Payload.Metadata
	r := Release{Payload: img.PullSpec, Digest: img.Digest.String(), Architecture: img.Config.Architecture, Metadata: m.Metadata}
	if r.Version, err = semver.Parse(m.Version); err != nil {
		return Release{}, fmt.Errorf("version %q: %w", m.Version, err)
	}
	for _, list := range []struct {
		in  []string
		out *[]semver.Version
	}{{m.Previous, &r.Previous}, {m.Next, &r.Next}} {
		for _, s := range list.in {
			v, err := semver.Parse(s)
			if err != nil {
				return Release{}, fmt.Errorf("release-metadata %q: %w", s, err)
			}
			*list.out = append(*list.out, v)
		}
	}
	return r, nil
}

// Service serves the graph of one repository of releases and one
// graph-data directory. Both are loaded whole before they are served: a
// reload that fails keeps what was served before.
type Service struct {
	repo, graphData string

	mu       sync.RWMutex
	releases []Release
	data     *GraphData
	// skipped are the images of the last reload that are not releases;
	// warned, those already logged.
	skipped []string
	warned  map[string]bool
	warn    func(string)
}

// OnSkip calls warn, once each, for every image of the repository left
// out of the graph because it is not a release: those of the last reload
// now, and each new one as a reload finds it.
func (s *Service) OnSkip(warn func(string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.warn = warn
	for _, msg := range s.skipped {
		warn(msg)
	}
}

// New loads the releases and the graph data; an error names what is
// wrong (a malformed graph-data file with its file and line).
func New(ctx context.Context, repo, graphData string) (*Service, error) {
	s := &Service{repo: repo, graphData: graphData}
	if err := s.Reload(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the releases and the graph data again.
func (s *Service) Reload(ctx context.Context) error {
	data, err := LoadGraphData(s.graphData)
	if err != nil {
		return err
	}
	s.mu.RLock()
	known := make(map[string]Release, len(s.releases))
	for _, r := range s.releases {
		known[r.Digest] = r
	}
	s.mu.RUnlock()
	releases, skipped, err := ReadReleases(ctx, s.repo, known)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases, s.data, s.skipped = releases, data, nil
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	for _, e := range skipped {
		s.skipped = append(s.skipped, e.Error())
		if !s.warned[e.Error()] {
			s.warned[e.Error()] = true
			klog.FromContext(ctx).Info("Warning: an image of the release repository is not a release; it is left out of the graph", "repository", s.repo, "err", e)
			if s.warn != nil {
				s.warn(e.Error())
			}
		}
	}
	return nil
}

// Skipped lists the images of the repository that the last reload left
// out of the graph, each with why.
func (s *Service) Skipped() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]string(nil), s.skipped...)
}

// Run reloads every interval until ctx ends, keeping the last good state
// when a reload fails.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Reload(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Reloading the update graph; still serving the previous one")
			}
		}
	}
}

type apiError struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

func writeError(w http.ResponseWriter, status int, kind, value string) {
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Kind: kind, Value: value})
}

// negotiate picks the response media type from Accept, or "".
func negotiate(accept string) string {
	if strings.TrimSpace(accept) == "" {
		return mediaJSON
	}
	for _, part := range strings.Split(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case mediaJSON, "*/*", "application/*":
			return mediaJSON
		case mediaCincinnati:
			return mediaCincinnati
		}
	}
	return ""
}

// ServeHTTP answers the graph API: GET with channel (mandatory), arch
// (default amd64), and the informational version and id.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "invalid_method", "only GET and HEAD are served")
		return
	}
	known := false
	for _, p := range GraphPaths {
		known = known || r.URL.Path == p
	}
	if !known {
		writeError(w, http.StatusNotFound, "does_not_exist", "no such path: "+r.URL.Path)
		return
	}
	media := negotiate(r.Header.Get("Accept"))
	if media == "" {
		writeError(w, http.StatusNotAcceptable, "invalid_content_type", "accept "+mediaJSON+" or "+mediaCincinnati)
		return
	}
	q := r.URL.Query()
	channel := q.Get("channel")
	if channel == "" {
		writeError(w, http.StatusBadRequest, "missing_params", "mandatory client parameters missing: "+mandatoryChannel)
		return
	}
	arch := q.Get("arch")
	if arch == "" {
		arch = defaultArch
	}
	if v := q.Get("version"); v != "" {
		if _, err := semver.Parse(v); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_params", fmt.Sprintf("version %q: %v", v, err))
			return
		}
	}
	s.mu.RLock()
	g := Build(s.releases, s.data, channel, arch)
	s.mu.RUnlock()
	w.Header().Set("Content-Type", media)
	_ = json.NewEncoder(w).Encode(g)
}
