package algorithm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func affinityTerm(key, op string, values []string, topology string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: key, Operator: metav1.LabelSelectorOperator(op), Values: values}}},
		TopologyKey: topology,
	}
}

func zoned(name, zone string) *corev1.Node {
	return node(name, map[string]string{"topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name})
}

// The pod affinity example of 14.7.3.1: team4a must run with team4.
func TestPodAffinityTeam4(t *testing.T) {
	nodes := []*corev1.Node{zoned("n1", "z1"), zoned("n2", "z2")}
	existing := []*corev1.Pod{onNode(pod("team4", map[string]string{"team": "4"}), "n2")}
	p := pod("team4a", nil)
	p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{affinityTerm("team", "In", []string{"4"}, "kubernetes.io/hostname")}}}
	a := mustAlgorithm(t, policyOf(preds("MatchInterPodAffinity"), nil))
	d := decide(t, a, p, snapshot(nodes, existing, Listers{}))
	if d.Selected != "n2" {
		t.Errorf("team4a on %q, want n2", d.Selected)
	}
	if f := d.Filtered["n1"]; f == nil || f.Reasons[0] != ReasonPodAffinityRulesNotMatch {
		t.Errorf("n1: %+v", f)
	}
	// 14.7.3.3: no pod carries the label, so the pod fits nowhere (it does
	// not match its own term).
	d = decide(t, a, p, snapshot(nodes, nil, Listers{}))
	if d.Feasible() {
		t.Errorf("pod with unmatched affinity scheduled on %s", d.Selected)
	}
	// A pod matching its own term may start the group.
	self := pod("self", map[string]string{"team": "4"})
	self.Spec.Affinity = p.Spec.Affinity
	if d := decide(t, a, self, snapshot(nodes, nil, Listers{})); !d.Feasible() {
		t.Errorf("first pod of a self-affine group rejected: %v", d.Summary())
	}
}

// The anti-affinity example of 14.7.3.2: pod-s2 must not share a zone
// with security=S1 pods; existing pods' anti-affinity is symmetric.
func TestPodAntiAffinitySecurity(t *testing.T) {
	nodes := []*corev1.Node{zoned("n1", "z1"), zoned("n2", "z1"), zoned("n3", "z2")}
	s1 := onNode(pod("pod-s1", map[string]string{"security": "S1"}), "n1")
	p := pod("pod-s2", map[string]string{"security": "S2"})
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{affinityTerm("security", "In", []string{"S1"}, "topology.kubernetes.io/zone")}}}
	a := mustAlgorithm(t, policyOf(preds("MatchInterPodAffinity"), prios("InterPodAffinityPriority")))
	d := decide(t, a, p, snapshot(nodes, []*corev1.Pod{s1}, Listers{}))
	if d.Selected != "n3" || len(d.Filtered) != 2 {
		t.Errorf("selected %q filtered %v", d.Selected, d.Filtered)
	}

	// Symmetry: an existing pod's anti-affinity keeps a matching newcomer out.
	guard := onNode(pod("guard", nil), "n3")
	guard.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{affinityTerm("security", "In", []string{"S2"}, "topology.kubernetes.io/zone")}}}
	d = decide(t, a, pod("s2b", map[string]string{"security": "S2"}), snapshot(nodes, []*corev1.Pod{guard}, Listers{}))
	if f := d.Filtered["n3"]; f == nil || f.Reasons[0] != ReasonExistingPodsAntiAffinityNotOK {
		t.Errorf("n3: %+v", f)
	}

	// Preferred anti-affinity only scores.
	pref := pod("pref", nil)
	pref.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100,
			PodAffinityTerm: affinityTerm("security", "In", []string{"S1"}, "topology.kubernetes.io/zone")}}}}
	d = a.Schedule(t.Context(), pref, snapshot(nodes, []*corev1.Pod{s1}, Listers{}), Options{Explain: true})
	if len(d.Filtered) != 0 || d.Selected != "n3" {
		t.Errorf("preferred anti-affinity: selected %q filtered %v", d.Selected, d.Filtered)
	}
	if scoreOf(d, "n1", "InterPodAffinityPriority") != 0 || scoreOf(d, "n3", "InterPodAffinityPriority") != 10 {
		t.Errorf("scores %+v", d.Scored)
	}
}

func TestAffinityNamespaces(t *testing.T) {
	nodes := []*corev1.Node{zoned("n1", "z1"), zoned("n2", "z2")}
	other := onNode(pod("db", map[string]string{"app": "db"}), "n2")
	other.Namespace = "data"
	p := pod("web", nil)
	term := affinityTerm("app", "In", []string{"db"}, "topology.kubernetes.io/zone")
	p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}
	a := mustAlgorithm(t, policyOf(preds("MatchInterPodAffinity"), nil))
	if d := decide(t, a, p, snapshot(nodes, []*corev1.Pod{other}, Listers{})); d.Feasible() {
		t.Errorf("term without namespaces matched a pod of another namespace")
	}
	term.Namespaces = []string{"data"}
	p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{term}
	if d := decide(t, a, p, snapshot(nodes, []*corev1.Pod{other}, Listers{})); d.Selected != "n2" {
		t.Errorf("namespaces: selected %q", d.Selected)
	}
	term.Namespaces = nil
	term.NamespaceSelector = &metav1.LabelSelector{} // every namespace
	p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{term}
	if d := decide(t, a, p, snapshot(nodes, []*corev1.Pod{other}, Listers{})); d.Selected != "n2" {
		t.Errorf("empty namespace selector: selected %q", d.Selected)
	}
}
