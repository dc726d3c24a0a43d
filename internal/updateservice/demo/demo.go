// Package demo is the update graph capstan up serves out of the box: the
// releases 4.10.22 to 4.10.26 and 4.11.0 and the graph data of the CVO
// chapter's example (channel fast-4.11; 4.11.0 a conditional update with
// the risk RPMOSTreeTimeout).
package demo

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/updateservice"
)

//go:embed graph-data
var graphData embed.FS

// Versions are the demo releases, oldest first.
var Versions = []string{"4.10.22", "4.10.23", "4.10.24", "4.10.25", "4.10.26", "4.11.0"}

// WriteGraphData writes the demo graph-data directory to dir.
func WriteGraphData(dir string) error {
	return fs.WalkDir(graphData, "graph-data", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("graph-data", path)
		target := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		raw, err := graphData.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, raw, 0o644)
	})
}

// Built is a demo release written to a repository.
type Built struct {
	Version string
	Ref     release.Ref
	Digest  v1.Hash
}

// BuildReleases builds the demo releases and writes each to
// repo:<version>-x86_64 (repo is a registry repository, or oci:DIR).
// Every release updates from each earlier one of its own or the previous
// minor, as the real 4.10 and 4.11 streams do. Each carries the CVO's own
// manifests and the demo Operators at their run levels, and v's
// verification manifest (none when v is nil).
func BuildReleases(ctx context.Context, repo string, v *Verification) ([]Built, error) {
	return BuildVersions(ctx, repo, Versions, v)
}

// BuildVersions builds releases of the given versions, oldest first, as
// the demo releases are built: each updates from every one before it and
// carries the CVO's manifests and the demo Operators. A simulation builds
// the release a cluster runs and the one it would update to this way.
func BuildVersions(ctx context.Context, repo string, versions []string, v *Verification) ([]Built, error) {
	tmp, err := os.MkdirTemp("", "capstan-demo-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	created := time.Date(2022, 7, 1, 0, 0, 0, 0, time.UTC)
	var out []Built
	for i, version := range versions {
		meta := release.Metadata{Version: version, Previous: append([]string(nil), versions[:i]...),
			Metadata: map[string]string{release.URLMetadata: fmt.Sprintf("https://access.redhat.com/errata/RHBA-2022:%04d", 5000+i)}}
		src := filepath.Join(tmp, version)
		if err := WriteSource(src, version, Operators, v); err != nil {
			return nil, err
		}
		p, err := release.LoadDir(src, meta)
		if err != nil {
			return nil, err
		}
		img, err := release.Build(p, release.BuildOptions{Created: created.Add(time.Duration(i) * 24 * time.Hour)})
		if err != nil {
			return nil, err
		}
		ref, err := release.ParseRef(repo + ":" + version + "-x86_64")
		if err != nil {
			return nil, err
		}
		digest, err := release.Write(ctx, ref, img)
		if err != nil {
			return nil, err
		}
		out = append(out, Built{Version: version, Ref: ref, Digest: digest})
	}
	return out, nil
}

// Service builds the demo releases into an OCI layout under dir, writes
// the demo graph data there, and loads an update service over both.
func Service(ctx context.Context, dir string) (*updateservice.Service, []Built, error) {
	repo := "oci:" + filepath.Join(dir, "releases")
	built, err := BuildReleases(ctx, repo, nil)
	if err != nil {
		return nil, nil, err
	}
	data := filepath.Join(dir, "graph-data")
	if err := WriteGraphData(data); err != nil {
		return nil, nil, err
	}
	svc, err := updateservice.New(ctx, repo, data)
	return svc, built, err
}
