// Package algorithm is the Policy scheduler's decision logic as a pure
// library: predicates filter nodes, priorities score them 0-10, each score
// is multiplied by its weight, and the highest total wins, ties broken at
// random. Nothing here writes to the API. Every decision records, per node,
// which predicate rejected it and why, and each priority's score and weight:
// the scheduler, its events, `capstan explain` and the autoscaler's
// simulations all read that one record.
package algorithm

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// MaxPriority is the best score a priority gives a node.
const MaxPriority = 10

// Predicate filters nodes for a pod.
type Predicate interface {
	// Name is the predicate's name in the Policy.
	Name() string
	// Filter returns nil when the pod fits the node, else the reasons.
	Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string
}

// PreFilter is implemented by predicates that compute per-pod state once
// per scheduling cycle, before filtering nodes in parallel.
type PreFilter interface {
	PreFilter(cs *CycleState, pi *PodInfo)
}

// Priority scores the feasible nodes for a pod.
type Priority interface {
	// Name is the priority's name in the Policy.
	Name() string
	// Score sets scores[i] (0..MaxPriority) for nodes[i].
	Score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64)
}

// CycleState carries what one scheduling cycle computed once for its pod.
// Predicates store their pre-computed state under their own name, in
// PreFilter only: PreFilters run one after the other before the nodes are
// filtered in parallel, so the filters read it without a lock.
type CycleState struct {
	Snapshot *Snapshot
	data     map[string]any
}

// NewCycleState starts a cycle on a snapshot.
func NewCycleState(s *Snapshot) *CycleState {
	return &CycleState{Snapshot: s, data: map[string]any{}}
}

// Write stores state under key; only PreFilter may call it.
func (c *CycleState) Write(key string, v any) { c.data[key] = v }

// Read returns the state stored under key.
func (c *CycleState) Read(key string) any { return c.data[key] }

// Failure records why a node was filtered out.
type Failure struct {
	// Predicate is the (first) predicate that rejected the node.
	Predicate string
	// Reasons are the predicate's reasons, e.g. "Insufficient cpu".
	Reasons []string
	// More holds further failing predicates when every predicate was
	// evaluated (explanations), in evaluation order.
	More []Failure
}

// PriorityScore is one priority's verdict on one node.
type PriorityScore struct {
	Priority string
	Score    int64
	Weight   int64
}

// NodeScore is a feasible node's scores.
type NodeScore struct {
	Node   string
	Scores []PriorityScore
	Total  int64
}

// Decision is the record of one scheduling decision.
type Decision struct {
	Pod *corev1.Pod
	// NumNodes is how many nodes the snapshot had.
	NumNodes int
	// Filtered maps each rejected node to why.
	Filtered map[string]*Failure
	// Scored are the feasible nodes that were scored, best first.
	Scored []NodeScore
	// Evaluated counts nodes that went through the predicates; the search
	// may stop early once enough feasible nodes are found.
	Evaluated int
	// Selected is the chosen node, empty when none fits.
	Selected string
	// Ties is how many nodes shared the best total.
	Ties int
	// VolumeBindings are the unbound claims of the pod and what they get
	// on the selected node: the scheduler binds them with the pod.
	VolumeBindings []VolumeBinding
}

// Feasible reports whether some node fits.
func (d *Decision) Feasible() bool { return d.Selected != "" }

// Summary is the per-reason message of a pod that fits nowhere, in the
// format of upstream's FailedScheduling events: "0/6 nodes are available:
// 3 node(s) didn't match node selector, 3 node(s) had untolerated taint
// {dedicated: groupName}."
func (d *Decision) Summary() string {
	counts := map[string]int{}
	for _, f := range d.Filtered {
		for _, r := range f.Reasons {
			counts[r]++
		}
	}
	reasons := make([]string, 0, len(counts))
	for r, n := range counts {
		reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(reasons)
	msg := fmt.Sprintf("0/%d nodes are available", d.NumNodes)
	if len(reasons) == 0 {
		return msg + "."
	}
	return msg + ": " + strings.Join(reasons, ", ") + "."
}
