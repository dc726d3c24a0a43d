package updateservice

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
)

// Node metadata keys the CVO reads.
const (
	ChannelsMetadata    = "io.openshift.upgrades.graph.release.channels"
	ManifestRefMetadata = "io.openshift.upgrades.graph.release.manifestref"
	ArchMetadata        = "release.openshift.io/architecture"
)

// Release is a release image as the service knows it.
type Release struct {
	Version      semver.Version
	Payload      string // pull spec by digest
	Digest       string
	Architecture string // GOARCH of the image
	Previous     []semver.Version
	Next         []semver.Version
	Metadata     map[string]string
}

// Graph is the graph API's response (version 1).
type Graph struct {
	Version          int               `json:"version"`
	Nodes            []Node            `json:"nodes"`
	Edges            [][2]int          `json:"edges"`
	ConditionalEdges []ConditionalEdge `json:"conditionalEdges"`
}

// Node is a release in the graph.
type Node struct {
	Version  string            `json:"version"`
	Payload  string            `json:"payload"`
	Metadata map[string]string `json:"metadata"`
}

// ConditionalEdge is a group of edges sharing the same risks.
type ConditionalEdge struct {
	Edges []Edge `json:"edges"`
	Risks []Risk `json:"risks"`
}

// Edge is a conditional edge's endpoints, by version.
type Edge struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Risk is a known issue of an update.
type Risk struct {
	URL           string         `json:"url"`
	Name          string         `json:"name"`
	Message       string         `json:"message"`
	MatchingRules []MatchingRule `json:"matchingRules"`
}

// channelsOf lists, for each version, the channels that hold it.
func (g *GraphData) channelsOf() map[string][]string {
	out := map[string][]string{}
	for name, versions := range g.Channels {
		for _, v := range versions {
			out[v.String()] = append(out[v.String()], name)
		}
	}
	for _, list := range out {
		sort.Strings(list)
	}
	return out
}

// Build computes the graph a cluster in channel on arch is served: the
// channel's releases of that architecture, the edges their metadata
// declares (previous and next), less the blocked ones; blocked edges with
// matching rules become conditional edges carrying their risks.
func Build(releases []Release, data *GraphData, channel, arch string) *Graph {
	g := &Graph{Version: 1, Nodes: []Node{}, Edges: [][2]int{}, ConditionalEdges: []ConditionalEdge{}}
	inChannel := map[string]bool{}
	for _, v := range data.Channels[channel] {
		inChannel[v.String()] = true
	}
	channels := data.channelsOf()
	var kept []Release
	for _, r := range releases {
		if inChannel[r.Version.String()] && (r.Architecture == arch || arch == "") {
			kept = append(kept, r)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Version.LT(kept[j].Version) })
	index := map[string]int{}
	for i, r := range kept {
		index[r.Version.String()] = i
		meta := map[string]string{}
		for k, v := range r.Metadata {
			meta[k] = v
		}
		meta[ChannelsMetadata] = strings.Join(channels[r.Version.String()], ",")
		if r.Digest != "" {
			meta[ManifestRefMetadata] = r.Digest
		}
		g.Nodes = append(g.Nodes, Node{Version: r.Version.String(), Payload: r.Payload, Metadata: meta})
	}
	// Every declared edge between two kept releases, once.
	type edge struct{ from, to int }
	seen := map[edge]bool{}
	var edges []edge
	add := func(from, to string) {
		f, ok1 := index[from]
		t, ok2 := index[to]
		if !ok1 || !ok2 || f == t {
			return
		}
		if e := (edge{f, t}); !seen[e] {
			seen[e] = true
			edges = append(edges, e)
		}
	}
	for _, r := range kept {
		for _, p := range r.Previous {
			add(p.String(), r.Version.String())
		}
		for _, n := range r.Next {
			add(r.Version.String(), n.String())
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].from != edges[j].from {
			return edges[i].from < edges[j].from
		}
		return edges[i].to < edges[j].to
	})
	// Blocked edges: dropped, or risks accumulated per edge.
	risks := map[edge][]Risk{}
	dropped := map[edge]bool{}
	for _, b := range data.Blocked {
		for _, e := range edges {
			if kept[e.to].Version.String() != b.To.String() || !b.From.MatchString(kept[e.from].Version.String()) {
				continue
			}
			if len(b.MatchingRules) == 0 {
				dropped[e] = true
				continue
			}
			risks[e] = append(risks[e], Risk{URL: b.URL, Name: b.Name, Message: b.Message, MatchingRules: b.MatchingRules})
		}
	}
	groups := map[string]int{}
	for _, e := range edges {
		switch {
		case dropped[e]:
		case len(risks[e]) > 0:
			key := riskKey(risks[e])
			i, ok := groups[key]
			if !ok {
				i = len(g.ConditionalEdges)
				groups[key] = i
				g.ConditionalEdges = append(g.ConditionalEdges, ConditionalEdge{Risks: risks[e]})
			}
			g.ConditionalEdges[i].Edges = append(g.ConditionalEdges[i].Edges, Edge{From: kept[e.from].Version.String(), To: kept[e.to].Version.String()})
		default:
			g.Edges = append(g.Edges, [2]int{e.from, e.to})
		}
	}
	return g
}

// riskKey identifies a list of risks, for grouping edges that share it.
func riskKey(rs []Risk) string {
	raw, _ := json.Marshal(rs)
	return string(raw)
}
