package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/taints"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/waitfor"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/sim"
)

// e2eTaint keeps other tests' pods off the machines these tests create
// (and exercises the MachineSet taints recipe of 7.7.3).
var e2eTaint = corev1.Taint{Key: "capstan.dev/e2e-machines", Value: "true", Effect: corev1.TaintEffectNoSchedule}

func machines(t *testing.T) machineclient.Interface {
	t.Helper()
	mc, err := env.MachineClient()
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

func machineSpec(zone string) machinev1.MachineSpec {
	return machinev1.MachineSpec{
		ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{"node-role.kubernetes.io/e2e": ""}},
		Taints:     []corev1.Taint{e2eTaint},
		ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{
			InstanceType: "capstan.medium", Region: sim.DefaultRegion, Zone: zone})},
	}
}

// newMachineSet creates a MachineSet and, at cleanup, deletes it with its
// machines and waits until their nodes are gone.
func newMachineSet(t *testing.T, name string, replicas int32, mutate ...func(*machinev1.MachineSet)) *machinev1.MachineSet {
	t.Helper()
	lbl := map[string]string{machine.MachineSetLabel: name}
	ms := &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: machine.Namespace},
		Spec: machinev1.MachineSetSpec{
			Replicas: ptr.To(replicas),
			Selector: metav1.LabelSelector{MatchLabels: lbl},
			Template: machinev1.MachineTemplateSpec{
				ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{machine.MachineSetLabel: name, machine.MachineRoleLabel: "worker"}},
				Spec:       machineSpec("sim-zone-a"),
			},
		},
	}
	for _, f := range mutate {
		f(ms)
	}
	ms, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Create(context.Background(), ms, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupMachines(t, name) })
	return ms
}

// cleanupMachines deletes the MachineSet and its machines, hooks removed,
// and waits until their nodes are gone.
func cleanupMachines(t *testing.T, set string) {
	ctx := context.Background()
	api := machines(t).MachineV1beta1()
	_ = api.MachineSets(machine.Namespace).Delete(ctx, set, metav1.DeleteOptions{})
	sel := machine.MachineSetLabel + "=" + set
	err := waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
		list, err := api.Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, "", err
		}
		for i := range list.Items {
			m := &list.Items[i]
			if len(m.Spec.LifecycleHooks.PreDrain)+len(m.Spec.LifecycleHooks.PreTerminate) > 0 {
				m.Spec.LifecycleHooks = machinev1.LifecycleHooks{}
				_, _ = api.Machines(machine.Namespace).Update(ctx, m, metav1.UpdateOptions{})
			}
			_ = api.Machines(machine.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{})
		}
		return len(list.Items) == 0, fmt.Sprintf("%d machines left", len(list.Items)), nil
	})
	if err != nil {
		t.Errorf("cleanup %s: %v", set, err)
		return
	}
	nodes, _ := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, set+"-") {
			t.Errorf("cleanup %s: node %s left behind", set, n.Name)
		}
	}
}

func getMachine(t *testing.T, name string) *machinev1.Machine {
	t.Helper()
	m, err := machines(t).MachineV1beta1().Machines(machine.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// setMachines returns the live machines of a MachineSet, by name.
func setMachines(t *testing.T, set string) []machinev1.Machine {
	t.Helper()
	list, err := machines(t).MachineV1beta1().Machines(machine.Namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=" + set})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b machinev1.Machine) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// waitMachinesRunning waits until the set has n machines not being deleted,
// all Running with Ready nodes, and returns them.
func waitMachinesRunning(t *testing.T, set string, n int) []machinev1.Machine {
	t.Helper()
	var out []machinev1.Machine
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		out = out[:0]
		var why []string
		for _, m := range setMachines(t, set) {
			if m.DeletionTimestamp != nil {
				continue
			}
			out = append(out, m)
			if ptr.Deref(m.Status.Phase, "") != machinev1.PhaseRunning || m.Status.NodeRef == nil {
				why = append(why, fmt.Sprintf("%s: phase %q", m.Name, ptr.Deref(m.Status.Phase, "")))
				continue
			}
			if n, err := env.Client.CoreV1().Nodes().Get(context.Background(), m.Status.NodeRef.Name, metav1.GetOptions{}); err != nil || nodes.ConditionStatus(n, corev1.NodeReady) != corev1.ConditionTrue {
				why = append(why, m.Name+": node not Ready")
			}
		}
		if len(out) != n {
			why = append(why, fmt.Sprintf("%d machines, want %d", len(out), n))
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
	return out
}

func machineCondition(m *machinev1.Machine, ct machinev1.ConditionType) *machinev1.Condition {
	return machine.GetCondition(m.Status.Conditions, ct)
}

func waitMachineGone(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() (bool, string) {
		m, err := machines(t).MachineV1beta1().Machines(machine.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("machine %s still there, phase %q, conditions %+v", name, ptr.Deref(m.Status.Phase, ""), m.Status.Conditions)
	})
	if _, err := env.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node %s of deleted machine %s: %v, want NotFound", name, name, err)
	}
	if _, err := env.Cloud.GetInstance(context.Background(), name); !errors.Is(err, sim.ErrInstanceNotFound) {
		t.Errorf("instance %s of deleted machine: %v, want not found", name, err)
	}
}

// machineEvents returns the reasons of the events of a machine, in order.
func machineEvents(t *testing.T, name string) []string {
	t.Helper()
	evs, err := env.Client.CoreV1().Events(machine.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": name, "involvedObject.kind": "Machine"}.String()})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason)
	}
	return out
}

// waitMachineEvents waits for events of each reason about a Machine: events
// are recorded asynchronously, after the write that they report.
func waitMachineEvents(t *testing.T, name string, reasons ...string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs := machineEvents(t, name)
		for _, want := range reasons {
			if !slices.Contains(evs, want) {
				return false, fmt.Sprintf("events of %s %v lack %s", name, evs, want)
			}
		}
		return true, ""
	})
}

// tolerantPod runs on the node of a test machine.
func tolerantPod(name, node string) *corev1.Pod {
	p := boundPod(name, node)
	p.Spec.Tolerations = []corev1.Toleration{{Key: e2eTaint.Key, Operator: corev1.TolerationOpExists}}
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return p
}

// A MachineSet's machine is provisioned, linked to its node, and carries
// its labels and taints onto it (7.7.3); the set reports its replicas.
func TestMachineSetProvisionsLinkedNodes(t *testing.T) {
	ms := newMachineSet(t, "e2e-provision", 2)
	ms.Spec.MinReadySeconds = 0
	got := waitMachinesRunning(t, ms.Name, 2)
	for _, m := range got {
		// The cloud's own instance ID ends the provider ID.
		if id, ok := strings.CutPrefix(ptr.Deref(m.Spec.ProviderID, ""), sim.ProviderIDPrefix+"sim-zone-a/i-"); !ok || len(id) != 17 {
			t.Errorf("%s: providerID %q, want %si-<17 hex digits>", m.Name, ptr.Deref(m.Spec.ProviderID, ""), sim.ProviderIDPrefix+"sim-zone-a/")
		}
		if len(m.Status.Addresses) == 0 || m.Status.Addresses[0].Type != corev1.NodeInternalIP {
			t.Errorf("%s: addresses %v", m.Name, m.Status.Addresses)
		}
		for _, ct := range []machinev1.ConditionType{machinev1.MachineDrainable, machinev1.MachineTerminable, machinev1.InstanceExistsCondition} {
			if c := machineCondition(&m, ct); c == nil || c.Status != corev1.ConditionTrue {
				t.Errorf("%s: condition %s = %+v", m.Name, ct, c)
			}
		}
		if m.Labels[machine.InstanceTypeLabel] != "capstan.medium" || m.Labels[machine.ZoneLabel] != "sim-zone-a" || m.Annotations[machine.InstanceStateAnnotation] != "running" {
			t.Errorf("%s: labels %v annotations %v", m.Name, m.Labels, m.Annotations)
		}
		if !slices.Contains(m.Finalizers, machinev1.MachineFinalizer) {
			t.Errorf("%s: finalizers %v", m.Name, m.Finalizers)
		}
		n := env.GetNode(t, m.Status.NodeRef.Name)
		if n.Annotations[machine.MachineAnnotation] != machine.Namespace+"/"+m.Name {
			t.Errorf("node %s: annotation %q", n.Name, n.Annotations[machine.MachineAnnotation])
		}
		if _, ok := n.Labels["node-role.kubernetes.io/e2e"]; !ok || !taints.Has(n.Spec.Taints, e2eTaint.Key, e2eTaint.Effect) {
			t.Errorf("node %s: labels %v taints %v", n.Name, n.Labels, n.Spec.Taints)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		s, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Get(context.Background(), ms.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := s.Status
		return st.Replicas == 2 && st.FullyLabeledReplicas == 2 && st.ReadyReplicas == 2 && st.AvailableReplicas == 2 && st.ObservedGeneration == s.Generation,
			fmt.Sprintf("status %+v generation %d", st, s.Generation)
	})
	// The scale subresource, as `oc scale machineset` uses it.
	capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "scale", "machineset", ms.Name, "-n", machine.Namespace, "--replicas=1")
	waitMachinesRunning(t, ms.Name, 1)
}

// 6.2.2 with no hooks: Deleting, drained, instance and node deleted,
// finalizer removed.
func TestMachineDeletionWithoutHooks(t *testing.T) {
	ms := newMachineSet(t, "e2e-nohooks", 1)
	m := waitMachinesRunning(t, ms.Name, 1)[0]
	ctx := context.Background()
	ns := env.Namespace(t, "nohooks")
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, tolerantPod("app", m.Status.NodeRef.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodRunning(t, ns, "app")
	// Scaling to zero deletes it; nothing replaces it.
	capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "scale", "machineset", ms.Name, "-n", machine.Namespace, "--replicas=0")
	waitMachineGone(t, m.Name, time.Minute)
	env.WaitPodGone(t, ns, "app", 10*time.Second)
	waitMachineEvents(t, m.Name, machine.EventDrainProceeds, machine.EventDeleted, machine.EventDrainSucceeded)
}

// The example configuration of 6.2.3: one preDrain and three preTerminate
// hooks, removed one by one; nothing proceeds before its hooks are gone.
func TestMachineDeletionHooksExample(t *testing.T) {
	ms := newMachineSet(t, "e2e-hooks", 1, func(ms *machinev1.MachineSet) {
		ms.Spec.Template.Spec.LifecycleHooks = machinev1.LifecycleHooks{
			PreDrain: []machinev1.LifecycleHook{{Name: "MigrateImportantApp", Owner: "my-app-migration-controller"}},
			PreTerminate: []machinev1.LifecycleHook{
				{Name: "BackupFileSystem", Owner: "my-backup-controller"},
				{Name: "CloudProviderSpecialCase", Owner: "my-custom-storage-detach-controller"},
				{Name: "WaitForStorageDetach", Owner: "my-custom-storage-detach-controller"},
			},
		}
	})
	m := waitMachinesRunning(t, ms.Name, 1)[0]
	ctx := context.Background()
	ns := env.Namespace(t, "hooks")
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, tolerantPod("important", m.Status.NodeRef.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodRunning(t, ns, "important")
	if c := machineCondition(&m, machinev1.MachineDrainable); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "HookPresent" {
		t.Fatalf("Drainable before deletion: %+v", c)
	}
	api := machines(t).MachineV1beta1().Machines(machine.Namespace)
	if err := api.Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got := getMachine(t, m.Name)
		return ptr.Deref(got.Status.Phase, "") == machinev1.PhaseDeleting, fmt.Sprintf("phase %q", ptr.Deref(got.Status.Phase, ""))
	})
	// The MachineSet does not count it: a replacement starts at once.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		live := 0
		for _, x := range setMachines(t, ms.Name) {
			if x.DeletionTimestamp == nil {
				live++
			}
		}
		return live == 1, fmt.Sprintf("%d replacements", live)
	})
	// The drain controller looked at the deleted machine and declined.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs := machineEvents(t, m.Name)
		return slices.Contains(evs, machine.EventDrainBlocked), fmt.Sprintf("events %v", evs)
	})
	held := getMachine(t, m.Name)
	c := machineCondition(held, machinev1.MachineDrainable)
	if c == nil || c.Status != corev1.ConditionFalse || c.Message != "Drain operation currently blocked by: [{Name:MigrateImportantApp Owner:my-app-migration-controller}]" || c.Severity != machinev1.ConditionSeverityWarning {
		t.Fatalf("Drainable while held: %+v", c)
	}
	if d := machineCondition(held, machinev1.MachineDrained); d != nil && d.Status == corev1.ConditionTrue {
		t.Fatalf("drained despite the preDrain hook: %+v", d)
	}
	if env.GetNode(t, m.Status.NodeRef.Name).Spec.Unschedulable || !env.PodAlive(t, ns, "important") {
		t.Fatal("node cordoned or pod evicted while the preDrain hook holds")
	}
	removeHook := func(point, name string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := getMachine(t, m.Name)
			l := &got.Spec.LifecycleHooks.PreDrain
			if point == "preTerminate" {
				l = &got.Spec.LifecycleHooks.PreTerminate
			}
			*l = slices.DeleteFunc(*l, func(h machinev1.LifecycleHook) bool { return h.Name == name })
			_, err := api.Update(ctx, got, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("removing %s: %v", name, err)
		}
	}
	removeHook("preDrain", "MigrateImportantApp")
	env.WaitPodGone(t, ns, "important", 30*time.Second)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got := getMachine(t, m.Name)
		d := machineCondition(got, machinev1.MachineDrained)
		return d != nil && d.Status == corev1.ConditionTrue, fmt.Sprintf("Drained %+v", d)
	})
	if !env.GetNode(t, m.Status.NodeRef.Name).Spec.Unschedulable {
		t.Error("drained node not cordoned")
	}
	remaining := []string{"BackupFileSystem", "CloudProviderSpecialCase", "WaitForStorageDetach"}
	owners := map[string]string{"BackupFileSystem": "my-backup-controller", "CloudProviderSpecialCase": "my-custom-storage-detach-controller", "WaitForStorageDetach": "my-custom-storage-detach-controller"}
	// The machine controller looked at the drained machine and kept its
	// instance for the hooks.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs := machineEvents(t, m.Name)
		return slices.Contains(evs, machine.EventTerminateBlocked), fmt.Sprintf("events %v", evs)
	})
	for len(remaining) > 0 {
		var parts []string
		for _, h := range remaining {
			parts = append(parts, fmt.Sprintf("{Name:%s Owner:%s}", h, owners[h]))
		}
		// The condition says which hooks the machine controller saw on
		// its last look, the one that decided to keep the instance.
		want := "Terminate operation currently blocked by: [" + strings.Join(parts, " ") + "]"
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			c := machineCondition(getMachine(t, m.Name), machinev1.MachineTerminable)
			return c != nil && c.Status == corev1.ConditionFalse && c.Message == want, fmt.Sprintf("Terminable with %v: %+v", remaining, c)
		})
		if _, err := env.Cloud.GetInstance(ctx, m.Name); err != nil {
			t.Fatalf("instance gone while %v hold it: %v", remaining, err)
		}
		if _, err := env.Client.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("node gone while %v hold it: %v", remaining, err)
		}
		removeHook("preTerminate", remaining[0])
		remaining = remaining[1:]
	}
	waitMachineGone(t, m.Name, time.Minute)
}

// Adding or changing hooks of a deleted machine is refused with
// OpenShift's message; removing is allowed. A MachineSet whose selector
// does not match its template is refused.
func TestMachineWebhookRejections(t *testing.T) {
	ms := newMachineSet(t, "e2e-webhook", 1, func(ms *machinev1.MachineSet) {
		ms.Spec.Template.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{{Name: "Hold", Owner: "e2e-test"}}
	})
	m := waitMachinesRunning(t, ms.Name, 1)[0]
	ctx := context.Background()
	api := machines(t).MachineV1beta1().Machines(machine.Namespace)
	if err := api.Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// updateHooks changes the machine's hooks, retrying conflicts with the
	// controllers that write it too.
	updateHooks := func(change func(*machinev1.Machine)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := getMachine(t, m.Name)
			change(got)
			_, err := api.Update(ctx, got, metav1.UpdateOptions{})
			return err
		})
	}
	err := updateHooks(func(got *machinev1.Machine) {
		got.Spec.LifecycleHooks.PreTerminate = append(got.Spec.LifecycleHooks.PreTerminate, machinev1.LifecycleHook{Name: "Late", Owner: "e2e-test"})
	})
	want := `admission webhook "validation.machine.machine.openshift.io" denied the request: spec.lifecycleHooks.preTerminate: Forbidden: pre-terminate hooks are immutable when machine is marked for deletion: the following hooks are new or changed: [{Name:Late Owner:e2e-test}]`
	if err == nil || err.Error() != want {
		t.Fatalf("adding a hook to a deleted machine: %v\nwant: %s", err, want)
	}
	err = updateHooks(func(got *machinev1.Machine) { got.Spec.LifecycleHooks.PreDrain[0].Owner = "someone-else" })
	if err == nil || !strings.Contains(err.Error(), "pre-drain hooks are immutable when machine is marked for deletion") {
		t.Fatalf("changing a hook of a deleted machine: %v", err)
	}
	if err := updateHooks(func(got *machinev1.Machine) { got.Spec.LifecycleHooks.PreDrain = nil }); err != nil {
		t.Fatalf("removing a hook of a deleted machine: %v", err)
	}
	waitMachineGone(t, m.Name, time.Minute)

	bad := &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-badselector", Namespace: machine.Namespace},
		Spec: machinev1.MachineSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: machinev1.MachineTemplateSpec{ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{"a": "c"}}, Spec: machineSpec("sim-zone-a")},
		},
	}
	_, err = machines(t).MachineV1beta1().MachineSets(machine.Namespace).Create(ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.template.metadata.labels: Invalid value") || !strings.Contains(err.Error(), "`selector` does not match template `labels`") {
		t.Fatalf("mismatched selector: %v", err)
	}
	dup := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "e2e-duphooks", Namespace: machine.Namespace}, Spec: machineSpec("sim-zone-a")}
	dup.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{{Name: "Same", Owner: "a-owner"}, {Name: "Same", Owner: "b-owner"}}
	if _, err := api.Create(ctx, dup, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.lifecycleHooks.preDrain[1]") {
		t.Fatalf("duplicate hook names: %v", err)
	}
	badSpec := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "e2e-badspec", Namespace: machine.Namespace}, Spec: machineSpec("sim-zone-a")}
	badSpec.Spec.ProviderSpec.Value = machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "m5.enormous"})
	if _, err := api.Create(ctx, badSpec, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), `unknown instance type "m5.enormous"`) {
		t.Fatalf("unknown instance type: %v", err)
	}
}

// A PodDisruptionBudget holds the drain (Drained=False, DrainError,
// DrainRequeued) until it allows the eviction.
func TestDrainBlockedByPodDisruptionBudget(t *testing.T) {
	ms := newMachineSet(t, "e2e-pdb", 1)
	m := waitMachinesRunning(t, ms.Name, 1)[0]
	ctx := context.Background()
	ns := env.Namespace(t, "pdb")
	p := tolerantPod("guarded", m.Status.NodeRef.Name)
	p.Labels = map[string]string{"app": "guarded"}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodRunning(t, ns, "guarded")
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1, "disruption controller has not seen the budget"
	})
	if err := machines(t).MachineV1beta1().Machines(machine.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		got := getMachine(t, m.Name)
		d := machineCondition(got, machinev1.MachineDrained)
		return d != nil && d.Status == corev1.ConditionFalse && d.Reason == machinev1.MachineDrainError &&
				strings.Contains(d.Message, "could not drain machine") && strings.Contains(d.Message, "disruption budget"),
			fmt.Sprintf("Drained %+v", d)
	})
	waitMachineEvents(t, m.Name, machine.EventDrainRequeued)
	if !env.PodAlive(t, ns, "guarded") {
		t.Fatal("pod evicted against its budget")
	}
	if _, err := env.Cloud.GetInstance(ctx, m.Name); err != nil {
		t.Fatalf("instance deleted before the drain: %v", err)
	}
	// The budget lets go: the retried drain completes.
	if err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "guarded", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMachineGone(t, m.Name, time.Minute)
}

// The triggers of 6.2.2: the delete-machine annotation picks the machine a
// scale-down removes; the Oldest and Newest policies pick by age.
func TestScaleDownTriggers(t *testing.T) {
	ms := newMachineSet(t, "e2e-scaledown", 1, func(ms *machinev1.MachineSet) { ms.Spec.DeletePolicy = "Oldest" })
	oldest := waitMachinesRunning(t, ms.Name, 1)[0].Name
	scale := func(n int) {
		t.Helper()
		capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "scale", "machineset", ms.Name, "-n", machine.Namespace, fmt.Sprintf("--replicas=%d", n))
	}
	// Creation times have a resolution of a second: the next machines are
	// created once the apiserver stamps new objects later than the first.
	first := getMachine(t, oldest).CreationTimestamp
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		cm, err := env.Client.CoreV1().ConfigMaps(machine.Namespace).Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-clock-"}}, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		_ = env.Client.CoreV1().ConfigMaps(machine.Namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		return cm.CreationTimestamp.After(first.Time), fmt.Sprintf("apiserver stamps %s, the first machine %s", cm.CreationTimestamp, first)
	})
	scale(3)
	got := waitMachinesRunning(t, ms.Name, 3)
	ctx := context.Background()
	// The annotation beats the policy: a young machine goes first.
	marked := got[0].Name
	if marked == oldest {
		marked = got[1].Name
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, machine.DeleteMachineAnnotation)
	if _, err := machines(t).MachineV1beta1().Machines(machine.Namespace).Patch(ctx, marked, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	scale(2)
	waitMachineGone(t, marked, time.Minute)
	// Oldest: the first machine goes next.
	waitMachinesRunning(t, ms.Name, 2)
	scale(1)
	waitMachineGone(t, oldest, time.Minute)
	waitMachinesRunning(t, ms.Name, 1)
}

// A MachineHealthCheck remediates an unhealthy machine of a MachineSet by
// deleting it (through the usual deletion); too many unhealthy machines
// short-circuit remediation.
func TestMachineHealthCheckRemediation(t *testing.T) {
	ms := newMachineSet(t, "e2e-mhc", 2)
	got := waitMachinesRunning(t, ms.Name, 2)
	ctx := context.Background()
	mhcAPI := machines(t).MachineV1beta1().MachineHealthChecks(machine.Namespace)
	mhc := &machinev1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-mhc"},
		Spec: machinev1.MachineHealthCheckSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{machine.MachineSetLabel: ms.Name}},
			// Both stopped nodes count as unhealthy from the moment they go
			// Unknown; the timeout outlasts the gap between the two.
			UnhealthyConditions: []machinev1.UnhealthyCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Timeout: metav1.Duration{Duration: 5 * time.Second}}},
			MaxUnhealthy:        ptr.To(intstr.FromInt32(1)),
		},
	}
	if _, err := mhcAPI.Create(ctx, mhc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mhcAPI.Delete(context.Background(), mhc.Name, metav1.DeleteOptions{}) })
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		h, err := mhcAPI.Get(ctx, mhc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(h.Status.ExpectedMachines, -1) == 2 && ptr.Deref(h.Status.CurrentHealthy, -1) == 2 && h.Status.RemediationsAllowed == 1,
			fmt.Sprintf("status %+v", h.Status)
	})
	// Both nodes stop: more than maxUnhealthy, nothing is remediated.
	for _, m := range got {
		capstanOK(t, "sim", "--kubeconfig", env.Kubeconfig, "node", "stop", m.Status.NodeRef.Name)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		h, err := mhcAPI.Get(ctx, mhc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := machine.GetCondition(h.Status.Conditions, machinev1.RemediationAllowedCondition)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == machinev1.TooManyUnhealthyReason, fmt.Sprintf("conditions %+v", h.Status.Conditions)
	})
	// Events are recorded asynchronously: the condition can land first.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs, err := env.Client.CoreV1().Events(machine.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=e2e-mhc,reason=RemediationRestricted"})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "Remediation restricted due to exceeded number of unhealthy machines (total: 2, unhealthy: 2, maxUnhealthy: 1)") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("RemediationRestricted events: %+v", evs.Items)
	})
	for _, m := range got {
		if getMachine(t, m.Name).DeletionTimestamp != nil {
			t.Fatalf("machine %s remediated despite the short-circuit", m.Name)
		}
	}
	// One recovers: the other is remediated and replaced.
	capstanOK(t, "sim", "--kubeconfig", env.Kubeconfig, "node", "start", got[0].Status.NodeRef.Name)
	waitMachineGone(t, got[1].Name, time.Minute)
	waitMachineEvents(t, got[1].Name, machine.EventMachineDeleted)
	waitMachinesRunning(t, ms.Name, 2)
}

// The example hook controllers of 6.2.4.
func TestExampleHookControllers(t *testing.T) {
	ms := newMachineSet(t, "e2e-hookctl", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs := []*hooks.Hook{hooks.ProactiveReplacement(nil), hooks.LogFlushDelay(3*time.Second, nil), hooks.StorageDetach(nil)}
	for _, h := range hs {
		h.Selector = labelSelector(t, machine.MachineSetLabel+"="+ms.Name)
	}
	mgr, err := hooks.NewManager(env.Config, hooks.Options{}, hs...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	m := waitMachinesRunning(t, ms.Name, 1)[0]
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got := getMachine(t, m.Name)
		return len(got.Spec.LifecycleHooks.PreDrain) == 1 && len(got.Spec.LifecycleHooks.PreTerminate) == 2, fmt.Sprintf("hooks %+v", got.Spec.LifecycleHooks)
	})
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + m.Name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: m.Status.NodeRef.Name,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-e2e")}},
	}
	if _, err := env.Client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Conditions keep whole seconds, and the log flush hook counts its
	// delay from the Drained condition's: so is start.
	start := time.Now().Truncate(time.Second)
	if err := machines(t).MachineV1beta1().Machines(machine.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Proactive replacement: the drain waits for the replacement.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		got := getMachine(t, m.Name)
		d := machineCondition(got, machinev1.MachineDrained)
		return d != nil && d.Status == corev1.ConditionTrue, fmt.Sprintf("Drained %+v", d)
	})
	repl := waitMachinesRunning(t, ms.Name, 1)[0]
	if repl.Name == m.Name {
		t.Fatal("no replacement")
	}
	drainedAt := machineCondition(getMachine(t, m.Name), machinev1.MachineDrained).LastTransitionTime.Time
	if n := env.GetNode(t, repl.Status.NodeRef.Name); nodes.ConditionStatus(n, corev1.NodeReady) != corev1.ConditionTrue || n.CreationTimestamp.After(drainedAt.Add(time.Second)) {
		t.Errorf("drained at %v before the replacement node %s (created %v) was Ready", drainedAt, n.Name, n.CreationTimestamp)
	}
	// Log flush delay lets go of its hook at least 3s after the drain (the
	// drain time is rounded down to the second: the gap measured can only
	// be longer); storage detach holds until the attachment goes.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		names := hookNames(getMachine(t, m.Name).Spec.LifecycleHooks.PreTerminate)
		return slices.Equal(names, []string{"WaitForStorageDetach"}), fmt.Sprintf("preTerminate hooks %v", names)
	})
	if held := time.Since(drainedAt); held < 3*time.Second {
		t.Errorf("log flush hook removed %s after the drain, before its 3s", held)
	}
	if _, err := env.Cloud.GetInstance(ctx, m.Name); err != nil {
		t.Fatalf("instance gone while WaitForStorageDetach holds it: %v", err)
	}
	if err := env.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMachineGone(t, m.Name, time.Minute)
	if time.Since(start) < 3*time.Second {
		t.Error("deleted faster than the log flush delay")
	}
}

func labelSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func hookNames(hs []machinev1.LifecycleHook) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

// Control-plane nodes drain one at a time: while one is cordoned mid-drain
// (held by a disruption budget), another's drain waits.
func TestControlPlaneNodesDrainOneAtATime(t *testing.T) {
	ctx := context.Background()
	api := machines(t).MachineV1beta1().Machines(machine.Namespace)
	names := []string{"e2e-cp-a", "e2e-cp-b"}
	for _, n := range names {
		m := &machinev1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: machine.Namespace,
				Labels: map[string]string{machine.MachineRoleLabel: "master", machine.MachineTypeLabel: "master"}},
			Spec: machineSpec("sim-zone-c"),
		}
		if _, err := api.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = api.Delete(context.Background(), n, metav1.DeleteOptions{})
			waitMachineGone(t, n, time.Minute)
		})
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		for _, n := range names {
			if m := getMachine(t, n); ptr.Deref(m.Status.Phase, "") != machinev1.PhaseRunning {
				return false, n + " not Running"
			}
		}
		return true, ""
	})
	if n := env.GetNode(t, "e2e-cp-a"); !isMaster(n) {
		t.Fatalf("node of a master machine lacks the control-plane role: %v", n.Labels)
	}
	ns := env.Namespace(t, "cp")
	p := tolerantPod("guarded", "e2e-cp-a")
	p.Labels = map[string]string{"app": "guarded"}
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists})
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodRunning(t, ns, "guarded")
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1, "budget not observed"
	})
	if err := api.Delete(ctx, "e2e-cp-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return env.GetNode(t, "e2e-cp-a").Spec.Unschedulable, "e2e-cp-a not cordoned"
	})
	if err := api.Delete(ctx, "e2e-cp-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		d := machineCondition(getMachine(t, "e2e-cp-b"), machinev1.MachineDrained)
		return d != nil && d.Reason == machinev1.MachineDrainError && strings.Contains(d.Message, "control plane node e2e-cp-a is already cordoned"),
			fmt.Sprintf("e2e-cp-b Drained %+v", d)
	})
	if env.GetNode(t, "e2e-cp-b").Spec.Unschedulable {
		t.Fatal("second control-plane node cordoned while the first drains")
	}
	if err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "guarded", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMachineGone(t, "e2e-cp-a", time.Minute)
	waitMachineGone(t, "e2e-cp-b", time.Minute)
}

func isMaster(n *corev1.Node) bool {
	_, ok := n.Labels["node-role.kubernetes.io/master"]
	return ok
}

// A machine the cloud refuses goes Failed with the reason and message; a
// machine whose instance vanishes behind its back goes Failed too.
func TestMachineFailsWhenTheCloudRefuses(t *testing.T) {
	ctx := context.Background()
	env.Cloud.InjectFailure(sim.FailureRule{
		Match: func(s sim.InstanceSpec) bool { return s.Name == "e2e-refused" },
		Err:   &sim.InstanceError{Reason: sim.ReasonInsufficientCapacity, Message: "no capacity in sim-zone-c"},
	})
	t.Cleanup(env.Cloud.ClearFailures)
	api := machines(t).MachineV1beta1().Machines(machine.Namespace)
	for _, n := range []string{"e2e-refused", "e2e-vanished"} {
		if _, err := api.Create(ctx, &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: machine.Namespace}, Spec: machineSpec("sim-zone-c")}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = api.Delete(context.Background(), n, metav1.DeleteOptions{})
			waitMachineGone(t, n, time.Minute)
		})
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		m := getMachine(t, "e2e-refused")
		return ptr.Deref(m.Status.Phase, "") == machinev1.PhaseFailed && ptr.Deref(m.Status.ErrorReason, "") == machinev1.InsufficientResourcesMachineError &&
				strings.Contains(ptr.Deref(m.Status.ErrorMessage, ""), "no capacity in sim-zone-c"),
			fmt.Sprintf("phase %q reason %q message %q", ptr.Deref(m.Status.Phase, ""), ptr.Deref(m.Status.ErrorReason, ""), ptr.Deref(m.Status.ErrorMessage, ""))
	})
	waitMachineEvents(t, "e2e-refused", machine.EventFailedCreate)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		m := getMachine(t, "e2e-vanished")
		return ptr.Deref(m.Status.Phase, "") == machinev1.PhaseRunning, "e2e-vanished not Running"
	})
	capstanOK(t, "sim", "--kubeconfig", env.Kubeconfig, "node", "delete", "e2e-vanished")
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		m := getMachine(t, "e2e-vanished")
		c := machineCondition(m, machinev1.InstanceExistsCondition)
		return ptr.Deref(m.Status.Phase, "") == machinev1.PhaseFailed && ptr.Deref(m.Status.ErrorMessage, "") == "Can't find created instance." &&
				c != nil && c.Reason == machinev1.InstanceMissingReason,
			fmt.Sprintf("phase %q message %q InstanceExists %+v", ptr.Deref(m.Status.Phase, ""), ptr.Deref(m.Status.ErrorMessage, ""), c)
	})
}

// machine.openshift.io/exclude-node-draining skips the drain: the pods stay
// until the node goes.
func TestExcludeNodeDrainingSkipsTheDrain(t *testing.T) {
	ms := newMachineSet(t, "e2e-nodrain", 1, func(ms *machinev1.MachineSet) {
		ms.Spec.Template.Annotations = map[string]string{machine.ExcludeNodeDrainingAnnotation: ""}
		ms.Spec.Template.Spec.LifecycleHooks.PreTerminate = []machinev1.LifecycleHook{{Name: "Hold", Owner: "e2e-test"}}
	})
	m := waitMachinesRunning(t, ms.Name, 1)[0]
	ctx := context.Background()
	ns := env.Namespace(t, "nodrain")
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, tolerantPod("stays", m.Status.NodeRef.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodRunning(t, ns, "stays")
	api := machines(t).MachineV1beta1().Machines(machine.Namespace)
	if err := api.Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		d := machineCondition(getMachine(t, m.Name), machinev1.MachineDrained)
		return d != nil && d.Status == corev1.ConditionTrue && d.Message == "Node drain skipped", fmt.Sprintf("Drained %+v", d)
	})
	waitMachineEvents(t, m.Name, machine.EventDrainSkipped)
	if env.GetNode(t, m.Status.NodeRef.Name).Spec.Unschedulable || !env.PodAlive(t, ns, "stays") {
		t.Fatal("node cordoned or pod evicted although draining is excluded")
	}
}

func TestHookCommandsRejectUnknownNames(t *testing.T) {
	code, out := testenv.RunCapstan(t, "hooks", "run", "--kubeconfig", env.Kubeconfig, "--as-admin", "proactive-replacement", "backup-everything")
	if code == 0 || !strings.Contains(out, `unknown hook controller "backup-everything" (known: log-flush-delay, proactive-replacement, storage-detach)`) {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
	code, out = testenv.RunCapstan(t, "up", "--data-dir", t.TempDir(), "--hooks", "log-flush-delay", "--log-flush-delay", "-1s")
	if code == 0 || !strings.Contains(out, "--log-flush-delay -1s: must not be negative") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// The MachineSet taints recipe of 7.7.3, as the chapter gives it: add the
// taint to spec.template.spec of an existing set, scale it to 0, then to 2;
// the new nodes carry the taint.
func TestMachineSetTaintsRecipe(t *testing.T) {
	ms := newMachineSet(t, "e2e-recipe", 1, func(ms *machinev1.MachineSet) { ms.Spec.Template.Spec.Taints = nil })
	first := waitMachinesRunning(t, ms.Name, 1)[0]
	if n := env.GetNode(t, first.Status.NodeRef.Name); taints.Has(n.Spec.Taints, "key1", corev1.TaintEffectNoExecute) {
		t.Fatalf("taint before the recipe: %v", n.Spec.Taints)
	}
	ctx := context.Background()
	patch := `{"spec":{"template":{"spec":{"taints":[{"effect":"NoExecute","key":"key1","value":"value1"}]}}}}`
	if _, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Patch(ctx, ms.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "scale", "--replicas=0", "machineset", ms.Name, "-n", machine.Namespace)
	waitMachineGone(t, first.Name, time.Minute)
	capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "scale", "--replicas=2", "machineset", ms.Name, "-n", machine.Namespace)
	for _, m := range waitMachinesRunning(t, ms.Name, 2) {
		n := env.GetNode(t, m.Status.NodeRef.Name)
		ok := false
		for _, tn := range n.Spec.Taints {
			ok = ok || tn.Key == "key1" && tn.Value == "value1" && tn.Effect == corev1.TaintEffectNoExecute
		}
		if !ok {
			t.Errorf("node %s taints %v, want key1=value1:NoExecute", n.Name, n.Spec.Taints)
		}
	}
}
