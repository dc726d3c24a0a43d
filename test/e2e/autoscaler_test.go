package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
)

var machineAutoscalers = schema.GroupVersionResource{Group: "autoscaling.openshift.io", Version: "v1beta1", Resource: "machineautoscalers"}

// chapterClusterAutoscaler is the chapter's ClusterAutoscaler (4.7.1), as
// printed there.
func chapterClusterAutoscaler(t *testing.T) string {
	raw, err := os.ReadFile("../../internal/autoscaler/testdata/chapter-clusterautoscaler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func unstructuredFrom(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// createClusterAutoscaler creates the ClusterAutoscaler "default" from doc
// and deletes it when the test ends.
func createClusterAutoscaler(t *testing.T, doc string) {
	t.Helper()
	api := env.Dynamic.Resource(autoscaler.ClusterAutoscalerResource)
	if _, err := api.Create(context.Background(), unstructuredFrom(t, doc), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ClusterAutoscaler: %v", err)
	}
	t.Cleanup(func() {
		_ = api.Delete(context.Background(), "default", metav1.DeleteOptions{})
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			_, err := api.Get(context.Background(), "default", metav1.GetOptions{})
			return apierrors.IsNotFound(err), "ClusterAutoscaler default still there"
		})
	})
}

// createMachineAutoscaler makes MachineSet set a node group of min..max and
// deletes the MachineAutoscaler when the test ends.
func createMachineAutoscaler(t *testing.T, name, set string, minR, maxR int) {
	t.Helper()
	createMachineAutoscalerOn(t, env.Dynamic, name, set, minR, maxR)
	t.Cleanup(func() { deleteMachineAutoscaler(t, name) })
}

// createMachineAutoscalerOn makes MachineSet set a node group of
// min..max on the cluster of dyn.
func createMachineAutoscalerOn(t *testing.T, dyn dynamic.Interface, name, set string, minR, maxR int) {
	t.Helper()
	doc := fmt.Sprintf(`
apiVersion: autoscaling.openshift.io/v1beta1
kind: MachineAutoscaler
metadata:
  name: %s
  namespace: openshift-machine-api
spec:
  minReplicas: %d
  maxReplicas: %d
  scaleTargetRef:
    apiVersion: machine.openshift.io/v1beta1
    kind: MachineSet
    name: %s
`, name, minR, maxR, set)
	api := dyn.Resource(machineAutoscalers).Namespace(machine.Namespace)
	if _, err := api.Create(context.Background(), unstructuredFrom(t, doc), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating MachineAutoscaler %s: %v", name, err)
	}
}

func deleteMachineAutoscaler(t *testing.T, name string) {
	api := env.Dynamic.Resource(machineAutoscalers).Namespace(machine.Namespace)
	_ = api.Delete(context.Background(), name, metav1.DeleteOptions{})
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		_, err := api.Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "MachineAutoscaler " + name + " still there (finalizer)"
	})
}

// The API server refuses what OpenShift's operator refuses, with a message
// that names the fault; the chapter's ClusterAutoscaler applies unchanged.
func TestAutoscalerAPIValidation(t *testing.T) {
	ctx := context.Background()
	cas := env.Dynamic.Resource(autoscaler.ClusterAutoscalerResource)
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"second name", `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"other"},"spec":{}}`,
			`Name "other" is invalid, only "default" is allowed`},
		{"bad duration", `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},"spec":{"scaleDown":{"enabled":true,"delayAfterAdd":"10x"}}}`,
			`invalid duration "10x"`},
		{"threshold", `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},"spec":{"scaleDown":{"enabled":true,"utilizationThreshold":"1.5"}}}`,
			`invalid utilization threshold "1.5"`},
		{"cores min above max", `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},"spec":{"resourceLimits":{"cores":{"min":9,"max":8}}}}`,
			"max must be greater than or equal to min"},
	} {
		_, err := cas.Create(ctx, unstructuredFrom(t, tc.doc), metav1.CreateOptions{})
		if err == nil {
			_ = cas.Delete(ctx, "default", metav1.DeleteOptions{})
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want it to say %q", tc.name, err, tc.want)
		}
	}
	mas := env.Dynamic.Resource(machineAutoscalers).Namespace(machine.Namespace)
	bad := `{"apiVersion":"autoscaling.openshift.io/v1beta1","kind":"MachineAutoscaler","metadata":{"name":"bad"},
		"spec":{"minReplicas":3,"maxReplicas":1,"scaleTargetRef":{"kind":"MachineSet","name":"x"}}}`
	if _, err := mas.Create(ctx, unstructuredFrom(t, bad), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "maxReplicas must be greater than or equal to minReplicas") {
		t.Errorf("min > max: %v", err)
	}
	createClusterAutoscaler(t, chapterClusterAutoscaler(t))
	if _, err := cas.Create(ctx, unstructuredFrom(t, chapterClusterAutoscaler(t)), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a second ClusterAutoscaler default: %v, want AlreadyExists", err)
	}
	got, err := cas.Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(got.Object, "spec", "scaleDown", "delayAfterFailure"); v != "30s" {
		t.Errorf("stored delayAfterFailure %q", v)
	}
}

// A MachineAutoscaler writes its bounds onto its MachineSet, rewrites them
// when they change, refuses a MachineSet another one owns, and takes them
// off when it is deleted.
func TestMachineAutoscalerAnnotatesItsMachineSet(t *testing.T) {
	ctx := context.Background()
	newMachineSet(t, "ma-target", 0)
	sets := machines(t).MachineV1beta1().MachineSets(machine.Namespace)
	annotations := func() map[string]string {
		ms, err := sets.Get(ctx, "ma-target", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ms.Annotations
	}
	createMachineAutoscaler(t, "ma-one", "ma-target", 1, 4)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		a := annotations()
		return a[autoscaler.MinSizeAnnotation] == "1" && a[autoscaler.MaxSizeAnnotation] == "4" &&
			a[autoscaler.TargetOwnerAnnotation] == "openshift-machine-api/ma-one", fmt.Sprintf("annotations %v", a)
	})
	// The Machine API stamps the capacity a node of the set will have, for
	// scale-up from zero.
	if a := annotations(); a[machine.CPUAnnotation] != "2" || a[machine.MemoryAnnotation] != "8192" {
		t.Errorf("capacity annotations %v, want vCPU 2 and memoryMb 8192 (capstan.medium)", a)
	}
	api := env.Dynamic.Resource(machineAutoscalers).Namespace(machine.Namespace)
	ma, err := api.Get(ctx, "ma-one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(ma.Object, int64(6), "spec", "maxReplicas")
	if _, err := api.Update(ctx, ma, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		a := annotations()
		return a[autoscaler.MaxSizeAnnotation] == "6", "max-size " + a[autoscaler.MaxSizeAnnotation]
	})
	createMachineAutoscaler(t, "ma-two", "ma-target", 0, 2)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		evs := env.Events(t, machine.Namespace, "ma-two", "FailedSetOwner")
		return len(evs) > 0 && strings.Contains(evs[0].Message, "owned by openshift-machine-api/ma-one"), "no FailedSetOwner event on ma-two"
	})
	if a := annotations(); a[autoscaler.MaxSizeAnnotation] != "6" {
		t.Errorf("ma-two overwrote ma-one's bounds: %v", a)
	}
	deleteMachineAutoscaler(t, "ma-one")
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		a := annotations()
		_, hasMin := a[autoscaler.MinSizeAnnotation]
		owner := a[autoscaler.TargetOwnerAnnotation]
		// ma-two may now take the free MachineSet: either way ma-one's
		// bounds are gone.
		return owner != "openshift-machine-api/ma-one" && (!hasMin || owner == "openshift-machine-api/ma-two"), fmt.Sprintf("annotations %v", a)
	})
}

// autoscaledPod requests cpu and runs only on the nodes of MachineSet set.
func autoscaledPod(name, set, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"autoscale-e2e": set},
			Tolerations:                   []corev1.Toleration{{Key: e2eTaint.Key, Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}},
		},
	}
}

// autoscaledMachineSet is a MachineSet of 4-core machines whose nodes carry
// the label autoscaledPod selects, scaled between min and max.
func autoscaledMachineSet(t *testing.T, name string, minR, maxR int) {
	t.Helper()
	newMachineSet(t, name, 0, func(ms *machinev1.MachineSet) {
		ms.Spec.Template.Spec.Labels = map[string]string{"autoscale-e2e": name}
		ms.Spec.Template.Spec.ProviderSpec.Value = machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "capstan.large", Zone: "sim-zone-b"})
	})
	createMachineAutoscaler(t, name, name, minR, maxR)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		ms, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && ms.Annotations[autoscaler.MaxSizeAnnotation] == fmt.Sprint(maxR), "no max-size annotation yet"
	})
}

func replicas(t *testing.T, set string) int32 {
	ms, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Get(context.Background(), set, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(ms.Spec.Replicas, 0)
}

// eventMessage waits for an event of reason on an object and returns its
// message.
func eventMessage(t *testing.T, ns, name, reason, contains string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, e := range env.Events(t, ns, name, reason) {
			if strings.Contains(e.Message, contains) {
				msg = e.Message
				return true, ""
			}
		}
		return false, fmt.Sprintf("no %s event on %s saying %q", reason, name, contains)
	})
	return msg
}

// Pending pods make their MachineSet grow to the nodes first-fit
// decreasing needs (7: "when pods cannot be scheduled ... the cluster
// autoscaler increases the size of the cluster"); a pod no new node can
// take, and a pod beyond the maximum, say why.
func TestScaleUpFromPendingPods(t *testing.T) {
	ns := env.Namespace(t, "scale-up")
	autoscaledMachineSet(t, "as-up", 0, 3)
	createClusterAutoscaler(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},"spec":{"scaleDown":{"enabled":false}}}`)
	for i := range 3 {
		env.CreatePod(t, ns, autoscaledPod(fmt.Sprintf("web-%d", i), "as-up", "3"))
	}
	// The scheduler may report the pods in one loop or several: each loop
	// grows the group for the pods that fit no registered or upcoming
	// node, so every pod ends up running, on 3 nodes, one per node.
	for i := range 3 {
		env.WaitPodRunning(t, ns, fmt.Sprintf("web-%d", i))
	}
	if r := replicas(t, "as-up"); r != 3 {
		t.Fatalf("as-up has %d replicas, want 3", r)
	}
	triggered := 0
	for i := range 3 {
		for _, e := range env.Events(t, ns, fmt.Sprintf("web-%d", i), autoscaler.ReasonTriggeredScaleUp) {
			if strings.HasPrefix(e.Message, "pod triggered scale-up: [{MachineSet/openshift-machine-api/as-up ") {
				triggered++
			}
		}
	}
	if triggered == 0 {
		t.Errorf("no TriggeredScaleUp event naming MachineSet/openshift-machine-api/as-up")
	}
	env.CreatePod(t, ns, autoscaledPod("huge", "as-up", "6"))
	msg := eventMessage(t, ns, "huge", autoscaler.ReasonNotTriggerScaleUp, "scale-up")
	if msg != "pod didn't trigger scale-up: 1 pod does not fit the template: Insufficient cpu" {
		t.Errorf("huge pod: %q", msg)
	}
	env.CreatePod(t, ns, autoscaledPod("one-more", "as-up", "3"))
	msg = eventMessage(t, ns, "one-more", autoscaler.ReasonNotTriggerScaleUp, "scale-up")
	if msg != "pod didn't trigger scale-up: 1 max node group size reached" {
		t.Errorf("pod beyond the maximum: %q", msg)
	}
	if r := replicas(t, "as-up"); r != 3 {
		t.Errorf("as-up grew beyond its maximum: %d replicas", r)
	}
	// capstan explain pod adds the autoscaler's view, group by group.
	out := capstanOK(t, "explain", "pod", ns+"/huge", "--kubeconfig", env.Kubeconfig)
	for _, want := range []string{"Autoscaler: pod didn't trigger scale-up: 1 pod does not fit the template: Insufficient cpu",
		"  MachineSet/openshift-machine-api/as-up: pod does not fit the template: Insufficient cpu"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain pod lacks %q:\n%s", want, out)
		}
	}
}

// testSpeedClusterAutoscaler scales down after 2 seconds unneeded, with no
// cooldowns.
const testSpeedClusterAutoscaler = `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"scaleDown":{"enabled":true,"delayAfterAdd":"0s","delayAfterDelete":"0s","delayAfterFailure":"0s","unneededTime":"2s"}}}`

// deployment runs replicas pods of cpu on the nodes of MachineSet set.
func deployment(t *testing.T, ns, name, set, cpu string, replicas int32) {
	t.Helper()
	pod := autoscaledPod(name, set, cpu)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: pod.Spec},
		},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func scaleDeployment(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	// The deployment controller writes the status meanwhile: read again
	// on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := env.Client.AppsV1().Deployments(ns).GetScale(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = replicas
		_, err = env.Client.AppsV1().Deployments(ns).UpdateScale(context.Background(), name, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runningPods counts the running pods of app.
func runningPods(t *testing.T, ns, app string) int {
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// waitReplicas waits until a MachineSet has want replicas and as many
// nodes.
func waitReplicas(t *testing.T, set string, want int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		r := replicas(t, set)
		nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "autoscale-e2e=" + set})
		if err != nil {
			return false, err.Error()
		}
		why := make([]string, 0, len(nodes.Items))
		for _, n := range nodes.Items {
			why = append(why, n.Name+": "+n.Annotations[autoscaler.ScaleDownStatusAnnotation])
		}
		return int(r) == want && len(nodes.Items) == want, fmt.Sprintf("%s: %d replicas, %d nodes, want %d; nodes say %q", set, r, len(nodes.Items), want, why)
	})
}

// The chapter's HPA sequence with the replicas changed by hand: more
// replicas, more nodes; fewer replicas, the nodes left empty go after
// unneededTime, through the Machine API; never below the minimum.
func TestScaleUpThenDownWithReplicas(t *testing.T) {
	ns := env.Namespace(t, "up-down")
	autoscaledMachineSet(t, "as-updown", 1, 3)
	createClusterAutoscaler(t, testSpeedClusterAutoscaler)
	deployment(t, ns, "web", "as-updown", "3", 3)
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := runningPods(t, ns, "web")
		return n == 3, fmt.Sprintf("%d of 3 pods running", n)
	})
	waitReplicas(t, "as-updown", 3)
	scaleDeployment(t, ns, "web", 1)
	waitReplicas(t, "as-updown", 1)
	if n := runningPods(t, ns, "web"); n != 1 {
		t.Errorf("%d pods running after the scale-down, want 1", n)
	}
	eventMessage(t, machine.Namespace, autoscaler.StatusConfigMap, autoscaler.ReasonScaleDownEmpty, "Scale-down: removing empty node")
	// At the minimum, an empty node stays and says why.
	scaleDeployment(t, ns, "web", 0)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "autoscale-e2e=as-updown"})
		if err != nil || len(nodes.Items) != 1 {
			return false, fmt.Sprintf("nodes %v %v", nodes, err)
		}
		why := nodes.Items[0].Annotations[autoscaler.ScaleDownStatusAnnotation]
		return why == "unneeded, but MachineSet as-updown is at its minimum size 1", "scale-down status " + why
	})
}

// Each rule of the chapter that keeps a node from being removed, on a node
// of its own: the node says why it stays (annotation) and capstan explain
// node says the same.
func TestScaleDownBlockersOnNodes(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "blockers")
	const set = "as-block"
	newMachineSet(t, set, 8, func(ms *machinev1.MachineSet) {
		ms.Spec.Template.Spec.Labels = map[string]string{"autoscale-e2e": set}
		ms.Spec.Template.Spec.ProviderSpec.Value = machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "capstan.large", Zone: "sim-zone-c"})
	})
	running := waitMachinesRunning(t, set, 8)
	var nodes []string
	for _, m := range running {
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			m := getMachine(t, m.Name)
			return m.Status.NodeRef != nil, "machine " + m.Name + " has no node yet"
		})
		nodes = append(nodes, getMachine(t, m.Name).Status.NodeRef.Name)
	}
	createMachineAutoscaler(t, set, set, 0, 8)
	// Nodes stay unneeded for an hour before they go: long enough for the
	// verdicts to be read.
	createClusterAutoscaler(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"scaleDown":{"enabled":true,"delayAfterAdd":"0s","unneededTime":"1h"}}}`)
	// Pods are pinned with a label of each node's own: PodNodeConstraints
	// refuses a controller's pods that select kubernetes.io/hostname.
	for _, n := range nodes {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"blocker-e2e":%q}}}`, n)
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	small := func(name, node string) *corev1.Pod {
		p := autoscaledPod(name, set, "100m")
		p.Spec.NodeSelector["blocker-e2e"] = node
		return p
	}
	onNodeIn := func(ns, app, node string, mutate func(*corev1.Pod)) {
		p := small(app, node)
		if mutate != nil {
			mutate(p)
		}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}, Annotations: p.Annotations}, Spec: p.Spec}},
		}
		if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	onNode := func(app, node string, mutate func(*corev1.Pod)) { onNodeIn(ns, app, node, mutate) }
	// The blockers go before the machines, or they would block the drain.
	t.Cleanup(func() {
		_ = env.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "guarded", metav1.DeleteOptions{})
		_ = env.Client.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		_ = env.Client.AppsV1().Deployments(metav1.NamespaceSystem).Delete(ctx, "blocker-e2e-system", metav1.DeleteOptions{})
	})
	// node 0: a pod no controller recreates.
	bare := small("bare", nodes[0])
	env.CreatePod(t, ns, bare)
	// node 1: local storage.
	onNode("scratch", nodes[1], func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	})
	// node 2: safe-to-evict "false".
	onNode("pinned", nodes[2], func(p *corev1.Pod) {
		p.Annotations = map[string]string{autoscaler.SafeToEvictAnnotation: "false"}
	})
	// node 3: a PodDisruptionBudget that allows no disruption.
	onNode("guarded", nodes[3], nil)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// node 4: a pod that fits no other node (it wants this very host).
	onNode("stuck", nodes[4], nil)
	// node 5: the scale-down-disabled annotation.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, autoscaler.ScaleDownDisabledAnnotation)
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, nodes[5], types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// node 6: empty, unneeded, waiting for unneededTime.
	// node 7: a kube-system pod without a PodDisruptionBudget.
	onNodeIn(metav1.NamespaceSystem, "blocker-e2e-system", nodes[7], nil)
	for _, tc := range []struct {
		rule, node, want string
	}{
		{"pods without a controller", nodes[0], "pod " + ns + "/bare is not replicated (no controller that recreates it)"},
		{"local storage", nodes[1], "has local storage (volume scratch)"},
		{"safe-to-evict false", nodes[2], `is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`},
		{"restrictive PDB", nodes[3], "not enough pod disruption budget to move pod " + ns + "/guarded"},
		{"pods that cannot move", nodes[4], "can go to no other node"},
		{"scale-down disabled", nodes[5], `node is annotated cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`},
		{"unneeded, not long enough", nodes[6], "unneeded for "},
		{"kube-system pod without a PDB", nodes[7], "non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: kube-system/blocker-e2e-system-"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
				got := env.GetNode(t, tc.node).Annotations[autoscaler.ScaleDownStatusAnnotation]
				return strings.Contains(got, tc.want), fmt.Sprintf("node %s says %q, want %q", tc.node, got, tc.want)
			})
			out := capstanOK(t, "explain", "node", tc.node, "--kubeconfig", env.Kubeconfig)
			if !strings.Contains(out, "Scale-down: ") || !strings.Contains(out, tc.want) {
				t.Errorf("explain node %s:\n%s", tc.node, out)
			}
		})
	}
	if r := replicas(t, set); r != 8 {
		t.Errorf("%s has %d replicas, want all 8 kept", set, r)
	}
}

// clusterTotals counts the cluster's nodes and cores now.
func clusterTotals(t *testing.T) (nodes int, cores int64) {
	list, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		cores += n.Status.Capacity.Cpu().Value()
	}
	return len(list.Items), cores
}

// The chapter's cores example at the test cluster's size: with room in the
// limit for two more 4-core machines, two are added whatever the pods
// want, and the pods left say which limit holds them; then maxNodesTotal,
// which counts every node, control plane included.
func TestScaleUpWithinClusterLimits(t *testing.T) {
	ns := env.Namespace(t, "limits")
	autoscaledMachineSet(t, "as-limits", 0, 10)
	_, cores := clusterTotals(t)
	maxCores := cores + 2*4 + 3
	createClusterAutoscaler(t, fmt.Sprintf(`{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"resourceLimits":{"cores":{"min":0,"max":%d}},"scaleDown":{"enabled":false}}}`, maxCores))
	for i := range 5 {
		env.CreatePod(t, ns, autoscaledPod(fmt.Sprintf("web-%d", i), "as-limits", "3"))
	}
	waitReplicas(t, "as-limits", 2)
	want := fmt.Sprintf("would exceed cluster cores max %d", maxCores)
	found := false
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		for i := range 5 {
			for _, e := range env.Events(t, ns, fmt.Sprintf("web-%d", i), autoscaler.ReasonNotTriggerScaleUp) {
				found = found || strings.Contains(e.Message, want)
			}
		}
		return found, "no NotTriggerScaleUp saying " + want
	})
	if r := replicas(t, "as-limits"); r != 2 {
		t.Errorf("as-limits has %d replicas beyond the cores limit, want 2", r)
	}
	// maxNodesTotal: one node more than the cluster has now.
	n, _ := clusterTotals(t)
	api := env.Dynamic.Resource(autoscaler.ClusterAutoscalerResource)
	ca, err := api.Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(ca.Object, int64(n+1), "spec", "resourceLimits", "maxNodesTotal")
	_ = unstructured.SetNestedField(ca.Object, int64(1000), "spec", "resourceLimits", "cores", "max")
	if _, err := api.Update(context.Background(), ca, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, "as-limits", 3)
	// The two pods still pending (whichever the scheduler left) say why.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		for i := range 5 {
			for _, e := range env.Events(t, ns, fmt.Sprintf("web-%d", i), autoscaler.ReasonNotTriggerScaleUp) {
				if e.Message == "pod didn't trigger scale-up: max total nodes in cluster reached" {
					return true, ""
				}
			}
		}
		return false, "no NotTriggerScaleUp saying max total nodes in cluster reached"
	})
	if r := replicas(t, "as-limits"); r != 3 {
		t.Errorf("as-limits has %d replicas beyond maxNodesTotal, want 3", r)
	}
}

// Pods below the priority cutoff neither trigger a scale-up nor keep a
// node: the chapter's "best-effort" pods.
func TestPriorityCutoff(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "cutoff")
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-best-effort"}, Value: -20}
	if _, err := env.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	autoscaledMachineSet(t, "as-cutoff", 0, 2)
	createClusterAutoscaler(t, testSpeedClusterAutoscaler)
	p := autoscaledPod("batch", "as-cutoff", "1")
	p.Spec.PriorityClassName = pc.Name
	env.CreatePod(t, ns, p)
	eventMessage(t, ns, "batch", autoscaler.ReasonNotTriggerScaleUp, "pod didn't trigger scale-up: priority -20 below cutoff -10")
	if r := replicas(t, "as-cutoff"); r != 0 {
		t.Fatalf("an expendable pod grew the group to %d", r)
	}
	// A regular pod brings a node; the expendable one runs beside it; when
	// the regular pod goes, the expendable one does not keep the node.
	env.CreatePod(t, ns, autoscaledPod("web", "as-cutoff", "1"))
	waitReplicas(t, "as-cutoff", 1)
	env.WaitPodRunning(t, ns, "batch")
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, "as-cutoff", 0)
}

// A node group whose machines the cloud refuses is backed off and the
// next group takes the scale-up.
func TestScaleUpFailsOverToAnotherGroup(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "failover")
	env.Cloud.InjectFailure(sim.FailureRule{
		Match: func(s sim.InstanceSpec) bool { return strings.HasPrefix(s.Name, "as-first-") },
		Err:   &sim.InstanceError{Reason: sim.ReasonInsufficientCapacity, Message: "no capacity for as-first"},
	})
	t.Cleanup(env.Cloud.ClearFailures)
	autoscaledMachineSet(t, "as-first", 0, 2)
	autoscaledMachineSet(t, "as-second", 0, 2)
	// Both groups label their nodes for their own name: pods select either.
	for _, set := range []string{"as-first", "as-second"} {
		ms, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Get(ctx, set, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ms.Spec.Template.Spec.Labels["failover-e2e"] = "yes"
		if _, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Update(ctx, ms, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prio := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: autoscaler.PriorityConfigMap, Namespace: machine.Namespace},
		Data: map[string]string{"priorities": "50:\n- .*/as-first$\n10:\n- .*/as-second$\n"}}
	if _, err := env.Client.CoreV1().ConfigMaps(machine.Namespace).Create(ctx, prio, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().ConfigMaps(machine.Namespace).Delete(context.Background(), autoscaler.PriorityConfigMap, metav1.DeleteOptions{})
	})
	createClusterAutoscaler(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"expanders":["Priority"],"scaleDown":{"enabled":false}}}`)
	p := autoscaledPod("web", "", "1")
	p.Spec.NodeSelector = map[string]string{"failover-e2e": "yes"}
	env.CreatePod(t, ns, p)
	eventMessage(t, machine.Namespace, autoscaler.StatusConfigMap, autoscaler.ReasonScaleUpFailed, "MachineSet/openshift-machine-api/as-first due to cloudProviderError")
	env.WaitPodRunning(t, ns, "web")
	waitReplicas(t, "as-second", 1)
	waitReplicas(t, "as-first", 0)
}

// A scale-down goes through the Machine API: a preDrain hook on the
// machine holds the drain, and with it the node, until it is removed.
func TestScaleDownHeldByPreDrainHook(t *testing.T) {
	ctx := context.Background()
	const set = "as-hook"
	newMachineSet(t, set, 1, func(ms *machinev1.MachineSet) {
		ms.Spec.Template.Spec.Labels = map[string]string{"autoscale-e2e": set}
		ms.Spec.Template.Spec.LifecycleHooks = machinev1.LifecycleHooks{PreDrain: []machinev1.LifecycleHook{{Name: "e2e-hold", Owner: "e2e"}}}
	})
	running := waitMachinesRunning(t, set, 1)
	name := running[0].Name
	createMachineAutoscaler(t, set, set, 0, 1)
	createClusterAutoscaler(t, testSpeedClusterAutoscaler)
	// The empty node is unneeded and goes: its machine is deleted, and
	// waits for the hook.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		m := getMachine(t, name)
		c := machineCondition(m, machinev1.MachineDrainable)
		return m.DeletionTimestamp != nil && c != nil && c.Status == corev1.ConditionFalse, fmt.Sprintf("machine %s: deleting %v, Drainable %+v", name, m.DeletionTimestamp != nil, c)
	})
	if r := replicas(t, set); r != 0 {
		t.Errorf("%s has %d replicas, want 0", set, r)
	}
	node := env.GetNode(t, name)
	if !slices.ContainsFunc(node.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == autoscaler.ToBeDeletedTaint }) {
		t.Errorf("node %s is not tainted %s: %v", name, autoscaler.ToBeDeletedTaint, node.Spec.Taints)
	}
	m := getMachine(t, name)
	m.Spec.LifecycleHooks = machinev1.LifecycleHooks{}
	if _, err := machines(t).MachineV1beta1().Machines(machine.Namespace).Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMachineGone(t, name, time.Minute)
}
