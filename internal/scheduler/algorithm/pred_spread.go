package algorithm

import (
	"fmt"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/taints"
)

// Pod topology spread, as upstream's PodTopologySpread plugin decides it:
// a pod's topologySpreadConstraints (or, for a pod with none, the
// cluster-default constraints of upstream's default profile) bound how
// unevenly the pods their selector matches may be spread over the domains
// of a topology key. DoNotSchedule constraints filter (the EvenPodsSpread
// predicate, upstream's legacy name), ScheduleAnyway constraints score (the
// EvenPodsSpreadPriority priority).
//
// A domain counts when a node of it is eligible: it has every constraint's
// topology key and, by the constraint's node inclusion policies, matches
// the pod's node affinity (Honor by default) and has no taint the pod does
// not tolerate (Ignore by default). A full domain still counts: with zone C
// full, a hard zone spread of maxSkew 1 leaves pods Pending rather than
// crowd zones A and B.

// spreadConstraint is a TopologySpreadConstraint with its selector parsed
// and its defaults applied.
type spreadConstraint struct {
	maxSkew     int32
	topologyKey string
	selector    labels.Selector
	minDomains  int32
	// honorAffinity and honorTaints are the node inclusion policies.
	honorAffinity, honorTaints bool
}

// systemDefaultConstraints are upstream's cluster-default constraints
// (the default profile's "System" defaulting), for pods with none of their
// own that belong to a service, replication controller, replica set or
// stateful set.
var systemDefaultConstraints = []corev1.TopologySpreadConstraint{
	{TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway, MaxSkew: 3},
	{TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.ScheduleAnyway, MaxSkew: 5},
}

// spreadConstraints returns the pod's constraints of one action: its own,
// else the system defaults with the selector of its workload (defaulted
// reports the latter). A selector that does not parse is an error.
func spreadConstraints(s *Snapshot, pod *corev1.Pod, action corev1.UnsatisfiableConstraintAction) (cs []spreadConstraint, defaulted bool, err error) {
	if len(pod.Spec.TopologySpreadConstraints) > 0 {
		cs, err = parseSpreadConstraints(pod.Spec.TopologySpreadConstraints, pod.Labels, action)
		return cs, false, err
	}
	cs, err = parseSpreadConstraints(systemDefaultConstraints, pod.Labels, action)
	if err != nil || len(cs) == 0 {
		return nil, true, err
	}
	sel := s.defaultSelector(pod)
	if sel.Empty() {
		return nil, true, nil
	}
	for i := range cs {
		cs[i].selector = sel
	}
	return cs, true, nil
}

func parseSpreadConstraints(in []corev1.TopologySpreadConstraint, podLabels map[string]string, action corev1.UnsatisfiableConstraintAction) ([]spreadConstraint, error) {
	var out []spreadConstraint
	for i := range in {
		c := &in[i]
		if c.WhenUnsatisfiable != action {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("topologySpreadConstraints[%d].labelSelector: %w", i, err)
		}
		// matchLabelKeys adds the pod's own values of those keys to the
		// selector.
		if len(c.MatchLabelKeys) > 0 {
			match := labels.Set{}
			for _, k := range c.MatchLabelKeys {
				if v, ok := podLabels[k]; ok {
					match[k] = v
				}
			}
			if len(match) > 0 {
				if reqs, ok := sel.Requirements(); ok {
					merged := labels.SelectorFromSet(match)
					for _, r := range reqs {
						merged = merged.Add(r)
					}
					sel = merged
				}
			}
		}
		out = append(out, spreadConstraint{
			maxSkew: c.MaxSkew, topologyKey: c.TopologyKey, selector: sel, minDomains: ptr.Deref(c.MinDomains, 1),
			honorAffinity: ptr.Deref(c.NodeAffinityPolicy, corev1.NodeInclusionPolicyHonor) == corev1.NodeInclusionPolicyHonor,
			honorTaints:   ptr.Deref(c.NodeTaintsPolicy, corev1.NodeInclusionPolicyIgnore) == corev1.NodeInclusionPolicyHonor,
		})
	}
	return out, nil
}

// defaultSelector is upstream's DefaultSelector: the services selecting
// the pod, and its controlling replication controller, replica set or
// stateful set, merged into one selector.
func (s *Snapshot) defaultSelector(pod *corev1.Pod) labels.Selector {
	set := labels.Set{}
	if s.Services != nil {
		if svcs, err := s.Services.Services(pod.Namespace).List(labels.Everything()); err == nil {
			for _, svc := range svcs {
				if svc.Spec.Selector != nil && labels.Set(svc.Spec.Selector).AsSelectorPreValidated().Matches(labels.Set(pod.Labels)) {
					set = labels.Merge(set, svc.Spec.Selector)
				}
			}
		}
	}
	sel := set.AsSelector()
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return sel
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil {
		return sel
	}
	addSelector := func(ls *metav1.LabelSelector) {
		if other, err := metav1.LabelSelectorAsSelector(ls); err == nil {
			if reqs, ok := other.Requirements(); ok {
				sel = sel.Add(reqs...)
			}
		}
	}
	switch gvk := gv.WithKind(owner.Kind); {
	case gvk == corev1.SchemeGroupVersion.WithKind("ReplicationController") && s.ReplicationControllers != nil:
		if rc, err := s.ReplicationControllers.ReplicationControllers(pod.Namespace).Get(owner.Name); err == nil {
			set = labels.Merge(set, rc.Spec.Selector)
			sel = set.AsSelector()
		}
	case gvk == schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"} && s.ReplicaSets != nil:
		if rs, err := s.ReplicaSets.ReplicaSets(pod.Namespace).Get(owner.Name); err == nil {
			addSelector(rs.Spec.Selector)
		}
	case gvk == schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"} && s.StatefulSets != nil:
		if ss, err := s.StatefulSets.StatefulSets(pod.Namespace).Get(owner.Name); err == nil {
			addSelector(ss.Spec.Selector)
		}
	}
	return sel
}

// hasTopologyKeys reports whether the node has every constraint's key.
func hasTopologyKeys(ni *NodeInfo, cs []spreadConstraint) bool {
	for i := range cs {
		if _, ok := ni.Label(cs[i].topologyKey); !ok {
			return false
		}
	}
	return true
}

// includes applies a constraint's node inclusion policies to a node.
func (c *spreadConstraint) includes(pi *PodInfo, ni *NodeInfo) bool {
	if c.honorAffinity && pi.hasNodeSelector && !pi.nodeSelector.matches(ni) {
		return false
	}
	if c.honorTaints {
		if _, untolerated := taints.FirstUntolerated(ni.Node.Spec.Taints, pi.Pod.Spec.Tolerations, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute); untolerated {
			return false
		}
	}
	return true
}

// countable reports whether an existing pod counts for a constraint: of
// the incoming pod's namespace, not terminating, matched by the selector
// (an empty selector counts nothing, as upstream's counting does).
func (c *spreadConstraint) countable(ns string, p *corev1.Pod) bool {
	return p.Namespace == ns && p.DeletionTimestamp == nil && !c.selector.Empty() && c.selector.Matches(labels.Set(p.Labels))
}

// criticalPaths keeps the two domains with the fewest matching pods, as
// upstream does: [0] always holds the minimum while one node's pods change
// (a preemption's dry run, nominated pods).
type criticalPaths [2]struct {
	value string
	num   int
}

func newCriticalPaths() criticalPaths {
	return criticalPaths{{num: math.MaxInt32}, {num: math.MaxInt32}}
}

func (p *criticalPaths) update(value string, num int) {
	i := -1
	switch value {
	case p[0].value:
		i = 0
	case p[1].value:
		i = 1
	}
	if i >= 0 {
		p[i].num = num
		if p[0].num > p[1].num {
			p[0], p[1] = p[1], p[0]
		}
		return
	}
	switch {
	case num < p[0].num:
		p[1] = p[0]
		p[0].value, p[0].num = value, num
	case num < p[1].num:
		p[1].value, p[1].num = value, num
	}
}

// evenPodsSpread filters by the pod's DoNotSchedule constraints.
type evenPodsSpread struct{}

func (evenPodsSpread) Name() string { return "EvenPodsSpread" }

const spreadKey = "EvenPodsSpread"

// spreadState counts, per hard constraint, the matching pods of each
// eligible domain.
type spreadState struct {
	constraints []spreadConstraint
	counts      []map[string]int
	paths       []criticalPaths
}

func (evenPodsSpread) PreFilter(cs *CycleState, pi *PodInfo) {
	constraints, _, err := spreadConstraints(cs.Snapshot, pi.Pod, corev1.DoNotSchedule)
	if err != nil {
		cs.Reject("EvenPodsSpread", ReasonSpreadConstraintsInvalid, true)
		return
	}
	if len(constraints) == 0 {
		return
	}
	st := &spreadState{constraints: constraints, counts: make([]map[string]int, len(constraints)), paths: make([]criticalPaths, len(constraints))}
	for i := range constraints {
		st.counts[i] = map[string]int{}
	}
	st.countDomains(cs.Snapshot, pi)
	for i := range constraints {
		st.paths[i] = newCriticalPaths()
		for v, n := range st.counts[i] {
			st.paths[i].update(v, n)
		}
	}
	cs.Write(spreadKey, st)
}

// countDomains sets every eligible domain's count: the domains from the
// nodes, the counts from the pods the selectors match (found through the
// index, not by walking every pod of every node).
func (st *spreadState) countDomains(s *Snapshot, pi *PodInfo) {
	// eligible[i] caches, per node, whether it counts for constraint i.
	eligible := make([]map[*NodeInfo]bool, len(st.constraints))
	for i := range eligible {
		eligible[i] = make(map[*NodeInfo]bool)
	}
	for _, ni := range s.Nodes {
		if !hasTopologyKeys(ni, st.constraints) {
			continue
		}
		for i := range st.constraints {
			c := &st.constraints[i]
			if !c.includes(pi, ni) {
				continue
			}
			eligible[i][ni] = true
			v, _ := ni.Label(c.topologyKey)
			if _, ok := st.counts[i][v]; !ok {
				st.counts[i][v] = 0
			}
		}
	}
	for i := range st.constraints {
		c := &st.constraints[i]
		if c.selector.Empty() {
			continue
		}
		s.Pods.forEachSelected(c.selector, func(ep *PodInfo, ni *NodeInfo) {
			if eligible[i][ni] && c.countable(pi.Pod.Namespace, ep.Pod) {
				v, _ := ni.Label(c.topologyKey)
				st.counts[i][v]++
			}
		})
	}
}

// Clone copies the counts for a preemption's dry run or nominated pods.
func (st *spreadState) Clone() any {
	out := &spreadState{constraints: st.constraints, counts: make([]map[string]int, len(st.counts)), paths: slices.Clone(st.paths)}
	for i, m := range st.counts {
		out.counts[i] = maps.Clone(m)
	}
	return out
}

// update counts other, on ni, once more or once less, as upstream's
// updateWithPod does (which, unlike the first count, neither skips
// terminating pods nor treats an empty selector apart).
func (st *spreadState) update(pi, other *PodInfo, ni *NodeInfo, delta int) {
	if other.Pod.Namespace != pi.Pod.Namespace || !hasTopologyKeys(ni, st.constraints) {
		return
	}
	for i := range st.constraints {
		c := &st.constraints[i]
		if !c.selector.Matches(labels.Set(other.Pod.Labels)) || !c.includes(pi, ni) {
			continue
		}
		v, _ := ni.Label(c.topologyKey)
		st.counts[i][v] += delta
		st.paths[i].update(v, st.counts[i][v])
	}
}

func (evenPodsSpread) AddPod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo) {
	if st, _ := cs.Read(spreadKey).(*spreadState); st != nil {
		st.update(pi, other, ni, 1)
	}
}

func (evenPodsSpread) RemovePod(cs *CycleState, pi, other *PodInfo, ni *NodeInfo) {
	if st, _ := cs.Read(spreadKey).(*spreadState); st != nil {
		st.update(pi, other, ni, -1)
	}
}

// minMatch is the global minimum a constraint's skew is measured from: 0
// while fewer domains than minDomains are eligible.
func (st *spreadState) minMatch(i int) int {
	if len(st.counts[i]) < int(st.constraints[i].minDomains) {
		return 0
	}
	return st.paths[i][0].num
}

// skew is what the node's domain's skew would be with the pod there.
func (st *spreadState) skew(i int, pi *PodInfo, value string) int {
	self := 0
	if st.constraints[i].selector.Matches(labels.Set(pi.Pod.Labels)) {
		self = 1
	}
	return st.counts[i][value] + self - st.minMatch(i)
}

func (evenPodsSpread) Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	st, _ := cs.Read(spreadKey).(*spreadState)
	if st == nil {
		return nil
	}
	for i := range st.constraints {
		v, ok := ni.Label(st.constraints[i].topologyKey)
		if !ok {
			return []string{ReasonSpreadMissingLabel}
		}
		if st.skew(i, pi, v) > int(st.constraints[i].maxSkew) {
			return []string{ReasonSpreadConstraintsNotMatch}
		}
	}
	return nil
}

// resolvable: victims that match the selector lower their domain's count;
// a node without the topology key never fits.
func (evenPodsSpread) resolvable(_ *PodInfo, _ *NodeInfo, reasons []string) bool {
	return reasons[0] == ReasonSpreadConstraintsNotMatch
}

// SkewVerdict is one hard constraint's verdict on one node: the node's
// domain, how many matching pods it holds, the global minimum, and the
// skew the pod would make there.
type SkewVerdict struct {
	TopologyKey string
	Domain      string
	Matching    int
	Min         int
	Skew        int
	MaxSkew     int32
	// Missing: the node lacks the topology key.
	Missing bool
}

// String reads "topology.kubernetes.io/zone=us-east-1a: 2 matching, min 0, skew 3 > maxSkew 1".
func (v SkewVerdict) String() string {
	if v.Missing {
		return fmt.Sprintf("%s: node has no such label", v.TopologyKey)
	}
	op := "<="
	if v.Skew > int(v.MaxSkew) {
		op = ">"
	}
	return fmt.Sprintf("%s=%s: %d matching, min %d, skew %d %s maxSkew %d", v.TopologyKey, v.Domain, v.Matching, v.Min, v.Skew, op, v.MaxSkew)
}

// SpreadVerdicts returns, for a decision, the hard spread constraints'
// verdict on a node (nil when the pod has none).
func (d *Decision) SpreadVerdicts(node string) []SkewVerdict {
	if d.cycle == nil {
		return nil
	}
	ni := d.cycle.Snapshot.node(node)
	if ni == nil {
		return nil
	}
	st, _ := d.cycle.Read(spreadKey).(*spreadState)
	if st == nil {
		return nil
	}
	out := make([]SkewVerdict, len(st.constraints))
	for i := range st.constraints {
		c := &st.constraints[i]
		v, ok := ni.Label(c.topologyKey)
		out[i] = SkewVerdict{TopologyKey: c.topologyKey, Domain: v, MaxSkew: c.maxSkew, Missing: !ok}
		if ok {
			out[i].Matching, out[i].Min, out[i].Skew = st.counts[i][v], st.minMatch(i), st.skew(i, d.podInfo, v)
		}
	}
	return out
}
