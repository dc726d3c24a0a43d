package updateservice_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/blang/semver/v4"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/fuzzseed"
	"github.com/capstan-dev/capstan/internal/updateservice"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// FuzzGraphData writes an arbitrary channel file and blocked edge into a
// graph-data directory. Loading it is an error or a graph-data the
// service can serve, and every graph it serves is one the CVO reads for
// every release in it.
func FuzzGraphData(f *testing.F) {
	channels := fuzzseed.Read(f, "demo/graph-data/channels")
	blocked := fuzzseed.Read(f, "demo/graph-data/blocked-edges")
	for i, c := range channels {
		f.Add(c, blocked[i%len(blocked)])
	}
	f.Add([]byte("name: fast-4.11\nversions: [4.10.22, 4.11.0]\n"), []byte("to: 4.11.0\nfrom: .*\n"))
	var releases []updateservice.Release
	for _, v := range demo.Versions {
		releases = append(releases, updateservice.Release{Version: semver.MustParse(v), Architecture: "amd64",
			Payload: "registry.capstan.local/ocp/release@sha256:" + v})
	}
	f.Fuzz(func(t *testing.T, channel, edge []byte) {
		dir := t.TempDir()
		for name, raw := range map[string][]byte{"channels/fast-4.11.yaml": channel, "blocked-edges/edge.yaml": edge} {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		data, err := updateservice.LoadGraphData(dir)
		if err != nil {
			if data != nil {
				t.Fatalf("LoadGraphData returned graph data with its error %v", err)
			}
			return
		}
		g := updateservice.Build(releases, data, "fast-4.11", "amd64")
		body, err := json.Marshal(g)
		if err != nil {
			t.Fatalf("the graph does not marshal: %v", err)
		}
		for _, n := range g.Nodes {
			v, err := semver.Parse(n.Version)
			if err != nil {
				t.Fatalf("node version %q: %v", n.Version, err)
			}
			if _, err := cvo.ParseGraph(body, v, "fast-4.11"); err != nil {
				t.Fatalf("the CVO cannot read the served graph for %s: %v\n%s", v, err, body)
			}
		}
	})
}
