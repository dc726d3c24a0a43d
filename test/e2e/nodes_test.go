package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/taints"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
)

func TestBootNodesHaveRolesLabelsAndTaints(t *testing.T) {
	for _, name := range []string{"master-0", "master-1", "master-2"} {
		n := env.GetNode(t, name)
		for _, l := range []string{sim.LabelRoleMaster, sim.LabelRoleCP} {
			if _, ok := n.Labels[l]; !ok {
				t.Errorf("%s lacks label %s", name, l)
			}
		}
		if !taints.Has(n.Spec.Taints, sim.LabelRoleMaster, corev1.TaintEffectNoSchedule) {
			t.Errorf("%s lacks taint node-role.kubernetes.io/master:NoSchedule, has %v", name, n.Spec.Taints)
		}
	}
	zones := map[string]bool{}
	for _, name := range []string{"worker-0", "worker-1", "worker-2"} {
		n := env.GetNode(t, name)
		if _, ok := n.Labels[sim.LabelRoleWorker]; !ok {
			t.Errorf("%s lacks the worker role label", name)
		}
		if taints.Has(n.Spec.Taints, sim.LabelRoleMaster, corev1.TaintEffectNoSchedule) {
			t.Errorf("worker %s carries the master taint", name)
		}
		if n.Labels[sim.LabelHostname] != name || n.Labels[sim.LabelRegion] != sim.DefaultRegion {
			t.Errorf("%s labels: %v", name, n.Labels)
		}
		zones[n.Labels[sim.LabelZone]] = true
		cpu := n.Status.Allocatable[corev1.ResourceCPU]
		if cpu.Cmp(resource.MustParse("4")) != 0 {
			t.Errorf("%s allocatable cpu %s, want 4", name, cpu.String())
		}
		for _, ct := range sim.InjectableConditions {
			want := corev1.ConditionFalse
			if ct == corev1.NodeReady {
				want = corev1.ConditionTrue
			}
			if got := nodes.ConditionStatus(n, ct); got != want {
				t.Errorf("%s condition %s=%s, want %s", name, ct, got, want)
			}
		}
	}
	if len(zones) != 3 {
		t.Errorf("workers spread over %d zones, want 3", len(zones))
	}

	out := capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "get", "nodes")
	for _, want := range []string{"master-0", "control-plane,master", "worker-2", "worker", "Ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("capstan kubectl get nodes lacks %q:\n%s", want, out)
		}
	}
}

func TestNodeLeasesAreRenewed(t *testing.T) {
	ctx := context.Background()
	lease, err := env.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "worker-0", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease of worker-0: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "worker-0" {
		t.Errorf("lease holder %v, want worker-0", lease.Spec.HolderIdentity)
	}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].Kind != "Node" {
		t.Errorf("lease owner references %v, want the Node", lease.OwnerReferences)
	}
	first := lease.Spec.RenewTime.Time
	testenv.Eventually(t, 3*testenv.LeaseDuration, func() (bool, string) {
		l, err := env.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "worker-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(first), fmt.Sprintf("renewTime still %v", l.Spec.RenewTime)
	})
}

func TestStopNodeMakesItUnreachableAndStartRecovers(t *testing.T) {
	const node = "worker-1"
	out := capstanOK(t, "sim", "node", "stop", node, "--kubeconfig", env.Kubeconfig)
	if !strings.Contains(out, "node/worker-1 stopped") {
		t.Errorf("stop output: %q", out)
	}
	// The upstream node lifecycle controller, not capstan, marks the node.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n := env.GetNode(t, node)
		ok := nodes.ConditionStatus(n, corev1.NodeReady) == corev1.ConditionUnknown &&
			taints.Has(n.Spec.Taints, "node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute)
		return ok, fmt.Sprintf("Ready=%s taints=%v", nodes.ConditionStatus(n, corev1.NodeReady), n.Spec.Taints)
	})
	out = capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "get", "node", node)
	if !strings.Contains(out, "NotReady") {
		t.Errorf("kubectl shows stopped node as:\n%s", out)
	}

	capstanOK(t, "sim", "node", "start", node, "--kubeconfig", env.Kubeconfig)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n := env.GetNode(t, node)
		ok := nodes.Ready(n) && !taints.Has(n.Spec.Taints, "node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute)
		return ok, fmt.Sprintf("Ready=%s taints=%v", nodes.ConditionStatus(n, corev1.NodeReady), n.Spec.Taints)
	})
}

// A reboot takes the node down (NotReady) and brings it back in a new
// boot; the pod that ran on it is the same pod, its container restarted
// once, as a kubelet reports it after a reboot.
func TestRebootRestartsTheNodesPods(t *testing.T) {
	const node = "worker-1"
	ctx := context.Background()
	ns := env.Namespace(t, "reboot")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	created, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env.WaitPodRunning(t, ns, "survivor")
	before := env.GetNode(t, node).Status.NodeInfo.BootID
	out := capstanOK(t, "sim", "node", "reboot", node, "--down", "2s", "--kubeconfig", env.Kubeconfig)
	if out != "node/worker-1 rebooted\n" {
		t.Errorf("reboot said %q", out)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n := env.GetNode(t, node)
		return nodes.Ready(n) && n.Status.NodeInfo.BootID != before, fmt.Sprintf("Ready=%s boot %s (was %s)", nodes.ConditionStatus(n, corev1.NodeReady), n.Status.NodeInfo.BootID, before)
	})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses
		ok := len(cs) == 1 && cs[0].Ready && cs[0].RestartCount == 1 && cs[0].LastTerminationState.Terminated != nil &&
			cs[0].LastTerminationState.Terminated.ExitCode == 255 && p.UID == created.UID
		return ok, fmt.Sprintf("container statuses %+v", cs)
	})
}

func TestInjectedConditionsDriveTaintsByCondition(t *testing.T) {
	cases := []struct {
		cond   string
		taint  string
		effect corev1.TaintEffect
	}{
		{"MemoryPressure", "node.kubernetes.io/memory-pressure", corev1.TaintEffectNoSchedule},
		{"DiskPressure", "node.kubernetes.io/disk-pressure", corev1.TaintEffectNoSchedule},
		{"PIDPressure", "node.kubernetes.io/pid-pressure", corev1.TaintEffectNoSchedule},
		{"NetworkUnavailable", "node.kubernetes.io/network-unavailable", corev1.TaintEffectNoSchedule},
	}
	const node = "worker-2"
	for _, tc := range cases {
		t.Run(tc.cond, func(t *testing.T) {
			capstanOK(t, "sim", "node", "set-condition", node, tc.cond+"=True", "--kubeconfig", env.Kubeconfig)
			testenv.Eventually(t, 30*time.Second, func() (bool, string) {
				n := env.GetNode(t, node)
				ok := nodes.ConditionStatus(n, corev1.NodeConditionType(tc.cond)) == corev1.ConditionTrue && taints.Has(n.Spec.Taints, tc.taint, tc.effect)
				return ok, fmt.Sprintf("conditions=%v taints=%v", n.Status.Conditions, n.Spec.Taints)
			})
			capstanOK(t, "sim", "node", "set-condition", node, tc.cond+"=False", "--kubeconfig", env.Kubeconfig)
			testenv.Eventually(t, 30*time.Second, func() (bool, string) {
				n := env.GetNode(t, node)
				return !taints.Has(n.Spec.Taints, tc.taint, tc.effect), fmt.Sprintf("taints=%v", n.Spec.Taints)
			})
		})
	}
	t.Run("ReadyFalse", func(t *testing.T) {
		capstanOK(t, "sim", "node", "set-condition", node, "Ready=False", "--kubeconfig", env.Kubeconfig)
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			n := env.GetNode(t, node)
			ok := nodes.ConditionStatus(n, corev1.NodeReady) == corev1.ConditionFalse && taints.Has(n.Spec.Taints, "node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute)
			return ok, fmt.Sprintf("taints=%v", n.Spec.Taints)
		})
		capstanOK(t, "sim", "node", "set-condition", node, "Ready=True", "--kubeconfig", env.Kubeconfig)
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			n := env.GetNode(t, node)
			return nodes.Ready(n) && !taints.Has(n.Spec.Taints, "node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute), fmt.Sprintf("taints=%v", n.Spec.Taints)
		})
	})
}

func TestSimNodeAddRegistersRequestedNode(t *testing.T) {
	out := capstanOK(t, "sim", "node", "add", "--kubeconfig", env.Kubeconfig, "--name", "gpu-0",
		"--cpu", "8", "--memory", "32Gi", "--zone", "z1", "--gpu", "2", "--resource", "example.com/dongle=3",
		"--labels", "disktype=ssd", "--taints", "dedicated=gpu:NoSchedule")
	if !strings.Contains(out, "instance/gpu-0 created") {
		t.Errorf("add output: %q", out)
	}
	t.Cleanup(func() { capstan(t, "sim", "node", "delete", "gpu-0", "--kubeconfig", env.Kubeconfig) })
	if err := cluster.WaitNodesReady(context.Background(), env.Client, []string{"gpu-0"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	n := env.GetNode(t, "gpu-0")
	want := map[corev1.ResourceName]string{corev1.ResourceCPU: "8", corev1.ResourceMemory: "32Gi", sim.ResourceGPU: "2", "example.com/dongle": "3", corev1.ResourcePods: "250"}
	for r, q := range want {
		got := n.Status.Capacity[r]
		if got.Cmp(resource.MustParse(q)) != 0 {
			t.Errorf("capacity %s = %s, want %s", r, got.String(), q)
		}
		if a := n.Status.Allocatable[r]; a.Cmp(got) != 0 {
			t.Errorf("allocatable %s = %s, want %s", r, a.String(), got.String())
		}
	}
	if n.Labels[sim.LabelZone] != "z1" || n.Labels["disktype"] != "ssd" {
		t.Errorf("labels %v", n.Labels)
	}
	if !taints.Has(n.Spec.Taints, "dedicated", corev1.TaintEffectNoSchedule) {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	if !strings.HasPrefix(n.Spec.ProviderID, sim.ProviderIDPrefix) {
		t.Errorf("providerID %q", n.Spec.ProviderID)
	}

	out = capstanOK(t, "sim", "node", "delete", "gpu-0", "--kubeconfig", env.Kubeconfig)
	if !strings.Contains(out, "instance/gpu-0 deleted") {
		t.Errorf("delete output %q", out)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := env.Client.CoreV1().Nodes().Get(context.Background(), "gpu-0", metav1.GetOptions{})
		return err != nil, "node gpu-0 still exists"
	})
}

func TestSimCLIRejectsBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sim", "node", "set-condition", "worker-0", "MemoryPressure"}, "is not TYPE=STATUS"},
		{[]string{"sim", "node", "set-condition", "worker-0", "Bogus=True"}, `condition "Bogus" cannot be injected`},
		{[]string{"sim", "node", "set-condition", "worker-0", "Ready=Unknown"}, "use `capstan sim node stop`"},
		{[]string{"sim", "node", "set-condition", "worker-0", "Ready=maybe"}, "must be True or False"},
		{[]string{"sim", "node", "stop", "no-such-node"}, `node "no-such-node" not found`},
		{[]string{"sim", "node", "reboot", "no-such-node"}, `node "no-such-node" not found`},
		{[]string{"sim", "node", "reboot", "worker-0", "--down", "-1s"}, "--down -1s must not be negative"},
		{[]string{"sim", "node", "add", "--cpu", "0"}, "cpu must be positive"},
		{[]string{"sim", "node", "add", "--cpu", "lots"}, `--cpu "lots"`},
		{[]string{"sim", "node", "add", "--taints", "a=b:Sometimes"}, `effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute`},
		{[]string{"sim", "node", "add", "--labels", "novalue"}, "is not KEY=VALUE"},
		{[]string{"sim", "node", "add", "--role", "boss"}, "role must be master or worker"},
		{[]string{"sim", "node", "add", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"sim", "node", "mcd-fail", "worker-0", "--at", "boot"}, `--at "boot": want one of drain, pivot, reboot`},
		{[]string{"sim", "node", "mcd-fail", "worker-0"}, `--at "": want one of drain, pivot, reboot`},
		{[]string{"sim", "node", "mcd-fail", "worker-0", "--at", "drain", "--clear"}, "--at and --clear: give one"},
		{[]string{"sim", "node", "mcd-fail", "no-such-node", "--at", "drain"}, `node/no-such-node: nodes "no-such-node" not found`},
		{[]string{"sim", "cvo", "stop", "now"}, `unknown command "now"`},
	}
	for _, tc := range cases {
		out, err := capstan(t, append(tc.args, "--kubeconfig", env.Kubeconfig)...)
		if err == nil {
			t.Errorf("capstan %v succeeded, want error containing %q (output %q)", tc.args, tc.want, out)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("capstan %v: error %q, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// A fault annotation that does not parse is ignored whole and reported in
// a Warning event on the node, from its kubelet; a pod's shutdown-seconds
// that does not parse is reported on the pod and its grace period holds.
func TestInvalidSimAnnotationsAreReported(t *testing.T) {
	ctx := context.Background()
	addNode(t, "bad-fault", map[string]string{"e2e": "badfault"})
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"yes"}}}`, sim.ConditionAnnotationPrefix+"MemoryPressure")
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, "bad-fault", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs := env.Events(t, "default", "bad-fault", sim.ReasonInvalidAnnotation)
		if len(evs) == 0 {
			return false, "no InvalidAnnotation event on the node"
		}
		msg = evs[0].Message
		return evs[0].Type == corev1.EventTypeWarning && evs[0].Source.Host == "bad-fault", fmt.Sprintf("event %+v", evs[0])
	})
	if want := `annotation condition.sim.capstan.dev/MemoryPressure="yes" ignored: condition status "yes" for MemoryPressure must be True or False`; msg != want {
		t.Errorf("event %q, want %q", msg, want)
	}
	// The kubelet reported after seeing it: the condition is untouched.
	if st := nodes.ConditionStatus(env.GetNode(t, "bad-fault"), corev1.NodeMemoryPressure); st != corev1.ConditionFalse {
		t.Errorf("MemoryPressure %s after an invalid fault, want False", st)
	}

	ns := env.Namespace(t, "badshutdown")
	p := boundPod("sloppy", "bad-fault")
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	p.Annotations = map[string]string{sim.ShutdownSecondsAnnotation: "soon"}
	env.CreatePod(t, ns, p)
	env.WaitPodRunning(t, ns, "sloppy")
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "sloppy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs := env.Events(t, ns, "sloppy", sim.ReasonInvalidAnnotation)
		return len(evs) > 0 && strings.Contains(evs[0].Message, `sim.capstan.dev/shutdown-seconds="soon" ignored`), fmt.Sprintf("events %v", evs)
	})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return env.GetPod(t, ns, "sloppy") == nil, "pod still there after its 1s grace period"
	})
}
