package testenv

import (
	"context"
	"fmt"
	"time"

	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// CreatePod creates p in ns and fails the test if the apiserver refuses it.
func (e *Env) CreatePod(t TB, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := e.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, p.Name, err)
	}
	return got
}

// GetPod reads a pod, nil when it does not exist.
func (e *Env) GetPod(t TB, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := e.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading pod %s/%s: %v", ns, name, err)
	}
	return p
}

// PodAlive reports whether the pod exists and is not being deleted.
func (e *Env) PodAlive(t TB, ns, name string) bool {
	t.Helper()
	p := e.GetPod(t, ns, name)
	return p != nil && p.DeletionTimestamp == nil
}

// WaitPod waits until the pod satisfies cond and returns it.
func (e *Env) WaitPod(t TB, ns, name string, timeout time.Duration, cond func(*corev1.Pod) (bool, string)) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	Eventually(t, timeout, func() (bool, string) {
		got = e.GetPod(t, ns, name)
		if got == nil {
			return false, fmt.Sprintf("pod %s/%s does not exist", ns, name)
		}
		return cond(got)
	})
	return got
}

// PodCondition returns the pod's condition of type c, or nil.
func PodCondition(p *corev1.Pod, c corev1.PodConditionType) *corev1.PodCondition {
	_, cond := podutil.GetPodCondition(&p.Status, c)
	return cond
}

// PodConditionTrue reports whether the pod's condition of type c is True.
func PodConditionTrue(p *corev1.Pod, c corev1.PodConditionType) bool {
	cond := PodCondition(p, c)
	return cond != nil && cond.Status == corev1.ConditionTrue
}

// WaitPodRunning waits until the pod is Running and Ready.
func (e *Env) WaitPodRunning(t TB, ns, name string) *corev1.Pod {
	t.Helper()
	return e.WaitPod(t, ns, name, 30*time.Second, func(p *corev1.Pod) (bool, string) {
		return p.Status.Phase == corev1.PodRunning && PodConditionTrue(p, corev1.PodReady), fmt.Sprintf("pod %s phase %s, conditions %v", name, p.Status.Phase, p.Status.Conditions)
	})
}

// WaitPodGone waits until the pod is being deleted or gone (evicted).
func (e *Env) WaitPodGone(t TB, ns, name string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() (bool, string) { return !e.PodAlive(t, ns, name), "pod " + name + " still running" })
}

// Events lists the events about an object (any object when involved is
// empty), optionally of one reason.
func (e *Env) Events(t TB, ns, involved, reason string) []corev1.Event {
	t.Helper()
	sel := fields.Set{}
	if involved != "" {
		sel["involvedObject.name"] = involved
	}
	if reason != "" {
		sel["reason"] = reason
	}
	list, err := e.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		t.Fatalf("listing events of %s: %v", involved, err)
	}
	return list.Items
}

// GetNode reads a node and fails the test if it cannot.
func (e *Env) GetNode(t TB, name string) *corev1.Node {
	t.Helper()
	n, err := e.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading node %s: %v", name, err)
	}
	return n
}
