package cvo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// infraNodes are the custom pool's nodes, oldest first: the rollout takes
// zone-a's two, then zone-b's oldest, then the rest.
var infraNodes = []struct{ name, zone string }{
	{"infra-1", "zone-a"}, {"infra-2", "zone-a"}, {"infra-3", "zone-b"}, {"infra-4", "zone-b"}, {"infra-5", "zone-c"},
}

// TestMachineConfigRollout is the chapter's worked example: a pool of 5
// nodes with maxUnavailable 3 rolls a new configuration three nodes at a
// time, a finishing node freeing a slot for the next; then an invalid
// MachineConfig leaves the last good configuration, a paused pool holds,
// a degraded node is reported, and a drain held by a PodDisruptionBudget
// says which pod and budget hold it.
func TestMachineConfigRollout(t *testing.T) {
	ctx := context.Background()
	mcfg, err := mcfgclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range infraNodes {
		addPoolNode(t, n.name, n.zone, "infra")
	}
	names := make([]string, len(infraNodes))
	for i, n := range infraNodes {
		names[i] = n.name
	}
	if err := cluster.WaitNodesReady(ctx, env.Client, names, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	addCustomPool(t, mcfg, "infra", 3)
	pools := mcfg.MachineconfigurationV1().MachineConfigPools()
	first := waitPool(t, mcfg, "infra", "the infra pool never took its nodes", func(p *mcfgv1.MachineConfigPool) bool {
		return p.Status.MachineCount == 5 && p.Status.UpdatedMachineCount == 5 && poolCondition(p, mcfgv1.MachineConfigPoolUpdated) == corev1.ConditionTrue
	})
	// Nodes of a custom pool leave the worker pool.
	waitPool(t, mcfg, "worker", "the worker pool still counts the infra nodes", func(p *mcfgv1.MachineConfigPool) bool { return p.Status.MachineCount == 1 })

	configs := mcfg.MachineconfigurationV1().MachineConfigs()
	// The configs stay until the whole test ends: removing one rolls the
	// pool again.
	parent := t
	addConfig := func(t *testing.T, name, content string) {
		mc := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{mco.RoleLabel: "infra"}},
			Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(
				`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/` + name + `","contents":{"source":"data:,` + content + `"}}]}}`)}}}
		if _, err := configs.Create(ctx, mc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		parent.Cleanup(func() { _ = configs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	newTarget := func(t *testing.T, old string) string {
		p := waitPool(t, mcfg, "infra", "the pool never got a new rendered configuration", func(p *mcfgv1.MachineConfigPool) bool {
			return p.Spec.Configuration.Name != old && p.Spec.Configuration.Name != ""
		})
		return p.Spec.Configuration.Name
	}

	t.Run("the worked example: 5 nodes, maxUnavailable 3", func(t *testing.T) {
		rec := watchRollout(t, "node-role.kubernetes.io/infra")
		addConfig(t, "50-infra-motd", "hello")
		target := newTarget(t, first.Spec.Configuration.Name)
		p := waitPool(t, mcfg, "infra", "the rollout never completed", func(p *mcfgv1.MachineConfigPool) bool {
			return p.Status.Configuration.Name == target && p.Status.UpdatedMachineCount == 5 && poolCondition(p, mcfgv1.MachineConfigPoolUpdated) == corev1.ConditionTrue
		})
		rec.stop()
		if p.Status.ReadyMachineCount != 5 || p.Status.UnavailableMachineCount != 0 {
			t.Errorf("pool status %+v", p.Status)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.maxUnavailable > 3 {
			t.Errorf("%d nodes were unavailable at once, maxUnavailable is 3", rec.maxUnavailable)
		}
		if got := strings.Join(rec.targeted[:min(3, len(rec.targeted))], ","); got != "infra-1,infra-2,infra-3" {
			t.Errorf("first targeted %v, want infra-1, infra-2, infra-3 (zone, then oldest)", rec.targeted)
		}
		if len(rec.targeted) != 5 || rec.doneBeforeFourth == 0 {
			t.Errorf("targeted %v; nodes done before the fourth was targeted: %d", rec.targeted, rec.doneBeforeFourth)
		}
		for _, n := range names {
			if rec.reboots[n] != 1 {
				t.Errorf("node %s rebooted %d times, want once", n, rec.reboots[n])
			}
		}
		// The pool's events say what the controller did.
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			events, err := env.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=MachineConfigPool,involvedObject.name=infra"})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, e := range events.Items {
				got = append(got, e.Reason+": "+e.Message)
			}
			all := strings.Join(got, "\n")
			return strings.Contains(all, "Updating: Pool infra now targeting "+target) &&
				strings.Contains(all, "SetDesiredConfig: Targeted node infra-1 to MachineConfig: "+target) &&
				strings.Contains(all, "Completed: Pool infra has completed update to "+target), "the pool's events:\n" + all
		})
	})

	t.Run("an invalid MachineConfig leaves the last good configuration in force", func(t *testing.T) {
		good := getPool(t, mcfg, "infra").Spec.Configuration.Name
		waitUpdated(t, mcfg, good)
		bad := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: "60-infra-nopath", Labels: map[string]string{mco.RoleLabel: "infra"}},
			Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"contents":{"source":"data:,x"}}]}}`)}}}
		if _, err := configs.Create(ctx, bad, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitPool(t, mcfg, "infra", "the invalid config was not reported", func(p *mcfgv1.MachineConfigPool) bool {
			return poolCondition(p, mcfgv1.MachineConfigPoolRenderDegraded) == corev1.ConditionTrue
		})
		if m := poolConditionMessage(p, mcfgv1.MachineConfigPoolRenderDegraded); !strings.HasPrefix(m, "Failed to render configuration for pool infra: MachineConfig 60-infra-nopath: parsing Ignition config failed") {
			t.Errorf("RenderDegraded message %q", m)
		}
		if p.Spec.Configuration.Name != good || poolCondition(p, mcfgv1.MachineConfigPoolDegraded) != corev1.ConditionTrue {
			t.Errorf("the pool moved off %s or is not Degraded: %s %+v", good, p.Spec.Configuration.Name, p.Status.Conditions)
		}
		if err := configs.Delete(ctx, bad.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPool(t, mcfg, "infra", "RenderDegraded did not clear", func(p *mcfgv1.MachineConfigPool) bool {
			return poolCondition(p, mcfgv1.MachineConfigPoolRenderDegraded) == corev1.ConditionFalse && p.Spec.Configuration.Name == good
		})
	})

	t.Run("a paused pool holds", func(t *testing.T) {
		if _, err := pools.Patch(ctx, "infra", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		old := getPool(t, mcfg, "infra").Spec.Configuration.Name
		addConfig(t, "51-infra-paused", "later")
		target := newTarget(t, old)
		waitPool(t, mcfg, "infra", "the pause was not reported", func(p *mcfgv1.MachineConfigPool) bool {
			return poolConditionMessage(p, mcfgv1.MachineConfigPoolUpdating) == "Pool is paused; will not update to "+target
		})
		for _, n := range names {
			if d := env.GetNode(t, n).Annotations[mco.DesiredConfigAnnotation]; d == target {
				t.Errorf("node %s was targeted in a paused pool", n)
			}
		}
		if _, err := pools.Patch(ctx, "infra", types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUpdated(t, mcfg, target)
	})

	t.Run("a degraded node is reported, and holds its slot", func(t *testing.T) {
		annotateNode(t, "infra-5", mco.FailAnnotation, "unexpected on-disk state validating against the new config")
		old := getPool(t, mcfg, "infra").Spec.Configuration.Name
		addConfig(t, "52-infra-degraded", "x")
		target := newTarget(t, old)
		p := waitPool(t, mcfg, "infra", "the degraded node was not reported", func(p *mcfgv1.MachineConfigPool) bool {
			return p.Status.DegradedMachineCount == 1 && poolCondition(p, mcfgv1.MachineConfigPoolNodeDegraded) == corev1.ConditionTrue
		})
		want := `Node infra-5 is reporting: "unexpected on-disk state validating against the new config"`
		if m := poolConditionMessage(p, mcfgv1.MachineConfigPoolDegraded); m != want {
			t.Errorf("Degraded message %q, want %q", m, want)
		}
		annotateNode(t, "infra-5", mco.FailAnnotation, "")
		waitUpdated(t, mcfg, target)
	})

	t.Run("the daemon's drain, pivot and reboot failures fire their alerts", func(t *testing.T) {
		labels := map[string]string{"node": "infra-5"}
		for _, tc := range []struct{ step, alert string }{
			{mco.FailAtDrain, "MCCDrainError"}, {mco.FailAtPivot, "MCDPivotError"}, {mco.FailAtReboot, "MCDRebootError"},
		} {
			capstanOK(t, "sim", "node", "mcd-fail", "infra-5", "--at", tc.step, "--kubeconfig", env.Kubeconfig)
			old := getPool(t, mcfg, "infra").Spec.Configuration.Name
			addConfig(t, "53-infra-"+tc.step, tc.step)
			target := newTarget(t, old)
			a := env.WaitAlertFiring(t, tc.alert, labels, alertTimeout)
			if a.Labels["namespace"] != "openshift-machine-config-operator" || a.Annotations["summary"] == "" {
				t.Errorf("%s: %+v", tc.alert, a)
			}
			// A failed drain is retried with its reason on the node (the
			// daemon degrades only after an hour of them); a failed pivot
			// or reboot degrades the node at once.
			n := env.GetNode(t, "infra-5")
			if tc.step == mco.FailAtDrain {
				if r := n.Annotations[mco.ReasonAnnotation]; !strings.HasPrefix(r, "failed to drain node: infra-5: ") {
					t.Errorf("drain: infra-5's reason %q", r)
				}
			} else if s := n.Annotations[mco.StateAnnotation]; s != mco.StateDegraded {
				t.Errorf("%s: infra-5 is %s, not Degraded", tc.step, s)
			}
			capstanOK(t, "sim", "node", "mcd-fail", "infra-5", "--clear", "--kubeconfig", env.Kubeconfig)
			waitUpdated(t, mcfg, target)
			env.WaitAlertResolved(t, tc.alert, labels, alertTimeout)
		}
	})

	t.Run("a drain held by a PodDisruptionBudget says what holds it", func(t *testing.T) {
		ns := env.Namespace(t, "mco-pdb")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns, Labels: map[string]string{"app": "guarded"},
			Annotations: map[string]string{sim.ShutdownSecondsAnnotation: "1"}},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": "infra-1"},
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guard", Namespace: ns},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
		if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			got, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guard", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return got.Status.CurrentHealthy == 1 && got.Status.DisruptionsAllowed == 0, fmt.Sprintf("budget status %+v", got.Status)
		})
		old := getPool(t, mcfg, "infra").Spec.Configuration.Name
		addConfig(t, "53-infra-pdb", "y")
		target := newTarget(t, old)
		want := "infra-1: drain is blocked: pod " + ns + "/guarded cannot be evicted: PodDisruptionBudget guard allows 0 disruptions (1 healthy, 1 desired)"
		waitPool(t, mcfg, "infra", "the held drain was not reported", func(p *mcfgv1.MachineConfigPool) bool {
			return strings.Contains(poolConditionMessage(p, mcfgv1.MachineConfigPoolUpdating), want)
		})
		if err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "guard", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUpdated(t, mcfg, target)
	})
}

func getPool(t *testing.T, mcfg mcfgclient.Interface, name string) *mcfgv1.MachineConfigPool {
	t.Helper()
	p, err := mcfg.MachineconfigurationV1().MachineConfigPools().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// addPoolNode launches a worker node with the role of a custom pool,
// removed when the test ends.
func addPoolNode(t *testing.T, name, zone, role string) {
	t.Helper()
	spec := sim.InstanceSpec{Name: name, Zone: zone, CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"), Pods: 110, Role: "worker",
		Labels: map[string]string{"node-role.kubernetes.io/" + role: ""}}
	if _, err := env.Cloud.CreateInstance(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Cloud.DeleteInstance(context.Background(), name)
		_ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// addCustomPool creates a custom pool as OpenShift's docs make one: its
// nodes by their role, the worker configurations and its own, removed
// when the test ends.
func addCustomPool(t *testing.T, mcfg mcfgclient.Interface, role string, maxUnavailable int32) {
	t.Helper()
	pool := &mcfgv1.MachineConfigPool{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Spec: mcfgv1.MachineConfigPoolSpec{
			MachineConfigSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: mco.RoleLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"worker", role}}}},
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"node-role.kubernetes.io/" + role: ""}},
			MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
		},
	}
	pools := mcfg.MachineconfigurationV1().MachineConfigPools()
	if _, err := pools.Create(context.Background(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), role, metav1.DeleteOptions{}) })
}

func waitPool(t *testing.T, mcfg mcfgclient.Interface, name, what string, done func(*mcfgv1.MachineConfigPool) bool) *mcfgv1.MachineConfigPool {
	t.Helper()
	var p *mcfgv1.MachineConfigPool
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		p = getPool(t, mcfg, name)
		return done(p), fmt.Sprintf("%s: spec %s, status %+v", what, p.Spec.Configuration.Name, p.Status)
	})
	return p
}

func waitUpdated(t *testing.T, mcfg mcfgclient.Interface, target string) {
	t.Helper()
	waitPool(t, mcfg, "infra", "the rollout to "+target+" never completed", func(p *mcfgv1.MachineConfigPool) bool {
		return p.Status.Configuration.Name == target && p.Status.UpdatedMachineCount == 5 && p.Status.DegradedMachineCount == 0
	})
}

func poolCondition(p *mcfgv1.MachineConfigPool, t mcfgv1.MachineConfigPoolConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func poolConditionMessage(p *mcfgv1.MachineConfigPool, t mcfgv1.MachineConfigPoolConditionType) string {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Message
		}
	}
	return ""
}

func annotateNode(t *testing.T, node, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if value == "" {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, key)
	}
	if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rolloutRecorder watches a pool's nodes through a rollout.
type rolloutRecorder struct {
	mu               sync.Mutex
	nodes            map[string]*corev1.Node
	targeted         []string
	reboots          map[string]int
	maxUnavailable   int
	doneBeforeFourth int
	stop             func()
}

// watchRollout records, from a watch of the nodes a label selects, the
// order they are targeted in, their reboots, and the most unavailable at
// once.
func watchRollout(t *testing.T, selector string) *rolloutRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &rolloutRecorder{nodes: map[string]*corev1.Node{}, reboots: map[string]int{}, stop: cancel}
	list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		r.nodes[list.Items[i].Name] = &list.Items[i]
	}
	w, err := env.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			r.observe(n)
		}
	}()
	return r
}

func (r *rolloutRecorder) observe(n *corev1.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.nodes[n.Name]
	r.nodes[n.Name] = n
	if prev == nil {
		return
	}
	oldDesired, newDesired := prev.Annotations[mco.DesiredConfigAnnotation], n.Annotations[mco.DesiredConfigAnnotation]
	if newDesired != oldDesired && prev.Annotations[mco.CurrentConfigAnnotation] == oldDesired {
		r.targeted = append(r.targeted, n.Name)
		if len(r.targeted) == 4 {
			for _, other := range r.targeted[:3] {
				a := r.nodes[other].Annotations
				if a[mco.CurrentConfigAnnotation] == a[mco.DesiredConfigAnnotation] && a[mco.StateAnnotation] == mco.StateDone {
					r.doneBeforeFourth++
				}
			}
		}
	}
	if ready(prev) && !ready(n) {
		r.reboots[n.Name]++
	}
	busy := 0
	for _, m := range r.nodes {
		a := m.Annotations
		if !ready(m) || m.Spec.Unschedulable || a[mco.CurrentConfigAnnotation] != a[mco.DesiredConfigAnnotation] || a[mco.StateAnnotation] != mco.StateDone {
			busy++
		}
	}
	r.maxUnavailable = max(r.maxUnavailable, busy)
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setPaused pauses or resumes a pool.
func setPaused(t *testing.T, mcfg mcfgclient.Interface, pool string, paused bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
	if _, err := mcfg.MachineconfigurationV1().MachineConfigPools().Patch(context.Background(), pool, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// boots reads how many times each node has rebooted.
func boots(t *testing.T) map[string]int {
	t.Helper()
	nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for i := range nodes.Items {
		out[nodes.Items[i].Name] = sim.Boot(&nodes.Items[i])
	}
	return out
}

// releaseOfPool is the release version of the configuration a pool
// targets, and whether the pool has all its nodes on it.
func releaseOfPool(t *testing.T, mcfg mcfgclient.Interface, name string) (string, bool) {
	t.Helper()
	p := getPool(t, mcfg, name)
	target := p.Spec.Configuration.Name
	if target == "" {
		return "", false
	}
	mc, err := mcfg.MachineconfigurationV1().MachineConfigs().Get(context.Background(), target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := p.Status.Configuration.Name == target && poolCondition(p, mcfgv1.MachineConfigPoolUpdated) == corev1.ConditionTrue &&
		p.Status.UpdatedMachineCount == p.Status.MachineCount
	return mc.Annotations[mco.ReleaseImageVersionAnnotation], done
}
