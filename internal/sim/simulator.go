package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

// Options tune the simulator.
type Options struct {
	// Workers is the size of each worker pool (nodes, leases, pods). A
	// real kubelet renews its lease and syncs its pods on its own, beside
	// every other kubelet: the pools stand in for thousands of them, so
	// they must not be what holds them back: each request waits on the
	// API server (0.2-0.3 s on a saturated 2-core machine), and 5,000
	// nodes renew 500 leases a second, and register 80 a second to be
	// Ready within a minute.
	NodeWorkers, LeaseWorkers, PodWorkers int
	// LeaseDuration is the kubelet's node lease duration; renewals happen
	// at a quarter of it, with jitter, as the kubelet does.
	LeaseDuration time.Duration
	// NodeStatusReportFrequency is how often an unchanged node status is
	// posted anyway (the kubelet's nodeStatusReportFrequency).
	NodeStatusReportFrequency time.Duration
	// Cloud is the cloud whose instances become nodes.
	Cloud *APICloud
	Clock clock.WithTicker
	// Prober runs the readiness probes the simulation can answer (nil:
	// every running container is ready).
	Prober Prober
	// Lost, when its grace is set, has the simulator declare the node of
	// a stopped kubelet lost itself, when the node lifecycle controller
	// would, so that the controller's own grace period can be longer
	// (see lost.go).
	Lost Lost
	// Informers, when set, is a factory of node and pod informers shared
	// with other components of the same process: the simulated kubelets
	// read through it and leave shutting it down to its owner. Nothing
	// they read may be changed. Unset, the simulator has its own.
	Informers informers.SharedInformerFactory
	// NodeClient, when set, is the client each kubelet writes its node's
	// status, its lease and its pods' status with, as its own node (see
	// NodeTransport). Unset, the kubelets write as the simulator. The
	// simulator still registers each node itself: OpenShift's kubelets
	// set their role labels (node-role.kubernetes.io/worker) when they
	// register, which OpenShift's NodeRestriction allows and upstream's,
	// which capstan runs, refuses.
	NodeClient kubernetes.Interface
}

func (o *Options) setDefaults() {
	if o.NodeWorkers <= 0 {
		o.NodeWorkers = 64
	}
	if o.LeaseWorkers <= 0 {
		o.LeaseWorkers = 128
	}
	if o.PodWorkers <= 0 {
		o.PodWorkers = 64
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 40 * time.Second
	}
	if o.NodeStatusReportFrequency <= 0 {
		o.NodeStatusReportFrequency = 5 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Simulator runs the simulated kubelets of every instance of its cloud.
type Simulator struct {
	client kubernetes.Interface
	opts   Options
	cloud  *APICloud

	simFactory informers.SharedInformerFactory
	factory    informers.SharedInformerFactory

	instances corelisters.ConfigMapLister
	nodes     corelisters.NodeLister
	podIndex  cache.Indexer
	pods      corelisters.PodLister
	synced    []cache.InformerSynced

	nodeQueue workqueue.TypedRateLimitingInterface[string]
	// leaseQueue renews the leases in the order they fall due.
	leaseQueue *dueQueue
	leases     *leases

	instMu sync.Mutex
	// parsed are the instances read from their ConfigMaps, each with the
	// resource version it was read from: a kubelet's every renewal asks
	// whether its instance runs.
	parsed   map[string]parsedInstance
	podQueue workqueue.TypedRateLimitingInterface[string]

	ipMu sync.Mutex
	ips  map[string]*ipAllocator // by node name

	termMu      sync.Mutex
	terminating map[types.UID]time.Time // pod deletions seen, by pod UID

	imageMu sync.Mutex
	images  map[string]map[string]bool // images pulled, by node name

	probeMu sync.Mutex
	probes  map[string]*probeState // pods whose readiness is probed, by key

	events *eventReporter

	lostQueue    workqueue.TypedRateLimitingInterface[string]
	lostRecorder record.EventRecorder
	lostMu       sync.Mutex
	stoppedAt    map[string]time.Time // stopped kubelets, by node name
}

const podsByNodeIndex = "spec.nodeName"

// lostWorkers declare lost nodes: as many as the node lifecycle
// controller's workers that mark pods not ready.
const lostWorkers = 8

// New builds a simulator; Run starts it.
func New(client kubernetes.Interface, opts Options) *Simulator {
	opts.setDefaults()
	if opts.Cloud == nil {
		opts.Cloud = NewAPICloud(client, CloudOptions{Clock: opts.Clock})
	}
	s := &Simulator{
		client: client,
		opts:   opts,
		cloud:  opts.Cloud,
		ips:    map[string]*ipAllocator{},

		terminating: map[types.UID]time.Time{},
		images:      map[string]map[string]bool{},
		probes:      map[string]*probeState{},
		events:      newEventReporter(),
		stoppedAt:   map[string]time.Time{},
		parsed:      map[string]parsedInstance{},
	}
	s.lostRecorder = s.newLostRecorder()
	s.simFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = InstanceLabel }))
	s.factory = opts.Informers
	if s.factory == nil {
		s.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(crcache.TransformStripManagedFields()))
	}

	cmInformer := s.simFactory.Core().V1().ConfigMaps()
	nodeInformer := s.factory.Core().V1().Nodes()
	podInformer := s.factory.Core().V1().Pods()
	_ = podInformer.Informer().AddIndexers(cache.Indexers{podsByNodeIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	// The simulator never reads managed fields: dropping them from its
	// caches saves memory and garbage collection on large clusters (the
	// node and pod informers drop them by their factory's transform). It
	// watches no leases: a kubelet keeps the lease its last write
	// returned.
	_ = cmInformer.Informer().SetTransform(crcache.TransformStripManagedFields())
	s.instances = cmInformer.Lister()
	s.nodes = nodeInformer.Lister()
	s.pods = podInformer.Lister()
	s.podIndex = podInformer.Informer().GetIndexer()
	s.synced = []cache.InformerSynced{cmInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced,
		podInformer.Informer().HasSynced}

	rl := func() workqueue.TypedRateLimiter[string] {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 10*time.Second)
	}
	s.nodeQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "sim-nodes", Clock: opts.Clock})
	s.leaseQueue, s.leases = newDueQueue(opts.Clock), newLeases(opts.LeaseDuration)
	s.podQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "sim-pods", Clock: opts.Clock})
	s.lostQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "sim-lost", Clock: opts.Clock})

	_, _ = cmInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.enqueueObject(s.nodeQueue, obj) },
		UpdateFunc: func(_, obj any) { s.enqueueObject(s.nodeQueue, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				s.instMu.Lock()
				delete(s.parsed, m.GetName())
				s.instMu.Unlock()
			}
			s.enqueueObject(s.nodeQueue, obj)
		},
	})
	_, _ = nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.nodeChanged(nil, obj) },
		UpdateFunc: func(old, obj any) { s.nodeChanged(old, obj) },
		DeleteFunc: func(obj any) { s.enqueueObject(s.nodeQueue, obj) },
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.podChanged(obj) },
		UpdateFunc: func(_, obj any) { s.podChanged(obj) },
		DeleteFunc: func(obj any) { s.podDeleted(obj) },
	})
	return s
}

// Cloud returns the cloud the simulator serves.
func (s *Simulator) Cloud() *APICloud { return s.cloud }

// Run starts the informers and workers and blocks until ctx ends.
func (s *Simulator) Run(ctx context.Context) error {
	defer s.nodeQueue.ShutDown()
	defer s.podQueue.ShutDown()
	defer s.lostQueue.ShutDown()
	if err := EnsureNamespace(ctx, s.client); err != nil {
		return err
	}
	s.events.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	defer s.events.broadcaster.Shutdown()
	s.simFactory.Start(ctx.Done())
	s.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return fmt.Errorf("simulator caches did not sync: %w", ctx.Err())
	}
	klog.FromContext(ctx).Info("Simulator started")
	if s.opts.Prober != nil {
		go s.runProbes(ctx)
	}
	var wg sync.WaitGroup
	run := func(n int, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for processNext(ctx, q, sync) {
				}
			}()
		}
	}
	run(s.opts.NodeWorkers, s.nodeQueue, s.syncNode)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.leaseQueue.Run(ctx)
	}()
	for range s.opts.LeaseWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case name := <-s.leaseQueue.Ready():
					s.syncLease(ctx, name)
					s.leaseQueue.Done(name)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	run(s.opts.PodWorkers, s.podQueue, s.syncPod)
	run(lostWorkers, s.lostQueue, s.syncLost)
	<-ctx.Done()
	s.nodeQueue.ShutDown()
	s.podQueue.ShutDown()
	s.lostQueue.ShutDown()
	wg.Wait()
	s.simFactory.Shutdown()
	if s.opts.Informers == nil {
		s.factory.Shutdown()
	}
	return nil
}

// WaitForSync blocks until the simulator's caches are synced.
func (s *Simulator) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.synced...)
}

func processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Simulator sync failed, retrying", "key", key, "err", err)
		}
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

func (s *Simulator) enqueueObject(q workqueue.TypedRateLimitingInterface[string], obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(metav1.Object); ok {
		q.Add(m.GetName())
	}
}

func (s *Simulator) nodeChanged(old, obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Annotations[NodeInstanceAnnotation] == "" {
		return
	}
	if old != nil {
		o := old.(*corev1.Node)
		if o.ResourceVersion == node.ResourceVersion {
			return
		}
		// Only a kubelet-relevant change is worth a sync: fault
		// annotations, or status someone else (the node lifecycle
		// controller) changed.
		if annotationsEqual(o, node) && conditionsSame(o.Status.Conditions, node.Status.Conditions) {
			return
		}
		if (Stopped(o) && !Stopped(node)) || (Rebooting(o) && !Rebooting(node)) {
			s.kubeletStarted(node.Name)
			// A kubelet renews its lease as it starts, then every
			// interval: a change to its node does not renew it.
			s.leaseQueue.Add(node.Name)
		}
	} else {
		// Pods may have been bound before this node reached the cache.
		s.kubeletStarted(node.Name)
		s.leaseQueue.Add(node.Name)
	}
	s.nodeQueue.Add(node.Name)
}

// kubeletStarted queues every pod of a node whose kubelet comes back.
func (s *Simulator) kubeletStarted(nodeName string) {
	objs, _ := s.podIndex.ByIndex(podsByNodeIndex, nodeName)
	for _, o := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			s.podQueue.Add(key)
		}
	}
}

func annotationsEqual(a, b *corev1.Node) bool {
	for k, v := range a.Annotations {
		if isSimAnnotation(k) && b.Annotations[k] != v {
			return false
		}
	}
	for k, v := range b.Annotations {
		if isSimAnnotation(k) && a.Annotations[k] != v {
			return false
		}
	}
	return true
}

func isSimAnnotation(k string) bool {
	return k == StoppedAnnotation || k == RebootingAnnotation || k == BootAnnotation || strings.HasPrefix(k, ConditionAnnotationPrefix)
}

// Stopped reports whether a node's simulated kubelet is stopped.
func Stopped(node *corev1.Node) bool {
	return node.Annotations[StoppedAnnotation] == "true"
}

// instance returns the running instance behind a node name, or nil when
// its kubelet is not running (pending, shutting down, or no instance).
func (s *Simulator) instance(name string) (*Instance, *corev1.ConfigMap) {
	cm, err := s.instances.ConfigMaps(Namespace).Get(name)
	if err != nil {
		return nil, nil
	}
	s.instMu.Lock()
	defer s.instMu.Unlock()
	if p, ok := s.parsed[name]; ok && p.uid == cm.UID && p.resourceVersion == cm.ResourceVersion {
		return p.inst, cm
	}
	inst, err := InstanceFromConfigMap(cm)
	if err != nil {
		delete(s.parsed, name)
		return nil, nil
	}
	s.parsed[name] = parsedInstance{uid: cm.UID, resourceVersion: cm.ResourceVersion, inst: inst}
	return inst, cm
}

// parsedInstance is an instance as read from a version of its ConfigMap;
// nothing changes it.
type parsedInstance struct {
	uid             types.UID
	resourceVersion string
	inst            *Instance
}

// kubeletRunning reports whether the simulated kubelet of nodeName acts:
// its instance runs and no fault stopped it.
func (s *Simulator) kubeletRunning(nodeName string) (*Instance, *corev1.Node, bool) {
	inst, _ := s.instance(nodeName)
	if inst == nil || inst.State(s.opts.Clock.Now()) != InstanceRunning {
		return nil, nil, false
	}
	node, err := s.nodes.Get(nodeName)
	if err != nil || node.Annotations[NodeInstanceAnnotation] != inst.Name() || Stopped(node) || Rebooting(node) {
		return inst, node, false
	}
	return inst, node, true
}

// Nodes lists the simulated nodes.
func (s *Simulator) Nodes() ([]*corev1.Node, error) {
	all, err := s.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, n := range all {
		if n.Annotations[NodeInstanceAnnotation] != "" {
			out = append(out, n)
		}
	}
	return out, nil
}
