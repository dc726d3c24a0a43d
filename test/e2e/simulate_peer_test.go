package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/simulate"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// The peers a simulation is measured against: upstream's kube-scheduler
// and cluster-autoscaler binaries (hack/peer-binaries.sh builds them).
const (
	kubeSchedulerEnv     = "CAPSTAN_KUBE_SCHEDULER"
	clusterAutoscalerEnv = "CAPSTAN_CLUSTER_AUTOSCALER"
)

// A zone outage on a cluster run by upstream's kube-scheduler and
// cluster-autoscaler (its clusterapi provider on the Machine API, as
// OpenShift runs it), recorded, against capstan's simulation of the same
// outage from a snapshot taken just before, once with kube-scheduler and
// once with capstan's scheduler. The cluster: four MachineSets (a 4-CPU
// worker in each of three zones, an 8-CPU one in the second, the
// second zone's two the only ones that can grow), two
// priorities, zone spread constraints both ScheduleAnyway and
// DoNotSchedule, and PodDisruptionBudgets. It runs only when both
// binaries are given; docs/simulate.md has what it found.
func TestASimulatedZoneOutageAgreesWithUpstreamsSchedulerAndAutoscaler(t *testing.T) {
	scheduler, ca := os.Getenv(kubeSchedulerEnv), os.Getenv(clusterAutoscalerEnv)
	if scheduler == "" || ca == "" {
		t.Skipf("%s and %s name upstream's binaries (hack/peer-binaries.sh builds them)", kubeSchedulerEnv, clusterAutoscalerEnv)
	}
	dir := t.TempDir()
	const startup, boot = time.Minute, time.Minute
	up := testenv.StartUp(t, "--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--bare",
		"--control-plane-nodes", "1", "--nodes", "0", "--metrics-address", "", "--console-address", "", "--thanos-address", "",
		"--default-unreachable-toleration-seconds", "60", "--default-not-ready-toleration-seconds", "60", "--boot-delay", boot.String())
	up.WaitLine(t, "capstan is up", 4*time.Minute)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := testenv.Kubeconfig(t, kubeconfig)
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	mc := machineclient.NewForConfigOrDie(cfg)
	ctx := t.Context()

	// A bare cluster has only Kubernetes' namespaces.
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: machine.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Machine API is capstan's, as its own process; the scheduler
	// and the autoscaler are upstream's.
	machineAPI := testenv.StartCapstan(t, "machine-api", "--as-admin", "--kubeconfig", kubeconfig, "--cloud-kubeconfig", kubeconfig, "--health-address", "127.0.0.1:0")
	machineAPI.WaitLine(t, "Health: ", time.Minute)
	startPeer(t, dir, "kube-scheduler", nil, scheduler, "--kubeconfig", kubeconfig, "--leader-elect=false", "--secure-port", "0")

	sets := []struct {
		name, zone, instance string
		max                  int
	}{
		// Only the second zone's can grow: where two MachineSets of
		// one size tie, both autoscalers break the tie at random.
		{"workers-a", sim.DefaultZones[0], "capstan.large", 1},
		{"workers-b", sim.DefaultZones[1], "capstan.large", 3},
		{"workers-c", sim.DefaultZones[2], "capstan.large", 1},
		{"large-b", sim.DefaultZones[1], "capstan.xlarge", 2},
	}
	for _, s := range sets {
		// What OpenShift's MachineAutoscaler controller writes on its
		// target: the autoscalers read these annotations.
		ms := &machinev1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: machine.Namespace, Annotations: map[string]string{
				autoscaler.MinSizeAnnotation: "1", autoscaler.MaxSizeAnnotation: strconv.Itoa(s.max)}},
			Spec: machinev1.MachineSetSpec{
				Replicas: ptr.To[int32](1),
				Selector: metav1.LabelSelector{MatchLabels: map[string]string{machine.MachineSetLabel: s.name}},
				Template: machinev1.MachineTemplateSpec{
					ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{machine.MachineSetLabel: s.name, machine.MachineRoleLabel: "worker"}},
					Spec: machinev1.MachineSpec{
						ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{"node-role.kubernetes.io/worker": ""}},
						ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{
							InstanceType: s.instance, Region: sim.DefaultRegion, Zone: s.zone})},
					},
				},
			},
		}
		if _, err := mc.MachineV1beta1().MachineSets(machine.Namespace).Create(ctx, ms, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createMachineAutoscalerOn(t, dyn, s.name, s.name, 1, s.max)
	}
	createClusterAutoscalerWithoutScaleDown(t, dyn)
	// The arguments OpenShift's cluster-autoscaler-operator gives for
	// that ClusterAutoscaler, on upstream's clusterapi provider with the
	// Machine API's group and version (the group's preferred version is
	// v1, of ControlPlaneMachineSets); the node start-up window shortened
	// as the simulation is told.
	startPeer(t, dir, "cluster-autoscaler", []string{"CAPI_GROUP=machine.openshift.io", "CAPI_VERSION=v1beta1"}, ca,
		"--kubeconfig", kubeconfig, "--cloud-provider=clusterapi", "--namespace="+machine.Namespace, "--leader-elect=false",
		"--max-bulk-soft-taint-count=0", "--record-duplicated-events", "--scale-down-enabled=false",
		"--expendable-pods-priority-cutoff=-10", "--max-node-startup-time="+startup.String(), "--v=2", "--address=127.0.0.1:0")
	waitMachineSetsRunning(t, mc, len(sets))

	ns := "shop"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]int32{"shop-high": 1000, "shop-low": 0} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	workloads := []struct {
		name, priority, cpu string
		replicas            int32
		spread              corev1.UnsatisfiableConstraintAction
		budget              *intstr.IntOrString
	}{
		{"web", "shop-high", "1", 6, corev1.ScheduleAnyway, ptr.To(intstr.FromInt32(1))},
		{"api", "shop-high", "1", 3, corev1.DoNotSchedule, ptr.To(intstr.FromInt32(1))},
		{"batch", "shop-low", "1500m", 5, "", nil},
	}
	for _, w := range workloads {
		app := map[string]string{"app": w.name}
		spec := corev1.PodSpec{PriorityClassName: w.priority, TerminationGracePeriodSeconds: new(int64(0)),
			Containers: []corev1.Container{{Name: w.name, Image: "registry.example/" + w.name + ":1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(w.cpu)}}}}}
		if w.spread != "" {
			spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
				WhenUnsatisfiable: w.spread, LabelSelector: &metav1.LabelSelector{MatchLabels: app}}}
		}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.replicas), Selector: &metav1.LabelSelector{MatchLabels: app},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: app}, Spec: spec}}}
		if _, err := kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if w.budget != nil {
			pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns}, Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: w.budget, Selector: &metav1.LabelSelector{MatchLabels: app}}}
			if _, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitRunningPods(t, kube, ns, 14)
	// The third zone is lost: the control plane's node is in the first.
	zoneA := sim.DefaultZones[2]
	var lost []string
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if _, worker := n.Labels["node-role.kubernetes.io/worker"]; worker && n.Labels[corev1.LabelTopologyZone] == zoneA {
			lost = append(lost, n.Name)
			waitForAge(t, kube, n.Name, startup+5*time.Second)
		}
	}
	if len(lost) != 1 {
		t.Fatalf("workers of %s: %v; want one", zoneA, lost)
	}

	snap := filepath.Join(t.TempDir(), "snap.json")
	capstanOK(t, "simulate", "snapshot", "--kubeconfig", kubeconfig, "-o", snap)
	simulated := map[string]*simulate.Report{}
	for _, s := range []string{simulate.SchedulerKube, simulate.SchedulerCapstan} {
		simulated[s] = testenv.SimulateRun(t, "--snapshot", snap, "--change", "zone-outage="+zoneA, "--control=false", "--scheduler", s,
			"--speed", "10", "--quiet", "90s", "--for", "20m", "--max-node-startup-time", startup.String(), "--boot-time", boot.String())
	}
	observed, err := simulate.Record(ctx, simulate.RecordOptions{Kube: kube, Dyn: dyn, Host: cfg.Host, For: 20 * time.Minute, Quiet: 90 * time.Second,
		Change: "zone-outage=" + zoneA, Begun: func() {
			capstanOK(t, "sim", "zone", "exhaust", zoneA, "--kubeconfig", kubeconfig)
			capstanOK(t, "sim", "node", "stop", lost[0], "--kubeconfig", kubeconfig)
		}})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	_ = observed.WriteTable(&table)
	t.Logf("recorded under kube-scheduler and the cluster-autoscaler:\n%s", table.String())
	for _, s := range []string{simulate.SchedulerKube, simulate.SchedulerCapstan} {
		var table strings.Builder
		_ = simulated[s].WriteTable(&table)
		t.Logf("simulated with %s:\n%s", s, table.String())
		agree, out := compareCourses(t, simulated[s], observed)
		t.Logf("simulated with %s, against the live course:\n%s", s, out)
		if !agree {
			t.Errorf("the simulation with %s disagrees with the live course under upstream's scheduler and autoscaler", s)
		}
	}
}

// startPeer runs an upstream binary until the test ends, its output in
// DIR/NAME.log (printed when the test fails).
func startPeer(t *testing.T, dir, name string, env []string, path string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = f.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s's log (last 8 KB):\n%s", name, tail(b, 8<<10))
			}
		}
	})
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// waitMachineSetsRunning waits until n MachineSets have every replica's
// node Ready.
func waitMachineSetsRunning(t *testing.T, mc machineclient.Interface, n int) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		sets, err := mc.MachineV1beta1().MachineSets(machine.Namespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, s := range sets.Items {
			if s.Status.ReadyReplicas == ptr.Deref(s.Spec.Replicas, 0) && s.Status.ReadyReplicas > 0 {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d MachineSets ready", ready, n)
	})
}

// waitRunningPods waits until n pods of the namespace run.
func waitRunningPods(t *testing.T, kube kubernetes.Interface, ns string, n int) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		pods, err := kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, fmt.Sprintf("%d of %d pods of %s running", running, n, ns)
	})
}
