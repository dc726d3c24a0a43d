package algorithm

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// node builds a ready node with 4 cpu, 16Gi and 110 pods.
func node(name string, lbls map[string]string, taints ...corev1.Taint) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Allocatable: alloc, Capacity: alloc,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

var uidSeq int

func pod(name string, lbls map[string]string) *corev1.Pod {
	uidSeq++
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: lbls, UID: types.UID(fmt.Sprintf("uid-%d", uidSeq))},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
	}
}

func withRequests(p *corev1.Pod, cpu, mem string) *corev1.Pod {
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return p
}

func onNode(p *corev1.Pod, n string) *corev1.Pod {
	p.Spec.NodeName = n
	return p
}

// snapshot places pods (by spec.nodeName) on nodes.
func snapshot(nodes []*corev1.Node, pods []*corev1.Pod, l Listers) *Snapshot {
	infos := make([]*NodeInfo, len(nodes))
	byName := map[string]*NodeInfo{}
	for i, n := range nodes {
		infos[i] = NewNodeInfo(n)
		byName[n.Name] = infos[i]
	}
	for _, p := range pods {
		byName[p.Spec.NodeName].AddPod(NewPodInfo(p))
	}
	return NewSnapshot(infos, l)
}

func mustAlgorithm(t *testing.T, p *policy.Policy) *Algorithm {
	t.Helper()
	a, err := New(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func decide(t *testing.T, a *Algorithm, p *corev1.Pod, s *Snapshot) *Decision {
	t.Helper()
	return a.Schedule(context.Background(), p, s, Options{})
}

func policyOf(preds []policy.PredicatePolicy, prios []policy.PriorityPolicy) *policy.Policy {
	return &policy.Policy{Kind: "Policy", APIVersion: "v1", Predicates: preds, Priorities: prios}
}

func preds(names ...string) []policy.PredicatePolicy {
	out := make([]policy.PredicatePolicy, len(names))
	for i, n := range names {
		out[i] = policy.PredicatePolicy{Name: n}
	}
	return out
}

func prios(names ...string) []policy.PriorityPolicy {
	out := make([]policy.PriorityPolicy, len(names))
	for i, n := range names {
		out[i] = policy.PriorityPolicy{Name: n, Weight: 1}
	}
	return out
}
