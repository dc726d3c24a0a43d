package taints

import (
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// comparisonOperators enables the Gt/Lt toleration operators; they are
// behind a feature gate that is off by default, as in the embedded
// apiserver, which refuses them on pods.
const comparisonOperators = false

// Has reports whether taints hold one with this key and effect (the
// identity of a taint on a node: at most one per key and effect).
func Has(list []corev1.Taint, key string, effect corev1.TaintEffect) bool {
	for i := range list {
		if list[i].Key == key && list[i].Effect == effect {
			return true
		}
	}
	return false
}

// Tolerated reports whether some toleration tolerates the taint, with
// upstream's matching rules (k8s.io/component-helpers).
func Tolerated(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	return corev1helpers.TolerationsTolerateTaint(klog.Background(), tolerations, taint, comparisonOperators)
}

// FirstUntolerated returns the first of the node's taints with one of the
// given effects that the tolerations do not tolerate.
func FirstUntolerated(list []corev1.Taint, tolerations []corev1.Toleration, effects ...corev1.TaintEffect) (corev1.Taint, bool) {
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), list, tolerations, func(t *corev1.Taint) bool {
		for _, e := range effects {
			if t.Effect == e {
				return true
			}
		}
		return false
	}, comparisonOperators)
}
