package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// twoNodesOneSlowPodEach makes MachineSet set (1 to 2) grow to two nodes
// and leaves on each one replica of Deployment slow, whose pods take an
// hour to stop (terminationGracePeriodSeconds and the simulated shutdown
// both 3600) and carry finalizer, if any: the autoscaler must drain one
// node to remove it. A filler of 3.5 cores per node places the slow pods
// one a node, and goes.
func twoNodesOneSlowPodEach(t *testing.T, ns, set, finalizer string) {
	t.Helper()
	deployment(t, ns, "filler", set, "3500m", 2)
	waitReplicas(t, set, 2)
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := runningPods(t, ns, "filler")
		return n == 2, fmt.Sprintf("%d filler pods running", n)
	})
	pod := autoscaledPod("slow", set, "500m")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3600)
	meta := metav1.ObjectMeta{Labels: map[string]string{"app": "slow"}, Annotations: map[string]string{"sim.capstan.dev/shutdown-seconds": "3600"}}
	if finalizer != "" {
		meta.Finalizers = []string{finalizer}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "slow"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "slow"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: meta, Spec: pod.Spec}},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Before the MachineSet goes: its drain would wait an hour for them.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Client.AppsV1().Deployments(ns).Delete(ctx, "slow", metav1.DeleteOptions{})
		dropFinalizers(t, ns, "app=slow")
		_ = env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "app=slow"})
	})
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := runningPods(t, ns, "slow")
		return n == 2, fmt.Sprintf("%d slow pods running", n)
	})
	scaleDeployment(t, ns, "filler", 0)
}

// dropFinalizers takes the finalizers off the pods of a selector.
func dropFinalizers(t *testing.T, ns, selector string) {
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return
	}
	for _, p := range list.Items {
		_, _ = env.Client.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
}

// The autoscaler drains a node before it lowers the MachineSet, evicting
// each pod with its grace period bounded by maxPodGracePeriod: a pod that
// would take an hour to stop is gone in five seconds, and the node with
// it, as upstream's cluster-autoscaler removes it.
func TestScaleDownDrainBoundsGracePeriods(t *testing.T) {
	ns := env.Namespace(t, "as-grace")
	autoscaledMachineSet(t, "as-grace", 1, 2)
	createClusterAutoscaler(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"maxPodGracePeriod":5,"scaleDown":{"enabled":true,"delayAfterAdd":"0s","delayAfterDelete":"0s","delayAfterFailure":"0s","unneededTime":"2s"}}}`)
	twoNodesOneSlowPodEach(t, ns, "as-grace", "")
	waitReplicas(t, "as-grace", 1)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		n := runningPods(t, ns, "slow")
		return n == 2, fmt.Sprintf("%d slow pods running", n)
	})
	eventMessage(t, ns, "", autoscaler.ReasonScaleDown, "deleting pod for node scale down")
	eventMessage(t, machine.Namespace, autoscaler.StatusConfigMap, autoscaler.ReasonScaleDown, "removed with drain")
}

// A drain that fails leaves the MachineSet and the machine as they were
// and gives the node back, as upstream's does: here the evicted pod does
// not go (a finalizer holds it) within its bounded grace and the headroom.
func TestScaleDownFailedDrainKeepsTheMachine(t *testing.T) {
	ns := env.Namespace(t, "as-drainfail")
	autoscaledMachineSet(t, "as-drainfail", 1, 2)
	createClusterAutoscaler(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"maxPodGracePeriod":2,"scaleDown":{"enabled":true,"delayAfterAdd":"0s","delayAfterDelete":"0s","delayAfterFailure":"1h","unneededTime":"2s"}}}`)
	twoNodesOneSlowPodEach(t, ns, "as-drainfail", "e2e.capstan.dev/hold")
	// Until the drain fails, the MachineSet keeps its two replicas and no
	// machine is marked or deleted.
	failed := false
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		if r := replicas(t, "as-drainfail"); r != 2 {
			t.Fatalf("the MachineSet went to %d replicas before the drain ended", r)
		}
		for _, e := range env.Events(t, machine.Namespace, autoscaler.StatusConfigMap, autoscaler.ReasonScaleDownFailed) {
			failed = failed || strings.Contains(e.Message, "pods remaining after timeout")
		}
		return failed, "no ScaleDownFailed event for the drain"
	})
	ms, err := machines(t).MachineV1beta1().Machines(machine.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=as-drainfail"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Items {
		if m.DeletionTimestamp != nil || m.Annotations[machine.DeleteMachineAnnotation] != "" {
			t.Errorf("machine %s marked or deleted after a failed drain", m.Name)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "autoscale-e2e=as-drainfail"})
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes.Items {
			for _, taint := range n.Spec.Taints {
				if taint.Key == autoscaler.ToBeDeletedTaint {
					return false, "node " + n.Name + " is still tainted " + taint.Key
				}
			}
		}
		return true, ""
	})
	if r := replicas(t, "as-drainfail"); r != 2 {
		t.Errorf("%d replicas after the failed drain, want 2", r)
	}
}

// An unready node of an autoscaled MachineSet is removed once unneeded
// for the unready time (upstream's 20 minutes, here the MachineSet's
// autoscaling-options-scaledownunreadytime), whatever the unneeded time.
func TestScaleDownRemovesUnreadyNodes(t *testing.T) {
	newMachineSet(t, "as-unready", 2, func(ms *machinev1.MachineSet) {
		ms.Annotations = map[string]string{autoscaler.UnreadyTimeAnnotation: "3s"}
		ms.Spec.Template.Spec.Labels = map[string]string{"autoscale-e2e": "as-unready"}
	})
	createMachineAutoscaler(t, "as-unready", "as-unready", 1, 2)
	got := waitMachinesRunning(t, "as-unready", 2)
	createClusterAutoscaler(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"scaleDown":{"enabled":true,"delayAfterAdd":"0s","delayAfterDelete":"0s","delayAfterFailure":"0s","unneededTime":"1h"}}}`)
	// A node that goes unready while still starting counts as starting,
	// as upstream's: this one has been up longer than the startup time.
	stopped := got[0]
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		age := time.Since(env.GetNode(t, stopped.Status.NodeRef.Name).CreationTimestamp.Time)
		return age > e2eNodeStartupTime+time.Second, fmt.Sprintf("node %s is %s old", stopped.Status.NodeRef.Name, age)
	})
	capstanOK(t, "sim", "--kubeconfig", env.Kubeconfig, "node", "stop", stopped.Status.NodeRef.Name)
	waitMachineGone(t, stopped.Name, 2*time.Minute)
	if r := replicas(t, "as-unready"); r != 1 {
		t.Errorf("%d replicas, want 1", r)
	}
	if m := getMachine(t, got[1].Name); m.DeletionTimestamp != nil {
		t.Errorf("the ready machine %s was removed too", m.Name)
	}
}
