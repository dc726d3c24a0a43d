// Package cvo is capstan's Cluster Version Operator: it keeps the
// ClusterVersion "version" — the release the cluster runs, the updates
// the update service recommends and those it offers only with known
// risks — as OpenShift's CVO does.
package cvo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	configv1 "github.com/openshift/api/config/v1"
)

// GraphMediaType is what the CVO accepts from the update service.
const GraphMediaType = "application/json"

// UpdatesError says why updates could not be retrieved, with the
// RetrievedUpdates condition's reason.
type UpdatesError struct {
	Reason  string
	Message string
}

func (e *UpdatesError) Error() string { return e.Reason + ": " + e.Message }

type graph struct {
	Nodes            []graphNode            `json:"nodes"`
	Edges            [][]int                `json:"edges"`
	ConditionalEdges []graphConditionalEdge `json:"conditionalEdges"`
}

type graphNode struct {
	Version  semver.Version    `json:"version"`
	Payload  string            `json:"payload"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type graphConditionalEdge struct {
	Edges []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"edges"`
	Risks []configv1.ConditionalUpdateRisk `json:"risks"`
}

// Updates is what one query of the update service gave.
type Updates struct {
	Current     configv1.Release
	Recommended []configv1.Release
	Conditional []configv1.ConditionalUpdate
}

// FetchUpdates asks the update service at upstream for the graph of
// channel and returns the current release's node and its next hops.
func FetchUpdates(ctx context.Context, client *http.Client, upstream, arch, channel, clusterID string, version semver.Version) (*Updates, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, &UpdatesError{Reason: "InvalidURI", Message: fmt.Sprintf("failed to parse update service URL %q", upstream)}
	}
	q := u.Query()
	q.Add("arch", arch)
	q.Add("channel", channel)
	q.Add("id", clusterID)
	q.Add("version", version.String())
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &UpdatesError{Reason: "InvalidRequest", Message: err.Error()}
	}
	req.Header.Set("Accept", GraphMediaType)
	resp, err := client.Do(req)
	if err != nil {
		return nil, &UpdatesError{Reason: "RemoteFailed", Message: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &UpdatesError{Reason: "ResponseFailed", Message: "unexpected HTTP status: " + resp.Status}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &UpdatesError{Reason: "ResponseFailed", Message: err.Error()}
	}
	return ParseGraph(body, version, channel)
}

// ParseGraph reads an update service's answer (Cincinnati graph JSON)
// for the cluster running version in channel: the current release's
// node and its next hops, recommended and conditional.
func ParseGraph(body []byte, version semver.Version, channel string) (*Updates, error) {
	var g graph
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, &UpdatesError{Reason: "ResponseInvalid", Message: err.Error()}
	}
	out := &Updates{}
	current := -1
	var err error
	for i, n := range g.Nodes {
		if version.EQ(n.Version) {
			current = i
			if out.Current, err = toRelease(n); err != nil {
				return nil, &UpdatesError{Reason: "ResponseInvalid", Message: "invalid current node: " + err.Error()}
			}
			break
		}
	}
	if current < 0 {
		return nil, &UpdatesError{Reason: "VersionNotFound",
			Message: fmt.Sprintf("currently reconciling cluster version %s not found in the %q channel", version, channel)}
	}
	for _, e := range g.Edges {
		if len(e) != 2 || e[0] < 0 || e[1] < 0 || e[0] >= len(g.Nodes) || e[1] >= len(g.Nodes) {
			return nil, &UpdatesError{Reason: "ResponseInvalid", Message: fmt.Sprintf("invalid edge %v", e)}
		}
		if e[0] != current {
			continue
		}
		r, err := toRelease(g.Nodes[e[1]])
		if err != nil {
			return nil, &UpdatesError{Reason: "ResponseInvalid", Message: "invalid recommended update node: " + err.Error()}
		}
		out.Recommended = append(out.Recommended, r)
	}
	for _, ce := range g.ConditionalEdges {
		for _, e := range ce.Edges {
			if e.From != version.String() {
				continue
			}
			var target *graphNode
			for i := range g.Nodes {
				if g.Nodes[i].Version.String() == e.To {
					target = &g.Nodes[i]
					break
				}
			}
			if target == nil {
				return nil, &UpdatesError{Reason: "ResponseInvalid", Message: "no node for conditional update " + e.To}
			}
			r, err := toRelease(*target)
			if err != nil {
				return nil, &UpdatesError{Reason: "ResponseInvalid", Message: "invalid conditional update node: " + err.Error()}
			}
			risks := make([]configv1.ConditionalUpdateRisk, 0, len(ce.Risks))
			for _, risk := range ce.Risks {
				risk.MatchingRules = pruneRules(risk.MatchingRules)
				risks = append(risks, risk)
			}
			out.Conditional = append(out.Conditional, configv1.ConditionalUpdate{Release: r, Risks: risks})
		}
	}
	// A target both recommended and conditional is conditional.
	conditional := map[string]bool{}
	for _, c := range out.Conditional {
		conditional[c.Release.Image] = true
	}
	kept := out.Recommended[:0]
	for _, r := range out.Recommended {
		if !conditional[r.Image] {
			kept = append(kept, r)
		}
	}
	out.Recommended = kept
	// A risk left without a rule it can evaluate drops its update; a
	// target declared twice is dropped altogether.
	count := map[string]int{}
	for _, c := range out.Conditional {
		count[c.Release.Image]++
	}
	var conds []configv1.ConditionalUpdate
	for _, c := range out.Conditional {
		ok := count[c.Release.Image] == 1
		for _, r := range c.Risks {
			ok = ok && len(r.MatchingRules) > 0
		}
		if ok {
			conds = append(conds, c)
		}
	}
	out.Conditional = conds
	sortReleases(out.Recommended)
	sort.SliceStable(out.Conditional, func(i, j int) bool {
		return versionGreater(out.Conditional[i].Release.Version, out.Conditional[j].Release.Version)
	})
	return out, nil
}

// pruneRules keeps the matching rules the CVO knows how to evaluate.
func pruneRules(rules []configv1.ClusterCondition) []configv1.ClusterCondition {
	var out []configv1.ClusterCondition
	for _, r := range rules {
		switch {
		case r.Type == "Always" && r.PromQL == nil:
			out = append(out, r)
		case r.Type == "PromQL" && r.PromQL != nil && strings.TrimSpace(r.PromQL.PromQL) != "":
			out = append(out, r)
		}
	}
	return out
}

func toRelease(n graphNode) (configv1.Release, error) {
	r := configv1.Release{Version: n.Version.String(), Image: n.Payload}
	if u, ok := n.Metadata["url"]; ok {
		if _, err := url.Parse(u); err != nil {
			return r, fmt.Errorf("invalid URL for %s: %v", r.Version, err)
		}
		r.URL = configv1.URL(u)
	}
	if ch, ok := n.Metadata["io.openshift.upgrades.graph.release.channels"]; ok && ch != "" {
		r.Channels = strings.Split(ch, ",")
		sort.Strings(r.Channels)
	}
	return r, nil
}

// sortReleases orders releases by semantic version, newest first.
func sortReleases(rs []configv1.Release) {
	sort.SliceStable(rs, func(i, j int) bool { return versionGreater(rs[i].Version, rs[j].Version) })
}

func versionGreater(a, b string) bool {
	va, errA := semver.Parse(a)
	vb, errB := semver.Parse(b)
	switch {
	case errA == nil && errB == nil:
		return va.GT(vb)
	case errA == nil:
		return true
	case errB == nil:
		return false
	}
	return a > b
}

// httpClient is the client the CVO asks the update service with.
func httpClient() *http.Client { return &http.Client{Timeout: time.Minute} }
