// Package autoscaler is capstan's cluster autoscaler: OpenShift's
// ClusterAutoscaler and MachineAutoscaler APIs, MachineSets as node groups,
// and scale-up and scale-down decided with the scheduler's own placement
// library under the cluster's Policy, so that what it simulates is what
// the scheduler will do. Every decision says why, in events, in the
// cluster-autoscaler-status ConfigMap and on the nodes.
package autoscaler

import (
	"context"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"math/rand/v2"
	"sync"
	"time"

	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	machineinformers "github.com/openshift/client-go/machine/informers/externalversions"
	machinelisters "github.com/openshift/client-go/machine/listers/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	autoscalingv1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1"
	"github.com/capstan-dev/capstan/internal/compat"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// Options configure the autoscaler.
type Options struct {
	// Namespace holds the MachineSets, the status ConfigMap and the
	// priority expander's ConfigMap (openshift-machine-api).
	Namespace string
	// ScanInterval is the time between loops when nothing happens.
	ScanInterval time.Duration
	// Policy is the scheduler Policy the simulations decide with: the
	// cluster's own. Nil is the default policy.
	Policy *policy.Policy
	// Seed makes the random expander reproducible.
	Seed uint64
	// Clock is the real clock unless a test injects one.
	Clock clock.WithTicker
	// Informers, when set, is a factory of core informers shared with
	// other components of the same process (as kube-controller-manager's
	// controllers share one): the autoscaler reads nodes, pods and
	// workloads through it and leaves shutting it down to its owner.
	// Nothing it reads may be changed. Unset, it has its own.
	Informers informers.SharedInformerFactory
	// MaxNodeStartupTime, when set, replaces upstream's 15 minutes a node
	// that is not ready is taken to be starting: a simulation running
	// faster than real time divides it by its speed.
	MaxNodeStartupTime time.Duration
	// UnreadyTime, when set, replaces upstream's 20 minutes an unready
	// node must be unneeded before it goes (--scale-down-unready-time).
	UnreadyTime time.Duration
	// Drain times the drains of nodes whose pods must move (upstream's
	// when zero).
	Drain DrainOptions
}

// DefaultOptions are upstream's: a loop every 10 seconds.
func DefaultOptions() Options {
	return Options{Namespace: machine.Namespace, ScanInterval: 10 * time.Second, Drain: DefaultDrainOptions()}
}

// ClusterAutoscalerResource is the ClusterAutoscaler's API resource.
var ClusterAutoscalerResource = schema.GroupVersionResource{Group: autoscalingv1.GroupName, Version: "v1", Resource: "clusterautoscalers"}

var (
	machineSetResource = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinesets"}
	machineResource    = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machines"}
)

// Autoscaler is a running cluster autoscaler.
type Autoscaler struct {
	// rememberedMu and remembered: the planted bug UpcomingInMemory's
	// memory of the scale-ups made.
	rememberedMu sync.Mutex
	remembered   map[string]int

	opts       Options
	client     kubernetes.Interface
	dynamic    dynamic.Interface
	alg        *algorithm.Algorithm
	factory    informers.SharedInformerFactory
	mfactory   machineinformers.SharedInformerFactory
	listers    algorithm.Listers
	nodes      corelisters.NodeLister
	pods       corelisters.PodLister
	sets       machinelisters.MachineSetLister
	machines   machinelisters.MachineLister
	pdbs       policylisters.PodDisruptionBudgetLister
	jobs       batchlisters.JobLister
	daemonSets appslisters.DaemonSetLister
	synced     []cache.InformerSynced
	events     record.EventBroadcaster
	recorder   record.EventRecorder
	trigger    chan struct{}
	rand       *rand.Rand

	backoff *backoff
	// written are the replicas this loop set, by MachineSet, until the
	// cache shows them.
	written  map[string]int32
	podNotes *notes
	cfgNotes *notes
	// cleanedUp is set once the first loop has undone the removals a
	// previous autoscaler left unfinished.
	cleanedUp bool
	// podInfos keeps each pod's scheduling facts between loops, so that a
	// loop computes them only for the pods that changed.
	podInfos *algorithm.PodInfos
	// drains are the nodes being drained for removal.
	drains drains
	// unhonoured reports the fields of the ClusterAutoscaler capstan does
	// not act on.
	unhonoured compat.Reporter
}

// New sets up an autoscaler on cfg; Run runs it.
func New(cfg *rest.Config, client kubernetes.Interface, opts Options) (*Autoscaler, error) {
	if opts.Namespace == "" {
		return nil, fmt.Errorf("autoscaler: no namespace")
	}
	if opts.ScanInterval <= 0 {
		return nil, fmt.Errorf("autoscaler: scan interval must be positive, got %s", opts.ScanInterval)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	for name, d := range map[string]time.Duration{"max node startup time": opts.MaxNodeStartupTime, "scale-down unready time": opts.UnreadyTime,
		"max pod eviction time": opts.Drain.MaxPodEvictionTime, "eviction retry time": opts.Drain.EvictionRetryTime, "pod eviction headroom": opts.Drain.PodEvictionHeadroom} {
		if d < 0 {
			return nil, fmt.Errorf("autoscaler: %s must not be negative, got %s", name, d)
		}
	}
	if opts.Drain == (DrainOptions{}) {
		opts.Drain = DefaultDrainOptions()
	}
	p := opts.Policy
	if p == nil {
		p = policy.Default()
	}
	alg, err := algorithm.New(p, opts.Seed)
	if err != nil {
		return nil, err
	}
	mc, err := machineclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	a := &Autoscaler{
		opts: opts, client: client, dynamic: dyn, alg: alg,
		factory:  opts.Informers,
		mfactory: machineinformers.NewSharedInformerFactoryWithOptions(mc, 0, machineinformers.WithNamespace(opts.Namespace), machineinformers.WithTransform(crcache.TransformStripManagedFields())),
		trigger:  make(chan struct{}, 1),
		rand:     rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		backoff:  newBackoff(opts.Clock),
		written:  map[string]int32{},
		drains:   drains{nodes: map[string]*drainState{}},
		podInfos: algorithm.NewPodInfos(),
		podNotes: newNotes(5*time.Minute, opts.Clock),
		cfgNotes: newNotes(5*time.Minute, opts.Clock),
	}
	if a.factory == nil {
		a.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(crcache.TransformStripManagedFields()))
	}
	a.listers, a.synced = algorithm.ListersFrom(a.factory)
	a.nodes = a.factory.Core().V1().Nodes().Lister()
	a.pods = a.factory.Core().V1().Pods().Lister()
	a.sets = a.mfactory.Machine().V1beta1().MachineSets().Lister()
	a.machines = a.mfactory.Machine().V1beta1().Machines().Lister()
	a.pdbs = a.factory.Policy().V1().PodDisruptionBudgets().Lister()
	a.jobs = a.factory.Batch().V1().Jobs().Lister()
	a.daemonSets = a.factory.Apps().V1().DaemonSets().Lister()
	podInformer := a.factory.Core().V1().Pods().Informer()
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok && Unschedulable(p) {
				a.poke()
			}
		},
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Pod)
			p, ok2 := obj.(*corev1.Pod)
			if ok1 && ok2 && !Unschedulable(o) && Unschedulable(p) {
				a.poke()
			}
		},
	})
	a.synced = append(a.synced, podInformer.HasSynced,
		a.factory.Core().V1().Nodes().Informer().HasSynced,
		a.mfactory.Machine().V1beta1().MachineSets().Informer().HasSynced,
		a.mfactory.Machine().V1beta1().Machines().Informer().HasSynced,
		a.factory.Policy().V1().PodDisruptionBudgets().Informer().HasSynced,
		a.factory.Batch().V1().Jobs().Informer().HasSynced,
		a.factory.Apps().V1().DaemonSets().Informer().HasSynced)
	a.events = record.NewBroadcaster()
	a.recorder = a.events.NewRecorder(Scheme(), corev1.EventSource{Component: "cluster-autoscaler"})
	return a, nil
}

// shutdownInformers waits for the informers to stop once ctx has ended:
// the machine informers, and the core ones unless they are shared.
func (a *Autoscaler) shutdownInformers() {
	if a.opts.Informers == nil {
		a.factory.Shutdown()
	}
	a.mfactory.Shutdown()
}

// poke starts a loop now: a pod just became unschedulable.
func (a *Autoscaler) poke() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Run runs loops until ctx ends.
func (a *Autoscaler) Run(ctx context.Context) error {
	a.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer a.events.Shutdown()
	a.factory.Start(ctx.Done())
	a.mfactory.Start(ctx.Done())
	defer a.shutdownInformers()
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return ctx.Err()
	}
	log := klog.FromContext(ctx)
	log.Info("Cluster autoscaler started", "namespace", a.opts.Namespace, "scanInterval", a.opts.ScanInterval)
	for {
		acted, err := a.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			log.Error(err, "Autoscaler loop failed")
		}
		if acted && err == nil {
			// Upstream loops again at once after acting: the next decision
			// starts from the new sizes, once the cache has them.
			a.waitForCache(ctx)
			continue
		}
		t := a.opts.Clock.NewTimer(a.opts.ScanInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-a.trigger:
			t.Stop()
		case <-t.C():
		}
	}
}

// RunOnce runs one loop: read the cluster, settle failed scale-ups, scale
// up for pending pods, scale down unneeded nodes, report. It reports
// whether it changed a node group's size.
func (a *Autoscaler) RunOnce(ctx context.Context) (acted bool, err error) {
	start := time.Now()
	mLastActivity.WithLabelValues("main").Set(float64(start.Unix()))
	defer func() {
		observe("main", start)
		if err != nil {
			mErrors.WithLabelValues("apiCallError").Inc()
		}
	}()
	ca, err := a.clusterAutoscaler(ctx)
	if err == nil {
		active.Store(ca != nil)
	}
	if err != nil || ca == nil {
		return false, err
	}
	a.unhonoured.Report(a.recorder, "ClusterAutoscaler", ca, ca.UID, ca.Generation)
	cfg, err := ConfigFrom(ca)
	if a.opts.MaxNodeStartupTime > 0 {
		cfg.MaxNodeStartupTime = a.opts.MaxNodeStartupTime
	}
	if a.opts.UnreadyTime > 0 {
		cfg.UnreadyTime = a.opts.UnreadyTime
	}
	if err != nil {
		if a.cfgNotes.changed("config", err.Error(), a.opts.Clock.Now()) {
			a.recorder.Eventf(ca, corev1.EventTypeWarning, ReasonInvalidConfiguration, "ClusterAutoscaler %s is not applied: %v", ca.Name, err)
		}
		return false, nil
	}
	st, err := a.readState(&cfg)
	if err != nil {
		return false, err
	}
	cm, status := a.statusConfigMap(ctx)
	a.reportBadGroups(st)
	if !a.cleanedUp {
		a.cleanUpStaleDeletions(ctx, st, 0)
		a.cleanedUp = true
	} else {
		a.cleanUpStaleDeletions(ctx, st, staleDeletionAge)
	}
	if a.finishDrains(ctx, st, status) {
		return true, nil
	}
	settled, err := a.settleProvisioning(ctx, st, status)
	if err != nil || settled {
		return settled, err
	}
	upStart := time.Now()
	plan, err := a.planScaleUp(ctx, st)
	if err != nil {
		return false, err
	}
	scaled := a.executeScaleUp(ctx, st, plan, status)
	observe("scaleUp", upStart)
	a.reportPods(plan)
	now := a.opts.Clock.Now()
	if scaled {
		mLastActivity.WithLabelValues("scaleUp").Set(float64(now.Unix()))
		a.stamp(ctx, lastScaleUpAnnotation, now)
		recordState(st, &cfg, plan, nil, "", now)
		a.writeStatus(ctx, st, plan, nil)
		return true, nil
	}
	var down *ScaleDownPlan
	cool := ""
	if cfg.ScaleDownEnabled {
		downStart := time.Now()
		cool = cooldown(&cfg, cm, a.opts.Clock, now)
		if down, err = a.planScaleDown(st, cm, plan); err != nil {
			return false, err
		}
		observe("findUnneeded", downStart)
		a.recordNodeVerdicts(ctx, st, down)
		scaled = a.executeScaleDown(ctx, st, down, status)
		observe("scaleDown", downStart)
		if scaled {
			mLastActivity.WithLabelValues("scaleDown").Set(float64(now.Unix()))
		}
	}
	recordState(st, &cfg, plan, down, cool, now)
	a.writeStatus(ctx, st, plan, down)
	return scaled, nil
}

// clusterAutoscaler returns the ClusterAutoscaler "default", or nil when
// there is none: without one the autoscaler does nothing, as on OpenShift.
func (a *Autoscaler) clusterAutoscaler(ctx context.Context) (*autoscalingv1.ClusterAutoscaler, error) {
	u, err := a.dynamic.Resource(ClusterAutoscalerResource).Get(ctx, autoscalingv1.DefaultName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ClusterAutoscaler %s: %w", autoscalingv1.DefaultName, err)
	}
	ca := &autoscalingv1.ClusterAutoscaler{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ca); err != nil {
		return nil, fmt.Errorf("decoding ClusterAutoscaler %s: %w", autoscalingv1.DefaultName, err)
	}
	return ca, nil
}

func (a *Autoscaler) readState(cfg *Config) (*clusterState, error) {
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sets, err := a.sets.MachineSets(a.opts.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	machines, err := a.machines.Machines(a.opts.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	a.podInfos.NextRound()
	st := newClusterState(cfg, nodes, pods, sets, machines, a.opts.Clock, a.opts.Clock.Now())
	st.podInfos = a.podInfos
	return st, nil
}

// reportBadGroups says on each MachineSet why its annotations are not
// used.
func (a *Autoscaler) reportBadGroups(st *clusterState) {
	now := a.opts.Clock.Now()
	for _, b := range st.bad {
		for _, ms := range st.sets {
			if groupID(ms) == b.ID && a.cfgNotes.changed(b.ID, b.Err.Error(), now) {
				a.recorder.Eventf(ms, corev1.EventTypeWarning, ReasonInvalidNodeGroup, "MachineSet %s is not autoscaled: %v", ms.Name, b.Err)
			}
		}
	}
}

// planScaleUp runs the scale-up decision on the loop's state.
func (a *Autoscaler) planScaleUp(ctx context.Context, st *clusterState) (*ScaleUpPlan, error) {
	exp, err := a.expander(ctx, st.cfg)
	if err != nil {
		return nil, err
	}
	now := a.opts.Clock.Now()
	daemonSets, err := a.daemonSets.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return PlanScaleUp(&ScaleUpInput{
		Config: st.cfg, Algorithm: a.alg, Snapshot: st.snapshot(a.alg, a.listers), Expendable: st.expendableOn(),
		Groups: st.groups, Usage: st.usage, Pending: youngPodsLeftOut(st.pending, st.cfg.NewPodScaleUpDelay, a.opts.Clock, now),
		BackedOff:  func(id string) (bool, string) { return a.backoff.backedOff(id, now) },
		Expander:   exp,
		DaemonSets: daemonSets,
		PodInfos:   st.podInfos,
		Remembered: a.rememberedUpcoming(st.groups),
	}), nil
}

// rememberedUpcoming is the planted window bug UpcomingInMemory's count
// of the nodes each group is still to bring, from the scale-ups this
// process made (nil when the bug is not planted): a restart forgets them.
func (a *Autoscaler) rememberedUpcoming(groups []*NodeGroup) map[string]int {
	if !planted.On(planted.UpcomingInMemory) {
		return nil
	}
	a.rememberedMu.Lock()
	defer a.rememberedMu.Unlock()
	if a.remembered == nil {
		a.remembered = map[string]int{}
	}
	out := map[string]int{}
	for _, g := range groups {
		out[g.ID] = max(0, a.remembered[g.ID]-len(g.Nodes))
	}
	return out
}

// rememberScaleUp is the planted bug's memory of a scale-up: the size it
// set the group to.
func (a *Autoscaler) rememberScaleUp(id string, size int) {
	if !planted.On(planted.UpcomingInMemory) {
		return
	}
	a.rememberedMu.Lock()
	defer a.rememberedMu.Unlock()
	if a.remembered == nil {
		a.remembered = map[string]int{}
	}
	a.remembered[id] = size
}

// youngPodsLeftOut drops pods created less than delay ago.
func youngPodsLeftOut(pods []*corev1.Pod, delay time.Duration, c clock.PassiveClock, now time.Time) []*corev1.Pod {
	if delay <= 0 {
		return pods
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if simclock.Elapsed(c, p.CreationTimestamp.Time, now) >= delay {
			out = append(out, p)
		}
	}
	return out
}

// expander builds the loop's expander, reading the priority expander's
// ConfigMap when the Priority expander is configured.
func (a *Autoscaler) expander(ctx context.Context, cfg *Config) (*Expander, error) {
	e := &Expander{Names: cfg.Expanders, Rand: a.rand}
	for _, n := range cfg.Expanders {
		if n != "priority" {
			continue
		}
		cm, err := a.client.CoreV1().ConfigMaps(a.opts.Namespace).Get(ctx, PriorityConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading ConfigMap %s: %w", PriorityConfigMap, err)
		}
		pr, err := ParsePriorities(cm.Data["priorities"])
		if err != nil {
			if a.cfgNotes.changed("priorities", err.Error(), a.opts.Clock.Now()) {
				a.recorder.Eventf(cm, corev1.EventTypeWarning, "PriorityConfigMapInvalid", "Wrong configuration for priority expander: %v. Ignoring update.", err)
			}
			break
		}
		e.Priorities = pr
	}
	return e, nil
}

// reportPods records each pending pod's verdict in an event, once per
// change of message and again every few minutes while it holds.
func (a *Autoscaler) reportPods(plan *ScaleUpPlan) {
	now := a.opts.Clock.Now()
	live := map[string]bool{}
	for uid, v := range plan.Verdicts {
		live[string(uid)] = true
		var reason string
		switch v.Verdict {
		case VerdictTriggered:
			reason = ReasonTriggeredScaleUp
		case VerdictNotTriggered, VerdictExpendable:
			reason = ReasonNotTriggerScaleUp
		default:
			continue
		}
		if a.podNotes.changed(string(uid), v.Message, now) {
			a.recorder.Event(v.Pod, corev1.EventTypeNormal, reason, v.Message)
		}
	}
	a.podNotes.keepOnly(live)
}
