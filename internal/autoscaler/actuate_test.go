package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/machine"
)

// scales keeps the replicas the fake API's MachineSet scale subresource
// serves.
type scales struct {
	mu       sync.Mutex
	replicas map[string]int64
}

func (s *scales) react(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "scale" {
		return false, nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch a := action.(type) {
	case k8stesting.GetAction:
		r, ok := s.replicas[a.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "machinesets"}, a.GetName())
		}
		return true, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale",
			"metadata": map[string]any{"name": a.GetName()}, "spec": map[string]any{"replicas": r}}}, nil
	case k8stesting.UpdateAction:
		u := a.GetObject().(*unstructured.Unstructured)
		r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		s.replicas[u.GetName()] = r
		return true, u, nil
	}
	return false, nil, nil
}

// A removal decided twice on the same stale state (the loop after the
// one that made it, on a cache that had not caught up): the second finds
// the replicas where the removal took them and leaves the node's taint
// and its machine's mark as they are; undoing them would let the
// MachineSet delete a machine of its own choosing, a second node gone.
func TestScaleDownDecidedTwiceOnAStaleCacheIsNotUndone(t *testing.T) {
	f := newDownFixture(t, 3)
	for _, n := range f.fixture.nodes {
		f.since[n.Name] = t0.Add(-time.Hour)
	}
	f.on("ms-1", pod("b", "5", 0, "busy"))
	f.on("ms-2", pod("c", "5", 0, "busy"))
	plan := f.plan(t)
	if len(plan.Remove) != 1 || plan.Remove[0].Node != "ms-0" {
		t.Fatalf("the plan removes %v, want ms-0", plan.Remove)
	}

	s := runtime.NewScheme()
	if err := machinev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, m := range f.fixture.machines {
		m.TypeMeta = metav1.TypeMeta{APIVersion: "machine.openshift.io/v1beta1", Kind: "Machine"}
		objs = append(objs, m)
	}
	dyn := dynamicfake.NewSimpleDynamicClient(s, objs...)
	sc := &scales{replicas: map[string]int64{"ms": 3}}
	dyn.PrependReactor("*", "machinesets", sc.react)
	var nodes []runtime.Object
	for _, n := range f.fixture.nodes {
		nodes = append(nodes, n)
	}
	kube := fake.NewClientset(nodes...)
	a := &Autoscaler{opts: Options{Namespace: machine.Namespace, Clock: clocktesting.NewFakeClock(t0)}, client: kube, dynamic: dyn,
		recorder: record.NewFakeRecorder(100), backoff: newBackoff(nil), written: map[string]int32{}}
	var all []*corev1.Pod
	for _, ps := range f.pods {
		all = append(all, ps...)
	}
	st := newClusterState(&f.cfg, f.fixture.nodes, all, f.fixture.sets, f.fixture.machines, nil, fixtureNow)
	status := &corev1.ObjectReference{Kind: "ConfigMap", Namespace: machine.Namespace, Name: StatusConfigMap}
	ctx := context.Background()
	if !a.executeScaleDown(ctx, st, plan, status) {
		t.Fatal("the first removal was not made")
	}
	// The same state and plan again: the cache still shows 3 replicas.
	a.executeScaleDown(ctx, st, plan, status)
	if got := sc.replicas["ms"]; got != 2 {
		t.Errorf("replicas %d, want 2 (one removal)", got)
	}
	n, err := kube.CoreV1().Nodes().Get(ctx, "ms-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ToBeDeletedTaint }) {
		t.Errorf("ms-0 lost its %s taint: the removal was undone", ToBeDeletedTaint)
	}
	m, err := dyn.Resource(machineResource).Namespace(machine.Namespace).Get(ctx, "ms-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.GetAnnotations()[machine.DeleteMachineAnnotation]; !ok {
		t.Errorf("ms-0's machine lost its %s mark: the MachineSet would pick another", machine.DeleteMachineAnnotation)
	}
	// Someone else changed the replicas meanwhile: that removal is undone.
	sc.replicas["ms"] = 5
	plan2 := f.plan(t)
	plan2.Remove = plan.Remove
	a.executeScaleDown(ctx, st, plan2, status)
	n, _ = kube.CoreV1().Nodes().Get(ctx, "ms-0", metav1.GetOptions{})
	if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ToBeDeletedTaint }) {
		t.Errorf("ms-0 kept its taint though its removal did not happen (replicas changed to 5 by someone else)")
	}

}

// Undoing a failed scale-up never goes below the group's minimum, lowers
// the replicas only by the machines it could mark, and a machine it cannot
// mark does not stop the loop.
func TestUndoingAFailedScaleUp(t *testing.T) {
	failedMachine := func(name string, ms *machinev1.MachineSet) *machinev1.Machine {
		return &machinev1.Machine{
			TypeMeta: metav1.TypeMeta{APIVersion: "machine.openshift.io/v1beta1", Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ms.Namespace,
				OwnerReferences: []metav1.OwnerReference{{Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}},
			Status: machinev1.MachineStatus{Phase: ptr.To(machinev1.PhaseFailed)},
		}
	}
	for _, tc := range []struct {
		name         string
		min          int
		failed       int
		unmarkable   string
		wantReplicas int64
		wantMarked   int
	}{
		{name: "all three failed, min 2", min: 2, failed: 3, wantReplicas: 2, wantMarked: 1},
		{name: "two failed, one cannot be marked", min: 0, failed: 2, unmarkable: "ms-1", wantReplicas: 2, wantMarked: 1},
		{name: "at the minimum already", min: 3, failed: 3, wantReplicas: 3, wantMarked: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := machineSet("ms", "capstan.large", "", 3, tc.min, 10)
			var machines []*machinev1.Machine
			var objs []runtime.Object
			for i := range 3 {
				m := failedMachine(fmt.Sprintf("ms-%d", i), ms)
				if i >= tc.failed {
					m.Status.Phase = ptr.To(machinev1.PhaseProvisioning)
					m.CreationTimestamp = metav1.NewTime(t0)
				}
				machines = append(machines, m)
				objs = append(objs, m)
			}
			s := runtime.NewScheme()
			if err := machinev1.AddToScheme(s); err != nil {
				t.Fatal(err)
			}
			dyn := dynamicfake.NewSimpleDynamicClient(s, objs...)
			sc := &scales{replicas: map[string]int64{"ms": 3}}
			dyn.PrependReactor("*", "machinesets", sc.react)
			dyn.PrependReactor("patch", "machines", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.(k8stesting.PatchAction).GetName() == tc.unmarkable {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "machines"}, tc.unmarkable, errors.New("webhook refused"))
				}
				return false, nil, nil
			})
			a := &Autoscaler{opts: Options{Namespace: machine.Namespace, Clock: clocktesting.NewFakeClock(t0)}, client: fake.NewClientset(), dynamic: dyn,
				recorder: record.NewFakeRecorder(100), backoff: newBackoff(nil), written: map[string]int32{}}
			cfg := DefaultConfig()
			st := newClusterState(&cfg, nil, nil, []*machinev1.MachineSet{ms}, machines, nil, t0)
			status := &corev1.ObjectReference{Kind: "ConfigMap", Namespace: machine.Namespace, Name: StatusConfigMap}
			if _, err := a.settleProvisioning(context.Background(), st, status); err != nil {
				t.Fatalf("settleProvisioning failed the loop: %v", err)
			}
			if got := sc.replicas["ms"]; got != tc.wantReplicas {
				t.Errorf("replicas %d, want %d", got, tc.wantReplicas)
			}
			marked := 0
			for _, m := range machines {
				u, err := dyn.Resource(machineResource).Namespace(machine.Namespace).Get(context.Background(), m.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := u.GetAnnotations()[machine.DeleteMachineAnnotation]; ok {
					marked++
				}
			}
			if marked != tc.wantMarked {
				t.Errorf("%d machines marked, want %d", marked, tc.wantMarked)
			}
		})
	}
}
