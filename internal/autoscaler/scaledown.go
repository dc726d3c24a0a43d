package autoscaler

import (
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"k8s.io/utils/clock"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// ScaleDownInput is what one scale-down decision reads; like the scale-up
// it is a pure computation.
type ScaleDownInput struct {
	Config    *Config
	Algorithm *algorithm.Algorithm
	// Snapshot holds the registered nodes with their non-expendable pods;
	// the decision moves pods in it as it simulates removals.
	Snapshot *algorithm.Snapshot
	Groups   []*NodeGroup
	// Pods are the pods on each node, expendable ones included.
	Pods map[string][]*corev1.Pod
	// Usage is what the registered nodes add up to, those being deleted
	// left out.
	Usage Usage
	// Deleting are the nodes whose removal is under way: their pods are
	// found a place first, and nothing else is drained while one of them
	// still has pods to move.
	Deleting map[string]bool
	PDBs     []*policyv1.PodDisruptionBudget
	// ControllerExists says whether a pod's controller is still there.
	ControllerExists func(ns string, ref *metav1.OwnerReference) bool
	// UnneededSince is when each node was first found unneeded, as
	// recorded on the nodes.
	UnneededSince map[string]time.Time
	Now           time.Time
	// Clock measures the time from one instant to another (nil: the
	// real clock's).
	Clock clock.PassiveClock
	// Cooldown, when not empty, says why no node may go this loop.
	Cooldown string
	// PodInfos caches the pods' requests from loop to loop (nil: none).
	PodInfos *algorithm.PodInfos
}

// NodeVerdict is the scale-down's conclusion about one node.
type NodeVerdict struct {
	Node  string
	Group *NodeGroup
	// Utilization is the larger of the cpu and memory shares requested
	// (the GPU share on GPU nodes).
	Utilization float64
	// Unneeded nodes could go: they are underutilized and their pods fit
	// elsewhere. Since is when they were first found so.
	Unneeded bool
	Since    time.Time
	// Unready nodes go after the unready time instead of the unneeded
	// time, whatever their utilization.
	Unready bool
	// Remove is set on the nodes this loop removes.
	Remove bool
	// Empty nodes have no pod to move.
	Empty      bool
	PodsToMove []*corev1.Pod
	// Reason says why the node stays, or that it goes; Code is upstream's
	// name for why it stays (unremovable_nodes_count's reason).
	Reason string
	Code   string
	// Blocker is the pod that keeps the node, if one does.
	Blocker *Blocker
}

// ScaleDownPlan is one scale-down decision.
type ScaleDownPlan struct {
	Verdicts map[string]*NodeVerdict
	// Remove are the nodes removed this loop: every removable empty node,
	// and one node whose pods must move.
	Remove []*NodeVerdict
}

// Unneeded counts the unneeded nodes.
func (p *ScaleDownPlan) Unneeded() int {
	n := 0
	for _, v := range p.Verdicts {
		if v.Unneeded {
			n++
		}
	}
	return n
}

// PlanScaleDown finds the nodes that are unneeded, those unneeded long
// enough to go, and says of every other node why it stays.
func PlanScaleDown(in *ScaleDownInput) *ScaleDownPlan {
	plan := &ScaleDownPlan{Verdicts: map[string]*NodeVerdict{}}
	groupOf := map[string]*NodeGroup{}
	for _, g := range in.Groups {
		for _, n := range g.Nodes {
			groupOf[n.Name] = g
		}
	}
	drain := &drainContext{cfg: in.Config, now: in.Now, clock: in.Clock, pdbs: in.PDBs, controllerExists: in.ControllerExists}
	budget := map[string]int32{}
	for _, pdb := range in.PDBs {
		budget[pdb.Namespace+"/"+pdb.Name] = pdb.Status.DisruptionsAllowed
	}
	var infos []*algorithm.NodeInfo
	for _, ni := range in.Snapshot.Nodes {
		v := &NodeVerdict{Node: ni.Name, Group: groupOf[ni.Name]}
		v.Utilization = in.utilization(ni.Node, in.Pods[ni.Name])
		plan.Verdicts[ni.Name] = v
		infos = append(infos, ni)
	}
	// The least utilized nodes are looked at first: they are the cheapest
	// to empty.
	sort.SliceStable(infos, func(i, j int) bool {
		vi, vj := plan.Verdicts[infos[i].Name], plan.Verdicts[infos[j].Name]
		if vi.Utilization != vj.Utilization {
			return vi.Utilization < vj.Utilization
		}
		return vi.Node < vj.Node
	})
	removed := map[string]bool{}
	removedPerGroup := map[*NodeGroup]int{}
	usage := in.Usage
	// Removals under way come first: their pods need a place as much as
	// those of the nodes removed now (upstream's filterOutOngoingDeletions
	// and the deletion tracker's budgets). A node taking them is not empty;
	// one pod that fits nowhere stays a pending pod's business.
	drained, budgetLeft := false, maxScaleDownParallelism
	for _, ni := range infos {
		if !in.Deleting[ni.Name] {
			continue
		}
		removed[ni.Name] = true
		budgetLeft--
		for _, p := range in.podsToMove(ni, nil) {
			drained = true
			in.relocate(ni, []*corev1.Pod{p}, removed)
		}
	}
	for _, ni := range infos {
		v := plan.Verdicts[ni.Name]
		node := ni.Node
		switch {
		case v.Group == nil:
			v.Reason, v.Code = "node is not in an autoscaled MachineSet (no MachineAutoscaler)", "NotAutoscaled"
			continue
		case node.Annotations[ScaleDownDisabledAnnotation] == "true":
			v.Reason, v.Code = "node is annotated "+ScaleDownDisabledAnnotation+": \"true\"", "ScaleDownDisabledAnnotation"
			continue
		case hasToBeDeletedTaint(node) || node.DeletionTimestamp != nil:
			v.Reason, v.Code = "node is being deleted", "CurrentlyBeingDeleted"
			continue
		case !nodes.Ready(node):
			// An unready node is not checked for utilization: it goes
			// once unneeded for the unready time (upstream's
			// --scale-down-unready-enabled).
			v.Unready = true
		case v.Utilization > in.Config.UtilizationThreshold:
			v.Reason, v.Code = fmt.Sprintf("utilization %.2f above the threshold %g", v.Utilization, in.Config.UtilizationThreshold), "NotUnderutilized"
			continue
		}
		// The node's own pods as the API has them: which block it, and
		// which must move.
		own := map[types.UID]bool{}
		var ownMove []*corev1.Pod
		for _, p := range in.Pods[ni.Name] {
			out, b := drain.drainability(p)
			if b != nil {
				v.Blocker, v.Reason, v.Code = b, b.Message, "BlockedByPod"
				break
			}
			if out == drainMove {
				own[p.UID] = true
				ownMove = append(ownMove, p)
			}
		}
		if v.Blocker != nil {
			continue
		}
		// What must move is what the simulation has on the node by now:
		// those, and the pods it moved there from nodes removed before.
		move := in.podsToMove(ni, own)
		if why := in.pdbBudget(drain, ownMove, budget); why != nil {
			v.Blocker, v.Reason, v.Code = why, why.Message, "BlockedByPod"
			continue
		}
		if why, ok := in.relocate(ni, move, removed); !ok {
			v.Reason, v.Code = why, "NoPlaceToMovePods"
			continue
		}
		for _, p := range ownMove {
			for _, pdb := range drain.matchingPDBs(p) {
				budget[pdb.Namespace+"/"+pdb.Name]--
			}
		}
		removed[ni.Name] = true
		v.Unneeded, v.PodsToMove, v.Empty = true, move, len(move) == 0
		v.Since = in.Now
		if s, ok := in.UnneededSince[ni.Name]; ok && !s.After(in.Now) {
			v.Since = s
		}
		if wait, unready := in.unneededTime(v); simclock.Elapsed(in.Clock, v.Since, in.Now) < wait {
			d := simclock.Elapsed(in.Clock, v.Since, in.Now)
			if unready {
				v.Reason, v.Code = fmt.Sprintf("unready and unneeded for %s of %s", shortDuration(d), shortDuration(wait)), "NotUnreadyLongEnough"
			} else {
				v.Reason, v.Code = fmt.Sprintf("unneeded for %s of %s", shortDuration(d), shortDuration(wait)), "NotUnneededLongEnough"
			}
			continue
		}
		if in.Cooldown != "" {
			v.Reason, v.Code = "unneeded, but "+in.Cooldown, "ScaleDownInCooldown"
			continue
		}
		g := v.Group
		if g.Target-removedPerGroup[g]-1 < g.Min {
			v.Reason, v.Code = fmt.Sprintf("unneeded, but MachineSet %s is at its minimum size %d", g.Set.Name, g.Min), "NodeGroupMinSizeReached"
			continue
		}
		if why := in.Config.BelowMinimum(usage, node); why != "" {
			v.Reason, v.Code = "unneeded, but removing it "+why, "MinimalResourceLimitExceeded"
			continue
		}
		if !v.Empty && drained {
			v.Reason, v.Code = "unneeded; waits for the node being drained", "NodeGroupMaxDeletionCountReached"
			continue
		}
		if budgetLeft <= 0 {
			v.Reason, v.Code = fmt.Sprintf("unneeded; %d nodes are being removed already", maxScaleDownParallelism), "NodeGroupMaxDeletionCountReached"
			continue
		}
		budgetLeft--
		drained = drained || !v.Empty
		v.Remove = true
		v.Reason = "removable: unneeded for " + shortDuration(simclock.Elapsed(in.Clock, v.Since, in.Now))
		if v.Unready {
			v.Reason = "removable: unready and unneeded for " + shortDuration(simclock.Elapsed(in.Clock, v.Since, in.Now))
		}
		removedPerGroup[g]++
		usage.Add(node, -1)
		plan.Remove = append(plan.Remove, v)
	}
	return plan
}

// unneededTime is how long a node must be unneeded before it goes, and
// whether that is the unready time: the group's option, else the
// cluster's.
func (in *ScaleDownInput) unneededTime(v *NodeVerdict) (time.Duration, bool) {
	g := v.Group
	if v.Unready {
		if g.UnreadyTime != nil {
			return *g.UnreadyTime, true
		}
		return in.Config.UnreadyTime, true
	}
	if g.UnneededTime != nil {
		return *g.UnneededTime, false
	}
	return in.Config.UnneededTime, false
}

// maxScaleDownParallelism bounds the nodes being removed at once, those
// under way included (upstream's --max-scale-down-parallelism default).
const maxScaleDownParallelism = 10

// podsToMove are the pods the simulation has on ni that a removal must
// move: the node's own that must (own; nil: all its own but daemon and
// mirror pods), and those the simulation moved there from other nodes.
func (in *ScaleDownInput) podsToMove(ni *algorithm.NodeInfo, own map[types.UID]bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pi := range ni.Pods {
		p := pi.Pod
		switch {
		case p.Spec.NodeName != ni.Name:
			out = append(out, p) // moved here in this simulation
		case own != nil:
			if own[p.UID] {
				out = append(out, p)
			}
		case !isDaemonSetPod(p) && !isMirrorPod(p):
			out = append(out, p)
		}
	}
	return out
}

// utilization is the larger of the shares of cpu and memory the pods
// request (GPU nodes: of GPUs), daemon set pods left out when configured.
func (in *ScaleDownInput) utilization(node *corev1.Node, pods []*corev1.Pod) float64 {
	alloc := node.Status.Allocatable
	var cpu, mem, gpu, dsCPU, dsMem int64
	gpuName := corev1.ResourceName("")
	for _, r := range gpuResources {
		if q, ok := alloc[r]; ok && q.Value() > 0 {
			gpuName = r
		}
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req := in.PodInfos.Get(p).Requests
		if o := metav1.GetControllerOf(p); in.Config.IgnoreDaemonsetsUtilization && o != nil && o.Kind == "DaemonSet" {
			dsCPU += req.MilliCPU
			dsMem += req.Memory
			continue
		}
		cpu += req.MilliCPU
		mem += req.Memory
		if gpuName != "" {
			gpu += req.Scalar[gpuName]
		}
	}
	share := func(used, total int64) float64 {
		if total <= 0 {
			return 0
		}
		return float64(used) / float64(total)
	}
	if gpuName != "" {
		q := alloc[gpuName]
		return share(gpu, q.Value())
	}
	return max(share(cpu, alloc.Cpu().MilliValue()-dsCPU), share(mem, alloc.Memory().Value()-dsMem))
}

// pdbBudget checks that the disruption budgets left allow moving all the
// pods at once.
func (in *ScaleDownInput) pdbBudget(d *drainContext, pods []*corev1.Pod, budget map[string]int32) *Blocker {
	need := map[string]int32{}
	for _, p := range pods {
		for _, pdb := range d.matchingPDBs(p) {
			key := pdb.Namespace + "/" + pdb.Name
			need[key]++
			if need[key] > budget[key] {
				return &Blocker{Pod: p, Reason: NotEnoughPdb, Message: fmt.Sprintf("not enough pod disruption budget to move pod %s/%s (PodDisruptionBudget %s)", p.Namespace, p.Name, pdb.Name)}
			}
		}
	}
	return nil
}

// relocate finds every pod a place on the other nodes (not those removed
// already), placing them there in the snapshot; if one fits nowhere it
// undoes the placements and says why.
func (in *ScaleDownInput) relocate(from *algorithm.NodeInfo, pods []*corev1.Pod, removed map[string]bool) (string, bool) {
	var dests []*algorithm.NodeInfo
	for _, ni := range in.Snapshot.Nodes {
		if ni != from && !removed[ni.Name] && !hasToBeDeletedTaint(ni.Node) && !in.Deleting[ni.Name] {
			dests = append(dests, ni)
		}
	}
	// done records each move: the pod's info as it was on its node, and
	// as placed on its destination.
	type move struct {
		old, moved *algorithm.PodInfo
		to         *algorithm.NodeInfo
	}
	var done []move
	undo := func() {
		for i := len(done) - 1; i >= 0; i-- {
			in.Snapshot.Unplace(done[i].moved, done[i].to)
			if done[i].old != nil {
				in.Snapshot.Place(done[i].old, from)
			}
		}
	}
	for _, p := range pods {
		// The pod leaves its node in the simulation, so that its own
		// anti-affinity does not count against where it goes; it is asked
		// about unbound, as the scheduler will see it again.
		var old *algorithm.PodInfo
		for _, existing := range from.Pods {
			if existing.Pod.UID == p.UID {
				old = existing
				in.Snapshot.Unplace(existing, from)
				break
			}
		}
		unbound := p.DeepCopy()
		unbound.Spec.NodeName = ""
		pi := algorithm.NewPodInfo(unbound)
		to := in.Algorithm.FirstFit(pi, in.Snapshot, dests, nil)
		if to == nil {
			failures := map[string]*algorithm.Failure{}
			in.Algorithm.FirstFit(pi, in.Snapshot, dests, failures)
			if old != nil {
				in.Snapshot.Place(old, from)
			}
			undo()
			return fmt.Sprintf("pod %s/%s can go to no other node: %s", p.Namespace, p.Name, failureSummary(len(dests), failures)), false
		}
		in.Snapshot.Place(pi, to)
		done = append(done, move{old: old, moved: pi, to: to})
	}
	return "", true
}

// failureSummary counts why nodes refused a pod, as scheduling events do:
// "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) didn't match
// Pod's node affinity/selector".
func failureSummary(n int, failures map[string]*algorithm.Failure) string {
	d := &algorithm.Decision{NumNodes: n, Filtered: failures}
	return strings.TrimSuffix(d.Summary(), ".")
}

// shortDuration prints whole minutes from a minute on (4m, 1h10m) and
// whole seconds below (45s): a node's status then changes, and is
// written, once a minute while it waits, not every loop.
func shortDuration(d time.Duration) string {
	if d < time.Minute {
		return d.Truncate(time.Second).String()
	}
	s := d.Truncate(time.Minute).String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
