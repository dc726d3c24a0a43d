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

// PreFilterExtensions is implemented by predicates whose PreFilter state
// counts pods on nodes (inter-pod affinity, topology spread): preemption
// takes pods off a node and nominated pods are put on one, and the state
// must follow, one pod at a time, as upstream's AddPod and RemovePod do.
// They change the state of a cloned cycle only.
type PreFilterExtensions interface {
	// AddPod accounts for other, now on ni, in the state of pi's cycle.
	AddPod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo)
	// RemovePod forgets other, no longer on ni.
	RemovePod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo)
}

// resolvable is implemented by predicates some of whose failures removing
// pods from the node can fix (resources, ports, anti-affinity, spread):
// preemption tries a node only when its first failure is resolvable, as
// upstream tries only nodes whose status is Unschedulable rather than
// UnschedulableAndUnresolvable. A predicate without it never is.
type resolvable interface {
	resolvable(pi *PodInfo, ni *NodeInfo, reasons []string) bool
}

// clonable is implemented by cycle state that preemption and nominated
// pods change: Clone returns a copy that can be changed independently.
type clonable interface {
	Clone() any
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
	// rejected is the first PreFilter's verdict that the pod fits no node
	// at all (a claim missing, an affinity term that does not parse): as
	// upstream's PreFilter failures, it is every node's failure, before
	// any predicate runs on a node.
	rejected *Failure
}

// Reject records, in PreFilter, that the pod fits no node: reason is every
// node's; unresolvable says whether preemption could change that.
func (c *CycleState) Reject(predicate, reason string, unresolvable bool) {
	if c.rejected == nil {
		c.rejected = &Failure{Predicate: predicate, Reasons: []string{reason}, Unresolvable: unresolvable}
	}
}

// NewCycleState starts a cycle on a snapshot.
func NewCycleState(s *Snapshot) *CycleState {
	return &CycleState{Snapshot: s, data: map[string]any{}}
}

// Write stores state under key; only PreFilter may call it.
func (c *CycleState) Write(key string, v any) { c.data[key] = v }

// Read returns the state stored under key.
func (c *CycleState) Read(key string) any { return c.data[key] }

// Clone copies the cycle so that PreFilterExtensions may change it: state
// that can change is copied, the rest shared.
func (c *CycleState) Clone() *CycleState {
	out := &CycleState{Snapshot: c.Snapshot, data: make(map[string]any, len(c.data)), rejected: c.rejected}
	for k, v := range c.data {
		if cl, ok := v.(clonable); ok {
			v = cl.Clone()
		}
		out.data[k] = v
	}
	return out
}

// Failure records why a node was filtered out.
type Failure struct {
	// Predicate is the (first) predicate that rejected the node.
	Predicate string
	// Reasons are the predicate's reasons, e.g. "Insufficient cpu".
	Reasons []string
	// Unresolvable says that removing pods from the node cannot make the
	// pod fit (upstream's UnschedulableAndUnresolvable): preemption does
	// not try the node.
	Unresolvable bool
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

	// cycle and podInfo are the decision's, kept for a preemption that
	// follows it.
	cycle   *CycleState
	podInfo *PodInfo
}

// Feasible reports whether some node fits.
func (d *Decision) Feasible() bool { return d.Selected != "" }

// Summary is the per-reason message of a pod that fits nowhere, in the
// format of upstream's FailedScheduling events: "0/6 nodes are available:
// 3 node(s) didn't match node selector, 3 node(s) had untolerated taint
// {dedicated: groupName}."
func (d *Decision) Summary() string { return d.summaryWith(nil) }

// summaryWith is Summary with extra reasons counted in.
func (d *Decision) summaryWith(extra map[string]int) string {
	counts := map[string]int{}
	for _, f := range d.Filtered {
		for _, r := range f.Reasons {
			counts[r]++
		}
	}
	for r, n := range extra {
		counts[r] += n
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
