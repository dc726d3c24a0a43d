package algorithm

import (
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
)

// PodIndex indexes the pods on nodes for the inter-pod affinity code, so a
// decision touches the pods and terms that can matter instead of every pod
// in the cluster:
//
//   - pods by label, to find the existing pods an incoming pod's terms
//     select;
//   - the affinity terms of existing pods, grouped by identical term, with
//     how many pods on each node carry it, to find the terms that select an
//     incoming pod (the symmetric side) with one match per distinct term.
//
// A cache keeps one up to date with Add and Remove; NewSnapshot builds one
// from its nodes. Node pointers are kept, not domains: a node's labels are
// read at query time, so relabelling a node needs no re-indexing.
type PodIndex struct {
	pods    map[*PodInfo]*NodeInfo
	byUID   map[types.UID]*PodInfo
	byLabel map[string]map[string]map[*PodInfo]*NodeInfo
	groups  [termKinds]map[string]*termGroup
}

type termKind int

// The kinds of existing pods' terms the index groups.
const (
	kindRequiredAffinity termKind = iota
	kindRequiredAntiAffinity
	kindPreferredAffinity
	kindPreferredAntiAffinity
	termKinds
)

// termGroup is one distinct term (with its weight for preferred terms) and
// how many pods carry it on each node.
type termGroup struct {
	term   *AffinityTerm
	weight int64
	nodes  map[*NodeInfo]int
}

// NewPodIndex returns an empty index.
func NewPodIndex() *PodIndex {
	x := &PodIndex{pods: map[*PodInfo]*NodeInfo{}, byUID: map[types.UID]*PodInfo{}, byLabel: map[string]map[string]map[*PodInfo]*NodeInfo{}}
	for k := range x.groups {
		x.groups[k] = map[string]*termGroup{}
	}
	return x
}

// Add records pi on ni.
func (x *PodIndex) Add(pi *PodInfo, ni *NodeInfo) {
	x.pods[pi] = ni
	x.byUID[pi.Pod.UID] = pi
	for k, v := range pi.Pod.Labels {
		vals := x.byLabel[k]
		if vals == nil {
			vals = map[string]map[*PodInfo]*NodeInfo{}
			x.byLabel[k] = vals
		}
		set := vals[v]
		if set == nil {
			set = map[*PodInfo]*NodeInfo{}
			vals[v] = set
		}
		set[pi] = ni
	}
	pi.forEachTerm(func(kind termKind, t *AffinityTerm, w int64) {
		key := t.signature
		if w != 0 {
			key += "\x00" + strconv.FormatInt(w, 10)
		}
		g := x.groups[kind][key]
		if g == nil {
			g = &termGroup{term: t, weight: w, nodes: map[*NodeInfo]int{}}
			x.groups[kind][key] = g
		}
		g.nodes[ni]++
	})
}

// Remove forgets pi, which Add recorded.
func (x *PodIndex) Remove(pi *PodInfo) {
	ni, ok := x.pods[pi]
	if !ok {
		return
	}
	delete(x.pods, pi)
	if x.byUID[pi.Pod.UID] == pi {
		delete(x.byUID, pi.Pod.UID)
	}
	for k, v := range pi.Pod.Labels {
		if set := x.byLabel[k][v]; set != nil {
			delete(set, pi)
			if len(set) == 0 {
				delete(x.byLabel[k], v)
				if len(x.byLabel[k]) == 0 {
					delete(x.byLabel, k)
				}
			}
		}
	}
	pi.forEachTerm(func(kind termKind, t *AffinityTerm, w int64) {
		key := t.signature
		if w != 0 {
			key += "\x00" + strconv.FormatInt(w, 10)
		}
		g := x.groups[kind][key]
		if g == nil {
			return
		}
		if g.nodes[ni]--; g.nodes[ni] <= 0 {
			delete(g.nodes, ni)
		}
		if len(g.nodes) == 0 {
			delete(x.groups[kind], key)
		}
	})
}

// Len is the number of pods indexed.
func (x *PodIndex) Len() int { return len(x.pods) }

// forEachTerm calls fn for each of the pod's terms with its kind and its
// weight (0 for required terms).
func (pi *PodInfo) forEachTerm(fn func(termKind, *AffinityTerm, int64)) {
	for i := range pi.RequiredAffinity {
		fn(kindRequiredAffinity, &pi.RequiredAffinity[i], 0)
	}
	for i := range pi.RequiredAntiAffinity {
		fn(kindRequiredAntiAffinity, &pi.RequiredAntiAffinity[i], 0)
	}
	for i := range pi.PreferredAffinity {
		fn(kindPreferredAffinity, &pi.PreferredAffinity[i].AffinityTerm, int64(pi.PreferredAffinity[i].Weight))
	}
	for i := range pi.PreferredAntiAffinity {
		fn(kindPreferredAntiAffinity, &pi.PreferredAntiAffinity[i].AffinityTerm, int64(pi.PreferredAntiAffinity[i].Weight))
	}
}

// forEachMatchingTerm calls fn, for every distinct existing term of a kind
// that selects pod (in a namespace with nsLabels), with each existing node
// carrying it and how many of its pods do. The pod's own terms, when it is
// itself indexed, are left out (fn sees them with a count of -1).
func (x *PodIndex) forEachMatchingTerm(kind termKind, pod *corev1.Pod, nsLabels labels.Set, fn func(g *termGroup, ni *NodeInfo, count int)) {
	for _, g := range x.groups[kind] {
		if !g.term.Matches(pod, nsLabels) {
			continue
		}
		for ni, n := range g.nodes {
			if ni.Node != nil {
				fn(g, ni, n)
			}
		}
	}
	self := x.byUID[pod.UID]
	if self == nil || pod.UID == "" {
		return
	}
	ni := x.pods[self]
	if ni.Node == nil {
		return
	}
	self.forEachTerm(func(k termKind, t *AffinityTerm, w int64) {
		if k == kind && t.Matches(pod, nsLabels) {
			fn(&termGroup{term: t, weight: w}, ni, -1)
		}
	})
}

// forEachSelected calls fn for every indexed pod, on an existing node,
// whose labels the selector may match: the pods holding the label values
// of its most selective equality requirement, or of an existence
// requirement, or else every pod. fn still checks the full term.
func (x *PodIndex) forEachSelected(sel labels.Selector, fn func(*PodInfo, *NodeInfo)) {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return // labels.Nothing()
	}
	var best []map[*PodInfo]*NodeInfo
	bestSize, found := 0, false
	for _, r := range reqs {
		var sets []map[*PodInfo]*NodeInfo
		size := 0
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			for v := range r.Values() {
				if set := x.byLabel[r.Key()][v]; len(set) > 0 {
					sets = append(sets, set)
					size += len(set)
				}
			}
		case selection.Exists:
			for _, set := range x.byLabel[r.Key()] {
				sets = append(sets, set)
				size += len(set)
			}
		default:
			continue
		}
		if !found || size < bestSize {
			best, bestSize, found = sets, size, true
		}
	}
	visit := func(set map[*PodInfo]*NodeInfo) {
		for pi, ni := range set {
			if ni.Node != nil {
				fn(pi, ni)
			}
		}
	}
	if !found {
		visit(x.pods)
		return
	}
	for _, set := range best {
		visit(set)
	}
}

// termSignature identifies a term by what it selects: equal signatures
// select the same pods in the same domains.
func termSignature(sel labels.Selector, namespaces []string, nsSel labels.Selector, topologyKey string) string {
	var b strings.Builder
	b.WriteString(topologyKey)
	b.WriteByte(0)
	if _, ok := sel.Requirements(); !ok {
		b.WriteString("\x01nothing")
	} else {
		b.WriteString(sel.String())
	}
	b.WriteByte(0)
	ns := append([]string(nil), namespaces...)
	sort.Strings(ns)
	b.WriteString(strings.Join(ns, ","))
	b.WriteByte(0)
	switch {
	case nsSel == nil:
		b.WriteString("\x01none")
	default:
		if _, ok := nsSel.Requirements(); !ok {
			b.WriteString("\x01nothing")
		} else {
			b.WriteString(nsSel.String())
		}
	}
	return b.String()
}
