// Package updateservice is an OpenShift Update Service (Cincinnati): it
// builds the update graph from release images (their release-metadata's
// previous and next) and a graph-data directory in the layout of
// openshift/cincinnati-graph-data (channels/*.yaml, blocked-edges/*.yaml),
// and serves it as the graph API the Cluster Version Operator queries.
package updateservice

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"go.yaml.in/yaml/v3"
)

// GraphData is a loaded graph-data directory.
type GraphData struct {
	// Channels lists each channel's versions in file order.
	Channels map[string][]semver.Version
	// Blocked are the blocked edges, by file name order.
	Blocked []BlockedEdge
}

// BlockedEdge drops the edges from versions matching From to To; with
// matching rules it keeps them as a conditional edge with this risk.
type BlockedEdge struct {
	File          string
	To            semver.Version
	From          *regexp.Regexp
	URL           string
	Name          string
	Message       string
	MatchingRules []MatchingRule
}

// MatchingRule is a risk's cluster condition.
type MatchingRule struct {
	Type   string      `json:"type"`
	PromQL *PromQLRule `json:"promql,omitempty"`
}

// PromQLRule is a PromQL matching rule's query.
type PromQLRule struct {
	PromQL string `json:"promql"`
}

type channelFile struct {
	Name       string      `yaml:"name"`
	Versions   []yaml.Node `yaml:"versions"`
	Feeder     yaml.Node   `yaml:"feeder"`
	Tombstones []yaml.Node `yaml:"tombstones"`
}

type blockedFile struct {
	To            yaml.Node      `yaml:"to"`
	From          yaml.Node      `yaml:"from"`
	URL           string         `yaml:"url"`
	Name          string         `yaml:"name"`
	Message       string         `yaml:"message"`
	FixedIn       string         `yaml:"fixedIn"`
	AutoExtend    yaml.Node      `yaml:"autoExtend"`
	MatchingRules []matchingRule `yaml:"matchingRules"`
}

type matchingRule struct {
	Type   string    `yaml:"type"`
	PromQL yaml.Node `yaml:"promql"`
	line   int
}

func (m *matchingRule) UnmarshalYAML(n *yaml.Node) error {
	if err := onlyKeys(n, "type", "promql"); err != nil {
		return err
	}
	type plain matchingRule
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*m = matchingRule(p)
	m.line = n.Line
	return nil
}

// onlyKeys refuses a mapping key outside allowed, with its line (a
// node's Decode does not check fields).
func onlyKeys(n *yaml.Node, allowed ...string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ok := false
		for _, a := range allowed {
			ok = ok || k.Value == a
		}
		if !ok {
			return fmt.Errorf("line %d: field %s not found (want %s)", k.Line, k.Value, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// nameRule is the CamelCase form of a risk name.
var nameRule = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// LoadGraphData reads a graph-data directory. Any malformed file is an
// error naming the file and line; nothing is half-loaded.
func LoadGraphData(dir string) (*GraphData, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("graph data %s: not a directory", dir)
	}
	g := &GraphData{Channels: map[string][]semver.Version{}}
	channels, err := yamlFiles(filepath.Join(dir, "channels"))
	if err != nil {
		return nil, err
	}
	for _, path := range channels {
		name, versions, err := loadChannel(path)
		if err != nil {
			return nil, err
		}
		if _, dup := g.Channels[name]; dup {
			return nil, fmt.Errorf("%s: channel %q is defined twice", path, name)
		}
		g.Channels[name] = versions
	}
	blocked, err := yamlFiles(filepath.Join(dir, "blocked-edges"))
	if err != nil {
		return nil, err
	}
	for _, path := range blocked {
		b, err := loadBlockedEdge(path)
		if err != nil {
			return nil, err
		}
		g.Blocked = append(g.Blocked, *b)
	}
	if len(g.Channels) == 0 {
		return nil, fmt.Errorf("graph data %s has no channels (channels/*.yaml)", dir)
	}
	return g, nil
}

func yamlFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// decodeFile decodes one YAML document strictly, errors carrying the path.
func decodeFile(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: the file is empty", path)
		}
		return fmt.Errorf("%s: %s", path, yamlMessage(err))
	}
	return nil
}

// yamlMessage flattens a YAML error to one line per problem, each with
// its line.
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return strings.Join(te.Errors, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

func at(path string, n *yaml.Node) string { return fmt.Sprintf("%s: line %d", path, n.Line) }

func loadChannel(path string) (string, []semver.Version, error) {
	var f channelFile
	if err := decodeFile(path, &f); err != nil {
		return "", nil, err
	}
	if f.Name == "" {
		return "", nil, fmt.Errorf("%s: name is required", path)
	}
	if want := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".yaml"), ".yml"); want != f.Name {
		return "", nil, fmt.Errorf("%s: channel name %q does not match the file name", path, f.Name)
	}
	seen := map[string]bool{}
	var versions []semver.Version
	for i := range f.Versions {
		n := &f.Versions[i]
		if n.Kind != yaml.ScalarNode {
			return "", nil, fmt.Errorf("%s: a version must be a string", at(path, n))
		}
		v, err := semver.Parse(n.Value)
		if err != nil {
			return "", nil, fmt.Errorf("%s: version %q: %v", at(path, n), n.Value, err)
		}
		if seen[v.String()] {
			return "", nil, fmt.Errorf("%s: version %s is listed twice", at(path, n), v)
		}
		seen[v.String()] = true
		versions = append(versions, v)
	}
	return f.Name, versions, nil
}

func loadBlockedEdge(path string) (*BlockedEdge, error) {
	var f blockedFile
	if err := decodeFile(path, &f); err != nil {
		return nil, err
	}
	b := &BlockedEdge{File: filepath.Base(path), URL: f.URL, Name: f.Name, Message: f.Message}
	if f.To.Kind != yaml.ScalarNode || f.To.Value == "" {
		return nil, fmt.Errorf("%s: to is required", path)
	}
	to, err := semver.Parse(f.To.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: to %q: %v", at(path, &f.To), f.To.Value, err)
	}
	b.To = to
	if f.From.Kind != yaml.ScalarNode || f.From.Value == "" {
		return nil, fmt.Errorf("%s: from is required", path)
	}
	if b.From, err = regexp.Compile(f.From.Value); err != nil {
		return nil, fmt.Errorf("%s: from %q is not a regular expression: %v", at(path, &f.From), f.From.Value, err)
	}
	if len(f.MatchingRules) == 0 {
		return b, nil
	}
	// A conditional edge needs its risk described in full.
	for field, v := range map[string]string{"url": f.URL, "name": f.Name, "message": f.Message} {
		if v == "" {
			return nil, fmt.Errorf("%s: %s is required with matchingRules", path, field)
		}
	}
	if !nameRule.MatchString(f.Name) {
		return nil, fmt.Errorf("%s: name %q must be CamelCase", path, f.Name)
	}
	for _, r := range f.MatchingRules {
		switch r.Type {
		case "Always":
			if !r.PromQL.IsZero() {
				return nil, fmt.Errorf("%s: line %d: an Always rule takes no promql", path, r.line)
			}
			b.MatchingRules = append(b.MatchingRules, MatchingRule{Type: "Always"})
		case "PromQL":
			var q struct {
				PromQL string `yaml:"promql"`
			}
			if r.PromQL.IsZero() {
				return nil, fmt.Errorf("%s: line %d: a PromQL rule needs promql.promql", path, r.line)
			}
			if err := onlyKeys(&r.PromQL, "promql"); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if err := r.PromQL.Decode(&q); err != nil {
				return nil, fmt.Errorf("%s: %s", path, yamlMessage(err))
			}
			if strings.TrimSpace(q.PromQL) == "" {
				return nil, fmt.Errorf("%s: line %d: a PromQL rule needs promql.promql", path, r.line)
			}
			b.MatchingRules = append(b.MatchingRules, MatchingRule{Type: "PromQL", PromQL: &PromQLRule{PromQL: q.PromQL}})
		default:
			return nil, fmt.Errorf("%s: line %d: matching rule type %q (want Always or PromQL)", path, r.line, r.Type)
		}
	}
	return b, nil
}
