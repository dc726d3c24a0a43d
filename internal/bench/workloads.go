package bench

import (
	"fmt"
	"math"
	"sort"

	"github.com/capstan-dev/capstan/internal/taints"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/sim"
)

// Workloads of the scheduler benchmark. topology-spread and preemption
// are scheduler_perf's TopologySpreading and PreemptionBasic.
var Workloads = []string{"basic", "node-affinity", "pod-anti-affinity", "preferred-pod-affinity", "taints", "topology-spread", "preemption"}

// The preemption workload's priorities and sizes, scheduler_perf's
// PreemptionBasic: 4-CPU nodes holding four 900m pods of priority 0 each,
// then pods of priority 10 asking 3 CPUs, each of which takes three of
// them. Every tenth measured pod has preemptionPolicy Never and stays
// Pending.
const (
	benchHighPriorityClass = "bench-high"
	// benchNeverPriorityClass has the same value and preemptionPolicy
	// Never (the priority admission sets a pod's policy from its class).
	benchNeverPriorityClass = "bench-high-never"
	benchHighPriority       = 10
	lowPodsPerNode          = 4
	neverPreemptEvery       = 10
)

// groupSize is how many pods share an (anti-)affinity group.
const groupSize = 50

// benchNodeSpec is the i-th node of a workload's cluster.
func benchNodeSpec(workload string, i int) sim.InstanceSpec {
	spec := sim.InstanceSpec{
		Name: fmt.Sprintf("node-%05d", i), Zone: sim.DefaultZones[i%len(sim.DefaultZones)],
		CPU: resource.MustParse("32"), Memory: resource.MustParse("128Gi"), Pods: 110,
		Labels: map[string]string{},
	}
	switch workload {
	case "preemption":
		spec.CPU, spec.Memory = resource.MustParse("4"), resource.MustParse("16Gi")
	case "node-affinity":
		if i%2 == 0 {
			spec.Labels["tier"] = "gold"
		}
	case "taints":
		if i%2 == 0 {
			spec.Taints = append(spec.Taints, corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule})
		}
		if i%10 == 1 {
			spec.Taints = append(spec.Taints, corev1.Taint{Key: "spot", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule})
		}
	}
	return spec
}

// benchWorkloadPod is the i-th pod of a workload.
func benchWorkloadPod(workload string, i int) *corev1.Pod {
	group := fmt.Sprintf("g%04d", i/groupSize)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Labels: map[string]string{"group": group}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/bench:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}},
		},
	}
	groupTerm := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}},
		TopologyKey:   corev1.LabelHostname,
	}
	switch workload {
	case "node-affinity":
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn,
					Values: sim.DefaultZones[:2]}}}}},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 10,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "tier", Operator: corev1.NodeSelectorOpIn, Values: []string{"gold"}}}}}},
		}}
	case "pod-anti-affinity":
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{groupTerm}}}
	case "preferred-pod-affinity":
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: groupTerm}}}}
	case "taints":
		if i%2 == 0 {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoSchedule}}
		}
	case "topology-spread":
		// Each group spreads over the zones with maxSkew 1: the skew each
		// ends with is fixed by its size, so both schedulers must reach
		// it.
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}}}}
	case "preemption":
		p.Spec.PriorityClassName = benchHighPriorityClass
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("500Mi")}
		if i%neverPreemptEvery == neverPreemptEvery-1 {
			p.Spec.PriorityClassName = benchNeverPriorityClass
		}
	}
	return p
}

// benchInitPods are the pods a workload's cluster holds before the
// measured ones come: scheduler_perf's init pods, placed by the scheduler
// under test.
func benchInitPods(workload string, nodes int) []*corev1.Pod {
	var n int
	var requests corev1.ResourceList
	switch workload {
	case "preemption":
		n, requests = lowPodsPerNode*nodes, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("900m"), corev1.ResourceMemory: resource.MustParse("500Mi")}
	case "topology-spread":
		n, requests = 2*nodes, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	default:
		return nil
	}
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("init-%05d", i), Labels: map[string]string{"init": "true"}},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/bench:1", Resources: corev1.ResourceRequirements{Requests: requests}}}},
		}
	}
	return out
}

// Outcome is what a run decided, which both schedulers must decide alike:
// how many measured pods were bound and how many stayed Pending, how many
// pods preemption took, and the largest zone skew of a spread group.
type Outcome struct {
	Bound        int `json:"bound"`
	Pending      int `json:"pending"`
	Preempted    int `json:"preempted"`
	MaxGroupSkew int `json:"maxGroupSkew"`
}

// outcomeOf reads a run's outcome off the nodes and the pods left: the
// measured ones, and the init pods preemption did not take.
func outcomeOf(nodes []*corev1.Node, pods []*corev1.Pod, initPods int) Outcome {
	var o Outcome
	zoneOf := map[string]string{}
	zones := map[string]bool{}
	for _, n := range nodes {
		zoneOf[n.Name] = n.Labels[corev1.LabelTopologyZone]
		zones[n.Labels[corev1.LabelTopologyZone]] = true
	}
	perGroup := map[string]map[string]int{}
	initLeft := 0
	for _, p := range pods {
		if p.Labels["init"] == "true" {
			if p.DeletionTimestamp == nil {
				initLeft++
			}
			continue
		}
		if p.Spec.NodeName == "" {
			o.Pending++
			continue
		}
		o.Bound++
		if len(p.Spec.TopologySpreadConstraints) > 0 {
			g := p.Labels["group"]
			if perGroup[g] == nil {
				perGroup[g] = map[string]int{}
			}
			perGroup[g][zoneOf[p.Spec.NodeName]]++
		}
	}
	o.Preempted = initPods - initLeft
	for _, counts := range perGroup {
		lo, hi := -1, 0
		for z := range zones {
			c := counts[z]
			if lo < 0 || c < lo {
				lo = c
			}
			hi = max(hi, c)
		}
		o.MaxGroupSkew = max(o.MaxGroupSkew, hi-lo)
	}
	return o
}

// settled reports whether a measured pod is decided: bound, or found
// unschedulable with no node nominated for it (a pod preemption made room
// for is not decided until it binds).
func settled(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" {
		return true
	}
	if p.Status.NominatedNodeName != "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// Quality is how well pods were placed.
type Quality struct {
	// Violations counts pods placed against a hard constraint: required
	// node or pod (anti-)affinity, untolerated NoSchedule/NoExecute taints,
	// or more requests than the node allocates.
	Violations int
	NodesUsed  int
	// MinPerNode, MaxPerNode and StdDev describe pods per node over every
	// node that could run them.
	MinPerNode, MaxPerNode int
	StdDev                 float64
}

// placementQuality checks every bound pod against its constraints.
func placementQuality(nodes []*corev1.Node, pods []*corev1.Pod) Quality {
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	perNode := map[string][]*corev1.Pod{}
	var q Quality
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		perNode[p.Spec.NodeName] = append(perNode[p.Spec.NodeName], p)
	}
	for _, p := range pods {
		n := byName[p.Spec.NodeName]
		if n == nil {
			continue
		}
		if ok, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); err != nil || !ok {
			q.Violations++
			continue
		}
		if untolerated(p, n) {
			q.Violations++
			continue
		}
		if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
			for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				sel, _ := metav1.LabelSelectorAsSelector(term.LabelSelector)
				for _, other := range perNode[p.Spec.NodeName] { // hostname topology
					if other.UID != p.UID && sel.Matches(labels.Set(other.Labels)) {
						q.Violations++
						break
					}
				}
			}
		}
	}
	for name, ps := range perNode {
		var cpu int64
		for _, p := range ps {
			cpu += p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
		}
		if n := byName[name]; n != nil && cpu > n.Status.Allocatable.Cpu().MilliValue() {
			q.Violations++
		}
	}
	// Spread over the nodes the first pod could use.
	var counts []int
	for _, n := range nodes {
		eligible := len(pods) > 0 && !untolerated(pods[0], n)
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pods[0]).Match(n); !ok {
			eligible = false
		}
		if eligible || len(perNode[n.Name]) > 0 {
			counts = append(counts, len(perNode[n.Name]))
		}
	}
	sort.Ints(counts)
	if len(counts) > 0 {
		q.MinPerNode, q.MaxPerNode = counts[0], counts[len(counts)-1]
		var sum float64
		for _, c := range counts {
			sum += float64(c)
			if c > 0 {
				q.NodesUsed++
			}
		}
		mean := sum / float64(len(counts))
		var v float64
		for _, c := range counts {
			v += (float64(c) - mean) * (float64(c) - mean)
		}
		q.StdDev = math.Sqrt(v / float64(len(counts)))
	}
	return q
}

// untolerated reports whether the node has a NoSchedule or NoExecute taint
// the pod does not tolerate.
func untolerated(p *corev1.Pod, n *corev1.Node) bool {
	_, found := taints.FirstUntolerated(n.Spec.Taints, p.Spec.Tolerations, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute)
	return found
}
