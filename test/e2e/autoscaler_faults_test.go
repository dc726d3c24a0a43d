package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// capstan up killed with SIGKILL in the middle of a scale-up, while nodes
// wait out unneededTime, and in the middle of their removal: after each
// restart the MachineSet has the replicas decided once (no second
// scale-up for the same pods), the unneeded timers go on from where they
// were (kept on the nodes), a removal under way is neither undone nor
// done twice, and the scale-down removes exactly the unneeded nodes.
func TestAutoscalerSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--nodes", "1", "--control-plane-nodes", "1",
		"--autoscaler-scan-interval", "1s", "--metrics-address", "", "--console-address", ""}
	up := testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	cfg := testenv.Kubeconfig(t, filepath.Join(dir, "kubeconfig"))
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	mc := machineclient.NewForConfigOrDie(cfg)
	sets := mc.MachineV1beta1().MachineSets(machine.Namespace)
	const set = "as-fault"
	ms := &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: machine.Namespace},
		Spec: machinev1.MachineSetSpec{
			Replicas: ptr.To(int32(0)),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{machine.MachineSetLabel: set}},
			Template: machinev1.MachineTemplateSpec{
				ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{machine.MachineSetLabel: set}},
				Spec: machinev1.MachineSpec{
					// The hook holds a removal at Deleting, long enough
					// to kill capstan in the middle of it.
					LifecycleHooks: machinev1.LifecycleHooks{PreDrain: []machinev1.LifecycleHook{{Name: "e2e-hold", Owner: "e2e"}}},
					ObjectMeta:     machinev1.ObjectMeta{Labels: map[string]string{"autoscale-e2e": set}},
					ProviderSpec:   machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "capstan.large", Zone: "sim-zone-c"})},
				},
			},
		},
	}
	if _, err := sets.Create(ctx, ms, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{
		fmt.Sprintf(`{"apiVersion":"autoscaling.openshift.io/v1beta1","kind":"MachineAutoscaler","metadata":{"name":%q,"namespace":"openshift-machine-api"},
"spec":{"minReplicas":0,"maxReplicas":4,"scaleTargetRef":{"apiVersion":"machine.openshift.io/v1beta1","kind":"MachineSet","name":%q}}}`, set, set),
	} {
		if _, err := dyn.Resource(machineAutoscalers).Namespace(machine.Namespace).Create(ctx, unstructuredFrom(t, doc), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dyn.Resource(autoscaler.ClusterAutoscalerResource).Create(ctx, unstructuredFrom(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"scaleDown":{"enabled":true,"delayAfterAdd":"0s","delayAfterDelete":"0s","unneededTime":"25s"}}}`), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicasOf := func() int32 {
		got, err := sets.Get(ctx, set, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(got.Spec.Replicas, 0)
	}
	liveMachines := func() int {
		list, err := mc.MachineV1beta1().Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=" + set})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range list.Items {
			if m.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}
	if err := cluster.WaitForServiceAccount(ctx, client, "default", time.Minute); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := client.CoreV1().Pods("default").Create(ctx, autoscaledPodNamed(fmt.Sprintf("fault-%d", i), set), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Killed as soon as the scale-up is written, before its machines are
	// nodes.
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		r := replicasOf()
		return r == 3, fmt.Sprintf("%d replicas", r)
	})
	up.Kill(t)
	up = testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	for i := range 3 {
		waitPodRunning(t, client, "default", fmt.Sprintf("fault-%d", i))
	}
	if r, n := replicasOf(), liveMachines(); r != 3 || n != 3 {
		t.Fatalf("after the restart: %d replicas, %d machines, want the 3 decided once", r, n)
	}
	// Two nodes emptied: their unneeded timers start; kill; they go on.
	for i := 1; i < 3; i++ {
		if err := client.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("fault-%d", i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	since := map[string]string{}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "autoscale-e2e=" + set})
		if err != nil {
			return false, err.Error()
		}
		for _, n := range list.Items {
			if s, ok := n.Annotations[autoscaler.UnneededSinceAnnotation]; ok {
				since[n.Name] = s
			}
		}
		return len(since) == 2, fmt.Sprintf("unneeded since: %v", since)
	})
	up.Kill(t)
	up = testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	// The timers go on; the removal is written (replicas lowered, the two
	// machines deleting) and held by the hook.
	machineOf := func() map[string]*machinev1.Machine {
		list, err := mc.MachineV1beta1().Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=" + set})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*machinev1.Machine{}
		for i := range list.Items {
			if m := &list.Items[i]; m.Status.NodeRef != nil {
				out[m.Status.NodeRef.Name] = m
			}
		}
		return out
	}
	held := map[string]*machinev1.Machine{}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		byNode := machineOf()
		for name, s := range since {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("node %s: %v (the hook should hold it)", name, err)
			}
			removing := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == autoscaler.ToBeDeletedTaint })
			if !removing && n.Annotations[autoscaler.UnneededSinceAnnotation] != s {
				t.Fatalf("node %s: unneeded since %q after the restart, was %q: the timer restarted", name, n.Annotations[autoscaler.UnneededSinceAnnotation], s)
			}
			if m := byNode[name]; removing && m != nil && m.DeletionTimestamp != nil {
				held[name] = m
			}
		}
		return len(held) == 2 && replicasOf() == 1, fmt.Sprintf("%d replicas, machines deleting for %d of the 2 unneeded nodes", replicasOf(), len(held))
	})
	// Killed in the middle of the removal.
	up.Kill(t)
	up = testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	// Two status updates after the restart: at least one whole loop ran,
	// the start-up clean-up of unfinished removals included.
	seen := map[string]bool{}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		cm, err := client.CoreV1().ConfigMaps(machine.Namespace).Get(ctx, autoscaler.StatusConfigMap, metav1.GetOptions{})
		if err == nil {
			seen[cm.Annotations["cluster-autoscaler.kubernetes.io/last-updated"]] = true
		}
		return len(seen) >= 3, fmt.Sprintf("%d status updates seen", len(seen))
	})
	byNode := machineOf()
	for name, m := range held {
		now := byNode[name]
		switch {
		case now == nil || now.UID != m.UID:
			t.Errorf("node %s: machine %s gone or replaced during the held removal", name, m.Name)
		case now.DeletionTimestamp == nil:
			t.Errorf("node %s: machine %s no longer deleting after the restart", name, m.Name)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == autoscaler.ToBeDeletedTaint }) {
			t.Errorf("node %s lost its %s taint in the restart (%v): the removal was undone", name, autoscaler.ToBeDeletedTaint, err)
		}
	}
	if r, n := replicasOf(), liveMachines(); r != 1 || n != 1 {
		t.Fatalf("after a restart in the middle of the removal: %d replicas, %d live machines, want 1 and 1 (nothing removed twice)", r, n)
	}
	// The hook released: the two machines go, and nothing else does.
	for _, m := range held {
		patch := []byte(`{"spec":{"lifecycleHooks":{"preDrain":null}}}`)
		if _, err := mc.MachineV1beta1().Machines(machine.Namespace).Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		for name := range held {
			if _, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
				return false, "node " + name + " still there"
			}
		}
		return replicasOf() == 1 && liveMachines() == 1, fmt.Sprintf("%d replicas, %d machines", replicasOf(), liveMachines())
	})
	waitPodRunning(t, client, "default", "fault-0")
	up.Stop(t)
}

func autoscaledPodNamed(name, set string) *corev1.Pod {
	p := autoscaledPod(name, set, "3")
	p.Spec.Tolerations = nil
	return p
}
