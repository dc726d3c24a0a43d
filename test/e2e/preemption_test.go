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
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/scheduler"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// priorityClass creates a PriorityClass for the test (kept if it exists).
func priorityClass(t *testing.T, name string, value int32) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := env.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// The autoscaler chapter's "pod priority and preemption" beside its
// priority cutoff: a node full of pods below the cutoff, and a pod of high
// priority that fits once they go. The autoscaler leaves expendable pods
// out of its simulation (so the pod "fits" and adds no node); the
// scheduler preempts them, so the pod runs on the node there is, as on
// OpenShift.
func TestHighPriorityPodPreemptsBesideThePriorityCutoff(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "preempt")
	priorityClass(t, "e2e-expendable", -100)
	priorityClass(t, "e2e-important", 1000)
	const set = "as-preempt"
	newMachineSet(t, set, 1, func(ms *machinev1.MachineSet) {
		ms.Spec.Template.Spec.Labels = map[string]string{"autoscale-e2e": set}
		ms.Spec.Template.Spec.ProviderSpec.Value = machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "capstan.large", Zone: "sim-zone-b"})
	})
	node := waitMachinesRunning(t, set, 1)[0].Status.NodeRef.Name
	createMachineAutoscaler(t, set, set, 1, 3)
	createClusterAutoscaler(t, chapterClusterAutoscaler(t))
	for i := range 3 {
		p := autoscaledPod(fmt.Sprintf("batch-%d", i), set, "1")
		p.Spec.PriorityClassName = "e2e-expendable"
		env.CreatePod(t, ns, p)
	}
	for i := range 3 {
		env.WaitPodRunning(t, ns, fmt.Sprintf("batch-%d", i))
	}
	important := autoscaledPod("important", set, "2")
	important.Spec.PriorityClassName = "e2e-important"
	created := env.CreatePod(t, ns, important)
	got := env.WaitPod(t, ns, "important", 2*time.Minute, func(p *corev1.Pod) (bool, string) {
		return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	})
	if got.Spec.NodeName != node {
		t.Errorf("the important pod runs on %s, want the set's one node %s", got.Spec.NodeName, node)
	}
	if r := replicas(t, set); r != 1 {
		t.Errorf("%s grew to %d replicas: preemption, not a node, should have made room", set, r)
	}
	for _, e := range env.Events(t, ns, "important", autoscaler.ReasonTriggeredScaleUp) {
		t.Errorf("the important pod triggered a scale-up: %s", e.Message)
	}
	// Upstream takes the fewest victims that make room: 2 CPUs of the 3
	// expendable ones on a 4-CPU node, each marked and told why.
	preempted := 0
	for i := range 3 {
		name := fmt.Sprintf("batch-%d", i)
		for _, e := range env.Events(t, ns, name, scheduler.ReasonPreempted) {
			if want := fmt.Sprintf("Preempted by pod %s on node %s", created.UID, node); e.Message != want {
				t.Errorf("%s: Preempted event %q, want %q", name, e.Message, want)
			}
			preempted++
		}
	}
	if preempted != 1 {
		t.Errorf("%d pods preempted, want 1 (one expendable pod's CPU makes room for 2 CPUs beside the 2 others)", preempted)
	}
	fs := eventMessage(t, ns, "important", scheduler.ReasonFailedScheduling, "nodes are available")
	if strings.Contains(fs, "preemption:") {
		t.Errorf("FailedScheduling of a pod preemption made room for says preemption failed: %q", fs)
	}
	// An expendable pod that finds no room adds no node either (and
	// preempts nobody of higher priority): the autoscaler says why.
	late := autoscaledPod("batch-late", set, "1")
	late.Spec.PriorityClassName = "e2e-expendable"
	env.CreatePod(t, ns, late)
	eventMessage(t, ns, "batch-late", autoscaler.ReasonNotTriggerScaleUp, "priority -100 below cutoff -10")
	if r := replicas(t, set); r != 1 {
		t.Errorf("%s grew to %d replicas for an expendable pod", set, r)
	}
	if p := env.GetPod(t, ns, "important"); p == nil || p.DeletionTimestamp != nil {
		t.Errorf("the important pod was preempted by a pod of lower priority")
	}
	_ = ctx
}

// spreadNodes adds one tainted 4-CPU node per zone, labelled for the
// test's pods only.
func spreadNodes(t *testing.T, prefix string, zones ...string) []string {
	t.Helper()
	var names []string
	for _, z := range zones {
		name := prefix + "-" + z
		addNodeInZone(t, name, z, map[string]string{"spread-e2e": prefix}, corev1.Taint{Key: "spread-e2e", Value: prefix, Effect: corev1.TaintEffectNoSchedule})
		names = append(names, name)
	}
	return names
}

func spreadPodSpec(prefix, cpu string) corev1.PodSpec {
	return corev1.PodSpec{
		NodeSelector:                  map[string]string{"spread-e2e": prefix},
		Tolerations:                   []corev1.Toleration{{Key: "spread-e2e", Operator: corev1.TolerationOpExists}},
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}},
	}
}

// A hard zone spread counts a full zone: with zone C's node full, six
// one-CPU replicas of maxSkew 1 over zones A, B and C run one in A and one
// in B, and the four others stay Pending rather than pile into A and B,
// as kube-scheduler leaves them.
func TestHardZoneSpreadCountsAFullZone(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "spread")
	const prefix = "spread-full"
	zones := []string{"spread-zone-a", "spread-zone-b", "spread-zone-c"}
	nodes := spreadNodes(t, prefix, zones...)
	filler := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler"}, Spec: spreadPodSpec(prefix, "3500m")}
	filler.Spec.NodeSelector = map[string]string{corev1.LabelHostname: nodes[2]}
	env.CreatePod(t, ns, filler)
	env.WaitPodRunning(t, ns, "filler")
	spec := spreadPodSpec(prefix, "1")
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
		WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](6), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "spread"}}, Spec: spec}},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every replica tried: two bound, four unschedulable by the spread.
	var byZone map[string]int
	var pending []corev1.Pod
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, err.Error()
		}
		byZone, pending = map[string]int{}, nil
		for _, p := range pods.Items {
			switch {
			case p.Spec.NodeName != "":
				byZone[zoneOf(nodes, zones, p.Spec.NodeName)]++
			case unschedulableBy(&p, "node(s) didn't match pod topology spread constraints"):
				pending = append(pending, p)
			}
		}
		return len(pods.Items) == 6 && len(pending) == 4 && byZone[zones[0]]+byZone[zones[1]] == 2,
			fmt.Sprintf("%d replicas, bound by zone %v, %d pending by the spread", len(pods.Items), byZone, len(pending))
	})
	if byZone[zones[0]] != 1 || byZone[zones[1]] != 1 || byZone[zones[2]] != 0 {
		t.Errorf("bound replicas by zone %v, want one in each of A and B", byZone)
	}
	// The message is upstream's, preemption's part included: no pod of
	// lower priority could make room anywhere.
	msg := pending[0].Status.Conditions[0].Message
	for _, c := range pending[0].Status.Conditions {
		if c.Type == corev1.PodScheduled {
			msg = c.Message
		}
	}
	for _, want := range []string{"2 node(s) didn't match pod topology spread constraints", "preemption: 0/"} {
		if !strings.Contains(msg, want) {
			t.Errorf("FailedScheduling %q lacks %q", msg, want)
		}
	}
	// capstan explain pod gives each node's skew, and what preemption
	// would do.
	out := capstanOK(t, "explain", "pod", ns+"/"+pending[0].Name, "--kubeconfig", env.Kubeconfig)
	for _, want := range []string{"Topology spread (DoNotSchedule):",
		"  " + nodes[0] + ": topology.kubernetes.io/zone=" + zones[0] + ": 1 matching, min 0, skew 2 > maxSkew 1",
		"Preemption: 0/"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain pod lacks %q:\n%s", want, out)
		}
	}
}

func zoneOf(nodes, zones []string, node string) string {
	for i, n := range nodes {
		if n == node {
			return zones[i]
		}
	}
	return "elsewhere:" + node
}

// unschedulableBy reports a pod the scheduler found no node for, for a
// reason among others.
func unschedulableBy(p *corev1.Pod, reason string) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return strings.Contains(c.Message, reason)
		}
	}
	return false
}
