package algorithm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

func randomNodeSelectorRequirement(r *rand.Rand, fieldsOnly bool) corev1.NodeSelectorRequirement {
	ops := []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
		corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt, "Bogus"}
	keys := []string{"zone", "tier", "size", "gpu"}
	vals := []string{"a", "b", "3", "10", "-1", "x y"}
	if fieldsOnly {
		req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists}[r.IntN(3)]}
		for range r.IntN(3) {
			req.Values = append(req.Values, fmt.Sprintf("n%d", r.IntN(4)))
		}
		return req
	}
	req := corev1.NodeSelectorRequirement{Key: keys[r.IntN(len(keys))], Operator: ops[r.IntN(len(ops))]}
	for range r.IntN(3) {
		req.Values = append(req.Values, vals[r.IntN(len(vals))])
	}
	return req
}

func randomNodeSelectorTerm(r *rand.Rand) corev1.NodeSelectorTerm {
	var t corev1.NodeSelectorTerm
	for range r.IntN(3) {
		t.MatchExpressions = append(t.MatchExpressions, randomNodeSelectorRequirement(r, false))
	}
	for range r.IntN(2) {
		t.MatchFields = append(t.MatchFields, randomNodeSelectorRequirement(r, true))
	}
	return t
}

// The compiled node selectors decide exactly as component-helpers'
// nodeaffinity does, for random selectors (bad ones included) and nodes.
func TestNodeSelectorsMatchUpstream(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 3000 {
		labels := map[string]string{}
		for _, k := range []string{"zone", "tier", "size", "gpu"} {
			if r.IntN(2) == 0 {
				labels[k] = []string{"a", "b", "3", "10", "-1"}[r.IntN(5)]
			}
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", r.IntN(4)), Labels: labels}}
		pod := &corev1.Pod{}
		if r.IntN(3) == 0 {
			pod.Spec.NodeSelector = map[string]string{"zone": []string{"a", "b"}[r.IntN(2)]}
		}
		na := &corev1.NodeAffinity{}
		if r.IntN(4) != 0 {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
			for range r.IntN(3) {
				na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, randomNodeSelectorTerm(r))
			}
		}
		for range r.IntN(3) {
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.PreferredSchedulingTerm{Weight: int32(r.IntN(3)), Preference: randomNodeSelectorTerm(r)})
		}
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: na}
		ni := NewNodeInfo(n)

		want, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(n)
		want = want && err == nil
		pi := NewPodInfo(pod)
		got := !pi.hasNodeSelector || pi.nodeSelector.matches(ni)
		if got != want {
			t.Fatalf("round %d: required: got %v, upstream %v\nnode %+v\nselector %+v affinity %+v", round, got, want, n.ObjectMeta, pod.Spec.NodeSelector, na.RequiredDuringSchedulingIgnoredDuringExecution)
		}

		var wantScore int64
		up, upErr := nodeaffinity.NewPreferredSchedulingTerms(na.PreferredDuringSchedulingIgnoredDuringExecution)
		if upErr == nil {
			wantScore = up.Score(n)
		}
		terms, err := preferredTerms(pod)
		if (err != nil) != (upErr != nil) {
			t.Fatalf("round %d: preferred terms error %v, upstream %v", round, err, upErr)
		}
		var gotScore int64
		for i := range terms {
			if terms[i].matches(ni) {
				gotScore += terms[i].weight
			}
		}
		if gotScore != wantScore {
			t.Fatalf("round %d: preferred score %d, upstream %d\nnode %+v\nterms %+v", round, gotScore, wantScore, n.ObjectMeta, na.PreferredDuringSchedulingIgnoredDuringExecution)
		}
	}
}
