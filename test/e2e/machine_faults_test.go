package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testenv"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
)

// 6.2.2 under faults: capstan is killed (SIGKILL) while one machine waits
// on a hook, one drains against a disruption budget, and one's instance
// is shutting down. After a restart each deletion resumes where it was: no
// hook skipped, no instance terminated twice, none orphaned.
func TestMachineDeletionResumesAfterKill(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--nodes", "0", "--control-plane-nodes", "0",
		"--terminate-delay", "25s"}
	up := testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	cfg := testenv.Kubeconfig(t, filepath.Join(dir, "kubeconfig"))
	kube := kubernetes.NewForConfigOrDie(cfg)
	mc := machineclient.NewForConfigOrDie(cfg).MachineV1beta1().Machines(machine.Namespace)
	cloud := sim.NewAPICloud(kube, sim.CloudOptions{})
	ctx := context.Background()

	names := []string{"kill-hook", "kill-drain", "kill-term"}
	for _, name := range names {
		m := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: machine.Namespace}, Spec: machineSpec("sim-zone-b")}
		if name == "kill-hook" {
			m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{{Name: "Hold", Owner: "e2e-test"}}
			m.Spec.LifecycleHooks.PreTerminate = []machinev1.LifecycleHook{{Name: "HoldToo", Owner: "e2e-test"}}
		}
		if _, err := mc.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *machinev1.Machine {
		t.Helper()
		m, err := mc.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		for _, n := range names {
			if m := get(n); ptr.Deref(m.Status.Phase, "") != machinev1.PhaseRunning {
				return false, n + " not Running"
			}
		}
		return true, ""
	})
	if err := cluster.WaitForServiceAccount(ctx, kube, "default", time.Minute); err != nil {
		t.Fatal(err)
	}
	p := tolerantPod("guarded", "kill-drain")
	p.Labels = map[string]string{"app": "guarded"}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodRunning(t, kube, "default", "guarded")
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1, "budget not observed"
	})
	for _, n := range names {
		if err := mc.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var terminateAt time.Time
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		hook, drain := get("kill-hook"), get("kill-drain")
		c := machineCondition(hook, machinev1.MachineDrainable)
		if ptr.Deref(hook.Status.Phase, "") != machinev1.PhaseDeleting || c == nil || c.Status != corev1.ConditionFalse {
			return false, fmt.Sprintf("kill-hook: phase %q Drainable %+v", ptr.Deref(hook.Status.Phase, ""), c)
		}
		if d := machineCondition(drain, machinev1.MachineDrained); d == nil || d.Reason != machinev1.MachineDrainError {
			return false, fmt.Sprintf("kill-drain: Drained %+v", d)
		}
		inst, err := cloud.GetInstance(ctx, "kill-term")
		if err != nil || inst.TerminateAt == nil {
			return false, fmt.Sprintf("kill-term instance not shutting down: %v", err)
		}
		terminateAt = *inst.TerminateAt
		return true, ""
	})

	// SIGKILL: no shutdown of any kind.
	up.Kill(t)
	// Events carry whole seconds: anything stamped from this second on
	// comes from the restarted capstan.
	restarted := time.Now().Truncate(time.Second)
	up = testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)

	// The shutting-down instance was not terminated again: same end time.
	if inst, err := cloud.GetInstance(ctx, "kill-term"); err == nil {
		if inst.TerminateAt == nil || !inst.TerminateAt.Equal(terminateAt) {
			t.Errorf("kill-term instance terminated again: terminateAt %v, was %v", inst.TerminateAt, terminateAt)
		}
	} else if !errors.Is(err, sim.ErrInstanceNotFound) {
		t.Fatal(err)
	}
	// The hooks still hold: nothing proceeded while capstan was down or
	// after it came back. The restarted drain controller has looked at
	// both machines again: it declined to drain kill-hook and tried
	// kill-drain against its budget.
	for name, reason := range map[string]string{"kill-hook": machine.EventDrainBlocked, "kill-drain": machine.EventDrainRequeued} {
		testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
			for _, e := range eventsOf(t, kube, name, reason) {
				if !e.LastTimestamp.Time.Before(restarted) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("no %s event for %s since the restart", reason, name)
		})
	}
	hook := get("kill-hook")
	if d := machineCondition(hook, machinev1.MachineDrained); d != nil && d.Status == corev1.ConditionTrue {
		t.Fatalf("kill-hook drained despite its preDrain hook: %+v", d)
	}
	if n, err := kube.CoreV1().Nodes().Get(ctx, "kill-hook", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("kill-hook node cordoned or gone: %v", err)
	}
	if _, err := kube.CoreV1().Pods("default").Get(ctx, "guarded", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod evicted against its budget: %v", err)
	}
	// Release each hold; each deletion completes.
	update := func(change func(*machinev1.Machine)) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m := get("kill-hook")
			change(m)
			_, err := mc.Update(ctx, m, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(m *machinev1.Machine) { m.Spec.LifecycleHooks.PreDrain = nil })
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		d := machineCondition(get("kill-hook"), machinev1.MachineDrained)
		return d != nil && d.Status == corev1.ConditionTrue, fmt.Sprintf("Drained %+v", d)
	})
	// The machine controller looked at the drained machine and kept its
	// instance for the preTerminate hook.
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		return len(eventsOf(t, kube, "kill-hook", machine.EventTerminateBlocked)) > 0, "no TerminateBlocked event"
	})
	if _, err := cloud.GetInstance(ctx, "kill-hook"); err != nil {
		t.Fatalf("kill-hook instance deleted despite its preTerminate hook: %v", err)
	}
	update(func(m *machinev1.Machine) { m.Spec.LifecycleHooks.PreTerminate = nil })
	if err := kube.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "guarded", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		for _, n := range names {
			if _, err := mc.Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, n + " still there"
			}
		}
		return true, ""
	})
	insts, err := cloud.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range insts {
		t.Errorf("orphaned instance %s", inst.Name())
	}
	for _, n := range names {
		if _, err := kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("node %s: %v, want NotFound", n, err)
		}
	}
	up.Stop(t)
}

// eventsOf lists the events of reason about a Machine.
func eventsOf(t *testing.T, kube kubernetes.Interface, name, reason string) []corev1.Event {
	t.Helper()
	list, err := kube.CoreV1().Events(machine.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}
