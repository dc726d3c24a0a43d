package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/testenv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/capstan-dev/capstan/internal/sim"
)

func smallSpec(name string) sim.InstanceSpec {
	return sim.InstanceSpec{Name: name, CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi"), Pods: 20}
}

func TestCloudBootDelayAndTermination(t *testing.T) {
	ctx := context.Background()
	cloud := sim.NewAPICloud(env.Client, sim.CloudOptions{BootDelay: 3 * time.Second, TerminateDelay: 2 * time.Second})
	inst, err := cloud.CreateInstance(ctx, smallSpec("slowboot"))
	if err != nil {
		t.Fatal(err)
	}
	if st := inst.State(time.Now()); st != sim.InstancePending {
		t.Errorf("new instance state %s, want pending", st)
	}
	// The node registers only once the instance has booted: its creation
	// time (whole seconds, rounded down) is not before the boot ended.
	var node *corev1.Node
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, "slowboot", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = n
		return nodes.Ready(n), "not Ready"
	})
	if registered := node.CreationTimestamp.Add(time.Second); registered.Before(inst.BootedAt) {
		t.Errorf("node registered at %s, before the instance booted at %s", node.CreationTimestamp, inst.BootedAt)
	}

	if err := cloud.DeleteInstance(ctx, "slowboot"); err != nil {
		t.Fatal(err)
	}
	got, err := cloud.GetInstance(ctx, "slowboot")
	if err != nil {
		t.Fatalf("instance gone at once despite the terminate delay: %v", err)
	}
	if got.State(time.Now()) != sim.InstanceShuttingDown {
		t.Errorf("state %s, want shutting-down", got.State(time.Now()))
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := cloud.GetInstance(ctx, "slowboot")
		return errors.Is(err, sim.ErrInstanceNotFound), fmt.Sprintf("instance still there: %v", err)
	})
	// Its kubelet is gone with it: the node turns unreachable.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, "slowboot", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodes.ConditionStatus(n, corev1.NodeReady) == corev1.ConditionUnknown, "node of a terminated instance still Ready"
	})
	_ = env.Client.CoreV1().Nodes().Delete(ctx, "slowboot", metav1.DeleteOptions{})
}

func TestCloudInjectedFailuresAndValidation(t *testing.T) {
	ctx := context.Background()
	cloud := env.Cloud
	cloud.InjectFailure(sim.FailureRule{
		Match: func(s sim.InstanceSpec) bool { return s.Zone == "full-zone" },
		Err:   &sim.InstanceError{Reason: sim.ReasonInsufficientCapacity, Message: "no capacity in full-zone"},
		Times: 1,
	})
	t.Cleanup(cloud.ClearFailures)
	spec := smallSpec("refused")
	spec.Zone = "full-zone"
	_, err := cloud.CreateInstance(ctx, spec)
	var ie *sim.InstanceError
	if !errors.As(err, &ie) || ie.Reason != sim.ReasonInsufficientCapacity {
		t.Fatalf("create in full zone: %v, want InsufficientInstanceCapacity", err)
	}
	// The rule fired once; the next attempt succeeds.
	if _, err := cloud.CreateInstance(ctx, spec); err != nil {
		t.Fatalf("second create: %v", err)
	}
	if _, err := cloud.CreateInstance(ctx, spec); !errors.As(err, &ie) || ie.Reason != sim.ReasonAlreadyExists {
		t.Errorf("duplicate name: %v, want InstanceAlreadyExists", err)
	}
	bad := smallSpec("bad")
	bad.Memory = resource.Quantity{}
	if _, err := cloud.CreateInstance(ctx, bad); !errors.As(err, &ie) || ie.Reason != sim.ReasonInvalidConfiguration {
		t.Errorf("zero memory: %v, want InvalidConfiguration", err)
	}
	list, err := cloud.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, i := range list {
		names[i.Name()] = true
	}
	if !names["refused"] || names["bad"] || !names["worker-0"] {
		t.Errorf("instances %v", names)
	}
	if err := cloud.DeleteInstance(ctx, "refused"); err != nil {
		t.Fatal(err)
	}
	if err := cloud.DeleteInstance(ctx, "never-existed"); err != nil {
		t.Errorf("deleting a missing instance: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := cloud.GetInstance(ctx, "refused")
		return errors.Is(err, sim.ErrInstanceNotFound), fmt.Sprint(err)
	})
	_ = env.Client.CoreV1().Nodes().Delete(ctx, "refused", metav1.DeleteOptions{})
}

func TestOpenShiftCRDsAreServed(t *testing.T) {
	ctx := context.Background()
	machines := env.Dynamic.Resource(schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machines"})
	ns := env.Namespace(t, "machines")
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1",
		"kind":       "Machine",
		"metadata":   map[string]any{"name": "m1", "namespace": ns},
		"spec": map[string]any{
			"lifecycleHooks": map[string]any{
				"preDrain": []any{map[string]any{"name": "MigrateImportantApp", "owner": "my-app-migration-controller"}},
			},
			"providerSpec": map[string]any{"value": map[string]any{
				"apiVersion": "machine.capstan.dev/v1beta1", "kind": "CapstanMachineProviderSpec", "instanceType": "capstan.medium"}},
		},
	}}
	if _, err := machines.Namespace(ns).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Machine: %v", err)
	}
	// The CRD's own validation runs: a hook name must be a valid name.
	bad := m.DeepCopy()
	bad.SetName("m2")
	_ = unstructured.SetNestedSlice(bad.Object, []any{map[string]any{"name": "has spaces!", "owner": "x"}}, "spec", "lifecycleHooks", "preDrain")
	if _, err := machines.Namespace(ns).Create(ctx, bad, metav1.CreateOptions{}); err == nil {
		t.Errorf("a Machine with an invalid hook name was accepted")
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinesets"},
		{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinehealthchecks"},
		{Group: "config.openshift.io", Version: "v1", Resource: "clusterversions"},
		{Group: "config.openshift.io", Version: "v1", Resource: "clusteroperators"},
		{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigs"},
		{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"},
	} {
		if _, err := env.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("listing %s: %v", gvr, err)
		}
	}
}
