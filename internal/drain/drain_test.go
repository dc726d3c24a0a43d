package drain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// policy/v1: a nil selector covers nothing, {} every pod of the namespace.
func TestBudgetCovers(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "web", Labels: map[string]string{"app": "web"}}}
	budget := func(ns string, sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}}
	}
	for _, tc := range []struct {
		name string
		pdb  *policyv1.PodDisruptionBudget
		want bool
	}{
		{"nil selector", budget("web", nil), false},
		{"empty selector", budget("web", &metav1.LabelSelector{}), true},
		{"matching labels", budget("web", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}), true},
		{"other labels", budget("web", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}), false},
		{"empty selector, other namespace", budget("db", &metav1.LabelSelector{}), false},
	} {
		if got := BudgetCovers(tc.pdb, pod); got != tc.want {
			t.Errorf("%s: covers %v, want %v", tc.name, got, tc.want)
		}
	}
}
