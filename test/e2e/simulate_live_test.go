package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/simulate"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// The case a review measured by hand: three zones with a worker each,
// six 1.5-CPU replicas, autoscalers of 1 node (1 to 3 in one zone), and a
// zone lost with no capacity left in it. A snapshot is simulated under the
// outage, then the same outage is done on the cluster and recorded; the
// two courses agree, every milestone within 10 % of the observed course
// (capstan simulate compare). The cluster's timings are shortened so that
// the live course takes minutes: one-minute tolerations of lost nodes, a
// one-minute node start-up window for the autoscaler and instances that
// boot in a minute, which the simulation is told of
// (--max-node-startup-time, --boot-time), as a user would. The course is
// about three minutes: 10 % of it covers how long before the outage each
// kubelet last renewed its lease, which the snapshot cannot tell.
var machineSetsGVR = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinesets"}

func TestASimulatedZoneOutageAgreesWithTheLiveOne(t *testing.T) {
	dir := t.TempDir()
	const startup, boot = time.Minute, time.Minute
	up := testenv.StartUp(t, "--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)),
		"--control-plane-nodes", "1", "--nodes", "3", "--metrics-address", "", "--console-address", "", "--thanos-address", "",
		"--default-unreachable-toleration-seconds", "60", "--default-not-ready-toleration-seconds", "60", "--boot-delay", boot.String(),
		"--autoscaler-max-node-startup-time", startup.String())
	up.WaitLine(t, "capstan is up", 4*time.Minute)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := testenv.Kubeconfig(t, kubeconfig)
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := t.Context()

	createClusterAutoscalerWithoutScaleDown(t, dyn)
	workers := map[string]string{} // by zone
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/worker"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		workers[n.Labels[corev1.LabelTopologyZone]] = n.Name
	}
	// The zone lost is the third: the control plane's one node is in
	// the first, and a zone outage would take it too.
	zoneA := sim.DefaultZones[2]
	if len(workers) != 3 || workers[zoneA] == "" {
		t.Fatalf("workers by zone: %v; want one in each of 3 zones", workers)
	}
	sets, err := dyn.Resource(machineSetsGVR).Namespace(machine.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets.Items {
		if !strings.Contains(s.GetName(), "-worker-") {
			continue
		}
		// One MachineSet can grow, so that the least-waste expander has
		// no tie to break at random: the course is the same each time.
		max := 1
		if strings.HasSuffix(s.GetName(), sim.DefaultZones[1]) {
			max = 3
		}
		createMachineAutoscalerOn(t, dyn, s.GetName(), s.GetName(), 1, max)
	}
	// Every MachineSet carries its bounds before the snapshot is taken.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		sets, err := dyn.Resource(machineSetsGVR).Namespace(machine.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		bounded := 0
		for _, s := range sets.Items {
			if s.GetAnnotations()[autoscaler.MaxSizeAnnotation] != "" {
				bounded++
			}
		}
		return bounded == 3, fmt.Sprintf("%d of 3 worker MachineSets bounded", bounded)
	})

	ns := "shop"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	app := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: new(int32(6)), Selector: &metav1.LabelSelector{MatchLabels: app},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: app}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}}}},
			TerminationGracePeriodSeconds: new(int64(0))}}}}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var onA []string
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		running, a := 0, []string{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
			if p.Spec.NodeName == workers[zoneA] {
				a = append(a, ns+"/"+p.Name)
			}
		}
		onA = a
		return running == 6, fmt.Sprintf("%d of 6 web pods running", running)
	})
	// The autoscaler counts a lost node as starting within its first
	// minute: the outage comes after it.
	waitForAge(t, kube, workers[zoneA], startup+5*time.Second)

	snap := filepath.Join(t.TempDir(), "snap.json")
	capstanOK(t, "simulate", "snapshot", "--kubeconfig", kubeconfig, "-o", snap)
	const quiet = "90s"
	// At 5x: each tenth of a second the controllers take in real time is
	// half a simulated second, which a busy machine would make late.
	predicted := testenv.SimulateRun(t, "--snapshot", snap, "--change", "zone-outage="+zoneA, "--control=false",
		"--speed", "5", "--quiet", quiet, "--for", "20m", "--max-node-startup-time", startup.String(), "--boot-time", boot.String())

	// The same outage, live: zone A's kubelets stop and its capacity is
	// gone, as the zone-outage change does.
	observed, err := simulate.Record(ctx, simulate.RecordOptions{Kube: kube, Dyn: dyn, Host: cfg.Host, For: 20 * time.Minute, Quiet: 90 * time.Second,
		Change: "zone-outage=" + zoneA, Begun: func() {
			capstanOK(t, "sim", "zone", "exhaust", zoneA, "--kubeconfig", kubeconfig)
			capstanOK(t, "sim", "node", "stop", workers[zoneA], "--kubeconfig", kubeconfig)
		}})
	if err != nil {
		t.Fatal(err)
	}
	for what, r := range map[string]*simulate.Report{"simulated": predicted, "recorded": observed} {
		var table strings.Builder
		_ = r.WriteTable(&table)
		t.Logf("%s:\n%s", what, table.String())
	}
	agree, out := compareCourses(t, predicted, observed)
	t.Logf("capstan simulate compare:\n%s", out)
	if !agree {
		t.Errorf("the simulation and the live outage disagree")
	}

	// What both are expected to show, beyond agreeing: the lost zone's
	// pods evicted, a node added outside it, nothing left pending.
	for _, rep := range []*simulate.Report{predicted, observed} {
		var removed []string
		for _, r := range rep.Removed {
			removed = append(removed, r.Pod)
		}
		if fmt.Sprint(slices.Sorted(slices.Values(removed))) != fmt.Sprint(slices.Sorted(slices.Values(onA))) {
			t.Errorf("recorded %v removed %v; want the pods of zone A %v", rep.Recorded, removed, onA)
		}
		if len(rep.NodesAdded) != 1 || rep.NodesAdded[0].Zone != sim.DefaultZones[1] {
			t.Errorf("recorded %v added %+v; want one node in %s", rep.Recorded, rep.NodesAdded, sim.DefaultZones[1])
		}
		for _, p := range rep.Pending {
			t.Errorf("recorded %v left %s pending: %s", rep.Recorded, p.Pod, p.Scheduler)
		}
	}
}

// createClusterAutoscalerWithoutScaleDown makes the cluster of dyn
// autoscaled, up only: a course ends once its pods are placed.
func createClusterAutoscalerWithoutScaleDown(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ca := unstructuredFrom(t, `apiVersion: autoscaling.openshift.io/v1
kind: ClusterAutoscaler
metadata:
  name: default
spec:
  scaleDown:
    enabled: false
`)
	if _, err := dyn.Resource(autoscaler.ClusterAutoscalerResource).Create(t.Context(), ca, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// compareCourses runs capstan simulate compare on the two reports, and
// says whether they agree, with its output.
func compareCourses(t *testing.T, predicted, observed *simulate.Report) (bool, string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, r *simulate.Report) string {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	code, out := testenv.RunCapstan(t, "simulate", "compare", write("predicted.json", predicted), write("observed.json", observed))
	if code != 0 && code != 3 {
		t.Fatalf("capstan simulate compare exited %d:\n%s", code, out)
	}
	return code == 0, out
}

// waitForAge waits until a node is at least age old.
func waitForAge(t *testing.T, kube kubernetes.Interface, name string, age time.Duration) {
	t.Helper()
	testenv.Eventually(t, age+time.Minute, func() (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return time.Since(n.CreationTimestamp.Time) >= age, fmt.Sprintf("node %s is %s old", name, time.Since(n.CreationTimestamp.Time).Round(time.Second))
	})
}

// capstan simulate record, as a user runs it: it says when to make the
// change, and reports what the cluster did from then on, in the format of
// a simulation's report.
func TestSimulateRecordReportsWhatTheClusterDid(t *testing.T) {
	ns := env.Namespace(t, "record")
	cmd := testenv.CapstanProcess("simulate", "record", "--kubeconfig", env.Kubeconfig, "--quiet", "5s", "--for", "2m", "-o", "json")
	var stdout strings.Builder
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var log strings.Builder
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "Make the change now") {
			break
		}
	}
	// The rest of its log, read to its end before Wait (it ends within
	// --for).
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
	}()
	app := map[string]string{"app": "recorded"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "recorded", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: new(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: app},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: app}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}, TerminationGracePeriodSeconds: new(int64(0))}}}}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(t.Context(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-drained
	if err := cmd.Wait(); err != nil {
		t.Fatalf("capstan simulate record: %v\n%s", err, log.String())
	}
	var rep simulate.Report
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("the recording is not a JSON report: %v\n%s", err, stdout.String())
	}
	placed := 0
	for _, p := range rep.Placed {
		if strings.HasPrefix(p.Pod, ns+"/") {
			placed++
			if p.Workload != "Deployment "+ns+"/recorded" || p.Node == "" {
				t.Errorf("placed %+v; want a pod of Deployment %s/recorded on a node", p, ns)
			}
		}
	}
	if !rep.Recorded || placed != 2 {
		t.Errorf("recorded %v, %d pods of %s placed; want a recording of the Deployment's 2 pods placed:\n%s", rep.Recorded, placed, ns, stdout.String())
	}
}
