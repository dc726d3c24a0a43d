package cvo

import (
	"sort"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
	"github.com/capstan-dev/capstan/internal/release"
)

// TaskKind tells what a task of an update pass did.
type TaskKind int

const (
	// TaskApply is a manifest applied to the cluster.
	TaskApply TaskKind = iota
	// TaskWait is the wait for a ClusterOperator to reach its versions.
	TaskWait
)

// Span is one task of a pass, with its times: the manifest's run level
// and component (from its file name) and the object it names (for a
// wait, the ClusterOperator).
type Span struct {
	Kind                      TaskKind
	RunLevel, Component, Name string
	Start, End                time.Time
}

// Pass is what the operator did for one release: when it was accepted,
// every task, and when the pass completed.
type Pass struct {
	Version   string
	Accepted  time.Time
	Tasks     int
	Spans     []Span
	Completed time.Time
}

// Timeline records the operator's passes with in-process times, which the
// API cannot give (its timestamps are whole seconds): what the CVO
// benchmark measures. Set Options.Timeline to record.
type Timeline struct {
	mu     sync.Mutex
	passes map[string]*Pass
}

func (t *Timeline) pass(version string) *Pass {
	if t.passes == nil {
		t.passes = map[string]*Pass{}
	}
	p := t.passes[version]
	if p == nil {
		p = &Pass{Version: version}
		t.passes[version] = p
	}
	return p
}

func (t *Timeline) accepted(version string, at time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pass(version)
	if p.Accepted.IsZero() {
		p.Accepted = at
	}
}

func (t *Timeline) started(version string, tasks int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pass(version).Tasks = tasks
}

func (t *Timeline) task(version string, kind TaskKind, m *payload.Manifest, start, end time.Time) {
	if t == nil {
		return
	}
	level, component, _ := release.RunLevel(m.File)
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pass(version)
	p.Spans = append(p.Spans, Span{Kind: kind, RunLevel: level, Component: component, Name: m.Name, Start: start, End: end})
}

func (t *Timeline) completed(version string, at time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pass(version)
	if p.Completed.IsZero() {
		p.Completed = at
	}
}

// Pass returns a copy of what was recorded of version's pass.
func (t *Timeline) Pass(version string) Pass {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := *t.pass(version)
	p.Spans = append([]Span(nil), p.Spans...)
	return p
}

// Breakdown splits the wall time from..to of a pass's spans: Applying is
// when at least one manifest was being applied; Waiting when operators
// were being waited for and nothing was applied; the rest (neither) is
// the CVO between tasks. ApplySum adds up every apply's own duration.
type Breakdown struct {
	Applying, Waiting, Between, ApplySum time.Duration
	Applies, Waits                       int
}

// Breakdown splits the wall time from..to (see Breakdown).
func (p Pass) Breakdown(from, to time.Time) Breakdown {
	type edge struct {
		at    time.Time
		kind  TaskKind
		delta int
	}
	var b Breakdown
	var edges []edge
	for _, s := range p.Spans {
		start, end := maxTime(s.Start, from), minTime(s.End, to)
		if s.Kind == TaskApply {
			b.Applies++
			b.ApplySum += s.End.Sub(s.Start)
		} else {
			b.Waits++
		}
		if !end.After(start) {
			continue
		}
		edges = append(edges, edge{start, s.Kind, 1}, edge{end, s.Kind, -1})
	}
	sort.SliceStable(edges, func(i, j int) bool { return edges[i].at.Before(edges[j].at) })
	applying, waiting := 0, 0
	last := from
	account := func(until time.Time) {
		d := until.Sub(last)
		switch {
		case d <= 0:
		case applying > 0:
			b.Applying += d
		case waiting > 0:
			b.Waiting += d
		default:
			b.Between += d
		}
		last = until
	}
	for _, e := range edges {
		account(e.at)
		if e.kind == TaskApply {
			applying += e.delta
		} else {
			waiting += e.delta
		}
	}
	account(to)
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// LevelTime is one run level of a pass: from its first task's start to
// its last task's end, and the ClusterOperator waited for longest in it
// (Longest is zero when the level waited for none).
type LevelTime struct {
	RunLevel   string
	Start, End time.Time
	Longest    Span
}

// RunLevels are the pass's run levels in the order they started. Tasks
// of manifests without a run level (the CVO's own manifests/ directory)
// count as run level "00", where the CVO puts itself.
func (p Pass) RunLevels() []LevelTime {
	byLevel := map[string]*LevelTime{}
	var out []*LevelTime
	for _, s := range p.Spans {
		level := s.RunLevel
		if level == "" {
			level = "00"
		}
		l := byLevel[level]
		if l == nil {
			l = &LevelTime{RunLevel: level, Start: s.Start, End: s.End}
			byLevel[level] = l
			out = append(out, l)
		}
		l.Start, l.End = minTime(l.Start, s.Start), maxTime(l.End, s.End)
		if s.Kind == TaskWait && s.End.Sub(s.Start) > l.Longest.End.Sub(l.Longest.Start) {
			l.Longest = s
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	levels := make([]LevelTime, len(out))
	for i, l := range out {
		levels[i] = *l
	}
	return levels
}
