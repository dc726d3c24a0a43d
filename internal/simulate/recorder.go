package simulate

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// reportedReasons are the events a report keeps: the autoscaler's
// decisions and the Machine API's blocked drains.
var reportedReasons = map[string]bool{
	autoscaler.ReasonTriggeredScaleUp: true, autoscaler.ReasonNotTriggerScaleUp: true,
	autoscaler.ReasonScaledUpGroup: true, autoscaler.ReasonFailedToScaleUpGroup: true,
	autoscaler.ReasonScaleUpTimedOut: true, autoscaler.ReasonScaleUpFailed: true,
	autoscaler.ReasonMaxNodesTotalReached: true, autoscaler.ReasonScaleDown: true,
	autoscaler.ReasonScaleDownEmpty: true, autoscaler.ReasonScaleDownFailed: true,
}

// recorder watches the private cluster and keeps, in simulated time
// since begin, what changed: pods removed and placed, nodes added,
// removed and lost, the autoscaler's events, blocked drains.
type recorder struct {
	speed float64
	// evictionRate is the node lifecycle controller's rate of the
	// cluster simulated (nodes a simulated second).
	evictionRate float64
	factory      informers.SharedInformerFactory
	dfactory     dynamicinformer.DynamicSharedInformerFactory
	pods         corelisters.PodLister
	nodes        corelisters.NodeLister
	sets         appslisters.ReplicaSetLister
	machines     cache.GenericLister
	stopCh       chan struct{}
	avail        *availability
	desired      desiredOf

	mu            sync.Mutex
	started       time.Time
	lastChange    time.Time
	baselinePods  map[string]bool
	baselineNodes map[string]bool
	// baselinePending are the pods that had no node when the changes
	// began: still pending at the end, they are not the changes' doing.
	baselinePending map[string]bool
	removed         []PodRemoval
	removedPods     map[string]bool
	placedAt        map[string]time.Duration
	nodeAdded       map[string]time.Duration
	nodeRemoved     map[string]NodeChange
	nodeNotReady    map[string]time.Duration
	// tainted is when (real time) each node got the node lifecycle
	// controller's NoExecute taint during the run.
	tainted       map[string]time.Time
	events        map[string]*Event
	podAutoscaler map[string]string
	// scaledUpFor are, by MachineSet name, the pods whose
	// TriggeredScaleUp named it during the run.
	scaledUpFor  map[string]map[string]bool
	machineDrain map[string]string
	// updates are the nodes the MCO told to run a new configuration.
	updates map[string]*nodeUpdate
}

// nodeUpdate is a node's latest configuration update: when it was
// targeted and when its daemon was done.
type nodeUpdate struct {
	config            string
	targeted, updated time.Duration
	done              bool
}

// newRecorder watches the cluster of kube and dyn; without machines (a
// cluster that serves no Machine API), it watches no Machine.
func newRecorder(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, speed float64, machines bool) (*recorder, error) {
	r := &recorder{speed: speed, stopCh: make(chan struct{}),
		placedAt: map[string]time.Duration{}, nodeAdded: map[string]time.Duration{}, nodeRemoved: map[string]NodeChange{},
		nodeNotReady: map[string]time.Duration{}, tainted: map[string]time.Time{}, events: map[string]*Event{}, podAutoscaler: map[string]string{}, scaledUpFor: map[string]map[string]bool{},
		machineDrain: map[string]string{}, removedPods: map[string]bool{}, updates: map[string]*nodeUpdate{}}
	r.factory = informers.NewSharedInformerFactory(kube, 0)
	r.dfactory = dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	podInf := r.factory.Core().V1().Pods()
	nodeInf := r.factory.Core().V1().Nodes()
	r.pods, r.nodes = podInf.Lister(), nodeInf.Lister()
	r.sets = r.factory.Apps().V1().ReplicaSets().Lister()
	var mInf cache.SharedIndexInformer
	r.machines = cache.NewGenericLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), machinesGVR.GroupResource())
	if machines {
		gi := r.dfactory.ForResource(machinesGVR)
		mInf, r.machines = gi.Informer(), gi.Lister()
	}
	r.avail = newAvailability(r.workloadOf)
	apps := r.factory.Apps().V1()
	r.desired = workloadDesired(apps.Deployments().Lister(), apps.StatefulSets().Lister(), apps.DaemonSets().Lister(), apps.ReplicaSets().Lister())
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{podInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: r.podAdded, UpdateFunc: r.podUpdated, DeleteFunc: r.podDeleted}},
		{nodeInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: r.nodeAddedFn, UpdateFunc: r.nodeUpdated, DeleteFunc: r.nodeDeleted}},
		{r.factory.Core().V1().Events().Informer(), cache.ResourceEventHandlerFuncs{AddFunc: r.event, UpdateFunc: func(_, o any) { r.event(o) }}},
		{podInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: func(o any) { r.avail.pod(o, false) }, UpdateFunc: func(_, o any) { r.avail.pod(o, false) },
			DeleteFunc: func(o any) { r.avail.pod(o, true) }}},
		{r.factory.Policy().V1().PodDisruptionBudgets().Informer(), cache.ResourceEventHandlerFuncs{AddFunc: r.avail.budget, UpdateFunc: func(_, o any) { r.avail.budget(o) }}},
	}
	if mInf != nil {
		handlers = append(handlers, struct {
			inf cache.SharedIndexInformer
			h   cache.ResourceEventHandlerFuncs
		}{mInf, cache.ResourceEventHandlerFuncs{AddFunc: func(any) { r.changed() }, UpdateFunc: r.machineUpdated, DeleteFunc: func(any) { r.changed() }}})
	}
	_, _, _ = apps.Deployments().Informer(), apps.StatefulSets().Informer(), apps.DaemonSets().Informer()
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, err
		}
	}
	_ = r.factory.Apps().V1().ReplicaSets().Informer()
	r.factory.Start(r.stopCh)
	r.dfactory.Start(r.stopCh)
	for typ, ok := range r.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the %v informer did not sync (it lists and watches)", typ)
		}
	}
	for typ, ok := range r.dfactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the %v informer did not sync (it lists and watches)", typ)
		}
	}
	return r, nil
}

func (r *recorder) stop() {
	close(r.stopCh)
	r.factory.Shutdown()
	r.dfactory.Shutdown()
}

// begin marks the start of the changes: what exists now is the
// baseline, compared with the pods restored from the snapshot.
func (r *recorder) begin(restored map[string]restoredPod) Calibration {
	zones := map[string]string{}
	for _, n := range r.nodeList() {
		zones[n.Name] = nodeZone(n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.baselinePods, r.baselineNodes, r.baselinePending = map[string]bool{}, map[string]bool{}, map[string]bool{}
	pods, _ := r.pods.List(labels.Everything())
	calibration := calibrate(restored, pods, func(node string) string { return zones[node] })
	for _, p := range pods {
		r.baselinePods[objectKey(p)] = true
		if p.Spec.NodeName == "" {
			r.baselinePending[objectKey(p)] = true
		}
	}
	ns, _ := r.nodes.List(labels.Everything())
	for _, n := range ns {
		r.baselineNodes[n.Name] = true
	}
	r.started = time.Now()
	r.lastChange = r.started
	r.avail.begin(r.started, func(key string) *corev1.Pod {
		ns, name, _ := strings.Cut(key, "/")
		p, err := r.pods.Pods(ns).Get(name)
		if err != nil {
			return nil
		}
		return p
	})
	return calibration
}

// now is the simulated time since begin.
func (r *recorder) now() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.simSince(time.Now())
}

// simAt is the simulated time of t since begin (negative before it).
func (r *recorder) simAt(t time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.simSince(t)
}

// simDuration is a real duration in simulated time.
func (r *recorder) simDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) * r.speed)
}

func (r *recorder) simSince(t time.Time) time.Duration {
	if r.started.IsZero() {
		return 0
	}
	return time.Duration(float64(t.Sub(r.started)) * r.speed)
}

func (r *recorder) changed() {
	r.mu.Lock()
	r.lastChange = time.Now()
	r.mu.Unlock()
}

func (r *recorder) runningPods() int {
	pods, _ := r.pods.List(labels.Everything())
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

func (r *recorder) nodeList() []*corev1.Node {
	ns, _ := r.nodes.List(labels.Everything())
	sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	return ns
}

// workloadOf names a pod's workload: its controller, or the Deployment
// of its ReplicaSet.
func (r *recorder) workloadOf(p *corev1.Pod) string {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return ""
	}
	if ref.Kind == "ReplicaSet" {
		if rs, err := r.sets.ReplicaSets(p.Namespace).Get(ref.Name); err == nil {
			if d := metav1.GetControllerOf(rs); d != nil {
				return d.Kind + " " + p.Namespace + "/" + d.Name
			}
		}
	}
	return ref.Kind + " " + p.Namespace + "/" + ref.Name
}

func (r *recorder) podAdded(obj any) { r.changed() }

func (r *recorder) podUpdated(old, obj any) {
	o, ok1 := old.(*corev1.Pod)
	p, ok2 := obj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	if o.Spec.NodeName == p.Spec.NodeName && o.Status.Phase == p.Status.Phase && (o.DeletionTimestamp == nil) == (p.DeletionTimestamp == nil) {
		return
	}
	var workload string
	if o.DeletionTimestamp == nil && p.DeletionTimestamp != nil {
		workload = r.workloadOf(p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastChange = time.Now()
	if r.started.IsZero() {
		return
	}
	if o.Spec.NodeName == "" && p.Spec.NodeName != "" {
		r.placedAt[objectKey(p)] = r.simSince(r.lastChange)
	}
	if o.DeletionTimestamp == nil && p.DeletionTimestamp != nil {
		// A pod is removed from its node when its deletion begins: on
		// a lost node it stays Terminating, its replacement made at once.
		r.recordRemoval(p, workload)
	}
}

// recordRemoval keeps a pod's removal from its node, once, with the
// reason of its DisruptionTarget condition. r.mu is held.
func (r *recorder) recordRemoval(p *corev1.Pod, workload string) {
	key := objectKey(p)
	if p.Spec.NodeName == "" || r.removedPods[key] {
		return
	}
	r.removedPods[key] = true
	reason := "Deleted"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason != "" {
			reason = c.Reason
		}
	}
	r.removed = append(r.removed, PodRemoval{Pod: key, Workload: workload, Node: p.Spec.NodeName,
		At: Duration(r.simSince(r.lastChange)), Reason: reason})
}

func (r *recorder) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	workload := r.workloadOf(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastChange = time.Now()
	if !r.started.IsZero() {
		r.recordRemoval(p, workload)
	}
}

func (r *recorder) nodeAddedFn(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastChange = time.Now()
	if !r.started.IsZero() {
		r.nodeAdded[n.Name] = r.simSince(r.lastChange)
	}
}

func (r *recorder) nodeUpdated(old, obj any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := obj.(*corev1.Node)
	if !ok1 || !ok2 || (nodeReady(o) == nodeReady(n) && o.Spec.Unschedulable == n.Spec.Unschedulable && len(o.Spec.Taints) == len(n.Spec.Taints) &&
		!configChanged(o, n)) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastChange = time.Now()
	if !r.started.IsZero() {
		r.configUpdate(n)
	}
	if !r.started.IsZero() && lifecycleTainted(n) && !lifecycleTainted(o) {
		if _, seen := r.tainted[n.Name]; !seen {
			r.tainted[n.Name] = r.lastChange
		}
	}
	if nodeReady(o) && !nodeReady(n) && !r.started.IsZero() {
		if _, seen := r.nodeNotReady[n.Name]; !seen {
			r.nodeNotReady[n.Name] = r.simSince(r.lastChange)
		}
	}
}

// configChanged says whether the MCO's annotations of a node changed.
func configChanged(o, n *corev1.Node) bool {
	for _, k := range []string{mco.CurrentConfigAnnotation, mco.DesiredConfigAnnotation, mco.StateAnnotation} {
		if o.Annotations[k] != n.Annotations[k] {
			return true
		}
	}
	return false
}

// configUpdate keeps when a node was told to run a new configuration and
// when its daemon was done. r.mu is held.
func (r *recorder) configUpdate(n *corev1.Node) {
	a := n.Annotations
	desired := a[mco.DesiredConfigAnnotation]
	u := r.updates[n.Name]
	if desired != "" && desired != a[mco.CurrentConfigAnnotation] && (u == nil || u.config != desired) {
		u = &nodeUpdate{config: desired, targeted: r.simSince(r.lastChange)}
		r.updates[n.Name] = u
	}
	if u != nil && !u.done && a[mco.CurrentConfigAnnotation] == u.config && a[mco.StateAnnotation] == mco.StateDone {
		u.done, u.updated = true, r.simSince(r.lastChange)
	}
}

func (r *recorder) nodeDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	set := r.machineSetOf(n)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastChange = time.Now()
	if !r.started.IsZero() {
		r.nodeRemoved[n.Name] = NodeChange{Node: n.Name, Zone: nodeZone(n), At: Duration(r.simSince(r.lastChange)), MachineSet: set}
	}
}

func (r *recorder) machineUpdated(old, obj any) {
	o, ok1 := old.(*unstructured.Unstructured)
	m, ok2 := obj.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return
	}
	op, _, _ := unstructured.NestedString(o.Object, "status", "phase")
	mp, _, _ := unstructured.NestedString(m.Object, "status", "phase")
	if op != mp || (o.GetDeletionTimestamp() == nil) != (m.GetDeletionTimestamp() == nil) {
		r.changed()
	}
}

func (r *recorder) event(obj any) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	obj0 := e.InvolvedObject
	key := obj0.Name
	if obj0.Namespace != "" {
		key = obj0.Namespace + "/" + obj0.Name
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case obj0.Kind == "Pod" && (e.Reason == autoscaler.ReasonNotTriggerScaleUp || e.Reason == autoscaler.ReasonTriggeredScaleUp):
		r.podAutoscaler[key] = e.Message
		if e.Reason == autoscaler.ReasonTriggeredScaleUp && !r.started.IsZero() {
			for _, m := range scaledUpSet.FindAllStringSubmatch(e.Message, -1) {
				if r.scaledUpFor[m[1]] == nil {
					r.scaledUpFor[m[1]] = map[string]bool{}
				}
				r.scaledUpFor[m[1]][key] = true
			}
		}
	case obj0.Kind == "Machine" && (e.Reason == machine.EventDrainBlocked || e.Reason == machine.EventTerminateBlocked):
		r.machineDrain[key] = e.Message
	}
	at := e.LastTimestamp.Time
	if at.IsZero() {
		at = e.EventTime.Time
	}
	if r.started.IsZero() || !reportedReasons[e.Reason] || (!at.IsZero() && at.Before(r.started.Truncate(time.Second))) {
		return
	}
	id := e.Reason + "\x00" + obj0.Kind + "\x00" + key + "\x00" + e.Message
	if ev := r.events[id]; ev != nil {
		ev.Count = max(ev.Count, int(e.Count))
		return
	}
	r.events[id] = &Event{At: Duration(r.simSince(time.Now())), Object: obj0.Kind + " " + key, Reason: e.Reason, Message: e.Message, Count: max(1, int(e.Count))}
}

// scaledUpSet finds the MachineSets a TriggeredScaleUp message names
// ("pod triggered scale-up: [{MachineSet/NAMESPACE/NAME 1->2 (max: 3)}]").
var scaledUpSet = regexp.MustCompile(`MachineSet/[^/\s]+/([^\s/]+) \d+->\d+`)

// machineSetOf names the MachineSet of a node's Machine, if it has one.
func (r *recorder) machineSetOf(n *corev1.Node) string {
	ref := n.Annotations[machine.MachineAnnotation]
	if ref == "" {
		return ""
	}
	obj, err := r.machines.Get(ref)
	if err != nil {
		return ""
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	for _, o := range u.GetOwnerReferences() {
		if o.Kind == "MachineSet" {
			return o.Name
		}
	}
	return ""
}

// waitSettled waits until nothing has changed for quiet, or until limit
// has passed since begin (real time both), saying which.
func (r *recorder) waitSettled(ctx context.Context, quiet, limit time.Duration, busy func() bool, log interface{ Write([]byte) (int, error) }) bool {
	r.changed()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	report := time.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		r.mu.Lock()
		last, started := r.lastChange, r.started
		r.mu.Unlock()
		now := time.Now()
		if now.Sub(last) >= quiet && !r.terminating() && !r.provisioning() && !busy() {
			return true
		}
		if now.Sub(started) >= limit {
			return false
		}
		if now.Sub(report) >= 10*time.Second {
			report = now
			fmt.Fprintf(log, "Simulated %s; last change %s ago\n", Duration(r.now()), Duration(time.Duration(float64(now.Sub(last))*r.speed)))
		}
	}
}

// quietFor waits until nothing has changed for quiet, for at most limit
// (real time), and says whether it was quiet.
func (r *recorder) quietFor(ctx context.Context, quiet, limit time.Duration) bool {
	err := waitfor.Poll(ctx, 100*time.Millisecond, limit, waitfor.Simple(func(context.Context) (bool, string) {
		r.mu.Lock()
		last := r.lastChange
		r.mu.Unlock()
		return time.Since(last) >= quiet, "changing"
	}))
	return err == nil
}

// provisioning says whether a Machine is on its way to a node: neither
// Failed nor being deleted, and without a node yet. An instance booting
// for longer than the quiet time has not settled the cluster.
func (r *recorder) provisioning() bool {
	objs, _ := r.machines.List(labels.Everything())
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		node, _, _ := unstructured.NestedString(u.Object, "status", "nodeRef", "name")
		if node == "" && phase != "Failed" {
			return true
		}
	}
	return false
}

// terminating says whether a pod is being deleted on a node whose kubelet
// runs: its end is still to come, however long its grace period. (On a
// lost node a pod stays Terminating for good.)
func (r *recorder) terminating() bool {
	pods, _ := r.pods.List(labels.Everything())
	for _, p := range pods {
		if p.DeletionTimestamp == nil || p.Spec.NodeName == "" {
			continue
		}
		if n, err := r.nodes.Get(p.Spec.NodeName); err == nil && nodeReady(n) {
			return true
		}
	}
	return false
}

// fill writes what was recorded into the report.
func (r *recorder) fill(ctx context.Context, rep *Report, a *applier) error {
	rollouts, err := r.rollouts(ctx, a.dyn)
	if err != nil {
		return err
	}
	rep.Rollouts = rollouts
	if a.plan != nil {
		if rep.Update, err = a.updateRun(ctx); err != nil {
			return err
		}
	}
	pods, err := r.pods.List(labels.Everything())
	if err != nil {
		return err
	}
	sort.Slice(pods, func(i, j int) bool { return objectKey(pods[i]) < objectKey(pods[j]) })
	var machines []machinev1.Machine
	objs, _ := r.machines.List(labels.Everything())
	for _, o := range objs {
		var m machinev1.Machine
		if u, ok := o.(*unstructured.Unstructured); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m) == nil {
			machines = append(machines, m)
		}
	}
	zoneOf := map[string]string{}
	for _, n := range r.nodeList() {
		zoneOf[n.Name] = nodeZone(n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Duration = Duration(r.simSince(time.Now()))
	if rep.Settled {
		rep.Duration = Duration(r.simSince(r.lastChange))
	}
	rep.Removed = append([]PodRemoval{}, r.removed...)
	sort.SliceStable(rep.Removed, func(i, j int) bool { return rep.Removed[i].At < rep.Removed[j].At })
	rep.Placed, rep.Pending = []PodPlacement{}, []PendingPod{}
	for _, p := range pods {
		key := objectKey(p)
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Spec.NodeName == "" {
			pp := PendingPod{Pod: key, Workload: r.workloadOf(p), Autoscaler: r.podAutoscaler[key], AlreadyPending: r.baselinePending[key]}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					pp.Scheduler = c.Message
				}
			}
			rep.Pending = append(rep.Pending, pp)
			continue
		}
		if r.baselinePods[key] {
			continue
		}
		at, ok := r.placedAt[key]
		if !ok {
			at = r.simSince(p.CreationTimestamp.Time)
		}
		rep.Placed = append(rep.Placed, PodPlacement{Pod: key, Workload: r.workloadOf(p), Node: p.Spec.NodeName, Zone: zoneOf[p.Spec.NodeName], At: Duration(at)})
	}
	sort.SliceStable(rep.Placed, func(i, j int) bool { return rep.Placed[i].At < rep.Placed[j].At })
	rep.NodesAdded, rep.NodesRemoved, rep.NodesNotReady = []NodeChange{}, []NodeChange{}, []NodeChange{}
	for name, at := range r.nodeAdded {
		nc := NodeChange{Node: name, Zone: zoneOf[name], At: Duration(at)}
		if n, err := r.nodes.Get(name); err == nil {
			nc.MachineSet = r.machineSetOf(n)
		} else if gone, ok := r.nodeRemoved[name]; ok {
			nc.Zone, nc.MachineSet = gone.Zone, gone.MachineSet
		}
		if pods := r.scaledUpFor[nc.MachineSet]; nc.MachineSet != "" && len(pods) > 0 {
			nc.For = slices.Sorted(maps.Keys(pods))
		}
		rep.NodesAdded = append(rep.NodesAdded, nc)
	}
	for _, nc := range r.nodeRemoved {
		rep.NodesRemoved = append(rep.NodesRemoved, nc)
	}
	notReady := map[string]bool{}
	for name, at := range r.nodeNotReady {
		rep.NodesNotReady = append(rep.NodesNotReady, NodeChange{Node: name, Zone: zoneOf[name], At: Duration(at)})
		notReady[name] = true
	}
	rep.Caveats = append(rep.Caveats, taintPace(r.tainted, zoneOf, notReady, r.evictionRate, r.speed)...)
	for _, l := range [][]NodeChange{rep.NodesAdded, rep.NodesRemoved, rep.NodesNotReady} {
		sort.Slice(l, func(i, j int) bool {
			if l[i].At != l[j].At {
				return l[i].At < l[j].At
			}
			return l[i].Node < l[j].Node
		})
	}
	rep.Availability, rep.Budgets = r.avail.report(r.desired, r.simDuration)
	rep.Autoscaler = []Event{}
	for _, e := range r.events {
		rep.Autoscaler = append(rep.Autoscaler, *e)
	}
	sort.Slice(rep.Autoscaler, func(i, j int) bool {
		if rep.Autoscaler[i].At != rep.Autoscaler[j].At {
			return rep.Autoscaler[i].At < rep.Autoscaler[j].At
		}
		return rep.Autoscaler[i].Object+rep.Autoscaler[i].Reason < rep.Autoscaler[j].Object+rep.Autoscaler[j].Reason
	})
	rep.BlockedDrains = a.blockedDrains(pods, machines, r.machineDrain)
	if rep.BlockedDrains == nil {
		rep.BlockedDrains = []BlockedDrain{}
	}
	return nil
}

// rollouts are the pools whose nodes were told to run the pool's
// configuration during the run, each with its nodes in the order they
// were.
func (r *recorder) rollouts(ctx context.Context, dyn dynamic.Interface) ([]PoolRollout, error) {
	out := []PoolRollout{}
	r.mu.Lock()
	updates := make(map[string]nodeUpdate, len(r.updates))
	for n, u := range r.updates {
		updates[n] = *u
	}
	r.mu.Unlock()
	if len(updates) == 0 {
		return out, nil
	}
	list, err := dyn.Resource(resourceOf("MachineConfigPool").GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the MachineConfigPools: %w", err)
	}
	var pools []*mcfgv1.MachineConfigPool
	for i := range list.Items {
		p, err := typed[mcfgv1.MachineConfigPool](&list.Items[i])
		if err != nil {
			return nil, err
		}
		pools = append(pools, p)
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	members := map[string][]*corev1.Node{}
	for _, n := range r.nodeList() {
		if p, err := mco.PrimaryPool(pools, n); err == nil && p != nil {
			members[p.Name] = append(members[p.Name], n)
		}
	}
	for _, p := range pools {
		target, ns := p.Spec.Configuration.Name, members[p.Name]
		ro := PoolRollout{Pool: p.Name, Config: target, Nodes: len(ns), MaxUnavailable: mco.MaxUnavailable(p, len(ns)), Order: []NodeUpdate{}}
		var longest time.Duration
		for _, n := range ns {
			a := n.Annotations
			if a[mco.CurrentConfigAnnotation] == target && a[mco.StateAnnotation] == mco.StateDone {
				ro.Updated++
			}
			u, ok := updates[n.Name]
			if !ok || u.config != target {
				continue
			}
			nu := NodeUpdate{Node: n.Name, Zone: nodeZone(n), Targeted: Duration(u.targeted), State: a[mco.StateAnnotation]}
			if nu.State == mco.StateDegraded {
				nu.Reason = a[mco.ReasonAnnotation]
			}
			took := r.simSince(time.Now()) - u.targeted
			if u.done {
				nu.Updated = ptr.To(Duration(u.updated))
				took = u.updated - u.targeted
			}
			if took > longest {
				longest, ro.Longest = took, fmt.Sprintf("%s (%s)", n.Name, Duration(took))
			}
			ro.Order = append(ro.Order, nu)
		}
		if len(ro.Order) == 0 {
			continue
		}
		sort.SliceStable(ro.Order, func(i, j int) bool {
			if ro.Order[i].Targeted != ro.Order[j].Targeted {
				return ro.Order[i].Targeted < ro.Order[j].Targeted
			}
			return ro.Order[i].Node < ro.Order[j].Node
		})
		ro.Started = ro.Order[0].Targeted
		if ro.Updated == ro.Nodes {
			var last Duration
			for _, u := range ro.Order {
				if u.Updated != nil && *u.Updated > last {
					last = *u.Updated
				}
			}
			ro.Finished = &last
		}
		out = append(out, ro)
	}
	return out, nil
}

// lifecycleTainted says whether a node has the node lifecycle
// controller's NoExecute taint.
func lifecycleTainted(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) {
			return true
		}
	}
	return false
}

// taintPace is a caveat for each zone whose nodes all went NotReady and
// whose taints came slower, in real time, than the node lifecycle
// controller's rate at the speed asks: on a busy machine the controller,
// which taints one node per 100 ms with two requests each, falls behind,
// and every time after its first taints is later than the cluster's.
func taintPace(tainted map[string]time.Time, zoneOf map[string]string, notReady map[string]bool, rate, speed float64) []string {
	byZone := map[string][]time.Time{}
	zoneSize := map[string]int{}
	zoneDown := map[string]int{}
	for node, zone := range zoneOf {
		zoneSize[zone]++
		if notReady[node] {
			zoneDown[zone]++
		}
	}
	for node, at := range tainted {
		byZone[zoneOf[node]] = append(byZone[zoneOf[node]], at)
	}
	var out []string
	for _, zone := range slices.Sorted(maps.Keys(byZone)) {
		times := byZone[zone]
		// A zone not fully disrupted is tainted at the secondary rate, or
		// not at all: its pace says nothing.
		if len(times) < 3 || zoneDown[zone] < zoneSize[zone] {
			continue
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		span := times[len(times)-1].Sub(times[0]).Seconds()
		if span <= 0 {
			continue
		}
		got, want := float64(len(times)-1)/span, rate*speed
		if got < want/2 {
			out = append(out, fmt.Sprintf("the node lifecycle controller tainted zone %s's nodes at %.1f a real second, where %gx asks %.1f (%g a second simulated): this machine could not keep the pace, and every taint and eviction after the first comes later than the cluster's; a lower --speed keeps it",
				zone, got, speed, want, rate))
		}
	}
	return out
}
