package algorithm

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Preemption, as upstream's DefaultPreemption plugin decides it, in a pure
// function: for a pod that fits nowhere, the nodes where removing pods of
// lower priority would let it fit, the fewest such pods on each (keeping
// every one that can stay, those whose disruption budget forbids it tried
// first), and the best node by upstream's criteria. The scheduler carries
// the decision out; nothing here writes.

// Preemption messages, worded as upstream's.
const (
	ReasonNoVictims             = "No preemption victims found for incoming pod"
	ReasonPreemptionNotHelpful  = "Preemption is not helpful for scheduling"
	ReasonPreemptionPolicyNever = "not eligible due to preemptionPolicy=Never."
	ReasonTerminatingOnNominee  = "not eligible due to a terminating pod on the nominated node."
)

// Candidate-search bounds of upstream's DefaultPreemptionArgs defaults:
// dry-run preemption on at least 10% of the potential nodes and at least
// 100 of them.
const (
	minCandidateNodesPercentage = 10
	minCandidateNodesAbsolute   = 100
)

// Preemption is the outcome of a preemption attempt.
type Preemption struct {
	// Node is the node the pod is nominated to, empty when preemption
	// does not help.
	Node string
	// Victims are the pods to delete there, most important first.
	Victims []*corev1.Pod
	// PDBViolations counts the victims whose disruption budget does not
	// allow their eviction.
	PDBViolations int
	// Message says why preemption does not help (empty when it does), as
	// upstream's FailedScheduling events end: "preemption: 0/4 nodes are
	// available: 1 No preemption victims found for incoming pod, 3
	// Preemption is not helpful for scheduling."
	Message string
	// NotEligible: the pod may not preempt (preemptionPolicy Never, or its
	// victims are still terminating); Message says which.
	NotEligible bool
	// ClearNomination: the pod's earlier nomination no longer holds and
	// must be cleared (upstream clears it when no node can be found).
	ClearNomination bool
	// Failed says, for each node preemption tried in vain, why.
	Failed map[string]*Failure
	// Candidates are every node where preemption would have helped, in
	// the order they were found, the chosen one among them.
	Candidates []PreemptionCandidate
}

// PreemptionCandidate is a node where preemption makes room, and the pods
// it would take.
type PreemptionCandidate struct {
	Node          string
	Victims       []*corev1.Pod
	PDBViolations int
}

// Preempt decides, after a decision found no node for its pod, whether
// removing pods of lower priority makes room and where. offset is where
// among the potential nodes the search starts (upstream draws it at
// random). It never writes anything.
func (a *Algorithm) Preempt(ctx context.Context, d *Decision, snap *Snapshot, offset int) *Preemption {
	if ok, msg := a.eligibleToPreempt(d, snap); !ok {
		return &Preemption{Message: "preemption: " + msg, NotEligible: true}
	}
	var potential []*NodeInfo
	for _, ni := range snap.Nodes {
		if f := d.Filtered[ni.Name]; f != nil && !f.Unresolvable {
			potential = append(potential, ni)
		}
	}
	failed := map[string]*Failure{}
	var candidates []*candidate
	if len(potential) > 0 {
		var pdbs []*policyv1.PodDisruptionBudget
		if snap.PodDisruptionBudgets != nil {
			pdbs, _ = snap.PodDisruptionBudgets.List(labels.Everything())
		}
		candidates = a.dryRun(ctx, d, potential, parseBudgets(pdbs), offset, failed)
	}
	if len(candidates) == 0 {
		return &Preemption{ClearNomination: true, Failed: failed, Message: "preemption: " + preemptionSummary(len(snap.Nodes), failed)}
	}
	out := &Preemption{Failed: failed, Candidates: make([]PreemptionCandidate, len(candidates))}
	for i, c := range candidates {
		out.Candidates[i] = PreemptionCandidate{Node: c.node, Victims: c.victims, PDBViolations: c.pdbViolations}
	}
	best := pickCandidate(candidates)
	out.Node, out.Victims, out.PDBViolations = best.node, best.victims, best.pdbViolations
	return out
}

// eligibleToPreempt is upstream's PodEligibleToPreemptOthers: a pod with
// preemptionPolicy Never does not preempt, and neither does one whose
// nominated node still has a pod it preempted terminating there (unless the
// node no longer suits it at all).
func (a *Algorithm) eligibleToPreempt(d *Decision, snap *Snapshot) (bool, string) {
	pod := d.Pod
	if p := pod.Spec.PreemptionPolicy; p != nil && *p == corev1.PreemptNever {
		return false, ReasonPreemptionPolicyNever
	}
	nn := pod.Status.NominatedNodeName
	if nn == "" {
		return true, ""
	}
	if f := d.Filtered[nn]; f != nil && f.Unresolvable {
		return true, ""
	}
	if ni := snap.node(nn); ni != nil {
		prio := corev1helpers.PodPriority(pod)
		for _, p := range ni.Pods {
			if corev1helpers.PodPriority(p.Pod) < prio && terminatingByPreemption(p.Pod) {
				return false, ReasonTerminatingOnNominee
			}
		}
	}
	return true, ""
}

// terminatingByPreemption reports a pod being deleted because the
// scheduler preempted it.
func terminatingByPreemption(p *corev1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			return c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler
		}
	}
	return false
}

// candidate is a node where preemption makes room, with its victims.
type candidate struct {
	node          string
	victims       []*corev1.Pod
	pdbViolations int
	// order is the candidate's place in the search, the last tie-break.
	order int
}

// numCandidates is how many candidates the search looks for among n
// potential nodes.
func numCandidates(n int) int {
	return min(max(n*minCandidateNodesPercentage/100, minCandidateNodesAbsolute), n)
}

// dryRun tries the potential nodes from offset, in turn, until enough
// candidates are found (at least one that violates no budget), as
// upstream's DryRunPreemption; failed gets why the others were not.
func (a *Algorithm) dryRun(ctx context.Context, d *Decision, potential []*NodeInfo, pdbs []budget, offset int, failed map[string]*Failure) []*candidate {
	want := numCandidates(len(potential))
	var clean, violating []*candidate
	for i := range potential {
		if ctx.Err() != nil {
			break
		}
		ni := potential[(offset+i)%len(potential)]
		victims, violations, f := a.selectVictims(d, ni, pdbs)
		if f != nil {
			failed[ni.Name] = f
			continue
		}
		c := &candidate{node: ni.Name, victims: victims, pdbViolations: violations, order: i}
		if violations == 0 {
			clean = append(clean, c)
		} else {
			violating = append(violating, c)
		}
		if len(clean) > 0 && len(clean)+len(violating) >= want {
			break
		}
	}
	// Upstream keeps at most want of each kind.
	clean, violating = clean[:min(len(clean), want)], violating[:min(len(violating), want)]
	return append(clean, violating...)
}

// selectVictims is upstream's SelectVictimsOnNode: every pod of lower
// priority is taken off a copy of the node; if the pod then fits, they are
// put back one by one, most important first, those whose budget forbids
// their eviction first, each kept if the pod still fits. The rest are the
// victims.
func (a *Algorithm) selectVictims(d *Decision, orig *NodeInfo, pdbs []budget) ([]*corev1.Pod, int, *Failure) {
	pi := d.podInfo
	prio := corev1helpers.PodPriority(pi.Pod)
	ni := orig.Clone()
	cs := d.cycle.Clone()
	var potential []*PodInfo
	for _, p := range ni.Pods {
		if corev1helpers.PodPriority(p.Pod) < prio {
			potential = append(potential, p)
		}
	}
	if len(potential) == 0 {
		return nil, 0, &Failure{Predicate: "DefaultPreemption", Reasons: []string{ReasonNoVictims}, Unresolvable: true}
	}
	for _, p := range potential {
		ni.RemovePod(p.Pod)
		a.removePod(cs, pi, p, ni)
	}
	if f := a.filterNode(cs, pi, ni, false); f != nil {
		return nil, 0, f
	}
	now := time.Now()
	sort.SliceStable(potential, func(i, j int) bool { return moreImportant(potential[i].Pod, potential[j].Pod, now) })
	violatingPods, cleanPods := splitByPDB(potential, pdbs)
	var victims []*corev1.Pod
	violations := 0
	reprieve := func(p *PodInfo) bool {
		ni.AddPod(p)
		a.addPod(cs, pi, p, ni)
		if a.filterNode(cs, pi, ni, false) == nil {
			return true
		}
		ni.RemovePod(p.Pod)
		a.removePod(cs, pi, p, ni)
		victims = append(victims, p.Pod)
		return false
	}
	for _, p := range violatingPods {
		if !reprieve(p) {
			violations++
		}
	}
	for _, p := range cleanPods {
		reprieve(p)
	}
	if len(violatingPods) > 0 && len(cleanPods) > 0 {
		sort.SliceStable(victims, func(i, j int) bool { return moreImportant(victims[i], victims[j], now) })
	}
	if len(victims) == 0 {
		// Upstream treats a candidate without victims as an error.
		return nil, 0, &Failure{Predicate: "DefaultPreemption", Reasons: []string{fmt.Sprintf("expected at least one victim pod on node %q", orig.Name)}}
	}
	return victims, violations, nil
}

// startTime is upstream's GetPodStartTime: a pod not started yet counts
// as started now.
func startTime(p *corev1.Pod, now time.Time) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return now
}

// moreImportant is upstream's MoreImportantPod: higher priority, then the
// older start.
func moreImportant(p1, p2 *corev1.Pod, now time.Time) bool {
	a, b := corev1helpers.PodPriority(p1), corev1helpers.PodPriority(p2)
	if a != b {
		return a > b
	}
	return startTime(p1, now).Before(startTime(p2, now))
}

// budget is a PodDisruptionBudget with its selector parsed once per
// preemption (nil: it matches nothing).
type budget struct {
	pdb      *policyv1.PodDisruptionBudget
	selector labels.Selector
}

func parseBudgets(pdbs []*policyv1.PodDisruptionBudget) []budget {
	out := make([]budget, len(pdbs))
	for i, pdb := range pdbs {
		out[i].pdb = pdb
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && !sel.Empty() {
			out[i].selector = sel
		}
	}
	return out
}

// splitByPDB sorts the pods (keeping their order) into those whose
// eviction would take a budget below zero and the others, counting down
// each budget's allowed disruptions as upstream's
// filterPodsWithPDBViolation does.
func splitByPDB(pods []*PodInfo, pdbs []budget) (violating, clean []*PodInfo) {
	allowed := make([]int32, len(pdbs))
	for i, b := range pdbs {
		allowed[i] = b.pdb.Status.DisruptionsAllowed
	}
	for _, p := range pods {
		violated := false
		if len(p.Pod.Labels) > 0 {
			for i, b := range pdbs {
				if b.pdb.Namespace != p.Pod.Namespace || b.selector == nil || !b.selector.Matches(labels.Set(p.Pod.Labels)) {
					continue
				}
				if _, disrupted := b.pdb.Status.DisruptedPods[p.Pod.Name]; disrupted {
					continue
				}
				if allowed[i]--; allowed[i] < 0 {
					violated = true
				}
			}
		}
		if violated {
			violating = append(violating, p)
		} else {
			clean = append(clean, p)
		}
	}
	return violating, clean
}

// pickCandidate is upstream's pickOneNodeForPreemption: the fewest budget
// violations, then the lowest highest-priority victim, the lowest sum of
// priorities, the fewest victims, the latest start of the highest-priority
// victims; a tie left after all of them goes to the first found.
func pickCandidate(cands []*candidate) *candidate {
	now := time.Now()
	scores := []func(*candidate) int64{
		func(c *candidate) int64 { return -int64(c.pdbViolations) },
		func(c *candidate) int64 { return -int64(corev1helpers.PodPriority(c.victims[0])) },
		func(c *candidate) int64 {
			var sum int64
			for _, p := range c.victims {
				// Shifted so that negative priorities still add up.
				sum += int64(corev1helpers.PodPriority(p)) + int64(math.MaxInt32+1)
			}
			return -sum
		},
		func(c *candidate) int64 { return -int64(len(c.victims)) },
		func(c *candidate) int64 { return earliestStartOfHighest(c.victims, now).UnixNano() },
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].order < cands[j].order })
	for _, score := range scores {
		var best []*candidate
		top := int64(math.MinInt64)
		for _, c := range cands {
			switch s := score(c); {
			case s > top:
				top, best = s, []*candidate{c}
			case s == top:
				best = append(best, c)
			}
		}
		if len(best) == 1 {
			return best[0]
		}
		cands = best
	}
	return cands[0]
}

// earliestStartOfHighest is upstream's GetEarliestPodStartTime: the
// earliest start among the victims of the highest priority.
func earliestStartOfHighest(victims []*corev1.Pod, now time.Time) time.Time {
	earliest := startTime(victims[0], now)
	top := corev1helpers.PodPriority(victims[0])
	for _, p := range victims {
		switch prio := corev1helpers.PodPriority(p); {
		case prio == top:
			if t := startTime(p, now); t.Before(earliest) {
				earliest = t
			}
		case prio > top:
			top, earliest = prio, startTime(p, now)
		}
	}
	return earliest
}

// preemptionSummary is upstream's FitError message for a preemption that
// found no candidate: the nodes tried, by why they failed, and the rest as
// "Preemption is not helpful for scheduling".
func preemptionSummary(numNodes int, failed map[string]*Failure) string {
	d := &Decision{NumNodes: numNodes, Filtered: failed}
	rest := numNodes - len(failed)
	if rest == 0 {
		return d.Summary()
	}
	return d.summaryWith(map[string]int{ReasonPreemptionNotHelpful: rest})
}
