package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/util/retry"

	"github.com/capstan-dev/capstan/internal/taints"
	"github.com/capstan-dev/capstan/internal/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/scheduler"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
	"github.com/capstan-dev/capstan/internal/sim"
)

// addNode launches a simulated node with labels and taints and removes it
// when the test ends.
func addNode(t *testing.T, name string, labels map[string]string, nodeTaints ...corev1.Taint) {
	t.Helper()
	addNodeInZone(t, name, "", labels, nodeTaints...)
}

// addNodeInZone is addNode in a zone of its own choosing: the node
// lifecycle controller rate-limits evictions per zone.
func addNodeInZone(t *testing.T, name, zone string, labels map[string]string, nodeTaints ...corev1.Taint) {
	t.Helper()
	ctx := context.Background()
	spec := sim.InstanceSpec{Name: name, Zone: zone, CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"), Pods: 110, Labels: labels, Taints: nodeTaints}
	if _, err := env.Cloud.CreateInstance(ctx, spec); err != nil {
		t.Fatalf("adding node %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = env.Cloud.DeleteInstance(context.Background(), name)
		_ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if err := cluster.WaitNodesReady(ctx, env.Client, []string{name}, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The not-ready taint added at registration must be gone before pods
	// can land.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n := env.GetNode(t, name)
		return !taints.Has(n.Spec.Taints, "node.kubernetes.io/not-ready", corev1.TaintEffectNoSchedule), fmt.Sprintf("taints %v", n.Spec.Taints)
	})
}

func simplePod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "hello-pod", Image: "docker.io/ocpqe/hello-pod"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
}

// waitScheduled waits until the pod is bound and returns its node.
func waitScheduled(t *testing.T, ns, name string) string {
	t.Helper()
	var node string
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = p.Spec.NodeName
		return node != "", fmt.Sprintf("pod %s not scheduled: %v", name, p.Status.Conditions)
	})
	return node
}

// waitFailedScheduling waits for the scheduler to report the pod
// unschedulable and returns the event message.
func waitFailedScheduling(t *testing.T, ns, name string) string {
	t.Helper()
	var msg string
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		for _, e := range env.Events(t, ns, name, scheduler.ReasonFailedScheduling) {
			// Only this pod's: an earlier pod of the same name had its own.
			if e.InvolvedObject.UID == p.UID {
				msg = e.Message
			}
		}
		return msg != "", "no FailedScheduling event"
	})
	if p, err = env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod %s reported unschedulable but bound to %s", name, p.Spec.NodeName)
	}
	return msg
}

// schedulerSees waits until the default scheduler's cache reflects a node
// change the test just made, without guessing how long its informer
// takes: it creates probe pods pinned to the node (by its hostname label)
// until the scheduler decides on one as only the changed node allows:
// bound when wantBound, or else reported unschedulable with a message
// containing reason. Probes are deleted.
func schedulerSees(t *testing.T, ns, node string, wantBound bool, reason string, mutate ...func(*corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		name := fmt.Sprintf("probe-%s-%d", node, i)
		p := simplePod(name, nil)
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		for _, m := range mutate {
			m(p)
		}
		env.CreatePod(t, ns, p)
		var bound, rejected bool
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			got := env.GetPod(t, ns, name)
			bound = got != nil && got.Spec.NodeName != ""
			for _, e := range env.Events(t, ns, name, scheduler.ReasonFailedScheduling) {
				// Events outlive their pod: one of an earlier probe of the
				// same name says nothing about this one.
				rejected = rejected || (got != nil && e.InvolvedObject.UID == got.UID && strings.Contains(e.Message, reason))
			}
			return bound || rejected, fmt.Sprintf("probe %s neither bound nor rejected", name)
		})
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if bound == wantBound && (bound || rejected) {
			return
		}
		if i == 50 {
			t.Fatalf("the scheduler never saw the change of node %s", node)
		}
	}
}

func TestDefaultSchedulerRunsDeploymentsAndDaemonSets(t *testing.T) {
	ns := env.Namespace(t, "sched")
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: simplePod("", nil).Spec},
		},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}}, Spec: simplePod("", nil).Spec},
		},
	}
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == 3, fmt.Sprintf("%d/3 ready", d.Status.ReadyReplicas)
	})
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	spread := map[string]int{}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Spec.NodeName, "master-") {
			t.Errorf("pod %s landed on tainted %s", p.Name, p.Spec.NodeName)
		}
		spread[p.Spec.NodeName]++
	}
	if len(spread) != 3 {
		t.Errorf("3 replicas on %d nodes (%v); SelectorSpreadPriority should spread them over the 3 workers", len(spread), spread)
	}
	// Every schedulable node gets its daemon pod, bound by the scheduler
	// through the DaemonSet's matchFields node affinity.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		d, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.DesiredNumberScheduled > 0 && d.Status.NumberReady == d.Status.DesiredNumberScheduled,
			fmt.Sprintf("%d/%d ready", d.Status.NumberReady, d.Status.DesiredNumberScheduled)
	})
	dsPods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range dsPods.Items {
		want := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
		if p.Spec.NodeName != want {
			t.Errorf("daemon pod %s on %s, its affinity names %s", p.Name, p.Spec.NodeName, want)
		}
	}
	// Events are recorded asynchronously, after the binding they report.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Scheduled"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if strings.HasPrefix(e.Message, "Successfully assigned "+ns+"/") && e.Source.Component == scheduler.DefaultSchedulerName {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no Scheduled event from default-scheduler among %d", len(evs.Items))
	})
}

// 14.6.3: node affinity with and without a matching label.
func TestNodeAffinityExamples(t *testing.T) {
	ns := env.Namespace(t, "nodeaff")
	addNode(t, "aff-node1", map[string]string{"zone": "us"})
	podS1 := func(name string) *corev1.Pod {
		p := simplePod(name, nil)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"us"}}}}}}}}
		return p
	}
	env.CreatePod(t, ns, podS1("pod-s1"))
	if node := waitScheduled(t, ns, "pod-s1"); node != "aff-node1" {
		t.Errorf("pod-s1 on %s, want aff-node1", node)
	}
	env.WaitPodRunning(t, ns, "pod-s1")

	capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "label", "node", "aff-node1", "zone=emea", "--overwrite")
	// Wait until the scheduler's cache has the new label.
	schedulerSees(t, ns, "aff-node1", true, "", func(p *corev1.Pod) { p.Spec.NodeSelector["zone"] = "emea" })
	env.CreatePod(t, ns, podS1("pod-s1-emea"))
	msg := waitFailedScheduling(t, ns, "pod-s1-emea")
	if !strings.Contains(msg, "node(s) didn't match node selector") || !strings.HasPrefix(msg, "0/") {
		t.Errorf("FailedScheduling message %q", msg)
	}
	env.WaitPod(t, ns, "pod-s1-emea", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		c := testenv.PodCondition(p, corev1.PodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable, fmt.Sprintf("PodScheduled %+v", c)
	})
	// A node change, not a timer, brings the pod back: relabel and it goes
	// (waitScheduled gives up after 30s, before the one-minute flush of
	// unschedulable pods could retry it).
	capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "label", "node", "aff-node1", "zone=us", "--overwrite")
	if node := waitScheduled(t, ns, "pod-s1-emea"); node != "aff-node1" {
		t.Errorf("pod on %s", node)
	}
}

// 14.7.3: pod affinity and anti-affinity, confined to two dedicated nodes.
func TestPodAffinityExamples(t *testing.T) {
	ns := env.Namespace(t, "podaff")
	addNode(t, "pa-node1", map[string]string{"e2e": "podaff"})
	addNode(t, "pa-node2", map[string]string{"e2e": "podaff"})
	confined := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{"e2e": "podaff"}
		return p
	}
	term := func(key, value string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: key, Operator: metav1.LabelSelectorOpIn, Values: []string{value}}}}, TopologyKey: "kubernetes.io/hostname"}
	}

	t.Run("affinity team4", func(t *testing.T) {
		env.CreatePod(t, ns, confined(simplePod("team4", map[string]string{"team": "4"})))
		n4 := waitScheduled(t, ns, "team4")
		p := confined(simplePod("team4a", nil))
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term("team", "4")}}}
		env.CreatePod(t, ns, p)
		if n := waitScheduled(t, ns, "team4a"); n != n4 {
			t.Errorf("team4a on %s, team4 on %s", n, n4)
		}
	})
	t.Run("anti-affinity security", func(t *testing.T) {
		env.CreatePod(t, ns, confined(simplePod("s1", map[string]string{"security": "s1"})))
		n1 := waitScheduled(t, ns, "s1")
		p := confined(simplePod("pod-s2", nil))
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term("security", "s1")}}}
		env.CreatePod(t, ns, p)
		if n := waitScheduled(t, ns, "pod-s2"); n == n1 {
			t.Errorf("pod-s2 shares %s with s1", n)
		}
		// With s1 on both nodes, a required anti-affinity pod stays Pending;
		// a preferred one still runs.
		other := "pa-node1"
		if n1 == other {
			other = "pa-node2"
		}
		s1b := simplePod("s1b", map[string]string{"security": "s1"})
		s1b.Spec.NodeName = other
		env.CreatePod(t, ns, s1b)
		env.WaitPodRunning(t, ns, "s1b")
		p3 := confined(simplePod("pod-s3", nil))
		p3.Spec.Affinity = p.Spec.Affinity
		env.CreatePod(t, ns, p3)
		msg := waitFailedScheduling(t, ns, "pod-s3")
		if !strings.Contains(msg, "2 node(s) didn't match pod anti-affinity rules") {
			t.Errorf("message %q", msg)
		}
		p4 := confined(simplePod("pod-s4", nil))
		p4.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term("security", "s1")}}}}
		env.CreatePod(t, ns, p4)
		waitScheduled(t, ns, "pod-s4")
	})
	t.Run("affinity without a matching label", func(t *testing.T) {
		p := confined(simplePod("pod-s2-aff", nil))
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term("security", "s2")}}}
		env.CreatePod(t, ns, p)
		if msg := waitFailedScheduling(t, ns, "pod-s2-aff"); !strings.Contains(msg, "didn't match pod affinity rules") {
			t.Errorf("message %q", msg)
		}
	})
}

// 14.9.2.1: three taints, two tolerated: the pod cannot be scheduled
// there, and a pod already running there keeps running.
func TestMultipleTaintsExample(t *testing.T) {
	ns := env.Namespace(t, "taints")
	// The NoSchedule taints are there from registration, so the scheduler
	// cannot race them; the NoExecute one comes while a pod runs.
	addNode(t, "taint-node1", map[string]string{"e2e": "taints"},
		corev1.Taint{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: "key2", Value: "value2", Effect: corev1.TaintEffectNoSchedule})
	tolerations := []corev1.Toleration{
		{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "value1", Effect: corev1.TaintEffectNoSchedule},
		{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "value1", Effect: corev1.TaintEffectNoExecute},
	}
	running := simplePod("already-there", nil)
	running.Spec.NodeName = "taint-node1"
	running.Spec.Tolerations = tolerations
	env.CreatePod(t, ns, running)
	env.WaitPodRunning(t, ns, "already-there")
	brief := simplePod("one-second", nil)
	brief.Spec.NodeName = "taint-node1"
	brief.Spec.Tolerations = append(tolerations[:1:1], corev1.Toleration{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "value1",
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](1)})
	env.CreatePod(t, ns, brief)
	env.WaitPodRunning(t, ns, "one-second")
	capstanOK(t, "adm", "taint", "nodes", "taint-node1", "key1=value1:NoExecute", "--kubeconfig", env.Kubeconfig)
	n := env.GetNode(t, "taint-node1")
	if len(n.Spec.Taints) != 3 {
		t.Fatalf("taints %v", n.Spec.Taints)
	}
	p := simplePod("tolerates-two", nil)
	p.Spec.NodeSelector = map[string]string{"e2e": "taints"}
	p.Spec.Tolerations = tolerations
	env.CreatePod(t, ns, p)
	if msg := waitFailedScheduling(t, ns, "tolerates-two"); !strings.Contains(msg, "1 node(s) had untolerated taint {key2: value2}") {
		t.Errorf("message %q", msg)
	}
	// The taint eviction controller looked at every pod of the node when
	// the NoExecute taint came: once it evicted the pod tolerating it for
	// a second, it has decided on the pod tolerating it for ever too.
	env.WaitPodGone(t, ns, "one-second", 30*time.Second)
	if !env.PodAlive(t, ns, "already-there") {
		t.Error("the running pod was evicted")
	}
}

// writePolicy writes a Policy file and checks it with validate-policy.
func writePolicy(t *testing.T, content string) *policy.Policy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := capstanOK(t, "scheduler", "validate-policy", path); !strings.Contains(out, "valid policy") {
		t.Errorf("validate-policy: %q", out)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runScheduler runs another scheduler beside the default one.
func runScheduler(t *testing.T, name string, p *policy.Policy) {
	t.Helper()
	s, err := scheduler.New(env.Client, scheduler.Config{Name: name, Policy: p, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The base of each sample policy: the chapter truncates them ("...") and
// says a real policy keeps the default predicates; these confine the test
// pods to the test's nodes.
const basePredicates = `
- name: GeneralPredicates
- name: PodToleratesNodeTaints`

func service(t *testing.T, ns, name string, selector map[string]string) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Selector: selector, Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := env.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestSamplePolicyRegionZoneAffinityRackSpread(t *testing.T) {
	ns := env.Namespace(t, "policy1")
	p := writePolicy(t, `kind: "Policy"
version: "v1"
predicates:`+basePredicates+`
- name: "RegionZoneAffinity"
  argument:
    serviceAffinity:
      labels:
      - "region"
      - "zone"
priorities:
- name: "RackSpread"
  weight: 1
  argument:
    serviceAntiAffinity:
      label: "rack"
`)
	runScheduler(t, "policy-1", p)
	lbl := func(region, zone, rack string) map[string]string {
		return map[string]string{"e2e": "policy1", "region": region, "zone": zone, "rack": rack}
	}
	addNode(t, "p1-r1z1a", lbl("r1", "z1", "a"))
	addNode(t, "p1-r1z1b", lbl("r1", "z1", "b"))
	addNode(t, "p1-r1z2a", lbl("r1", "z2", "a"))
	addNode(t, "p1-r2z1a", lbl("r2", "z1", "a"))
	service(t, ns, "db", map[string]string{"app": "db"})
	first := simplePod("db-0", map[string]string{"app": "db"})
	first.Spec.NodeName = "p1-r1z1a"
	env.CreatePod(t, ns, first)
	env.WaitPodRunning(t, ns, "db-0")
	for i := 1; i <= 3; i++ {
		pd := simplePod(fmt.Sprintf("db-%d", i), map[string]string{"app": "db"})
		pd.Spec.SchedulerName = "policy-1"
		pd.Spec.NodeSelector = map[string]string{"e2e": "policy1"}
		env.CreatePod(t, ns, pd)
		n := waitScheduled(t, ns, pd.Name)
		if n != "p1-r1z1a" && n != "p1-r1z1b" {
			t.Errorf("%s on %s: left region r1 / zone z1 of the service's first pod", pd.Name, n)
		}
		if i == 1 && n != "p1-r1z1b" {
			t.Errorf("db-1 on %s, RackSpread wants rack b", n)
		}
	}
	// The events name the scheduler that decided.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=db-1,reason=Scheduled"})
		if err != nil {
			return false, err.Error()
		}
		return len(evs.Items) > 0 && evs.Items[0].Source.Component == "policy-1", fmt.Sprintf("Scheduled events of db-1: %v", evs.Items)
	})
}

func TestSamplePolicyCityBuildingRoom(t *testing.T) {
	ns := env.Namespace(t, "policy2")
	p := writePolicy(t, `kind: "Policy"
version: "v1"
predicates:`+basePredicates+`
- name: "CityAffinity"
  argument:
    serviceAffinity:
      labels:
      - "city"
priorities:
- name: "BuildingSpread"
  weight: 1
  argument:
    serviceAntiAffinity:
      label: "building"
- name: "RoomSpread"
  weight: 1
  argument:
    serviceAntiAffinity:
      label: "room"
`)
	runScheduler(t, "policy-2", p)
	lbl := func(city, building, room string) map[string]string {
		return map[string]string{"e2e": "policy2", "city": city, "building": building, "room": room}
	}
	addNode(t, "p2-paris-b1-r1", lbl("paris", "b1", "r1"))
	addNode(t, "p2-paris-b1-r2", lbl("paris", "b1", "r2"))
	addNode(t, "p2-paris-b2-r1", lbl("paris", "b2", "r1"))
	addNode(t, "p2-tokyo-b1-r1", lbl("tokyo", "b1", "r1"))
	service(t, ns, "web", map[string]string{"app": "web"})
	first := simplePod("web-0", map[string]string{"app": "web"})
	first.Spec.NodeName = "p2-paris-b1-r1"
	env.CreatePod(t, ns, first)
	env.WaitPodRunning(t, ns, "web-0")
	pd := simplePod("web-1", map[string]string{"app": "web"})
	pd.Spec.SchedulerName = "policy-2"
	pd.Spec.NodeSelector = map[string]string{"e2e": "policy2"}
	env.CreatePod(t, ns, pd)
	// Same city; the other building and the other room score best.
	if n := waitScheduled(t, ns, "web-1"); n != "p2-paris-b2-r1" && n != "p2-paris-b1-r2" {
		t.Errorf("web-1 on %s", n)
	} else if n != "p2-paris-b2-r1" {
		// b2-r1: building 10 + room 0; b1-r2: building 0 + room 10: a tie.
		t.Logf("web-1 on %s (tied with p2-paris-b2-r1)", n)
	}
}

func TestSamplePolicyRequireRegionZonePreferred(t *testing.T) {
	ns := env.Namespace(t, "policy3")
	p := writePolicy(t, `kind: "Policy"
version: "v1"
predicates:`+basePredicates+`
- name: "RequireRegion"
  argument:
    labelsPresence:
      labels:
      - "region"
      presence: true
priorities:
- name: "ZonePreferred"
  weight: 1
  argument:
    labelPreference:
      label: "zone"
      presence: true
`)
	runScheduler(t, "policy-3", p)
	addNode(t, "p3-none", map[string]string{"e2e": "policy3"})
	addNode(t, "p3-region", map[string]string{"e2e": "policy3", "region": "r1"})
	addNode(t, "p3-region-zone", map[string]string{"e2e": "policy3", "region": "r1", "zone": "z1"})
	pd := simplePod("app", nil)
	pd.Spec.SchedulerName = "policy-3"
	pd.Spec.NodeSelector = map[string]string{"e2e": "policy3"}
	env.CreatePod(t, ns, pd)
	if n := waitScheduled(t, ns, "app"); n != "p3-region-zone" {
		t.Errorf("app on %s, want p3-region-zone", n)
	}
	// Without the zone node it still needs a region.
	pd2 := simplePod("app2", nil)
	pd2.Spec.SchedulerName = "policy-3"
	pd2.Spec.NodeSelector = map[string]string{"e2e": "policy3", "kubernetes.io/hostname": "p3-none"}
	env.CreatePod(t, ns, pd2)
	if msg := waitFailedScheduling(t, ns, "app2"); !strings.Contains(msg, "node(s) didn't have the requested labels") {
		t.Errorf("message %q", msg)
	}
}

func TestSamplePolicyCombined(t *testing.T) {
	ns := env.Namespace(t, "policy4")
	p := writePolicy(t, `kind: "Policy"
version: "v1"
predicates:
- name: "PodToleratesNodeTaints"
- name: "RegionAffinity"
  argument:
    serviceAffinity:
      labels:
      - "region"
- name: "RequireRegion"
  argument:
    labelsPresence:
      labels:
      - "region"
      presence: true
- name: "BuildingNodesAvoid"
  argument:
    labelsPresence:
      labels:
      - "building"
      presence: false
- name: "PodFitsPorts"
- name: "MatchNodeSelector"
priorities:
- name: "ZoneSpread"
  weight: 2
  argument:
    serviceAntiAffinity:
      label: "zone"
- name: "ZonePreferred"
  weight: 1
  argument:
    labelPreference:
      label: "zone"
      presence: true
- name: "ServiceSpreadingPriority"
  weight: 1
`)
	runScheduler(t, "policy-4", p)
	addNode(t, "p4-r1-z1", map[string]string{"e2e": "policy4", "region": "r1", "zone": "z1"})
	addNode(t, "p4-r1-z2", map[string]string{"e2e": "policy4", "region": "r1", "zone": "z2"})
	addNode(t, "p4-r1-building", map[string]string{"e2e": "policy4", "region": "r1", "zone": "z3", "building": "b1"})
	addNode(t, "p4-r2-z1", map[string]string{"e2e": "policy4", "region": "r2", "zone": "z1"})
	service(t, ns, "api", map[string]string{"app": "api"})
	first := simplePod("api-0", map[string]string{"app": "api"})
	first.Spec.NodeName = "p4-r1-z1"
	env.CreatePod(t, ns, first)
	env.WaitPodRunning(t, ns, "api-0")
	pd := simplePod("api-1", map[string]string{"app": "api"})
	pd.Spec.SchedulerName = "policy-4"
	pd.Spec.NodeSelector = map[string]string{"e2e": "policy4"}
	pd.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
	env.CreatePod(t, ns, pd)
	if n := waitScheduled(t, ns, "api-1"); n != "p4-r1-z2" {
		t.Errorf("api-1 on %s, want p4-r1-z2 (region r1, no building, other zone)", n)
	}
	// The host port is now taken on p4-r1-z2 and p4-r1-z1 holds api-0's
	// zone: a second port user goes to z1, never to the building or r2.
	pd2 := pd.DeepCopy()
	pd2.Name = "api-2"
	env.CreatePod(t, ns, pd2)
	if n := waitScheduled(t, ns, "api-2"); n != "p4-r1-z1" {
		t.Errorf("api-2 on %s, want p4-r1-z1", n)
	}
	out := capstanOK(t, "explain", "pod", ns+"/api-2", "--kubeconfig", env.Kubeconfig, "--policy", writeTemp(t, p))
	for _, want := range []string{"p4-r1-building", "BuildingNodesAvoid: node(s) didn't have the requested labels",
		"p4-r2-z1", "RegionAffinity: node(s) didn't match service affinity", "ZoneSpread(x2)", "Winner: p4-r1-z1"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
}

func writeTemp(t *testing.T, p *policy.Policy) string {
	t.Helper()
	raw := fmt.Sprintf("%s", mustJSON(t, p))
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPodForAnotherSchedulerIsLeftAlone(t *testing.T) {
	ns := env.Namespace(t, "other")
	p := simplePod("not-mine", nil)
	p.Spec.SchedulerName = "nobody-runs-this"
	env.CreatePod(t, ns, p)
	// A pod created after it, for the default scheduler, is scheduled:
	// the scheduler has seen not-mine (its informer delivers in order)
	// and, had it taken it, would have decided on it first.
	env.CreatePod(t, ns, simplePod("mine", nil))
	waitScheduled(t, ns, "mine")
	got, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "not-mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "" || len(got.Status.Conditions) != 0 {
		t.Errorf("pod touched: node %q conditions %v", got.Spec.NodeName, got.Status.Conditions)
	}
	evs, _ := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=not-mine"})
	if len(evs.Items) != 0 {
		t.Errorf("events for a pod of another scheduler: %v", evs.Items)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestInvalidPolicyStopsTheScheduler(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(path, []byte(`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"NoSuchPredicate"}],"priorities":[{"name":"LeastRequestedPriority","weight":0}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"scheduler", "validate-policy", path},
		{"scheduler", "--policy", path, "--kubeconfig", env.Kubeconfig, "--as-admin", "--scheduler-name", "never-starts"},
	} {
		_, err := capstan(t, args...)
		if err == nil || !strings.Contains(err.Error(), `predicate 1 ("NoSuchPredicate"): unknown predicate`) ||
			!strings.Contains(err.Error(), `priority 1 ("LeastRequestedPriority"): weight 0 must be positive`) {
			t.Errorf("capstan %v: %v", args, err)
		}
	}
}

// WaitForFirstConsumer claims are bound by the decision that places their
// pod: two pods created together, each with its own claim, and one
// volume: exactly one pod gets it (the persistent volume controller binds
// its claim before the pod is bound), the other is told no volume is left.
func TestWaitForFirstConsumerClaimsNeverShareAVolume(t *testing.T) {
	ns := env.Namespace(t, "volbind")
	ctx := context.Background()
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-local-" + ns}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	if _, err := env.Client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.StorageV1().StorageClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "e2e-pv-" + ns},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class.Name,
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/mnt/e2e"}}}}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	for _, name := range []string{"claim-a", "claim-b"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class.Name), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b"} {
		p := simplePod("pod-"+name, nil)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-" + name}}}}
		env.CreatePod(t, ns, p)
	}
	var winner, loser string
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		a, b := env.GetPod(t, ns, "pod-a"), env.GetPod(t, ns, "pod-b")
		switch {
		case a.Spec.NodeName != "" && b.Spec.NodeName != "":
			t.Fatalf("both pods placed with one volume: %s and %s", a.Spec.NodeName, b.Spec.NodeName)
		case a.Spec.NodeName != "":
			winner, loser = "a", "b"
		case b.Spec.NodeName != "":
			winner, loser = "b", "a"
		}
		return winner != "", "neither pod placed"
	})
	claim, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-"+winner, metav1.GetOptions{})
	if err != nil || claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName != pv.Name {
		t.Fatalf("claim of the placed pod: %v %+v", err, claim.Status)
	}
	// The scheduler may first have seen the pod before its claim ("not
	// found"); once it sees the claim, it says no volume is left.
	env.WaitPod(t, ns, "pod-"+loser, time.Minute, func(p *corev1.Pod) (bool, string) {
		c := testenv.PodCondition(p, corev1.PodScheduled)
		return c != nil && strings.Contains(c.Message, "didn't find available persistent volumes to bind"), fmt.Sprintf("PodScheduled %+v", c)
	})
	got, err := env.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil || got.Spec.ClaimRef == nil || got.Spec.ClaimRef.Name != "claim-"+winner || got.Annotations["pv.kubernetes.io/bound-by-controller"] != "yes" {
		t.Fatalf("volume claimRef %+v annotations %v (%v)", got.Spec.ClaimRef, got.Annotations, err)
	}
}

// A pod with scheduling gates waits, unscheduled and without events, until
// its last gate is removed; then it is scheduled.
func TestSchedulingGatesHoldThePod(t *testing.T) {
	ns := env.Namespace(t, "gates")
	ctx := context.Background()
	gated := simplePod("gated", nil)
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}, {Name: "example.com/approval"}}
	env.CreatePod(t, ns, gated)
	// A pod created after it is scheduled: the scheduler has seen the
	// gated one, and left it alone.
	env.CreatePod(t, ns, simplePod("after", nil))
	waitScheduled(t, ns, "after")
	got := env.GetPod(t, ns, "gated")
	if got.Spec.NodeName != "" || len(env.Events(t, ns, "gated", "")) != 0 {
		t.Fatalf("gated pod: node %q, events %v", got.Spec.NodeName, env.Events(t, ns, "gated", ""))
	}
	if c := testenv.PodCondition(got, corev1.PodScheduled); c == nil || c.Reason != corev1.PodReasonSchedulingGated {
		t.Errorf("PodScheduled %+v, want reason SchedulingGated", c)
	}
	ungate := func(keep []corev1.PodSchedulingGate) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := env.GetPod(t, ns, "gated")
			p.Spec.SchedulingGates = keep
			_, err := env.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	ungate(gated.Spec.SchedulingGates[1:])
	env.CreatePod(t, ns, simplePod("after-first-gate", nil))
	waitScheduled(t, ns, "after-first-gate")
	if n := env.GetPod(t, ns, "gated").Spec.NodeName; n != "" {
		t.Fatalf("scheduled on %s with a gate left", n)
	}
	ungate(nil)
	waitScheduled(t, ns, "gated")
}
