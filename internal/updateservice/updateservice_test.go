package updateservice_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/updateservice"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// demoService serves the demo releases (in an OCI layout) and graph data,
// plus extra graph-data files.
func demoService(t *testing.T, extra map[string]string) (*updateservice.Service, []demo.Built) {
	t.Helper()
	dir := t.TempDir()
	s, built, err := demo.Service(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(extra) == 0 {
		return s, built
	}
	for name, content := range extra {
		if err := os.WriteFile(filepath.Join(dir, "graph-data", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, built
}

func get(t *testing.T, s http.Handler, url, accept string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec.Result(), rec.Body.Bytes()
}

func graphOf(t *testing.T, s http.Handler, channel string) *updateservice.Graph {
	t.Helper()
	return graphFor(t, s, "arch=amd64&channel="+channel+"&id=e2d2f3f5-0f1c-4a4e-9c53-6c3b3b8a0d11&version=4.10.22")
}

func graphFor(t *testing.T, s http.Handler, query string) *updateservice.Graph {
	t.Helper()
	resp, body := get(t, s, "/api/upgrades_info/v1/graph?"+query, "application/json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("graph for %s: %s %s: %s", query, resp.Status, resp.Header.Get("Content-Type"), body)
	}
	var g updateservice.Graph
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// targets lists the versions reachable in one edge from version.
func targets(g *updateservice.Graph, version string) []string {
	var out []string
	for _, e := range g.Edges {
		if g.Nodes[e[0]].Version == version {
			out = append(out, g.Nodes[e[1]].Version)
		}
	}
	return out
}

func TestChapterGraph(t *testing.T) {
	s, built := demoService(t, nil)
	g := graphOf(t, s, "fast-4.11")
	if g.Version != 1 || len(g.Nodes) != 6 {
		t.Fatalf("fast-4.11: version %d, %d nodes, want 1 and 6", g.Version, len(g.Nodes))
	}
	if got := strings.Join(targets(g, "4.10.22"), ","); got != "4.10.23,4.10.24,4.10.25,4.10.26" {
		t.Errorf("recommended from 4.10.22: %s", got)
	}
	n := g.Nodes[0]
	if n.Version != "4.10.22" || n.Payload != built[0].Ref.String()[:strings.LastIndex(built[0].Ref.String(), ":")]+"@"+built[0].Digest.String() {
		t.Errorf("node 0: %+v (built %s %s)", n, built[0].Ref, built[0].Digest)
	}
	if n.Metadata[updateservice.ChannelsMetadata] != "candidate-4.10,candidate-4.11,eus-4.10,fast-4.10,fast-4.11,stable-4.10" {
		t.Errorf("channels of 4.10.22: %q", n.Metadata[updateservice.ChannelsMetadata])
	}
	if n.Metadata["url"] != "https://access.redhat.com/errata/RHBA-2022:5000" || n.Metadata[updateservice.ManifestRefMetadata] != built[0].Digest.String() {
		t.Errorf("metadata of 4.10.22: %v", n.Metadata)
	}
	if len(g.ConditionalEdges) != 1 {
		t.Fatalf("conditional edges: %+v", g.ConditionalEdges)
	}
	ce := g.ConditionalEdges[0]
	if len(ce.Edges) != 5 || ce.Edges[0] != (updateservice.Edge{From: "4.10.22", To: "4.11.0"}) {
		t.Errorf("conditional edges to 4.11.0: %+v", ce.Edges)
	}
	if len(ce.Risks) != 1 || ce.Risks[0].Name != "RPMOSTreeTimeout" || ce.Risks[0].MatchingRules[0].Type != "PromQL" ||
		!strings.Contains(ce.Risks[0].MatchingRules[0].PromQL.PromQL, "cluster_infrastructure_provider") {
		t.Errorf("risks: %+v", ce.Risks)
	}
	for _, e := range g.Edges {
		if g.Nodes[e[1]].Version == "4.11.0" {
			t.Errorf("4.11.0 is also an unconditional edge from %s", g.Nodes[e[0]].Version)
		}
	}
	// Another channel: only its versions; an unknown one: nothing.
	if g := graphOf(t, s, "stable-4.10"); len(g.Nodes) != 5 || len(g.ConditionalEdges) != 0 {
		t.Errorf("stable-4.10: %d nodes, %d conditional edges", len(g.Nodes), len(g.ConditionalEdges))
	}
	if g := graphOf(t, s, "stable-9.9"); len(g.Nodes) != 0 || len(g.Edges) != 0 {
		t.Errorf("an unknown channel served %d nodes", len(g.Nodes))
	}
	if g := graphFor(t, s, "channel=fast-4.11&arch=arm64"); len(g.Nodes) != 0 {
		t.Errorf("arm64 served %d amd64 nodes", len(g.Nodes))
	}
}

func TestBlockedEdges(t *testing.T) {
	s, _ := demoService(t, map[string]string{
		// Without matching rules: the edges are dropped.
		"blocked-edges/4.10.24.yaml": "to: 4.10.24\nfrom: ^4[.]10[.]2[23]$\n",
		// Two risks on the same edges: one group carrying both.
		"blocked-edges/4.11.0-PreRelease.yaml": "to: 4.11.0\nfrom: .*\nurl: https://example.com/pre\nname: PreRelease\nmessage: Not yet GA.\nmatchingRules:\n- type: Always\n",
	})
	g := graphOf(t, s, "fast-4.11")
	if got := strings.Join(targets(g, "4.10.22"), ","); got != "4.10.23,4.10.25,4.10.26" {
		t.Errorf("from 4.10.22 with 4.10.24 blocked: %s", got)
	}
	if got := strings.Join(targets(g, "4.10.23"), ","); got != "4.10.25,4.10.26" {
		t.Errorf("from 4.10.23 with 4.10.24 blocked: %s", got)
	}
	if got := strings.Join(targets(g, "4.10.24"), ","); got != "4.10.25,4.10.26" {
		t.Errorf("from 4.10.24: %s", got)
	}
	if len(g.ConditionalEdges) != 1 || len(g.ConditionalEdges[0].Risks) != 2 || len(g.ConditionalEdges[0].Edges) != 5 {
		t.Fatalf("conditional edges: %+v", g.ConditionalEdges)
	}
	if r := g.ConditionalEdges[0].Risks; r[0].Name != "PreRelease" || r[1].Name != "RPMOSTreeTimeout" || r[0].MatchingRules[0].Type != "Always" {
		t.Errorf("risks in file order: %+v", r)
	}
}

func TestGraphAPIErrors(t *testing.T) {
	s, _ := demoService(t, nil)
	for _, tc := range []struct {
		url, accept string
		status      int
		kind, value string
	}{
		{"/api/upgrades_info/v1/graph?arch=amd64", "application/json", 400, "missing_params", "mandatory client parameters missing: channel"},
		{"/api/upgrades_info/v1/graph?channel=fast-4.11", "text/html", 406, "invalid_content_type", ""},
		{"/api/upgrades_info/v1/graph?channel=fast-4.11&version=4.10", "", 400, "invalid_params", `version "4.10"`},
		{"/nope", "", 404, "does_not_exist", ""},
	} {
		resp, body := get(t, s, tc.url, tc.accept)
		var e struct{ Kind, Value string }
		if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != tc.status || e.Kind != tc.kind || !strings.Contains(e.Value, tc.value) {
			t.Errorf("%s (Accept %q): %d %s, want %d %s %q", tc.url, tc.accept, resp.StatusCode, body, tc.status, tc.kind, tc.value)
		}
	}
	resp, _ := get(t, s, "/graph?channel=fast-4.11", "application/vnd.redhat.cincinnati.v1+json")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/vnd.redhat.cincinnati.v1+json" {
		t.Errorf("cincinnati media type: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestMalformedGraphDataIsRefusedWithFileAndLine(t *testing.T) {
	for name, tc := range map[string]struct{ file, content, want string }{
		"bad version":       {"channels/fast-4.12.yaml", "name: fast-4.12\nversions:\n- 4.12.0\n- 4.12\n", "channels/fast-4.12.yaml: line 4: version \"4.12\""},
		"unknown field":     {"channels/fast-4.12.yaml", "name: fast-4.12\nversion:\n- 4.12.0\n", "channels/fast-4.12.yaml: line 2: field version not found"},
		"name mismatch":     {"channels/fast-4.12.yaml", "name: fast-4.13\nversions: []\n", "does not match the file name"},
		"syntax":            {"channels/fast-4.12.yaml", "name: fast-4.12\nversions: [4.12.0\n", "channels/fast-4.12.yaml: line"},
		"duplicate version": {"channels/fast-4.12.yaml", "name: fast-4.12\nversions:\n- 4.12.0\n- 4.12.0\n", "line 4: version 4.12.0 is listed twice"},
		"bad regexp":        {"blocked-edges/4.10.25.yaml", "to: 4.10.25\nfrom: 4.10.(\n", "blocked-edges/4.10.25.yaml: line 2: from \"4.10.(\" is not a regular expression"},
		"no to":             {"blocked-edges/4.10.25.yaml", "from: .*\n", "blocked-edges/4.10.25.yaml: to is required"},
		"risk without url":  {"blocked-edges/4.10.25-X.yaml", "to: 4.10.25\nfrom: .*\nname: X\nmessage: m\nmatchingRules:\n- type: Always\n", "url is required with matchingRules"},
		"unknown rule type": {"blocked-edges/4.10.25-X.yaml", "to: 4.10.25\nfrom: .*\nurl: https://x\nname: X\nmessage: m\nmatchingRules:\n- type: Sometimes\n", "line 7: matching rule type \"Sometimes\""},
		"rule field typo":   {"blocked-edges/4.10.25-X.yaml", "to: 4.10.25\nfrom: .*\nurl: https://x\nname: X\nmessage: m\nmatchingRules:\n- type: PromQL\n  promql:\n    query: up\n", "line 9: field query not found"},
		"empty promql":      {"blocked-edges/4.10.25-X.yaml", "to: 4.10.25\nfrom: .*\nurl: https://x\nname: X\nmessage: m\nmatchingRules:\n- type: PromQL\n", "line 7: a PromQL rule needs promql.promql"},
	} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "graph-data")
			if err := demo.WriteGraphData(data); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(data, tc.file), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := updateservice.LoadGraphData(data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadGraphData: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// An image of the release repository that is not a release is left out of
// the graph, with why, and the rest is served (review M5: it made the
// service, and so capstan up, fail to start).
func TestAnImageThatIsNotAReleaseIsSkipped(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	repo := "oci:" + filepath.Join(dir, "releases")
	if _, err := demo.BuildReleases(ctx, repo, nil); err != nil {
		t.Fatal(err)
	}
	junk, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Write(ctx, release.Ref{Layout: filepath.Join(dir, "releases"), Tag: "not-a-release"}, junk); err != nil {
		t.Fatal(err)
	}
	if err := demo.WriteGraphData(filepath.Join(dir, "graph-data")); err != nil {
		t.Fatal(err)
	}
	s, err := updateservice.New(ctx, repo, filepath.Join(dir, "graph-data"))
	if err != nil {
		t.Fatalf("the update service with a non-release image in its repository: %v", err)
	}
	junkDigest, _ := junk.Digest()
	skipped := s.Skipped()
	if len(skipped) != 1 || !strings.Contains(skipped[0], "skipping oci:"+filepath.Join(dir, "releases")+"@"+junkDigest.String()+": ") ||
		!strings.Contains(skipped[0], "not a release image") {
		t.Errorf("skipped %q, want the random image, not a release", skipped)
	}
	if g := graphOf(t, s, "fast-4.11"); len(g.Nodes) != len(demo.Versions) {
		t.Errorf("%d nodes served, want the %d releases", len(g.Nodes), len(demo.Versions))
	}
	// Each skipped image is warned of once: those already found when the
	// hook is set, then each new one a reload finds.
	var warned []string
	s.OnSkip(func(msg string) { warned = append(warned, msg) })
	if len(warned) != 1 || warned[0] != skipped[0] {
		t.Errorf("warned %q, want %q", warned, skipped)
	}
	// A reload reads only what it has not read before, and skips again.
	if err := s.Reload(ctx); err != nil || len(s.Skipped()) != 1 || len(warned) != 1 {
		t.Errorf("reload: %v, skipped %q, warned %q", err, s.Skipped(), warned)
	}
	more, err := random.Image(128, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Write(ctx, release.Ref{Layout: filepath.Join(dir, "releases"), Tag: "not-a-release-either"}, more); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(ctx); err != nil || len(s.Skipped()) != 2 || len(warned) != 2 {
		t.Errorf("reload with a second image that is not a release: %v, skipped %q, warned %q", err, s.Skipped(), warned)
	}
}
