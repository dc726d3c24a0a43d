// Package payload turns a release payload's manifests into the Cluster
// Version Operator's task graph and runs it: run levels one after
// another, the components of one run level side by side, one component's
// manifests in file order, a Job a barrier no work crosses.
package payload

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/capstan-dev/capstan/internal/release"
)

// Manifest is one document of a payload file.
type Manifest struct {
	// Dir is the payload directory (manifests or release-manifests), File
	// the manifest's file name, Index its document's place in the file.
	Dir   string
	File  string
	Index int
	// APIVersion, Kind, Namespace and Name identify the object.
	APIVersion, Kind, Namespace, Name string
	Annotations                       map[string]string
	Raw                               []byte
}

func (m *Manifest) String() string {
	ns := m.Namespace
	if ns != "" {
		ns += "/"
	}
	return fmt.Sprintf("%s %s%s (%s #%d)", strings.ToLower(m.Kind), ns, m.Name, m.File, m.Index)
}

// isJob reports whether a manifest is a batch Job, which the graph never
// reorders work across.
func (m *Manifest) isJob() bool {
	return m.Kind == "Job" && strings.HasPrefix(m.APIVersion, "batch/")
}

// Node is a unit of the graph: one run level's component, its manifests
// applied one after another.
type Node struct {
	RunLevel  string
	Component string
	Tasks     []*Manifest
}

func (n *Node) String() string {
	if n.RunLevel == "" {
		return n.Tasks[0].File
	}
	return fmt.Sprintf("%s_%s", n.RunLevel, n.Component)
}

// Graph is the order of the work: Levels one after another, the nodes of
// a level in parallel.
type Graph struct {
	Levels [][]*Node
}

// Nodes counts the graph's nodes.
func (g *Graph) Nodes() int {
	n := 0
	for _, l := range g.Levels {
		n += len(l)
	}
	return n
}

// Tasks counts the manifests in the graph.
func (g *Graph) Tasks() int {
	n := 0
	for _, l := range g.Levels {
		for _, node := range l {
			n += len(node.Tasks)
		}
	}
	return n
}

// Sort orders manifests as the CVO reads them: the CVO's own manifests/
// first, then by file name, then by their place in the file.
func Sort(ms []*Manifest) {
	sort.SliceStable(ms, func(i, j int) bool {
		if di, dj := dirOrder[ms[i].Dir], dirOrder[ms[j].Dir]; di != dj {
			return di < dj
		}
		if ms[i].File != ms[j].File {
			return ms[i].File < ms[j].File
		}
		return ms[i].Index < ms[j].Index
	})
}

// ByRunLevel builds the graph of an update: manifests sorted, cut at every
// Job (a Job runs alone, between what comes before it and after it), and
// within each piece one level per run level, one node per component.
// Manifests outside the 0000_<level>_<component>_ pattern each make a
// level of their own, in their order.
func ByRunLevel(ms []*Manifest) *Graph {
	sorted := append([]*Manifest(nil), ms...)
	Sort(sorted)
	g := &Graph{}
	var piece []*Manifest
	flush := func() {
		g.Levels = append(g.Levels, levelsOf(piece)...)
		piece = nil
	}
	for _, m := range sorted {
		if m.isJob() {
			flush()
			g.Levels = append(g.Levels, []*Node{nodeOf(m)})
			continue
		}
		piece = append(piece, m)
	}
	flush()
	return g
}

func nodeOf(m *Manifest) *Node {
	level, component, _ := release.RunLevel(m.File)
	return &Node{RunLevel: level, Component: component, Tasks: []*Manifest{m}}
}

// levelsOf groups a Job-free piece, already in file order.
func levelsOf(ms []*Manifest) [][]*Node {
	var levels [][]*Node
	var current []*Node
	currentLevel := "\x00"
	byComponent := map[string]*Node{}
	for _, m := range ms {
		level, component, ok := release.RunLevel(m.File)
		if !ok {
			if len(current) > 0 {
				levels = append(levels, current)
			}
			levels = append(levels, []*Node{{Tasks: []*Manifest{m}}})
			current, currentLevel, byComponent = nil, "\x00", map[string]*Node{}
			continue
		}
		if level != currentLevel {
			if len(current) > 0 {
				levels = append(levels, current)
			}
			current, currentLevel, byComponent = nil, level, map[string]*Node{}
		}
		n, ok := byComponent[component]
		if !ok {
			n = &Node{RunLevel: level, Component: component}
			byComponent[component] = n
			current = append(current, n)
		}
		n.Tasks = append(n.Tasks, m)
	}
	if len(current) > 0 {
		levels = append(levels, current)
	}
	return levels
}

// Flatten builds the graph of an install or of reconciling: every
// run level's components in one level, all in parallel (the CVO's
// FlattenByNumberAndComponent), Jobs still barriers.
func Flatten(ms []*Manifest) *Graph {
	g := ByRunLevel(ms)
	out := &Graph{}
	var merged []*Node
	for _, level := range g.Levels {
		if len(level) == 1 && len(level[0].Tasks) == 1 && level[0].Tasks[0].isJob() {
			if len(merged) > 0 {
				out.Levels = append(out.Levels, merged)
				merged = nil
			}
			out.Levels = append(out.Levels, level)
			continue
		}
		merged = append(merged, level...)
	}
	if len(merged) > 0 {
		out.Levels = append(out.Levels, merged)
	}
	return out
}

// ApplyFunc applies one manifest.
type ApplyFunc func(ctx context.Context, m *Manifest) error

// IncompleteError says which nodes did not finish.
type IncompleteError struct {
	Incomplete []*Node
	Errs       []error
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("%d incomplete task nodes, beginning with %s: %v", len(e.Incomplete), e.Incomplete[0], errors.Join(e.Errs...))
}

func (e *IncompleteError) Unwrap() []error { return e.Errs }

// Run applies the graph with at most workers nodes at a time: a level
// starts only when the one before is wholly done, so nothing is applied
// ahead of a lower run level. A node that fails stops there (its later
// manifests are not applied), while the other nodes of its level go on, as
// upstream's RunGraph continues independent edges; the levels after it
// are not started. The error lists every failure and what is incomplete.
func Run(ctx context.Context, g *Graph, workers int, apply ApplyFunc) error {
	if workers < 1 {
		workers = 1
	}
	for li, level := range g.Levels {
		var (
			mu     sync.Mutex
			errs   []error
			failed []*Node
			wg     sync.WaitGroup
		)
		incomplete := func(n *Node, err error) {
			mu.Lock()
			defer mu.Unlock()
			failed = append(failed, n)
			if err != nil {
				errs = append(errs, err)
			}
		}
		slots := make(chan struct{}, workers)
		for _, n := range level {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				incomplete(n, nil)
				continue
			}
			wg.Add(1)
			go func(n *Node) {
				defer wg.Done()
				defer func() { <-slots }()
				for _, m := range n.Tasks {
					if ctx.Err() != nil {
						incomplete(n, nil)
						return
					}
					if err := apply(ctx, m); err != nil {
						incomplete(n, fmt.Errorf("%s: %w", m, err))
						return
					}
				}
			}(n)
		}
		wg.Wait()
		if len(failed) > 0 {
			for _, l := range g.Levels[li+1:] {
				failed = append(failed, l...)
			}
			if len(errs) == 0 {
				errs = append(errs, context.Cause(ctx))
			}
			return &IncompleteError{Incomplete: failed, Errs: errs}
		}
	}
	return nil
}

// RunLevelNumber is a node's run level as a number (-1 when none).
func (n *Node) RunLevelNumber() int {
	v, err := strconv.Atoi(n.RunLevel)
	if err != nil {
		return -1
	}
	return v
}
