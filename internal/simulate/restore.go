package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/autoscaler"
	"k8s.io/klog/v2"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// restorer rebuilds a snapshot's cluster on a private, empty one: the
// nodes as simulated instances with the snapshot's capacity, labels,
// taints and conditions, the pods bound where they ran, the workloads
// adopting them, and the Machine API objects backed by those instances.
// Every duration the cluster waits on (tolerations, grace periods, the
// autoscaler's delays) is divided by speed.
type restorer struct {
	snap  *Snapshot
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	cloud *sim.APICloud
	speed float64
	// mcfg is nil when the simulation runs no Machine Config Operator.
	mcfg mcfgclient.Interface
	// update is the run's update, whose CVO starts after the restore.
	update *updatePlan
	// osImage and extensionsImage are the machine OS images the
	// simulation's MCO renders with.
	osImage, extensionsImage string
	// configName maps the configuration each MachineConfigPool targeted
	// in the snapshot to the one rendered for it in the simulation.
	configName map[string]string

	// machineNode maps a snapshot Machine (namespace/name) to its node;
	// the simulated Machine takes the node's name, since a simulated
	// instance, its node and its machine share one name.
	machineNode map[string]string
	// nodesByName are the snapshot's nodes.
	nodesByName map[string]*corev1.Node
	// stopped are the nodes whose kubelet was not Ready in the snapshot:
	// they are restored with their kubelet stopped.
	stopped map[string]bool
	// boundPods are the pods restored bound to a node whose kubelet runs.
	boundPods int
	// restored are the snapshot's pods restored, by namespace/name: the
	// node each ran on ("" for those pending) and the UID it was made
	// with here.
	restored   map[string]restoredPod
	restoredMu sync.Mutex
}

func typed[T any](u *unstructured.Unstructured) (*T, error) {
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), objectKey(u), err)
	}
	return &out, nil
}

func objectKey(u metav1.Object) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// scaled divides a duration by the speed, keeping at least a millisecond
// of a duration that had one.
func scaled(d time.Duration, speed float64) time.Duration {
	if d <= 0 {
		return d
	}
	return max(time.Duration(float64(d)/speed), time.Millisecond)
}

// scaledSeconds divides whole seconds by the speed, rounding up: a
// duration of seconds stays at least a second.
func scaledSeconds(s int64, speed float64) int64 {
	if s <= 0 {
		return s
	}
	return int64(math.Ceil(float64(s) / speed))
}

func (r *restorer) objects(key string) []unstructured.Unstructured {
	res, _ := resourceByKey(key)
	objs, _ := r.snap.Get(res)
	if !res.Namespaced {
		return objs
	}
	going := terminatingNamespaces(r.snap)
	if len(going) == 0 {
		return objs
	}
	// What a namespace being deleted holds is going with it.
	var out []unstructured.Unstructured
	for _, u := range objs {
		if !going[u.GetNamespace()] {
			out = append(out, u)
		}
	}
	return out
}

// terminatingNamespaces are the snapshot's namespaces being deleted.
func terminatingNamespaces(s *Snapshot) map[string]bool {
	out := map[string]bool{}
	for _, u := range s.Objects["v1/namespaces"] {
		if u.GetDeletionTimestamp() != nil {
			out[u.GetName()] = true
		}
	}
	return out
}

// restore creates everything, in the order that lets controllers adopt
// what already runs rather than start anew: pods before the ReplicaSets,
// StatefulSets, DaemonSets and Jobs that own them, ReplicaSets before
// their Deployments, Machines before their MachineSets.
func (r *restorer) restore(ctx context.Context) error {
	r.nodesByName, r.stopped, r.machineNode = map[string]*corev1.Node{}, map[string]bool{}, map[string]string{}
	for _, u := range r.objects("v1/nodes") {
		n, err := typed[corev1.Node](&u)
		if err != nil {
			return err
		}
		r.nodesByName[n.Name] = n
		if c := nodes.Condition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			r.stopped[n.Name] = true
		}
		if m := n.Annotations[machine.MachineAnnotation]; m != "" {
			r.machineNode[m] = n.Name
		}
	}
	for _, u := range r.objects("machine.openshift.io/v1beta1/machines") {
		if ref, ok, _ := unstructured.NestedString(u.Object, "status", "nodeRef", "name"); ok && ref != "" {
			r.machineNode[objectKey(&u)] = ref
		}
	}
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"namespaces", r.namespaces},
		{"cluster-scoped classes", r.classes},
		{"persistent volumes and claims", r.volumes},
		{"the release's machine OS", r.releaseConfigMap},
		{"machine configuration", r.machineConfigs},
		{"nodes", r.nodes},
		{"machines", r.machines},
		{"pods", r.pods},
		{"workloads", r.workloads},
		{"services, quotas and limit ranges", r.namespaced},
		{"disruption budgets, autoscalers and health checks", r.policies},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("restoring %s: %w", s.what, err)
		}
	}
	return nil
}

// cleanMeta strips what the API server sets, and owner references: the
// controllers adopt what their selectors match.
func cleanMeta(u *unstructured.Unstructured) {
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
		"ownerReferences", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(u.Object, "status")
}

func (r *restorer) create(ctx context.Context, res Resource, u *unstructured.Unstructured, skipExisting bool) error {
	ri := r.dyn.Resource(res.GVR)
	var err error
	if res.Namespaced {
		_, err = ri.Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
	} else {
		_, err = ri.Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil && !(skipExisting && apierrors.IsAlreadyExists(err)) {
		return fmt.Errorf("%s %s: %w", res.Kind, objectKey(u), err)
	}
	return nil
}

func (r *restorer) namespaces(ctx context.Context) error {
	// A snapshot made from manifests may hold objects of a namespace it
	// has no Namespace of.
	have := map[string]bool{}
	for _, u := range r.objects("v1/namespaces") {
		have[u.GetName()] = true
	}
	var missing []string
	for _, objs := range r.snap.Objects {
		for _, u := range objs {
			if ns := u.GetNamespace(); ns != "" && !have[ns] {
				have[ns] = true
				missing = append(missing, ns)
			}
		}
	}
	sort.Strings(missing)
	for _, ns := range missing {
		_, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	for _, u := range r.objects("v1/namespaces") {
		if u.GetDeletionTimestamp() != nil {
			continue
		}
		u := u.DeepCopy()
		cleanMeta(u)
		unstructured.RemoveNestedField(u.Object, "spec")
		_, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: u.GetName(), Labels: u.GetLabels(), Annotations: u.GetAnnotations()}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// The private cluster made it (default, kube-system,
			// openshift-machine-api): the snapshot's node selectors and
			// labels still apply.
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": u.GetLabels(), "annotations": u.GetAnnotations()}})
			_, err = r.kube.CoreV1().Namespaces().Patch(ctx, u.GetName(), "application/merge-patch+json", patch, metav1.PatchOptions{})
		}
		if err != nil {
			return fmt.Errorf("namespace %s: %w", u.GetName(), err)
		}
	}
	return nil
}

func (r *restorer) classes(ctx context.Context) error {
	for _, key := range []string{"scheduling.k8s.io/v1/priorityclasses", "storage.k8s.io/v1/storageclasses"} {
		// The API server makes its own system classes.
		if err := r.createEach(ctx, key, true, nil); err != nil {
			return err
		}
	}
	return nil
}

// createEach creates the snapshot's objects of a resource as they were,
// less their server-set metadata: all of them, or those keep keeps.
func (r *restorer) createEach(ctx context.Context, key string, skipExisting bool, keep func(*unstructured.Unstructured) bool) error {
	res, _ := resourceByKey(key)
	for _, u := range r.objects(key) {
		if keep != nil && !keep(&u) {
			continue
		}
		u := u.DeepCopy()
		cleanMeta(u)
		if err := r.create(ctx, res, u, skipExisting); err != nil {
			return err
		}
	}
	return nil
}

func (r *restorer) volumes(ctx context.Context) error {
	pvs, _ := resourceByKey("v1/persistentvolumes")
	for _, u := range r.objects(pvs.Key()) {
		u := u.DeepCopy()
		cleanMeta(u)
		unstructured.RemoveNestedField(u.Object, "spec", "claimRef", "uid")
		unstructured.RemoveNestedField(u.Object, "spec", "claimRef", "resourceVersion")
		if err := r.create(ctx, pvs, u, false); err != nil {
			return err
		}
	}
	return r.createEach(ctx, "v1/persistentvolumeclaims", false, func(u *unstructured.Unstructured) bool {
		return u.GetDeletionTimestamp() == nil
	})
}

// controllerTaints are the taints the node lifecycle controller and the
// cloud node controller keep from a node's conditions and spec: the
// private cluster's controllers set them from its own.
var controllerTaints = map[string]bool{
	corev1.TaintNodeNotReady:                         true,
	corev1.TaintNodeUnreachable:                      true,
	corev1.TaintNodeUnschedulable:                    true,
	corev1.TaintNodeMemoryPressure:                   true,
	corev1.TaintNodeDiskPressure:                     true,
	corev1.TaintNodePIDPressure:                      true,
	corev1.TaintNodeNetworkUnavailable:               true,
	"node.cloudprovider.kubernetes.io/uninitialized": true,
	"node.cloudprovider.kubernetes.io/shutdown":      true,
}

// instanceSpecOf is the simulated instance behind a snapshot's node: its
// allocatable resources as the instance's capacity (what the scheduler
// counts), its labels and its own taints.
func instanceSpecOf(n *corev1.Node, machineName string) (sim.InstanceSpec, error) {
	alloc := n.Status.Allocatable
	if len(alloc) == 0 {
		alloc = n.Status.Capacity
	}
	cpu, okCPU := alloc[corev1.ResourceCPU]
	mem, okMem := alloc[corev1.ResourceMemory]
	if !okCPU || !okMem {
		return sim.InstanceSpec{}, fmt.Errorf("node %s reports no allocatable cpu or memory", n.Name)
	}
	pods := int64(110)
	if p, ok := alloc[corev1.ResourcePods]; ok {
		pods = p.Value()
	}
	spec := sim.InstanceSpec{
		Name: n.Name, CPU: cpu, Memory: mem, Pods: pods,
		InstanceType: n.Labels[sim.LabelInstanceType], Region: n.Labels[sim.LabelRegion], Zone: nodeZone(n),
		Role: "worker", Labels: map[string]string{}, Machine: machineName,
	}
	if spec.InstanceType == "" {
		spec.InstanceType = "snapshot"
	}
	if _, ok := n.Labels[nodes.LabelRoleMaster]; ok {
		spec.Role = "master"
	}
	if _, ok := n.Labels[nodes.LabelRoleControlPlane]; ok {
		spec.Role = "master"
	}
	for k, v := range n.Labels {
		spec.Labels[k] = v
	}
	for name, q := range alloc {
		switch {
		case name == corev1.ResourceCPU, name == corev1.ResourceMemory, name == corev1.ResourcePods,
			name == corev1.ResourceEphemeralStorage, strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
		case name == sim.ResourceGPU:
			spec.GPU = q.Value()
		default:
			if !q.IsZero() {
				if spec.ExtendedResources == nil {
					spec.ExtendedResources = map[corev1.ResourceName]resource.Quantity{}
				}
				spec.ExtendedResources[name] = q
			}
		}
	}
	for _, t := range n.Spec.Taints {
		if !controllerTaints[t.Key] {
			spec.Taints = append(spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
	}
	if machineName != "" {
		spec.Annotations = map[string]string{machine.MachineAnnotation: machine.Namespace + "/" + machineName}
	}
	return spec, spec.Validate()
}

func nodeZone(n *corev1.Node) string {
	if z := n.Labels[sim.LabelZone]; z != "" {
		return z
	}
	return n.Labels["failure-domain.beta.kubernetes.io/zone"]
}

// nodes launches an instance per snapshot node, waits for their nodes to
// register, and then gives each exactly the snapshot's labels, taints,
// schedulability and conditions.
func (r *restorer) nodes(ctx context.Context) error {
	linked := map[string]bool{}
	for _, n := range r.machineNode {
		linked[n] = true
	}
	names := make([]string, 0, len(r.nodesByName))
	for name := range r.nodesByName {
		names = append(names, name)
	}
	sort.Strings(names)
	// One now for every node: nodes as old as each other stay so.
	now := time.Now()
	err := parallel(ctx, names, func(ctx context.Context, name string) error {
		m := ""
		if linked[name] {
			m = name
		}
		n := r.nodesByName[name]
		spec, err := instanceSpecOf(n, m)
		if err != nil {
			return err
		}
		// The node was as old at the snapshot as it is now in the
		// simulation's time.
		if spec.Annotations == nil {
			spec.Annotations = map[string]string{}
		}
		// Every restored node says so, a node made in the second of the
		// snapshot too: the private cluster's own creation times are
		// those of the restore, in whatever order it went, and the MCO
		// takes the oldest node first.
		if !n.CreationTimestamp.IsZero() {
			age := max(r.snap.TakenAt.Sub(n.CreationTimestamp.Time), 0)
			spec.Annotations[sim.CreatedAnnotation] = now.Add(-scaled(age, r.speed)).UTC().Format(time.RFC3339Nano)
		}
		// The node boots running the configuration it ran.
		for k, v := range r.configAnnotations(n.Annotations) {
			spec.Annotations[k] = v
		}
		if _, err := r.cloud.CreateInstance(ctx, spec); err != nil {
			return fmt.Errorf("launching node %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	nodeInf := informers.NewSharedInformerFactory(r.kube, 0).Core().V1().Nodes().Informer()
	err = waitfor.Informed(ctx, nodeInf, 200*time.Millisecond, 10*time.Minute, func(objs []any) (bool, string) {
		return len(objs) >= len(names), fmt.Sprintf("%d of %d nodes registered", len(objs), len(names))
	})
	if err != nil {
		return err
	}
	return parallel(ctx, names, func(ctx context.Context, name string) error {
		want := r.nodesByName[name]
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := r.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			labels := map[string]string{}
			for k, v := range want.Labels {
				labels[k] = v
			}
			n.Labels = labels
			var taints []corev1.Taint
			for _, t := range n.Spec.Taints {
				if controllerTaints[t.Key] {
					taints = append(taints, t)
				}
			}
			for _, t := range want.Spec.Taints {
				if !controllerTaints[t.Key] {
					taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
				}
			}
			n.Spec.Taints = taints
			n.Spec.Unschedulable = want.Spec.Unschedulable
			if r.stopped[name] {
				n.Annotations[sim.StoppedAnnotation] = "true"
				// Lost as long before the snapshot, in simulated time, as
				// it was in the cluster: the simulator declares it so at
				// once.
				if c := nodes.Condition(want, corev1.NodeReady); c != nil && !c.LastTransitionTime.IsZero() {
					n.Annotations[sim.LostSinceAnnotation] = r.sinceSnapshot(c.LastTransitionTime.Time).Format(time.RFC3339Nano)
				}
			}
			// The autoscaler's count of a node's unneeded time goes on.
			if t, err := time.Parse(time.RFC3339, want.Annotations[autoscaler.UnneededSinceAnnotation]); err == nil {
				n.Annotations[autoscaler.UnneededSinceAnnotation] = r.sinceSnapshot(t).Format(time.RFC3339)
			}
			for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
				if c := nodes.Condition(want, t); c != nil && c.Status == corev1.ConditionTrue {
					n.Annotations[sim.ConditionAnnotationPrefix+string(t)] = string(corev1.ConditionTrue)
				}
			}
			_, err = r.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
	})
}

// sinceSnapshot is the real instant of the simulation that is as long
// before now, in simulated time, as t was before the snapshot.
func (r *restorer) sinceSnapshot(t time.Time) time.Time {
	return time.Now().Add(-scaled(max(r.snap.TakenAt.Sub(t), 0), r.speed))
}

// parallel runs fn for every item on a few workers, returning the first
// error; the others still finish.
func parallel[T any](ctx context.Context, items []T, fn func(context.Context, T) error) error {
	const workers = 16
	ch := make(chan T)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range min(workers, len(items)) {
		wg.Go(func() {
			for it := range ch {
				if err := fn(ctx, it); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
	if len(errs) > 3 {
		return fmt.Errorf("%w (and %d more errors)", errors.Join(errs[:3]...), len(errs)-3)
	}
	return errors.Join(errs...)
}

// providerSpecOf is the capstan provider spec standing for a snapshot's
// MachineSet or Machine: its own when it already is one (a capstan
// cluster's snapshot), else the size of a node it backs (its allocatable,
// as the restored nodes have: the instance type's capacity, which the
// scale-from-zero annotations give, is more than a node of it offers),
// else the size OpenShift's scale-from-zero annotations give
// (machine.openshift.io/vCPU, memoryMb, GPU, maxPods), in the zone its
// provider spec or labels name.
func providerSpecOf(what string, annotations, labels map[string]string, raw *runtime.RawExtension, node *corev1.Node) (*runtime.RawExtension, error) {
	if raw != nil && len(raw.Raw) > 0 {
		if _, err := machine.ParseProviderSpec(machinev1.ProviderSpec{Value: raw}); err == nil {
			return raw, nil
		}
	}
	ps := machine.ProviderSpec{InstanceType: labels[machine.InstanceTypeLabel], Region: labels[machine.RegionLabel], Zone: labels[machine.ZoneLabel]}
	if raw != nil && len(raw.Raw) > 0 {
		var cloud struct {
			Placement struct {
				AvailabilityZone string `json:"availabilityZone"`
				Region           string `json:"region"`
			} `json:"placement"`
			Zone         string `json:"zone"`
			Region       string `json:"region"`
			Location     string `json:"location"`
			InstanceType string `json:"instanceType"`
			MachineType  string `json:"machineType"`
			VMSize       string `json:"vmSize"`
		}
		if err := json.Unmarshal(raw.Raw, &cloud); err == nil {
			ps.Zone = first(ps.Zone, cloud.Placement.AvailabilityZone, cloud.Zone)
			ps.Region = first(ps.Region, cloud.Placement.Region, cloud.Region, cloud.Location)
			ps.InstanceType = first(ps.InstanceType, cloud.InstanceType, cloud.MachineType, cloud.VMSize)
		}
	}
	if v, m := annotations["machine.openshift.io/vCPU"], annotations["machine.openshift.io/memoryMb"]; node == nil && v != "" && m != "" {
		cpu, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s: annotation machine.openshift.io/vCPU %q: %w", what, v, err)
		}
		mb, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: annotation machine.openshift.io/memoryMb %q: %w", what, m, err)
		}
		ps.CPU, ps.Memory = &cpu, resource.NewQuantity(mb<<20, resource.BinarySI)
		if g := annotations["machine.openshift.io/GPU"]; g != "" {
			ps.GPU, _ = strconv.ParseInt(g, 10, 64)
		}
		if p := annotations["machine.openshift.io/maxPods"]; p != "" {
			ps.Pods, _ = strconv.ParseInt(p, 10, 64)
		}
	}
	if node != nil {
		spec, err := instanceSpecOf(node, "")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		ps.CPU, ps.Memory, ps.GPU, ps.Pods = &spec.CPU, &spec.Memory, spec.GPU, spec.Pods
		ps.ExtendedResources = spec.ExtendedResources
		ps.Zone, ps.Region = first(ps.Zone, spec.Zone), first(ps.Region, spec.Region)
	}
	if ps.CPU == nil {
		return nil, fmt.Errorf("%s: its instance size is unknown: it is not capstan's, has no machine.openshift.io/vCPU and memoryMb annotations, and backs no node of the snapshot", what)
	}
	if ps.InstanceType == "" {
		ps.InstanceType = "snapshot"
	}
	if ps.Pods == 0 {
		ps.Pods = 250
	}
	return machine.RawProviderSpec(ps), nil
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// machines restores the Machine API: each Machine under its node's name
// (a simulated instance, node and machine share one), backed by the
// instance already launched for that node, then the MachineSets, which
// adopt them.
func (r *restorer) machines(ctx context.Context) error {
	machinesRes, _ := resourceByKey("machine.openshift.io/v1beta1/machines")
	setsRes, _ := resourceByKey("machine.openshift.io/v1beta1/machinesets")
	sets := r.objects(setsRes.Key())
	setNode := map[string]*corev1.Node{} // a node of each MachineSet, by set namespace/name
	var machines []*machinev1.Machine
	for _, u := range r.objects(machinesRes.Key()) {
		m, err := typed[machinev1.Machine](&u)
		if err != nil {
			return err
		}
		if m.DeletionTimestamp != nil {
			continue
		}
		node := r.nodesByName[r.machineNode[objectKey(m)]]
		if node == nil {
			// A machine without a node (still provisioning, or failed):
			// its MachineSet makes another one if it needs it.
			continue
		}
		for _, ref := range m.OwnerReferences {
			if ref.Kind == "MachineSet" {
				setNode[m.Namespace+"/"+ref.Name] = node
			}
		}
		raw, err := providerSpecOf("Machine "+objectKey(m), nil, m.Labels, m.Spec.ProviderSpec.Value, node)
		if err != nil {
			return err
		}
		out := &machinev1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations},
			Spec:       m.Spec,
		}
		out.Spec.ProviderID = nil
		out.Spec.ProviderSpec = machinev1.ProviderSpec{Value: raw}
		machines = append(machines, out)
	}
	// Each Machine is created as the machine controller would leave it
	// once it has found its instance (the provider ID, the instance's
	// labels and state, the finalizer), as the snapshot's Machine was:
	// the controller then only writes its status, rather than patching
	// every one of thousands of Machines twice first.
	act := &machine.SimActuator{Cloud: r.cloud}
	if err := parallel(ctx, machines, func(ctx context.Context, m *machinev1.Machine) error {
		if err := act.Update(ctx, m); err != nil {
			return fmt.Errorf("machine %s: %w", objectKey(m), err)
		}
		m.Status = machinev1.MachineStatus{}
		controllerutil.AddFinalizer(m, machinev1.MachineFinalizer)
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetAPIVersion("machine.openshift.io/v1beta1")
		u.SetKind("Machine")
		return r.create(ctx, machinesRes, u, false)
	}); err != nil {
		return err
	}
	// A MachineSet whose controller has not seen its Machines yet makes
	// new ones, then deletes them again: the MachineSets come once the
	// machine controller has given every Machine a phase (the controllers
	// share one cache).
	machineInf := dynamicinformer.NewFilteredDynamicInformer(r.dyn, machinesRes.GVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	err := waitfor.Informed(ctx, machineInf, 200*time.Millisecond, 10*time.Minute, func(objs []any) (bool, string) {
		phased := 0
		for _, o := range objs {
			if p, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "status", "phase"); p != "" {
				phased++
			}
		}
		return phased >= len(machines), fmt.Sprintf("%d of %d restored Machines have a phase", phased, len(machines))
	})
	if err != nil {
		return err
	}
	for _, u := range sets {
		ms, err := typed[machinev1.MachineSet](&u)
		if err != nil {
			return err
		}
		raw, err := providerSpecOf("MachineSet "+objectKey(ms), ms.Annotations, ms.Spec.Template.Labels, ms.Spec.Template.Spec.ProviderSpec.Value, setNode[objectKey(ms)])
		if err != nil {
			return err
		}
		u := u.DeepCopy()
		cleanMeta(u)
		if err := unstructured.SetNestedField(u.Object, map[string]any{}, "spec", "template", "spec", "providerSpec"); err != nil {
			return err
		}
		var value map[string]any
		if err := json.Unmarshal(raw.Raw, &value); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, value, "spec", "template", "spec", "providerSpec", "value"); err != nil {
			return err
		}
		if err := r.create(ctx, setsRes, u, false); err != nil {
			return err
		}
	}
	return nil
}

// restorePod is the pod to create for a snapshot's pod, or nil for one
// that has finished or is going: bound where it ran, its priority left
// to admission, its service account token left to admission, and its
// tolerations' and grace period's seconds divided by the speed. A
// toleration of a NoExecute taint its node had at the snapshot has run
// since the taint was added: what is left of it is divided.
func restorePod(u *unstructured.Unstructured, speed float64, takenAt time.Time, nodeTaints []corev1.Taint) (*corev1.Pod, error) {
	p, err := typed[corev1.Pod](u)
	if err != nil {
		return nil, err
	}
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	ann := map[string]string{}
	for k, v := range p.Annotations {
		if !strings.HasPrefix(k, "kubernetes.io/config.") {
			ann[k] = v
		}
	}
	if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
		raw, err := json.Marshal(restoredStatusOf(p, speed, takenAt))
		if err != nil {
			return nil, err
		}
		ann[sim.RestoredStatusAnnotation] = string(raw)
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: ann}, Spec: p.Spec}
	s := &out.Spec
	s.Priority, s.PreemptionPolicy = nil, nil
	s.EphemeralContainers = nil
	s.DeprecatedServiceAccount = s.ServiceAccountName
	var vols []corev1.Volume
	dropped := map[string]bool{}
	for _, v := range s.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			dropped[v.Name] = true
			continue
		}
		vols = append(vols, v)
	}
	s.Volumes = vols
	for _, cs := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range cs {
			var mounts []corev1.VolumeMount
			for _, m := range cs[i].VolumeMounts {
				if !dropped[m.Name] {
					mounts = append(mounts, m)
				}
			}
			cs[i].VolumeMounts = mounts
		}
	}
	for i := range s.Tolerations {
		tol := &s.Tolerations[i]
		if tol.TolerationSeconds == nil {
			continue
		}
		left := *tol.TolerationSeconds
		for _, t := range nodeTaints {
			if t.Effect == corev1.TaintEffectNoExecute && t.TimeAdded != nil && tol.ToleratesTaint(klog.Background(), &t, false) {
				left = max(left-int64(takenAt.Sub(t.TimeAdded.Time)/time.Second), 0)
			}
		}
		tol.TolerationSeconds = new(scaledSeconds(left, speed))
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := s.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	s.TerminationGracePeriodSeconds = new(scaledSeconds(grace, speed))
	if d := s.ActiveDeadlineSeconds; d != nil {
		s.ActiveDeadlineSeconds = new(scaledSeconds(*d, speed))
	}
	return out, nil
}

// restoredStatusOf is what the kubelet of a running pod keeps of its
// snapshot: when it started, as long before the snapshot in simulated
// time as it was in the cluster's; its containers' restarts; whether it
// was not ready.
func restoredStatusOf(p *corev1.Pod, speed float64, takenAt time.Time) sim.RestoredStatus {
	var rs sim.RestoredStatus
	if p.Status.StartTime != nil && takenAt.After(p.Status.StartTime.Time) {
		rs.StartedAgoSeconds = takenAt.Sub(p.Status.StartTime.Time).Seconds() / speed
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount > 0 {
			if rs.Restarts == nil {
				rs.Restarts = map[string]int32{}
			}
			rs.Restarts[cs.Name] = cs.RestartCount
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			rs.NotReady = true
		}
	}
	return rs
}

// pods creates the service accounts the pods run as, then the pods:
// those bound to a node first, then those the snapshot had pending.
func (r *restorer) pods(ctx context.Context) error {
	r.restored = map[string]restoredPod{}
	var bound, pending []*corev1.Pod
	accounts := map[[2]string]bool{}
	for _, u := range r.objects("v1/pods") {
		var taints []corev1.Taint
		nodeName, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
		if n := r.nodesByName[nodeName]; n != nil {
			taints = n.Spec.Taints
		}
		p, err := restorePod(&u, r.speed, r.snap.TakenAt.Time, taints)
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		if p.Spec.ServiceAccountName != "" {
			accounts[[2]string{p.Namespace, p.Spec.ServiceAccountName}] = true
		}
		if p.Spec.NodeName != "" {
			if _, ok := r.nodesByName[p.Spec.NodeName]; !ok {
				// Its node went while the snapshot was taken, or before
				// the pod garbage collector came by: it deletes such
				// pods, and so does the restore (a caveat says so).
				continue
			}
			bound = append(bound, p)
			if !r.stopped[p.Spec.NodeName] {
				r.boundPods++
			}
		} else {
			pending = append(pending, p)
		}
	}
	for sa := range accounts {
		_, err := r.kube.CoreV1().ServiceAccounts(sa[0]).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa[1], Namespace: sa[0]}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("service account %s/%s: %w", sa[0], sa[1], err)
		}
	}
	create := func(ctx context.Context, p *corev1.Pod) error {
		made, err := r.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("pod %s: %w", objectKey(p), err)
		}
		r.restoredMu.Lock()
		r.restored[objectKey(p)] = restoredPod{node: p.Spec.NodeName, uid: made.UID}
		r.restoredMu.Unlock()
		return nil
	}
	if err := parallel(ctx, bound, create); err != nil {
		return err
	}
	return parallel(ctx, pending, create)
}

// workloads creates the pods' owners so that they adopt the pods already
// there: ReplicaSets, StatefulSets, DaemonSets and Jobs, then the
// Deployments owning the ReplicaSets. A finished Job is left out.
func (r *restorer) workloads(ctx context.Context) error {
	if err := r.awaitControllersSeePods(ctx); err != nil {
		return err
	}
	if err := r.revisions(ctx); err != nil {
		return err
	}
	for _, key := range []string{"apps/v1/replicasets", "apps/v1/statefulsets", "apps/v1/daemonsets", "batch/v1/jobs", "apps/v1/deployments"} {
		res, _ := resourceByKey(key)
		for _, orig := range r.objects(key) {
			if orig.GetDeletionTimestamp() != nil || (res.Kind == "Job" && jobFinished(&orig)) {
				continue
			}
			u := orig.DeepCopy()
			cleanMeta(u)
			if err := r.scaleWorkload(u); err != nil {
				return fmt.Errorf("%s %s: %w", res.Kind, objectKey(u), err)
			}
			if res.Kind == "StatefulSet" || res.Kind == "DaemonSet" {
				if err := r.createWithoutRolling(ctx, res, u, r.updateRevision(res.Kind, &orig)); err != nil {
					return fmt.Errorf("%s %s: %w", res.Kind, objectKey(u), err)
				}
				continue
			}
			if res.Kind == "ReplicaSet" {
				created, err := r.dyn.Resource(res.GVR).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("%s %s: %w", res.Kind, objectKey(u), err)
				}
				if err := r.adopt(ctx, created, nil); err != nil {
					return fmt.Errorf("%s %s: %w", res.Kind, objectKey(u), err)
				}
				continue
			}
			if err := r.create(ctx, res, u, false); err != nil {
				return err
			}
		}
	}
	return nil
}

func jobFinished(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if (m["type"] == "Complete" || m["type"] == "Failed") && m["status"] == "True" {
			return true
		}
	}
	return false
}

// scaleWorkload divides a workload's seconds by the speed, and keeps a
// Job's selector: it names the snapshot Job's UID, which its pods carry.
func (r *restorer) scaleWorkload(u *unstructured.Unstructured) error {
	if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "template", "spec"); ok {
		// The API server's default grace period, scaled as a given one.
		if _, set, _ := unstructured.NestedInt64(u.Object, "spec", "template", "spec", "terminationGracePeriodSeconds"); !set {
			if err := unstructured.SetNestedField(u.Object, int64(corev1.DefaultTerminationGracePeriodSeconds), "spec", "template", "spec", "terminationGracePeriodSeconds"); err != nil {
				return err
			}
		}
	}
	for _, path := range [][]string{
		{"spec", "minReadySeconds"}, {"spec", "progressDeadlineSeconds"},
		{"spec", "activeDeadlineSeconds"}, {"spec", "ttlSecondsAfterFinished"},
		{"spec", "template", "spec", "terminationGracePeriodSeconds"},
	} {
		if v, ok, _ := unstructured.NestedInt64(u.Object, path...); ok {
			if err := unstructured.SetNestedField(u.Object, scaledSeconds(v, r.speed), path...); err != nil {
				return err
			}
		}
	}
	tols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "tolerations")
	for _, t := range tols {
		if m, ok := t.(map[string]any); ok {
			if s, ok := m["tolerationSeconds"].(int64); ok {
				m["tolerationSeconds"] = scaledSeconds(s, r.speed)
			}
		}
	}
	if len(tols) > 0 {
		if err := unstructured.SetNestedSlice(u.Object, tols, "spec", "template", "spec", "tolerations"); err != nil {
			return err
		}
	}
	if u.GetKind() == "Job" {
		if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "selector"); ok {
			return unstructured.SetNestedField(u.Object, true, "spec", "manualSelector")
		}
	}
	return nil
}

// policies restores the PodDisruptionBudgets and the autoscalers, the
// ClusterAutoscaler's delays divided by the speed.
func (r *restorer) policies(ctx context.Context) error {
	for _, key := range []string{"policy/v1/poddisruptionbudgets", "autoscaling.openshift.io/v1beta1/machineautoscalers", "autoscaling.openshift.io/v1/clusterautoscalers",
		"autoscaling/v2/horizontalpodautoscalers", "machine.openshift.io/v1beta1/machinehealthchecks", "batch/v1/cronjobs"} {
		res, _ := resourceByKey(key)
		for _, u := range r.objects(key) {
			u := u.DeepCopy()
			cleanMeta(u)
			if err := prepareApply(u, r.speed); err != nil {
				return err
			}
			if err := prepareRestore(u, r.speed); err != nil {
				return fmt.Errorf("%s %s: %w", res.Kind, objectKey(u), err)
			}
			if err := r.create(ctx, res, u, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// namespaced restores what the pods' namespaces hold beside them, once
// the pods are made (a quota or a limit range would otherwise judge the
// restored pods as new ones): Services (with the addresses the private
// cluster gives them; the API server's own is there already),
// ResourceQuotas and LimitRanges.
func (r *restorer) namespaced(ctx context.Context) error {
	for _, key := range []string{"v1/services", "v1/resourcequotas", "v1/limitranges"} {
		res, _ := resourceByKey(key)
		for _, u := range r.objects(key) {
			if u.GetDeletionTimestamp() != nil {
				continue
			}
			u := u.DeepCopy()
			cleanMeta(u)
			if err := prepareRestore(u, r.speed); err != nil {
				return fmt.Errorf("%s %s: %w", res.Kind, objectKey(u), err)
			}
			if err := r.create(ctx, res, u, res.Kind == "Service"); err != nil {
				return err
			}
		}
	}
	return nil
}

// mhcNodeStartupTimeout is a MachineHealthCheck's default
// spec.nodeStartupTimeout, as OpenShift's.
const mhcNodeStartupTimeout = 10 * time.Minute

// prepareRestore readies a snapshot's object of a kind only a restore
// makes: a Service without the cluster's addresses and node ports, a
// MachineHealthCheck's timeouts divided by the speed, a CronJob
// suspended (its schedule is on the cluster's clock, which a simulation
// faster than real time does not keep).
func prepareRestore(u *unstructured.Unstructured, speed float64) error {
	switch u.GetKind() {
	case "Service":
		for _, f := range []string{"clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort"} {
			unstructured.RemoveNestedField(u.Object, "spec", f)
		}
		ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
		for _, p := range ports {
			if pm, ok := p.(map[string]any); ok {
				delete(pm, "nodePort")
			}
		}
		if ports != nil {
			return unstructured.SetNestedSlice(u.Object, ports, "spec", "ports")
		}
	case "MachineHealthCheck":
		timeout := mhcNodeStartupTimeout
		if v, ok, _ := unstructured.NestedString(u.Object, "spec", "nodeStartupTimeout"); ok && v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("spec.nodeStartupTimeout %q: %w", v, err)
			}
			timeout = d
		}
		if err := unstructured.SetNestedField(u.Object, scaled(timeout, speed).String(), "spec", "nodeStartupTimeout"); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "spec", "unhealthyConditions")
		for i, c := range conds {
			cm, _ := c.(map[string]any)
			v, _ := cm["timeout"].(string)
			if v == "" {
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("spec.unhealthyConditions[%d].timeout %q: %w", i, v, err)
			}
			cm["timeout"] = scaled(d, speed).String()
		}
		if conds != nil {
			return unstructured.SetNestedSlice(u.Object, conds, "spec", "unhealthyConditions")
		}
	case "CronJob":
		return unstructured.SetNestedField(u.Object, true, "spec", "suspend")
	}
	return nil
}

// prepareApply makes an object ready for the simulated cluster: its
// durations and seconds divided by the speed.
func prepareApply(u *unstructured.Unstructured, speed float64) error {
	switch u.GetKind() {
	case "ClusterAutoscaler":
		if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "scaleDown"); !ok {
			// No scaleDown is scale-down enabled with the defaults.
			if err := unstructured.SetNestedField(u.Object, true, "spec", "scaleDown", "enabled"); err != nil {
				return err
			}
		}
		// Its delays stay the cluster's: the autoscaler's clock runs
		// them at the speed.
	case "Deployment", "StatefulSet", "DaemonSet", "Job":
		r := restorer{speed: speed}
		return r.scaleWorkload(u)
	}
	return nil
}
