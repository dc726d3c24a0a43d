// Package scheduler is capstan's Policy scheduler: it watches pods and
// nodes, decides with the algorithm library of a scheduler Policy, binds
// through the pods/binding subresource, and reports each decision in
// events and the PodScheduled condition.
package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// DefaultSchedulerName is the name pods get when they name none.
const DefaultSchedulerName = corev1.DefaultSchedulerName

// Event reasons, as upstream's scheduler names them.
const (
	ReasonScheduled        = "Scheduled"
	ReasonFailedScheduling = "FailedScheduling"
)

// Config configures a scheduler.
type Config struct {
	// Name is the scheduler name pods select with spec.schedulerName.
	Name string
	// Policy decides; nil means the default policy.
	Policy *policy.Policy
	// Seed makes tie-breaking reproducible.
	Seed uint64
	// BindWorkers bind in parallel with the next decisions.
	BindWorkers int
	// VolumeBindTimeout bounds the wait for a pod's claims to be bound
	// (by the persistent volume controller, or a provisioner) before the
	// pod is; upstream's default is 10 minutes.
	VolumeBindTimeout time.Duration
	// Clock is the real clock unless a test injects one.
	Clock Clock
	// DisablePreemption keeps the scheduler from evicting pods of lower
	// priority to make room, as kube-scheduler's disablePreemption did;
	// by default it preempts, as upstream's DefaultPreemption does.
	DisablePreemption bool
	// Informers, when set, is a factory shared with other components of
	// the same process, as kube-controller-manager's controllers share
	// one: the scheduler reads through it, starts what it asks of it,
	// and leaves shutting it down to its owner. Nothing it reads may be
	// changed. Unset, the scheduler has its own.
	Informers informers.SharedInformerFactory
}

// Scheduler is a running Policy scheduler.
type Scheduler struct {
	cfg       Config
	client    kubernetes.Interface
	algorithm *algorithm.Algorithm
	factory   informers.SharedInformerFactory
	listers   algorithm.Listers
	synced    []cache.InformerSynced
	cache     *nodeCache
	queue     *schedulingQueue
	recorder  record.EventRecorder
	events    record.EventBroadcaster
	binds     chan bindRequest
	// volumeBinds counts bindings waiting for their claims, which run
	// beside the bind workers so that a slow provisioner holds none.
	volumeBinds sync.WaitGroup
	// cachesSynced is closed once Run's informers have synced.
	cachesSynced chan struct{}
	metrics      *schedulerMetrics
	// offsets draws where each preemption's search starts, as upstream
	// draws it at random; guarded by the cache lock.
	offsets *rand.Rand
	// preempting are the pods whose victims are being deleted: they are
	// not tried again until that is done (upstream's PreEnqueue check).
	preemptingMu sync.Mutex
	preempting   map[types.UID]bool
	preemptions  sync.WaitGroup
}

type bindRequest struct {
	qp      *queuedPod
	pod     *corev1.Pod
	cycle   int64
	node    string
	volumes []algorithm.VolumeBinding
	// start is when the attempt began.
	start time.Time
}

// New builds a scheduler; Run starts it.
func New(client kubernetes.Interface, cfg Config) (*Scheduler, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultSchedulerName
	}
	if cfg.Policy == nil {
		cfg.Policy = policy.Default()
	}
	if cfg.BindWorkers <= 0 {
		cfg.BindWorkers = 16
	}
	if cfg.VolumeBindTimeout <= 0 {
		cfg.VolumeBindTimeout = 10 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	alg, err := algorithm.New(cfg.Policy, cfg.Seed)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:       cfg,
		client:    client,
		algorithm: alg,
		factory:   cfg.Informers,
		cache:     newNodeCache(alg.LabelKeys()),
		queue:     newSchedulingQueue(cfg.Clock),
		binds:     make(chan bindRequest, 1024),

		cachesSynced: make(chan struct{}),
		offsets:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5bd1e995)),
		preempting:   map[types.UID]bool{},
	}
	if s.factory == nil {
		s.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(crcache.TransformStripManagedFields()))
	}
	s.metrics = newSchedulerMetrics(cfg.Name, s.queue)
	s.events = record.NewBroadcaster()
	s.recorder = s.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: cfg.Name})
	s.setupInformers()
	return s, nil
}

// Synced is closed once the scheduler's caches have synced and it starts
// scheduling.
func (s *Scheduler) Synced() <-chan struct{} { return s.cachesSynced }

// Algorithm returns the decision logic the scheduler uses.
func (s *Scheduler) Algorithm() *algorithm.Algorithm { return s.algorithm }

func (s *Scheduler) setupInformers() {
	f := s.factory
	s.listers, s.synced = algorithm.ListersFrom(f)
	moveOnChange := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.queue.MoveAllToActive() },
		UpdateFunc: func(any, any) { s.queue.MoveAllToActive() },
		DeleteFunc: func(any) { s.queue.MoveAllToActive() },
	}
	_, _ = f.Core().V1().PersistentVolumes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.cache.volumeObserved(obj.(*corev1.PersistentVolume)) },
		UpdateFunc: func(_, obj any) { s.cache.volumeObserved(obj.(*corev1.PersistentVolume)) },
	})
	for _, inf := range []cache.SharedIndexInformer{
		f.Core().V1().Services().Informer(), f.Core().V1().PersistentVolumeClaims().Informer(),
		f.Core().V1().PersistentVolumes().Informer(), f.Storage().V1().StorageClasses().Informer(),
	} {
		_, _ = inf.AddEventHandler(moveOnChange)
	}
	nodes := f.Core().V1().Nodes().Informer()
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			s.cache.setNode(obj.(*corev1.Node))
			s.queue.MoveAllToActive()
		},
		UpdateFunc: func(old, obj any) {
			o, n := old.(*corev1.Node), obj.(*corev1.Node)
			s.cache.setNode(n)
			if nodeSchedulingChanged(o, n) {
				s.queue.MoveAllToActive()
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				s.cache.removeNode(n.Name)
			}
		},
	})
	pods := f.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.podChanged(nil, obj.(*corev1.Pod)) },
		UpdateFunc: func(old, obj any) { s.podChanged(old.(*corev1.Pod), obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.podDeleted(p)
			}
		},
	})
	s.synced = append(s.synced, nodes.HasSynced, pods.HasSynced)
}

// nodeSchedulingChanged reports a node change that may let a waiting pod
// fit: anything but heartbeats.
func nodeSchedulingChanged(o, n *corev1.Node) bool {
	if o.Spec.Unschedulable != n.Spec.Unschedulable || len(o.Spec.Taints) != len(n.Spec.Taints) ||
		len(o.Labels) != len(n.Labels) || len(o.Status.Allocatable) != len(n.Status.Allocatable) {
		return true
	}
	for k, v := range n.Labels {
		if o.Labels[k] != v {
			return true
		}
	}
	for i := range n.Spec.Taints {
		if !o.Spec.Taints[i].MatchTaint(&n.Spec.Taints[i]) || o.Spec.Taints[i].Value != n.Spec.Taints[i].Value {
			return true
		}
	}
	for k, v := range n.Status.Allocatable {
		if ov, ok := o.Status.Allocatable[k]; !ok || ov.Cmp(v) != 0 {
			return true
		}
	}
	for _, c := range n.Status.Conditions {
		for _, oc := range o.Status.Conditions {
			if oc.Type == c.Type && oc.Status != c.Status {
				return true
			}
		}
	}
	return false
}

// podSchedulingChanged reports a change of what the scheduler decides on:
// the spec, labels or annotations, not the status.
func podSchedulingChanged(old, pod *corev1.Pod) bool {
	return !equality.Semantic.DeepEqual(old.Spec, pod.Spec) ||
		!equality.Semantic.DeepEqual(old.Labels, pod.Labels) ||
		!equality.Semantic.DeepEqual(old.Annotations, pod.Annotations)
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func (s *Scheduler) podChanged(old, pod *corev1.Pod) {
	// A pending pod of this scheduler waits where it was nominated;
	// every other pod holds no nomination.
	nominated := ""
	if pod.Spec.NodeName == "" && pod.Spec.SchedulerName == s.cfg.Name && pod.DeletionTimestamp == nil && !terminal(pod) {
		nominated = pod.Status.NominatedNodeName
	}
	if nominated != "" || (old != nil && old.Status.NominatedNodeName != "") {
		s.cache.nominate(pod, nominated)
	}
	switch {
	case pod.Spec.NodeName != "":
		s.queue.Delete(pod)
		if terminal(pod) {
			if s.cache.forgetPod(pod) {
				s.queue.MoveAllToActive()
			}
			return
		}
		s.cache.accountPod(pod)
	case pod.Spec.SchedulerName == s.cfg.Name && pod.DeletionTimestamp == nil && !terminal(pod) && len(pod.Spec.SchedulingGates) == 0:
		if old != nil && old.ResourceVersion == pod.ResourceVersion {
			return
		}
		s.queue.Add(pod, old == nil || podSchedulingChanged(old, pod))
	case pod.Spec.SchedulerName == s.cfg.Name && pod.DeletionTimestamp == nil && !terminal(pod):
		// Held by scheduling gates (the apiserver reports it
		// SchedulingGated; it is queued when the last gate goes).
		s.queue.Gate(pod)
	default:
		// Another scheduler's, being deleted, or finished.
		s.queue.Delete(pod)
	}
}

// podDeleted forgets a deleted pod wherever it is: queued, in flight, or
// holding a place in the cache (observed bound or only assumed).
func (s *Scheduler) podDeleted(pod *corev1.Pod) {
	s.queue.Delete(pod)
	s.cache.nominate(pod, "")
	if s.cache.forgetPod(pod) {
		// Freed resources, ports or affinity may let a waiting pod in.
		s.queue.MoveAllToActive()
	}
}

// Run schedules until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("scheduler", s.cfg.Name)
	s.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	defer s.events.Shutdown()
	s.factory.Start(ctx.Done())
	if s.cfg.Informers == nil {
		defer s.factory.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return fmt.Errorf("scheduler %s: caches did not sync: %w", s.cfg.Name, ctx.Err())
	}
	close(s.cachesSynced)
	logger.Info("Scheduler started", "predicates", s.algorithm.Predicates())
	var wg sync.WaitGroup
	for i := 0; i < s.cfg.BindWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for req := range s.binds {
				s.bind(ctx, req)
			}
		}()
	}
	go func() {
		t := s.cfg.Clock.NewTicker(housekeepingPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				s.housekeeping(logger)
			}
		}
	}()
	go func() {
		<-ctx.Done()
		s.queue.Close()
	}()
	for {
		qp, pod, cycle, ok := s.queue.Pop()
		if !ok {
			break
		}
		if s.isPreempting(pod.UID) {
			// Its victims are still being deleted: it waits for that
			// (startPreemption moves it on when done).
			s.queue.Requeue(qp, cycle, true)
			continue
		}
		s.scheduleOne(ctx, qp, pod, cycle)
	}
	close(s.binds)
	wg.Wait()
	s.volumeBinds.Wait()
	s.preemptions.Wait()
	return nil
}

// housekeepingPeriod is how often parked pods are flushed and expired
// assumptions dropped (upstream cleans its assumed pods every second).
const housekeepingPeriod = time.Second

// housekeeping retries pods parked too long and gives back the place of
// assumed pods whose binding never showed up.
func (s *Scheduler) housekeeping(logger klog.Logger) {
	s.queue.FlushStale()
	if expired := s.cache.expireAssumed(s.cfg.Clock.Now()); len(expired) > 0 {
		for _, p := range expired {
			logger.Info("Assumed pod expired: its binding never showed up", "pod", klog.KObj(p), "node", p.Spec.NodeName)
		}
		s.queue.MoveAllToActive()
	}
}

// scheduleOne decides for one pod and, when a node fits, assumes it there
// and hands the binding to a bind worker.
func (s *Scheduler) scheduleOne(ctx context.Context, qp *queuedPod, pod *corev1.Pod, cycle int64) {
	start := s.cfg.Clock.Now()
	s.cache.mu.Lock()
	snap := s.cache.snapshotLocked(s.listers)
	d := s.algorithm.Schedule(ctx, pod, snap, algorithm.Options{})
	var pre *algorithm.Preemption
	switch {
	case d.Feasible():
		s.cache.assumeLocked(pod, d.Selected, d.VolumeBindings)
	case !s.cfg.DisablePreemption:
		pre = s.algorithm.Preempt(ctx, d, snap, s.offsets.IntN(max(len(snap.Nodes), 1)))
		if pre.Node != "" {
			s.cache.nominateLocked(pod, pre.Node)
		}
	}
	s.cache.mu.Unlock()
	if !d.Feasible() {
		s.metrics.attempt(resultUnschedulable, start, s.cfg.Clock.Now())
		msg, nomination := d.Summary(), keepNomination
		if pre != nil {
			s.metrics.preemptionAttempts.Inc()
			switch {
			case pre.Node != "":
				nomination = pre.Node
				s.startPreemption(ctx, pod, pre)
			case pre.ClearNomination:
				nomination = ""
			}
			if pre.Message != "" {
				msg += " " + pre.Message
			}
		}
		s.unschedulable(ctx, qp, pod, cycle, msg, nomination)
		return
	}
	req := bindRequest{qp: qp, pod: pod, cycle: cycle, node: d.Selected, volumes: d.VolumeBindings, start: start}
	if len(req.volumes) > 0 {
		s.volumeBinds.Add(1)
		go func() {
			defer s.volumeBinds.Done()
			s.bind(ctx, req)
		}()
		return
	}
	s.binds <- req
}

// bind posts the binding. A node that vanished since the decision, or a
// rejected binding, sends the pod back to the queue; a pod already bound
// (by anyone) is never bound again.
func (s *Scheduler) bind(ctx context.Context, req bindRequest) {
	pod := req.pod
	logger := klog.FromContext(ctx)
	if !s.cache.hasNode(req.node) {
		s.metrics.attempt(resultError, req.start, s.cfg.Clock.Now())
		s.cache.unassume(pod)
		s.queue.Requeue(req.qp, req.cycle, false)
		return
	}
	if len(req.volumes) > 0 {
		if err := s.bindVolumes(ctx, pod, req.volumes); err != nil {
			s.metrics.attempt(resultError, req.start, s.cfg.Clock.Now())
			s.cache.unassume(pod)
			if ctx.Err() != nil {
				return
			}
			if s.queue.Requeue(req.qp, req.cycle, false) {
				s.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedScheduling, "Binding volumes: %v", err)
			}
			return
		}
	}
	err := s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: req.node},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		s.metrics.attempt(resultScheduled, req.start, s.cfg.Clock.Now())
		s.metrics.tries.Observe(float64(req.qp.attempts + 1))
		s.cache.finishBinding(pod, s.cfg.Clock.Now())
		s.queue.Done(req.qp, pod)
		s.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonScheduled, "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, req.node)
	case apierrors.IsNotFound(err):
		// Deleted: nothing left to do for this pod object; the informer
		// brings whatever replaced it.
		s.cache.unassume(pod)
		s.queue.Done(req.qp, pod)
		logger.V(2).Info("Binding dropped", "pod", klog.KObj(pod), "err", err)
	default:
		// Any other failure goes back to the queue, a conflict included:
		// the apiserver answers 409 both for a pod already bound and for a
		// binding whose etcd write failed ("etcdserver: request timed
		// out"), and only the informer tells them apart. A bound pod
		// leaves the queue when its update arrives (in flight, it does
		// not come back at all).
		s.metrics.attempt(resultError, req.start, s.cfg.Clock.Now())
		s.cache.unassume(pod)
		if ctx.Err() != nil {
			return
		}
		if s.queue.Requeue(req.qp, req.cycle, false) {
			s.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedScheduling, "Binding rejected: %v", err)
		}
	}
}

// unschedulable parks the pod until the cluster changes and records why no
// node fits; a pod deleted or bound elsewhere meanwhile is just dropped.
func (s *Scheduler) unschedulable(ctx context.Context, qp *queuedPod, pod *corev1.Pod, cycle int64, msg, nomination string) {
	if !s.queue.Requeue(qp, cycle, true) {
		return
	}
	if err := s.setUnschedulableCondition(ctx, pod, msg, nomination); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(2).Info("Updating PodScheduled condition failed", "pod", klog.KObj(pod), "err", err)
	}
	s.recorder.Event(pod, corev1.EventTypeWarning, ReasonFailedScheduling, msg)
}

// keepNomination leaves a pod's status.nominatedNodeName as it is.
const keepNomination = "\x00keep"

// setUnschedulableCondition records why the pod fits nowhere and, in the
// same write as upstream, where it is nominated to (nomination: a node, ""
// to clear it, or keepNomination).
func (s *Scheduler) setUnschedulableCondition(ctx context.Context, pod *corev1.Pod, msg, nomination string) error {
	if nomination == keepNomination {
		nomination = pod.Status.NominatedNodeName
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && c.Message == msg &&
			pod.Status.NominatedNodeName == nomination {
			return nil
		}
	}
	updated := pod.DeepCopy()
	updated.Status.NominatedNodeName = nomination
	cond := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.NewTime(s.cfg.Clock.Now())}
	replaced := false
	for i := range updated.Status.Conditions {
		if updated.Status.Conditions[i].Type == corev1.PodScheduled {
			if updated.Status.Conditions[i].Status == corev1.ConditionFalse {
				cond.LastTransitionTime = updated.Status.Conditions[i].LastTransitionTime
			}
			updated.Status.Conditions[i] = cond
			replaced = true
		}
	}
	if !replaced {
		updated.Status.Conditions = append(updated.Status.Conditions, cond)
	}
	_, err := s.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	return err
}
