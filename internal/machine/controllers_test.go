package machine

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	capdrain "github.com/capstan-dev/capstan/internal/drain"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/capstan-dev/capstan/internal/nodes"
)

func controlPlaneNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{nodes.LabelRoleMaster: "", nodes.LabelRoleControlPlane: ""}}}
}

// slowNodeLists lets the node lists of concurrent drains overlap: each
// list, once answered, waits until another list was answered too (or half
// a second passed: the other drain may be waiting its turn).
type slowNodeLists struct {
	kubernetes.Interface
	listed *atomic.Int32
}

func (k slowNodeLists) CoreV1() corev1client.CoreV1Interface {
	return slowCore{CoreV1Interface: k.Interface.CoreV1(), listed: k.listed}
}

type slowCore struct {
	corev1client.CoreV1Interface
	listed *atomic.Int32
}

func (c slowCore) Nodes() corev1client.NodeInterface {
	return slowNodes{NodeInterface: c.CoreV1Interface.Nodes(), listed: c.listed}
}

type slowNodes struct {
	corev1client.NodeInterface
	listed *atomic.Int32
}

func (n slowNodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	list, err := n.NodeInterface.List(ctx, opts)
	n.listed.Add(1)
	deadline := time.Now().Add(500 * time.Millisecond)
	for n.listed.Load() < 2 && time.Now().Before(deadline) {
		goruntime.Gosched()
	}
	return list, err
}

// Two drains of control-plane nodes start at once (concurrent
// reconciles): exactly one may cordon its node; the other is refused
// until the first is done, even when both look at the nodes before either
// cordons.
func TestControlPlaneNodesDrainOneAtATime(t *testing.T) {
	kube := kubefake.NewClientset(controlPlaneNode("master-0"), controlPlaneNode("master-1"), controlPlaneNode("master-2"))
	d := &drainReconciler{kube: slowNodeLists{Interface: kube, listed: &atomic.Int32{}}, opts: &Options{}}
	var wg sync.WaitGroup
	var cordoned, refused atomic.Int32
	for _, name := range []string{"master-0", "master-1"} {
		wg.Go(func() {
			node, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			helper := capdrain.New(context.Background(), kube, time.Second, klog.Background())
			var notPermitted *errDrainNotPermitted
			switch err := d.cordon(context.Background(), helper, node); {
			case err == nil:
				cordoned.Add(1)
			case errors.As(err, &notPermitted):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if cordoned.Load() != 1 || refused.Load() != 1 {
		t.Fatalf("%d control-plane nodes cordoned, %d refused; want one of each", cordoned.Load(), refused.Load())
	}
}

func newFakeClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).
		WithStatusSubresource(&machinev1.Machine{}, &machinev1.MachineSet{}).
		WithIndex(&corev1.Node{}, nodeProviderIDIndex, indexNodeProviderID).
		WithIndex(&corev1.Node{}, nodeMachineIndex, indexNodeMachine).
		Build()
}

// A machine deleted before nodelink linked its node is not deleted without
// draining the node it owns: the drain finds the node by provider ID.
func TestUnlinkedNodeIsDrained(t *testing.T) {
	m := testMachine("m")
	m.Spec.ProviderID = ptr.To("capstan://sim-zone-a/m-instance")
	m.Finalizers = []string{machinev1.MachineFinalizer}
	m.DeletionTimestamp = ptr.To(metav1.Now())
	m.Status.Phase = ptr.To(machinev1.PhaseDeleting)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m-instance"}, Spec: corev1.NodeSpec{ProviderID: "capstan://sim-zone-a/m-instance"}}
	c := newFakeClient(m, node)
	kube := kubefake.NewClientset(node.DeepCopy())
	d := &drainReconciler{client: c, reader: c, kube: kube, recorder: record.NewFakeRecorder(10), opts: &Options{DrainTimeout: time.Second}}
	if _, err := d.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: Namespace, Name: "m"}}); err != nil {
		t.Fatal(err)
	}
	got, err := kube.CoreV1().Nodes().Get(context.Background(), "m-instance", metav1.GetOptions{})
	if err != nil || !got.Spec.Unschedulable {
		t.Fatalf("the machine's unlinked node was not drained (cordoned): %v %v", err, got.Spec.Unschedulable)
	}
	after := &machinev1.Machine{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(m), after); err != nil {
		t.Fatal(err)
	}
	if d := GetCondition(after.Status.Conditions, machinev1.MachineDrained); d == nil || d.Status != corev1.ConditionTrue || d.Message != "Drain finished successfully" {
		t.Fatalf("Drained %+v, want a real drain, not a skipped one", d)
	}
}

// laggingClient creates through the API but shows what it created only
// once someone waits for it (a Get), as an informer cache catches up: a
// List right after creating misses the new machines.
type laggingClient struct {
	client.WithWatch
	mu     sync.Mutex
	hidden map[types.NamespacedName]bool
	// failEvery makes every n-th creation fail; ambiguousEvery makes
	// every n-th one happen and then fail as a timeout does, the answer
	// lost (etcd committed it while electing a leader).
	failEvery, ambiguousEvery, creates int
}

func (l *laggingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	l.mu.Lock()
	l.creates++
	fail := l.failEvery > 0 && l.creates%l.failEvery == 0
	l.mu.Unlock()
	if fail {
		return apierrors.NewServiceUnavailable("injected: the apiserver is busy")
	}
	if m, ok := obj.(*machinev1.Machine); ok && m.Name == "" && m.GenerateName != "" {
		m.Name = fmt.Sprintf("%s%d", m.GenerateName, l.creates)
	}
	if err := l.WithWatch.Create(ctx, obj, opts...); err != nil {
		return err
	}
	l.mu.Lock()
	l.hidden[client.ObjectKeyFromObject(obj)] = true
	ambiguous := l.ambiguousEvery > 0 && l.creates%l.ambiguousEvery == 0
	l.mu.Unlock()
	if ambiguous {
		return apierrors.NewInternalError(errors.New("etcdserver: request timed out, possibly due to previous leader failure"))
	}
	return nil
}

func (l *laggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	l.mu.Lock()
	hidden := l.hidden[key]
	delete(l.hidden, key) // shown from the next look on
	l.mu.Unlock()
	if hidden {
		return apierrors.NewNotFound(machinev1.Resource("machines"), key.Name)
	}
	return l.WithWatch.Get(ctx, key, obj, opts...)
}

func (l *laggingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.WithWatch.List(ctx, list, opts...); err != nil {
		return err
	}
	ml, ok := list.(*machinev1.MachineList)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := ml.Items[:0]
	for _, m := range ml.Items {
		if !l.hidden[client.ObjectKeyFromObject(&m)] {
			kept = append(kept, m)
		}
	}
	ml.Items = kept
	return nil
}

// workersMachineSet is the MachineSet "workers" of replicas machines.
func workersMachineSet(replicas int32) *machinev1.MachineSet {
	return &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: Namespace, UID: "ms-uid"},
		Spec: machinev1.MachineSetSpec{Replicas: ptr.To(replicas),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{MachineSetLabel: "workers"}},
			Template: machinev1.MachineTemplateSpec{ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{MachineSetLabel: "workers"}},
				Spec: testMachine("t").Spec}},
	}
}

// Some creations fail: the retry creates only what is missing, never
// again the machines the cache had not shown yet.
func TestMachineSetDoesNotOvershootWhenCreatesFail(t *testing.T) {
	ms := workersMachineSet(5)
	lc := &laggingClient{WithWatch: newFakeClient(ms), hidden: map[types.NamespacedName]bool{}, failEvery: 2}
	r := &machineSetReconciler{client: lc, recorder: record.NewFakeRecorder(100), opts: &Options{Concurrency: 1}}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	for attempt := 0; attempt < 10; attempt++ {
		if _, err := r.Reconcile(context.Background(), req); err == nil {
			break
		}
	}
	list := &machinev1.MachineList{}
	if err := lc.WithWatch.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 5 {
		t.Fatalf("%d machines for 5 replicas", len(list.Items))
	}
}

// Some creations are carried out but answered with a timeout: the
// MachineSet still ends with exactly its replicas, none made twice.
func TestMachineSetDoesNotOvershootWhenCreatesTimeOut(t *testing.T) {
	ms := workersMachineSet(5)
	lc := &laggingClient{WithWatch: newFakeClient(ms), hidden: map[types.NamespacedName]bool{}, ambiguousEvery: 2}
	r := &machineSetReconciler{client: lc, recorder: record.NewFakeRecorder(100), opts: &Options{Concurrency: 1}}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	for attempt := 0; attempt < 10; attempt++ {
		if _, err := r.Reconcile(context.Background(), req); err == nil {
			break
		}
	}
	list := &machinev1.MachineList{}
	if err := lc.WithWatch.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 5 {
		t.Fatalf("%d machines for 5 replicas", len(list.Items))
	}
}

// fakeActuator keeps instances in memory.
type fakeActuator struct {
	mu        sync.Mutex
	instances map[string]bool
	refuse    error
}

func (a *fakeActuator) Create(_ context.Context, m *machinev1.Machine) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse != nil {
		return a.refuse
	}
	a.instances[m.Name] = true
	return nil
}

func (a *fakeActuator) Exists(_ context.Context, m *machinev1.Machine) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.instances[m.Name], nil
}

func (a *fakeActuator) Update(_ context.Context, m *machinev1.Machine) error {
	m.Spec.ProviderID = ptr.To("capstan://sim-zone-a/" + m.Name)
	m.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.10"}}
	return nil
}

func (a *fakeActuator) Delete(_ context.Context, m *machinev1.Machine) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.instances, m.Name)
	return nil
}

// A machine's status follows its lifecycle through the one status
// function: Provisioning, Provisioned with its addresses, Running once its
// node is linked, Failed when its instance vanishes, with the conditions
// OpenShift sets at each step.
func TestMachineStatusThroughItsLifecycle(t *testing.T) {
	ctx := context.Background()
	m := testMachine("m")
	c := newFakeClient(m)
	act := &fakeActuator{instances: map[string]bool{}}
	r := &machineReconciler{client: c, reader: c, actuator: act, recorder: record.NewFakeRecorder(100), opts: &Options{InstancePollInterval: time.Second}}
	key := client.ObjectKeyFromObject(m)
	reconcileAndGet := func() *machinev1.Machine {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		got := &machinev1.Machine{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	reconcileAndGet() // finalizer
	got := reconcileAndGet()
	if phaseOf(got) != machinev1.PhaseProvisioning {
		t.Fatalf("phase %q, want Provisioning", phaseOf(got))
	}
	if ic := GetCondition(got.Status.Conditions, machinev1.InstanceExistsCondition); ic == nil || ic.Reason != machinev1.InstanceNotCreatedReason {
		t.Errorf("InstanceExists %+v, want False/InstanceNotCreated", ic)
	}
	reconcileAndGet() // creates the instance; providerID and labels first
	got = reconcileAndGet()
	if phaseOf(got) != machinev1.PhaseProvisioned || len(got.Status.Addresses) != 1 || !conditionTrue(got.Status.Conditions, machinev1.InstanceExistsCondition) {
		t.Fatalf("phase %q addresses %v conditions %+v, want Provisioned with an address", phaseOf(got), got.Status.Addresses, got.Status.Conditions)
	}
	// nodelink links the node.
	if err := writeMachineStatus(ctx, c, got.DeepCopy(), got, machineFacts{nodeRef: &corev1.ObjectReference{Kind: "Node", Name: "n"}}); err != nil {
		t.Fatal(err)
	}
	got = reconcileAndGet()
	if phaseOf(got) != machinev1.PhaseRunning || !conditionTrue(got.Status.Conditions, machinev1.MachineDrainable) || !conditionTrue(got.Status.Conditions, machinev1.MachineTerminable) {
		t.Fatalf("phase %q conditions %+v, want Running", phaseOf(got), got.Status.Conditions)
	}
	// The instance is deleted behind the Machine API's back.
	act.Delete(ctx, got)
	got = reconcileAndGet()
	if phaseOf(got) != machinev1.PhaseFailed || ptr.Deref(got.Status.ErrorMessage, "") != msgCantFindInstance {
		t.Fatalf("phase %q error %q, want Failed: %s", phaseOf(got), ptr.Deref(got.Status.ErrorMessage, ""), msgCantFindInstance)
	}
	if ic := GetCondition(got.Status.Conditions, machinev1.InstanceExistsCondition); ic == nil || ic.Reason != machinev1.InstanceMissingReason {
		t.Errorf("InstanceExists %+v, want False/InstanceMissing", ic)
	}
	// Deleted, it says Deleting and keeps saying why it failed.
	if err := c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if phaseOf(got) != machinev1.PhaseDeleting || ptr.Deref(got.Status.ErrorMessage, "") != msgCantFindInstance {
		t.Fatalf("phase %q error %q, want Deleting, still saying why it failed", phaseOf(got), ptr.Deref(got.Status.ErrorMessage, ""))
	}
}

// A cloud refusing the configuration fails the machine with the reason.
func TestMachineFailsWhenTheCloudRefuses(t *testing.T) {
	ctx := context.Background()
	m := testMachine("m")
	m.Finalizers = []string{machinev1.MachineFinalizer}
	m.Status.Phase = ptr.To(machinev1.PhaseProvisioning)
	c := newFakeClient(m)
	act := &fakeActuator{instances: map[string]bool{}, refuse: &MachineError{Reason: machinev1.InvalidConfigurationMachineError, Message: "no such zone"}}
	r := &machineReconciler{client: c, reader: c, actuator: act, recorder: record.NewFakeRecorder(100), opts: &Options{}}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)}); err != nil {
		t.Fatal(err)
	}
	got := &machinev1.Machine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if phaseOf(got) != machinev1.PhaseFailed || ptr.Deref(got.Status.ErrorReason, "") != machinev1.InvalidConfigurationMachineError || ptr.Deref(got.Status.ErrorMessage, "") != "no such zone" {
		t.Fatalf("phase %q reason %q message %q", phaseOf(got), ptr.Deref(got.Status.ErrorReason, ""), ptr.Deref(got.Status.ErrorMessage, ""))
	}
}

// The autoscaler marks a machine, then lowers the replicas: a MachineSet
// controller whose cache has the new replicas but not yet the mark must
// still delete the marked machine, not another.
func TestScaleDownDeletesTheMachineMarkedJustBefore(t *testing.T) {
	for round := 0; round < 10; round++ {
		ms := workersMachineSet(2)
		var cached, live []client.Object
		for _, name := range []string{"workers-a", "workers-b", "workers-c"} {
			m := testMachine(name)
			m.Labels = map[string]string{MachineSetLabel: "workers"}
			m.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ms, machineSetKind)}
			cached = append(cached, m.DeepCopy())
			if name == "workers-b" {
				m.Annotations = map[string]string{DeleteMachineAnnotation: "2026-11-23T00:00:00Z"}
			}
			live = append(live, m)
		}
		cache := newFakeClient(append(cached, ms)...)
		r := &machineSetReconciler{client: cache, reader: newFakeClient(live...), recorder: record.NewFakeRecorder(100), opts: &Options{Concurrency: 1}}
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}); err != nil {
			t.Fatal(err)
		}
		gone := &machinev1.Machine{}
		err := cache.Get(context.Background(), types.NamespacedName{Namespace: Namespace, Name: "workers-b"}, gone)
		if !apierrors.IsNotFound(err) && (err != nil || gone.DeletionTimestamp.IsZero()) {
			t.Fatalf("round %d: the marked machine workers-b was not deleted (%v)", round, err)
		}
	}
}
