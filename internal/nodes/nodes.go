// Package nodes holds the small questions every part of capstan asks of a
// Node: what a condition says, whether it is Ready, whether it is
// unreachable. Each is answered here once.
package nodes

import corev1 "k8s.io/api/core/v1"

// FindCondition returns the condition of type t among conds, or nil.
func FindCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// Condition returns the node's condition of type t, or nil.
func Condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	return FindCondition(n.Status.Conditions, t)
}

// ConditionStatus returns the status of the node's condition of type t,
// "" when the node does not report it.
func ConditionStatus(n *corev1.Node, t corev1.NodeConditionType) corev1.ConditionStatus {
	if c := Condition(n, t); c != nil {
		return c.Status
	}
	return ""
}

// Ready reports whether the node's Ready condition is True.
func Ready(n *corev1.Node) bool {
	return ConditionStatus(n, corev1.NodeReady) == corev1.ConditionTrue
}

// Unreachable reports whether the node lifecycle controller lost the
// node: its Ready condition is Unknown.
func Unreachable(n *corev1.Node) bool {
	return ConditionStatus(n, corev1.NodeReady) == corev1.ConditionUnknown
}

// IsControlPlane reports whether the node carries a control-plane role
// label (the current or the legacy master one).
func IsControlPlane(n *corev1.Node) bool {
	_, cp := n.Labels[LabelRoleControlPlane]
	_, master := n.Labels[LabelRoleMaster]
	return cp || master
}

// Role labels of nodes.
const (
	LabelRoleMaster       = "node-role.kubernetes.io/master"
	LabelRoleControlPlane = "node-role.kubernetes.io/control-plane"
	LabelRoleWorker       = "node-role.kubernetes.io/worker"
)
