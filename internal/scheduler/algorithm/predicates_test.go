package algorithm

import (
	"strings"
	"testing"

	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

func TestSummaryCountsReasons(t *testing.T) {
	nodes := []*corev1.Node{
		node("a", map[string]string{"zone": "us"}), node("b", map[string]string{"zone": "us"}), node("c", map[string]string{"zone": "us"}),
		node("d", map[string]string{"zone": "emea"}, corev1.Taint{Key: "dedicated", Value: "groupName", Effect: corev1.TaintEffectNoSchedule}),
		node("e", map[string]string{"zone": "emea"}, corev1.Taint{Key: "dedicated", Value: "groupName", Effect: corev1.TaintEffectNoSchedule}),
		node("f", map[string]string{"zone": "emea"}, corev1.Taint{Key: "dedicated", Value: "groupName", Effect: corev1.TaintEffectNoSchedule}),
	}
	p := pod("p", nil)
	p.Spec.NodeSelector = map[string]string{"zone": "emea"}
	a := mustAlgorithm(t, policyOf(preds("PodToleratesNodeTaints", "MatchNodeSelector"), nil))
	d := decide(t, a, p, snapshot(nodes, nil, Listers{}))
	if d.Feasible() {
		t.Fatalf("scheduled on %s", d.Selected)
	}
	want := "0/6 nodes are available: 3 node(s) didn't match node selector, 3 node(s) had untolerated taint {dedicated: groupName}."
	if got := d.Summary(); got != want {
		t.Errorf("summary\n got %q\nwant %q", got, want)
	}
	if f := d.Filtered["a"]; f.Predicate != "MatchNodeSelector" {
		t.Errorf("node a rejected by %s", f.Predicate)
	}
}

func TestPredicates(t *testing.T) {
	gpuNode := node("gpu", nil)
	gpuNode.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("2")
	portPod := func(port int32, ip string) *corev1.Pod {
		p := pod("ports", nil)
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: port, HostIP: ip}}
		return p
	}
	critical := withRequests(pod("critical", nil), "8", "1Gi")
	critical.Spec.Priority = ptr.To(int32(2000001000))
	bestEffort := pod("be", nil)
	pressured := node("mp", nil)
	pressured.Status.Conditions = append(pressured.Status.Conditions,
		corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue})
	notReady := node("nr", nil)
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	cordoned := node("cordoned", nil)
	cordoned.Spec.Unschedulable = true
	gpuPod := pod("gpu", nil)
	gpuPod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("3")}

	cases := []struct {
		name      string
		predicate string
		pod       *corev1.Pod
		node      *corev1.Node
		existing  []*corev1.Pod
		reason    string // "" = fits
	}{
		{"cpu fits", "PodFitsResources", withRequests(pod("p", nil), "3", "1Gi"), node("n", nil), nil, ""},
		{"cpu short", "PodFitsResources", withRequests(pod("p", nil), "3", "1Gi"), node("n", nil),
			[]*corev1.Pod{withRequests(pod("q", nil), "2", "1Gi")}, "Insufficient cpu"},
		{"memory short", "PodFitsResources", withRequests(pod("p", nil), "1", "17Gi"), node("n", nil), nil, "Insufficient memory"},
		{"gpu short", "PodFitsResources", gpuPod, gpuNode, nil, "Insufficient nvidia.com/gpu"},
		{"gpu absent", "PodFitsResources", gpuPod, node("n", nil), nil, "Insufficient nvidia.com/gpu"},
		{"critical pods checked too", "GeneralPredicates", critical, node("n", nil), nil, "Insufficient cpu"},
		{"non-critical checked", "GeneralPredicates", withRequests(pod("p", nil), "8", "1Gi"), node("n", nil), nil, "Insufficient cpu"},
		{"host port free", "PodFitsHostPorts", portPod(8080, ""), node("n", nil), []*corev1.Pod{portPod(9090, "")}, ""},
		{"host port taken", "PodFitsHostPorts", portPod(8080, ""), node("n", nil), []*corev1.Pod{portPod(8080, "10.0.0.1")}, ReasonHostPortsNotFree},
		{"PodFitsPorts alias", "PodFitsPorts", portPod(8080, "10.0.0.1"), node("n", nil), []*corev1.Pod{portPod(8080, "")}, ReasonHostPortsNotFree},
		{"hostname", "HostName", onNode(pod("p", nil), "other"), node("n", nil), nil, ReasonHostNameNotMatch},
		{"best effort on memory pressure", "CheckNodeMemoryPressure", bestEffort, pressured, nil, ReasonMemoryPressure},
		{"burstable on memory pressure", "CheckNodeMemoryPressure", withRequests(pod("p", nil), "1", "1Gi"), pressured, nil, ""},
		{"not ready", "CheckNodeCondition", pod("p", nil), notReady, nil, ReasonNodeNotReady},
		{"cordoned", "CheckNodeUnschedulable", pod("p", nil), cordoned, nil, ReasonNodeUnschedulable},
		{"NoExecute only ignores NoSchedule", "PodToleratesNodeNoExecuteTaints", pod("p", nil),
			node("n", nil, corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoSchedule}), nil, ""},
		{"NoExecute untolerated", "PodToleratesNodeNoExecuteTaints", pod("p", nil),
			node("n", nil, corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}), nil, "node(s) had untolerated taint {k: v}"},
		{"PreferNoSchedule does not filter", "PodToleratesNodeTaints", pod("p", nil),
			node("n", nil, corev1.Taint{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := mustAlgorithm(t, policyOf(preds(tc.predicate), nil))
			var existing []*corev1.Pod
			for _, e := range tc.existing {
				existing = append(existing, onNode(e, tc.node.Name))
			}
			d := a.Schedule(t.Context(), tc.pod, snapshot([]*corev1.Node{tc.node}, existing, Listers{}), Options{Explain: true})
			if tc.reason == "" {
				if !d.Feasible() {
					t.Fatalf("rejected: %+v", d.Filtered[tc.node.Name])
				}
				return
			}
			f := d.Filtered[tc.node.Name]
			if f == nil || !strings.Contains(strings.Join(f.Reasons, ";"), tc.reason) {
				t.Fatalf("failure %+v, want reason %q", f, tc.reason)
			}
		})
	}
}

func TestTolerations(t *testing.T) {
	taint := corev1.Taint{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoSchedule}
	cases := []struct {
		name string
		tol  corev1.Toleration
		ok   bool
	}{
		{"equal", corev1.Toleration{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "value1", Effect: corev1.TaintEffectNoSchedule}, true},
		{"default operator is Equal", corev1.Toleration{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoSchedule}, true},
		{"wrong value", corev1.Toleration{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "other", Effect: corev1.TaintEffectNoSchedule}, false},
		{"exists", corev1.Toleration{Key: "key1", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}, true},
		{"exists any effect", corev1.Toleration{Key: "key1", Operator: corev1.TolerationOpExists}, true},
		{"wrong effect", corev1.Toleration{Key: "key1", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{"tolerate everything", corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{"empty key with Equal matches any key with that value", corev1.Toleration{Operator: corev1.TolerationOpEqual, Value: "value1"}, true},
		{"comparison operators are off", corev1.Toleration{Key: "key1", Operator: "Gt", Value: "0"}, false},
		{"unknown operator", corev1.Toleration{Key: "key1", Operator: "Matches", Value: "value1"}, false},
	}
	for _, tc := range cases {
		// The predicate answers exactly what upstream's helper does.
		upstream := corev1helpers.TolerationsTolerateTaint(klog.Background(), []corev1.Toleration{tc.tol}, &taint, false)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{taint}}}
		pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{tc.tol}}}
		got := podToleratesNodeTaints{name: "PodToleratesNodeTaints"}.Filter(nil, NewPodInfo(pod), NewNodeInfo(node)) == nil
		if got != tc.ok || got != upstream {
			t.Errorf("%s: tolerated=%v, upstream %v, want %v", tc.name, got, upstream, tc.ok)
		}
	}
}

// TestMultipleTaints is the example of 14.9.2.1: node1 has three taints,
// the pod tolerates two; the NoSchedule one it does not tolerate keeps it
// off the node.
func TestMultipleTaints(t *testing.T) {
	n := node("node1", nil,
		corev1.Taint{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoExecute},
		corev1.Taint{Key: "key2", Value: "value2", Effect: corev1.TaintEffectNoSchedule})
	p := pod("p", nil)
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "value1", Effect: corev1.TaintEffectNoSchedule},
		{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "value1", Effect: corev1.TaintEffectNoExecute},
	}
	a := mustAlgorithm(t, policyOf(preds("PodToleratesNodeTaints"), nil))
	d := decide(t, a, p, snapshot([]*corev1.Node{n}, nil, Listers{}))
	if d.Feasible() || d.Filtered["node1"].Reasons[0] != "node(s) had untolerated taint {key2: value2}" {
		t.Errorf("decision %+v %+v", d.Selected, d.Filtered["node1"])
	}
	// The NoExecute predicate alone lets it run there (it already does).
	a = mustAlgorithm(t, policyOf(preds("PodToleratesNodeNoExecuteTaints"), nil))
	if d := decide(t, a, p, snapshot([]*corev1.Node{n}, nil, Listers{})); !d.Feasible() {
		t.Errorf("NoExecute-only check rejected a pod tolerating the NoExecute taint")
	}
}

func TestNodeAffinityRequired(t *testing.T) {
	us := node("us", map[string]string{"e2e-az-NorthSouth": "e2e-az-North", "zone": "us", "rank": "5"})
	emea := node("emea", map[string]string{"zone": "emea", "rank": "1"})
	term := func(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: reqs}
	}
	withAffinity := func(terms ...corev1.NodeSelectorTerm) *corev1.Pod {
		p := pod("p", nil)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
		return p
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"In", withAffinity(term(corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"us"}})), []string{"us"}},
		{"NotIn", withAffinity(term(corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"us"}})), []string{"emea"}},
		{"Exists", withAffinity(term(corev1.NodeSelectorRequirement{Key: "e2e-az-NorthSouth", Operator: corev1.NodeSelectorOpExists})), []string{"us"}},
		{"DoesNotExist", withAffinity(term(corev1.NodeSelectorRequirement{Key: "e2e-az-NorthSouth", Operator: corev1.NodeSelectorOpDoesNotExist})), []string{"emea"}},
		{"Gt", withAffinity(term(corev1.NodeSelectorRequirement{Key: "rank", Operator: corev1.NodeSelectorOpGt, Values: []string{"3"}})), []string{"us"}},
		{"Lt", withAffinity(term(corev1.NodeSelectorRequirement{Key: "rank", Operator: corev1.NodeSelectorOpLt, Values: []string{"3"}})), []string{"emea"}},
		{"terms OR'd", withAffinity(
			term(corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"us"}}),
			term(corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"emea"}})), []string{"emea", "us"}},
		{"expressions AND'd", withAffinity(term(
			corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"us"}},
			corev1.NodeSelectorRequirement{Key: "rank", Operator: corev1.NodeSelectorOpLt, Values: []string{"3"}})), nil},
		{"matchFields for DaemonSets", withAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"emea"}}}}), []string{"emea"}},
	}
	a := mustAlgorithm(t, policyOf(preds("MatchNodeSelector"), nil))
	for _, tc := range cases {
		d := a.Schedule(t.Context(), tc.pod, snapshot([]*corev1.Node{us, emea}, nil, Listers{}), Options{Explain: true})
		var got []string
		for _, s := range d.Scored {
			got = append(got, s.Node)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: feasible %v, want %v", tc.name, got, tc.want)
		}
	}
	// nodeSelector AND nodeAffinity.
	p := withAffinity(term(corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpExists}))
	p.Spec.NodeSelector = map[string]string{"zone": "emea"}
	if d := decide(t, a, p, snapshot([]*corev1.Node{us, emea}, nil, Listers{})); d.Selected != "emea" || len(d.Scored) != 1 {
		t.Errorf("nodeSelector and affinity: selected %q among %d", d.Selected, len(d.Scored))
	}
}

func TestLabelsPresenceAndInvalidPolicy(t *testing.T) {
	p := policyOf([]policy.PredicatePolicy{{Name: "RequireRegion", Argument: &policy.PredicateArgument{
		LabelsPresence: &policy.LabelsPresence{Labels: []string{"region"}, Presence: true}}},
		{Name: "BuildingNodesAvoid", Argument: &policy.PredicateArgument{
			LabelsPresence: &policy.LabelsPresence{Labels: []string{"building"}, Presence: false}}}}, nil)
	a := mustAlgorithm(t, p)
	nodes := []*corev1.Node{
		node("r", map[string]string{"region": "r1"}),
		node("rb", map[string]string{"region": "r1", "building": "b1"}),
		node("none", nil),
	}
	d := decide(t, a, pod("p", nil), snapshot(nodes, nil, Listers{}))
	if d.Selected != "r" || len(d.Filtered) != 2 {
		t.Errorf("selected %q, filtered %v", d.Selected, d.Filtered)
	}
	if f := d.Filtered["rb"]; f.Predicate != "BuildingNodesAvoid" {
		t.Errorf("rb rejected by %q", f.Predicate)
	}
	if _, err := New(policyOf(preds("Nope"), nil), 1); err == nil {
		t.Errorf("an invalid policy built an algorithm")
	}
}
