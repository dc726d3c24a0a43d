package mco

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	mcfgscheme "github.com/openshift/client-go/machineconfiguration/clientset/versioned/scheme"
	mcfginformers "github.com/openshift/client-go/machineconfiguration/informers/externalversions"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	operatorclient "github.com/openshift/client-go/operator/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/capstan-dev/capstan/internal/compat"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/sim"
)

// Node annotations the MCO's controllers and daemon keep.
const (
	CurrentConfigAnnotation    = "machineconfiguration.openshift.io/currentConfig"
	DesiredConfigAnnotation    = "machineconfiguration.openshift.io/desiredConfig"
	StateAnnotation            = "machineconfiguration.openshift.io/state"
	ReasonAnnotation           = "machineconfiguration.openshift.io/reason"
	DesiredDrainAnnotation     = "machineconfiguration.openshift.io/desiredDrain"
	LastAppliedDrainAnnotation = "machineconfiguration.openshift.io/lastAppliedDrain"
	PostConfigActionAnnotation = "machineconfiguration.openshift.io/post-config-action"

	StateDone           = "Done"
	StateWorking        = "Working"
	StateDegraded       = "Degraded"
	StateUnreconcilable = "Unreconcilable"

	// RequiredForUpgradeLabel marks the pools the MCO's ClusterOperator
	// waits for in an update (master, not worker).
	RequiredForUpgradeLabel = "operator.machineconfiguration.openshift.io/required-for-upgrade"
	// ZoneLabel orders the nodes of a rollout.
	ZoneLabel = "topology.kubernetes.io/zone"
)

// The release's machine OS images reach the MCO as OpenShift's payload
// delivers them: the ConfigMap machine-config-osimageurl in the MCO's
// namespace (keys releaseVersion, baseOSContainerImage,
// baseOSExtensionsContainerImage and the older osImageURL).
const (
	Namespace           = "openshift-machine-config-operator"
	OSImageURLConfigMap = "machine-config-osimageurl"
)

// Options configure the controllers.
type Options struct {
	// FromRelease takes the machine OS image and the release version from
	// the release's machine-config-osimageurl ConfigMap, as the MCO does:
	// no pool renders until the release has delivered it, and a new
	// release's image renders new configurations, which roll the nodes.
	FromRelease bool
	// OSImageURL is the machine OS image rendered into every pool's
	// configuration (unless a MachineConfig overrides it) when the
	// configuration does not come from the release.
	OSImageURL string
	// ReleaseVersion is written on rendered configurations when it does
	// not come from the release.
	ReleaseVersion string
	// Daemon times the simulated machine-config-daemon.
	Daemon DaemonOptions
}

// Controller renders the pools' configurations, targets their nodes at
// most maxUnavailable at a time, runs the simulated daemon on each node,
// and reports the pools' status.
type Controller struct {
	kube kubernetes.Interface
	mcfg mcfgclient.Interface
	// operator reads the MachineConfiguration cluster (the node
	// disruption policy); nil: the MCO's default policies.
	operator operatorclient.Interface
	// reverted: the pools whose maxUnavailable a planted bug set back.
	reverted sync.Map
	opts     Options
	recorder record.EventRecorder

	pools      mcfglisters.MachineConfigPoolLister
	configs    mcfglisters.MachineConfigLister
	nodes      corelisters.NodeLister
	configMaps corelisters.ConfigMapLister
	queue      workqueue.TypedRateLimitingInterface[string]
	daemon     *daemon
	metrics    *daemonMetrics
	// synced is set once the listers above are filled.
	synced atomic.Bool
	// unhonoured reports the fields capstan does not act on.
	unhonoured compat.Reporter
	// targeted are the nodes the planted bug UnavailableInMemory
	// remembers targeting and not yet seeing done.
	targetedMu sync.Mutex
	targeted   map[string]bool
}

// New returns the MCO's controllers.
func New(kube kubernetes.Interface, mcfg mcfgclient.Interface, opts Options) *Controller {
	return &Controller{kube: kube, mcfg: mcfg, opts: opts, recorder: &record.FakeRecorder{}, metrics: newDaemonMetrics(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "machineconfigpools"})}
}

// SetOperatorClient lets the daemon read the cluster's node disruption
// policy (MachineConfiguration cluster), and record the merged policies
// in its status.
func (c *Controller) SetOperatorClient(op operatorclient.Interface) { c.operator = op }

// Run runs until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kube.CoreV1().Events("")})
	defer b.Shutdown()
	// The pools' events need their kind: a scheme that knows it.
	sch := runtime.NewScheme()
	if err := scheme.AddToScheme(sch); err != nil {
		return err
	}
	if err := mcfgscheme.AddToScheme(sch); err != nil {
		return err
	}
	c.recorder = b.NewRecorder(sch, corev1.EventSource{Component: "machineconfigcontroller"})
	mf := mcfginformers.NewSharedInformerFactoryWithOptions(c.mcfg, 10*time.Minute, mcfginformers.WithTransform(crcache.TransformStripManagedFields()))
	kf := informers.NewSharedInformerFactoryWithOptions(c.kube, 10*time.Minute, informers.WithTransform(crcache.TransformStripManagedFields()))
	cf := informers.NewSharedInformerFactoryWithOptions(c.kube, 10*time.Minute, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + OSImageURLConfigMap }))
	pools, configs, nodes := mf.Machineconfiguration().V1().MachineConfigPools(), mf.Machineconfiguration().V1().MachineConfigs(), kf.Core().V1().Nodes()
	cms := cf.Core().V1().ConfigMaps()
	c.pools, c.configs, c.nodes, c.configMaps = pools.Lister(), configs.Lister(), nodes.Lister(), cms.Lister()
	all := func(any) { c.enqueueAll() }
	handler := cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, n any) { all(n) }, DeleteFunc: all}
	for _, inf := range []cache.SharedIndexInformer{pools.Informer(), configs.Informer(), cms.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	c.metrics.mu.Lock()
	c.metrics.nodes = c.nodes
	c.metrics.mu.Unlock()
	c.daemon = newDaemon(ctx, c.kube, c.nodes, c.opts.Daemon, c.recorder, c.metrics)
	c.daemon.configs, c.daemon.operator = c.configs, c.operator
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNode(nil, obj) },
		UpdateFunc: func(old, n any) { c.onNode(old, n) },
		DeleteFunc: all,
	}); err != nil {
		return err
	}
	mf.Start(ctx.Done())
	kf.Start(ctx.Done())
	cf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pools.Informer().HasSynced, configs.Informer().HasSynced, nodes.Informer().HasSynced, cms.Informer().HasSynced) {
		return ctx.Err()
	}
	c.synced.Store(true)
	c.enqueueAll()
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		name, shutdown := c.queue.Get()
		if shutdown {
			c.daemon.wait()
			return nil
		}
		if err := c.syncPool(ctx, name); err != nil {
			klog.FromContext(ctx).V(2).Info("Syncing a MachineConfigPool", "pool", name, "err", err)
			c.queue.AddRateLimited(name)
		} else {
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

func (c *Controller) onNode(old, obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.daemon.observe(n)
	if o, ok := old.(*corev1.Node); ok && !poolsCare(o, n) {
		return
	}
	c.enqueueAll()
}

// poolsCare tells whether a node's change can change a pool's status (as
// upstream's node controller asks before it syncs a pool): its labels,
// the MCO's annotations, or whether it is ready. A pool's sync reads
// every node, so syncing them at each node status report costs a
// 5,000-node cluster 5,000 nodes read a second.
func poolsCare(old, n *corev1.Node) bool {
	if !maps.Equal(old.Labels, n.Labels) || nodeReady(old) != nodeReady(n) {
		return true
	}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, mcoAnnotationPrefix) && old.Annotations[k] != v {
			return true
		}
	}
	for k := range old.Annotations {
		if _, ok := n.Annotations[k]; !ok && strings.HasPrefix(k, mcoAnnotationPrefix) {
			return true
		}
	}
	return false
}

// mcoAnnotationPrefix begins every annotation the MCO sets on a node.
const mcoAnnotationPrefix = "machineconfiguration.openshift.io/"

func (c *Controller) enqueueAll() {
	pools, _ := c.pools.List(labels.Everything())
	for _, p := range pools {
		c.queue.Add(p.Name)
	}
}

// PrimaryPool is the pool a node belongs to, as the MCO decides it
// (GetPoolsForNode): of the pools whose nodeSelector selects it (an empty
// selector selects nothing), master before a custom pool before worker.
// A node that more than one custom pool selects belongs to none: which
// configuration it should run cannot be told, and it is refused with an
// error naming them. Nil, nil: no pool selects it.
func PrimaryPool(pools []*mcfgv1.MachineConfigPool, node *corev1.Node) (*mcfgv1.MachineConfigPool, error) {
	var master, worker *mcfgv1.MachineConfigPool
	var custom []*mcfgv1.MachineConfigPool
	for _, p := range pools {
		if p.Spec.NodeSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(node.Labels)) {
			continue
		}
		switch p.Name {
		case "master":
			master = p
		case "worker":
			worker = p
		default:
			custom = append(custom, p)
		}
	}
	switch {
	case len(custom) > 1:
		names := make([]string, len(custom))
		for i, p := range custom {
			names[i] = p.Name
		}
		sort.Strings(names)
		return nil, fmt.Errorf("node %s belongs to %d custom roles (%s), cannot proceed with this Node", node.Name, len(custom), strings.Join(names, ", "))
	case master != nil:
		// A control-plane node stays in the master pool, whatever else
		// selects it (compact and single-node clusters).
		return master, nil
	case len(custom) == 1:
		return custom[0], nil
	}
	return worker, nil
}

// poolNodes are the nodes whose primary pool is pool, and the refusals of
// nodes its selector matches that cannot be placed in one pool.
func (c *Controller) poolNodes(pool *mcfgv1.MachineConfigPool) ([]*corev1.Node, []string, error) {
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector)
	if err != nil || pool.Spec.NodeSelector == nil || sel.Empty() {
		return nil, nil, fmt.Errorf("pool %s: invalid or empty nodeSelector: %v", pool.Name, err)
	}
	nodes, err := c.nodes.List(sel)
	if err != nil {
		return nil, nil, err
	}
	pools, err := c.pools.List(labels.Everything())
	if err != nil {
		return nil, nil, err
	}
	var out []*corev1.Node
	var refused []string
	for _, n := range nodes {
		primary, err := PrimaryPool(pools, n)
		switch {
		case err != nil:
			refused = append(refused, err.Error())
		case primary != nil && primary.Name == pool.Name:
			out = append(out, n)
		}
	}
	sort.Strings(refused)
	return out, refused, nil
}

// syncPool renders the pool, targets its nodes and reports its status.
func (c *Controller) syncPool(ctx context.Context, name string) error {
	cached, err := c.pools.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	pool := cached.DeepCopy()
	reported := pool.DeepCopy()
	reported.APIVersion, reported.Kind = mcfgv1.SchemeGroupVersion.String(), "MachineConfigPool"
	c.unhonoured.Report(c.recorder, "MachineConfigPool", reported, pool.UID, pool.Generation)
	if planted.On(planted.RevertUserEdit) && pool.Spec.MaxUnavailable != nil {
		if _, loaded := c.reverted.LoadOrStore(name, true); !loaded {
			patch := []byte(`{"spec":{"maxUnavailable":null}}`)
			if _, err := c.mcfg.MachineconfigurationV1().MachineConfigPools().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
		}
	}
	nodes, refused, err := c.poolNodes(pool)
	if err != nil {
		return err
	}
	release, ok := c.release()
	if !ok {
		// Nothing to render, or to report, before the release has said
		// which machine OS its nodes run.
		return nil
	}
	renderErr, err := c.render(ctx, pool, release)
	if err != nil {
		// The API said no (a conflict with a newer pool, say): nothing
		// is targeted from a pool that may be stale; try again.
		return err
	}
	joined, err := c.bootJoining(ctx, pool, nodes)
	if err != nil {
		return err
	}
	target := pool.Spec.Configuration.Name
	if target != "" && !pool.Spec.Paused {
		if err := c.targetNodes(ctx, pool, joined, target); err != nil {
			return err
		}
	}
	return c.updateStatus(ctx, pool, nodes, renderErr, refused)
}

// bootJoining gives each node that joins the pool (it has no current
// configuration) the configuration the machine-config server would serve
// it at first boot, paused pool or not: the pool's target once one of its
// nodes runs it, else the configuration its nodes run. It returns the
// nodes that had one already.
func (c *Controller) bootJoining(ctx context.Context, pool *mcfgv1.MachineConfigPool, nodes []*corev1.Node) ([]*corev1.Node, error) {
	served := pool.Status.Configuration.Name
	if pool.Status.UpdatedMachineCount > 0 || served == "" {
		served = pool.Spec.Configuration.Name
	}
	var managed []*corev1.Node
	for _, n := range nodes {
		if n.Annotations[CurrentConfigAnnotation] != "" {
			managed = append(managed, n)
			continue
		}
		if served == "" {
			continue // nothing rendered yet
		}
		if err := c.annotate(ctx, n.Name, map[string]any{CurrentConfigAnnotation: served, DesiredConfigAnnotation: served, StateAnnotation: StateDone}); err != nil {
			return nil, err
		}
	}
	return managed, nil
}

// releaseImages are what a release gives every rendered configuration.
type releaseImages struct {
	Version, OSImage, ExtensionsImage string
}

// release reads the release's images: from its ConfigMap, or from the
// options when the configuration does not come from a release.
func (c *Controller) release() (releaseImages, bool) {
	if !c.opts.FromRelease {
		return releaseImages{Version: c.opts.ReleaseVersion, OSImage: c.opts.OSImageURL}, true
	}
	cm, err := c.configMaps.ConfigMaps(Namespace).Get(OSImageURLConfigMap)
	if err != nil {
		return releaseImages{}, false
	}
	r := releaseImages{Version: cm.Data["releaseVersion"], OSImage: cm.Data["baseOSContainerImage"], ExtensionsImage: cm.Data["baseOSExtensionsContainerImage"]}
	if r.OSImage == "" {
		r.OSImage = cm.Data["osImageURL"]
	}
	return r, r.OSImage != ""
}

// render merges the pool's MachineConfigs and points the pool at the
// result. A configuration that cannot be rendered keeps the last good one
// in force and is returned as invalid; err is the API's failure, after
// which the pool is left as it was.
func (c *Controller) render(ctx context.Context, pool *mcfgv1.MachineConfigPool, release releaseImages) (invalid, err error) {
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.MachineConfigSelector)
	if err != nil {
		return fmt.Errorf("invalid machineConfigSelector: %w", err), nil
	}
	all, err := c.configs.List(sel)
	if err != nil {
		return nil, err
	}
	var configs []*mcfgv1.MachineConfig
	for _, mc := range all {
		if !strings.HasPrefix(mc.Name, "rendered-") {
			configs = append(configs, mc)
		}
	}
	spec, err := Merge(pool.Name, configs, release.OSImage, release.ExtensionsImage)
	if err != nil {
		return err, nil
	}
	name, err := RenderedName(pool.Name, spec)
	if err != nil {
		return err, nil
	}
	existing, err := c.configs.Get(name)
	switch {
	case err == nil && existing.Annotations[ReleaseImageVersionAnnotation] != release.Version:
		// The same configuration serves a new release: it says so, and
		// no node reboots for it.
		mc := existing.DeepCopy()
		if mc.Annotations == nil {
			mc.Annotations = map[string]string{}
		}
		mc.Annotations[ReleaseImageVersionAnnotation] = release.Version
		if _, err := c.mcfg.MachineconfigurationV1().MachineConfigs().Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("updating %s: %w", name, err)
		}
	case apierrors.IsNotFound(err):
		rendered := &mcfgv1.MachineConfig{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{GeneratedByAnnotation: "capstan", ReleaseImageVersionAnnotation: release.Version},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "machineconfiguration.openshift.io/v1", Kind: "MachineConfigPool",
					Name: pool.Name, UID: pool.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: *spec,
		}
		if _, err := c.mcfg.MachineconfigurationV1().MachineConfigs().Create(ctx, rendered, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %s: %w", name, err)
		}
	}
	if pool.Spec.Configuration.Name == name {
		return nil, nil
	}
	sort.Slice(configs, func(i, j int) bool { return configs[i].Name < configs[j].Name })
	next := pool.DeepCopy()
	next.Spec.Configuration.Name = name
	next.Spec.Configuration.Source = nil
	for _, mc := range configs {
		next.Spec.Configuration.Source = append(next.Spec.Configuration.Source,
			corev1.ObjectReference{APIVersion: "machineconfiguration.openshift.io/v1", Kind: "MachineConfig", Name: mc.Name})
	}
	updated, err := c.mcfg.MachineconfigurationV1().MachineConfigPools().Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	*pool = *updated
	c.recorder.Eventf(pool, corev1.EventTypeNormal, "Updating", "Pool %s now targeting %s", pool.Name, name)
	return nil, nil
}

// nodeDone reports whether a node runs config and its daemon is done.
func nodeDone(n *corev1.Node, config string) bool {
	a := n.Annotations
	return a[CurrentConfigAnnotation] == config && a[DesiredConfigAnnotation] == config && a[StateAnnotation] == StateDone
}

// nodeReady is Ready, without pressure, and schedulable.
func nodeReady(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case corev1.NodeReady:
			if c.Status != corev1.ConditionTrue {
				return false
			}
		case corev1.NodeDiskPressure, corev1.NodeNetworkUnavailable:
			if c.Status == corev1.ConditionTrue {
				return false
			}
		}
	}
	return true
}

func nodeDegraded(n *corev1.Node) bool {
	s := n.Annotations[StateAnnotation]
	return s == StateDegraded || s == StateUnreconcilable
}

// selfDone: the node runs the configuration it was last given.
func selfDone(n *corev1.Node) bool {
	a := n.Annotations
	return a[CurrentConfigAnnotation] == a[DesiredConfigAnnotation] && a[StateAnnotation] == StateDone
}

// mcdFailing: the node's daemon gave up on the configuration it was
// told to run (Degraded or Unreconcilable); it may be told another.
func mcdFailing(n *corev1.Node) bool {
	a := n.Annotations
	return a[CurrentConfigAnnotation] != a[DesiredConfigAnnotation] && nodeDegraded(n)
}

// unavailable counts against maxUnavailable, as the MCO counts it
// (isNodeUnavailable): not ready, or updating; a node whose daemon failed
// is not updating any more.
func unavailable(n *corev1.Node) bool {
	return !nodeReady(n) || (!selfDone(n) && !mcdFailing(n))
}

// MaxUnavailable is a pool's maxUnavailable for its node count: an
// integer or a percentage rounded down, 1 at least.
func MaxUnavailable(pool *mcfgv1.MachineConfigPool, nodes int) int {
	v := intstr.FromInt32(1)
	if pool.Spec.MaxUnavailable != nil {
		v = *pool.Spec.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, nodes, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Candidates picks the nodes to target next, as the MCO's node
// controller does (getAllCandidateMachines): the nodes not yet told to
// run config, at most maxUnavailable less the unavailable ones and those
// failing on config itself, in zone order then oldest first. A node that
// failed on an earlier configuration is a candidate: a new configuration
// (the fix, typically) is how it recovers.
func Candidates(pool *mcfgv1.MachineConfigPool, nodes []*corev1.Node, config string) []*corev1.Node {
	capacity := MaxUnavailable(pool, len(nodes))
	if planted.On(planted.OneMoreUnavailable) {
		capacity++
	}
	for _, n := range nodes {
		if unavailable(n) {
			capacity--
		}
	}
	if capacity <= 0 {
		return nil
	}
	var candidates []*corev1.Node
	for _, n := range nodes {
		if n.Annotations[DesiredConfigAnnotation] != config {
			candidates = append(candidates, n)
		} else if mcdFailing(n) {
			// Failing on this very configuration: it may be transient,
			// and if it clears, it must not update beside others.
			capacity--
		}
	}
	if capacity <= 0 {
		return nil
	}
	SortForUpdate(candidates)
	if len(candidates) > capacity {
		candidates = candidates[:capacity]
	}
	return candidates
}

// SortForUpdate orders nodes by zone, then oldest first; nodes without a
// zone come last. A node's age is sim.NodeCreated's: a node restored in a
// simulation is as old as it was in its cluster.
func SortForUpdate(nodes []*corev1.Node) {
	sort.SliceStable(nodes, func(i, j int) bool {
		zi, zj := nodes[i].Labels[ZoneLabel], nodes[j].Labels[ZoneLabel]
		if (zi == "") != (zj == "") {
			return zi != ""
		}
		if zi != zj {
			return zi < zj
		}
		if ci, cj := sim.NodeCreated(nodes[i]), sim.NodeCreated(nodes[j]); !ci.Equal(cj) {
			return ci.Before(cj)
		}
		return nodes[i].Name < nodes[j].Name
	})
}

// targetNodes gives new nodes the pool's configuration (they boot with
// it) and points the next candidates at it.
func (c *Controller) targetNodes(ctx context.Context, pool *mcfgv1.MachineConfigPool, managed []*corev1.Node, target string) error {
	candidates := Candidates(pool, managed, target)
	if planted.On(planted.UnavailableInMemory) {
		candidates = c.candidatesRemembered(pool, managed, target)
	}
	for _, n := range candidates {
		failpoint.Hit(failpoint.MCOTargetDecided)
		if err := c.annotate(ctx, n.Name, map[string]any{DesiredConfigAnnotation: target}); err != nil {
			return err
		}
		c.recorder.Eventf(pool, corev1.EventTypeNormal, "SetDesiredConfig", "Targeted node %s to MachineConfig: %s", n.Name, target)
	}
	return nil
}

// candidatesRemembered is the planted window bug UnavailableInMemory:
// Candidates with the nodes out of service counted from the controller's
// memory of those it targeted, not from the nodes, so that a restart
// forgets the nodes mid-update and targets maxUnavailable more.
func (c *Controller) candidatesRemembered(pool *mcfgv1.MachineConfigPool, managed []*corev1.Node, target string) []*corev1.Node {
	c.targetedMu.Lock()
	defer c.targetedMu.Unlock()
	if c.targeted == nil {
		c.targeted = map[string]bool{}
	}
	capacity := MaxUnavailable(pool, len(managed))
	var candidates []*corev1.Node
	for _, n := range managed {
		switch {
		case c.targeted[n.Name] && selfDone(n) && n.Annotations[CurrentConfigAnnotation] == target:
			delete(c.targeted, n.Name)
		case c.targeted[n.Name]:
			capacity--
		}
		if n.Annotations[DesiredConfigAnnotation] != target {
			candidates = append(candidates, n)
		}
	}
	SortForUpdate(candidates)
	candidates = candidates[:min(len(candidates), max(0, capacity))]
	for _, n := range candidates {
		c.targeted[n.Name] = true
	}
	return candidates
}

// annotate merge-patches a node's annotations (nil removes one).
func (c *Controller) annotate(ctx context.Context, node string, ann map[string]any) error {
	return patchNodeAnnotations(ctx, c.kube, node, ann)
}

func patchNodeAnnotations(ctx context.Context, kube kubernetes.Interface, node string, ann map[string]any) error {
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, raw, metav1.PatchOptions{})
	return err
}

// updateStatus counts the pool's machines and sets its conditions as the
// MCO's status calculation does.
func (c *Controller) updateStatus(ctx context.Context, pool *mcfgv1.MachineConfigPool, nodes []*corev1.Node, renderErr error, refused []string) error {
	target := pool.Spec.Configuration.Name
	st := pool.Status.DeepCopy()
	st.ObservedGeneration = pool.Generation
	st.MachineCount = int32(len(nodes))
	var updated, ready, unavail, degraded int32
	var degradedMsgs, stalled []string
	for _, n := range nodes {
		done := nodeDone(n, target)
		if done {
			updated++
			if nodeReady(n) {
				ready++
			}
		}
		if nodeDegraded(n) {
			degraded++
			degradedMsgs = append(degradedMsgs, fmt.Sprintf("Node %s is reporting: %q", n.Name, n.Annotations[ReasonAnnotation]))
		}
		if unavailable(n) {
			unavail++
		}
		if r := n.Annotations[ReasonAnnotation]; r != "" && !nodeDegraded(n) {
			stalled = append(stalled, fmt.Sprintf("%s: %s", n.Name, r))
		}
	}
	sort.Strings(degradedMsgs)
	sort.Strings(stalled)
	st.UpdatedMachineCount, st.ReadyMachineCount, st.UnavailableMachineCount, st.DegradedMachineCount = updated, ready, unavail, degraded
	total := int32(len(nodes))
	allUpdated := target != "" && updated == total && ready == total && unavail == 0
	if allUpdated {
		st.Configuration = mcfgv1.MachineConfigPoolStatusConfiguration{ObjectReference: corev1.ObjectReference{Name: target}, Source: pool.Spec.Configuration.Source}
	}
	now := metav1.Now()
	set := func(t mcfgv1.MachineConfigPoolConditionType, s corev1.ConditionStatus, reason, msg string) {
		setPoolCondition(st, mcfgv1.MachineConfigPoolCondition{Type: t, Status: s, Reason: reason, Message: msg}, now)
	}
	switch {
	case allUpdated:
		set(mcfgv1.MachineConfigPoolUpdated, corev1.ConditionTrue, "", "All nodes are updated with MachineConfig "+target)
		set(mcfgv1.MachineConfigPoolUpdating, corev1.ConditionFalse, "", "")
	case pool.Spec.Paused:
		set(mcfgv1.MachineConfigPoolUpdated, corev1.ConditionFalse, "", "")
		set(mcfgv1.MachineConfigPoolUpdating, corev1.ConditionFalse, "", "Pool is paused; will not update to "+target)
	case degraded > 0:
		set(mcfgv1.MachineConfigPoolUpdated, corev1.ConditionFalse, "", "")
		set(mcfgv1.MachineConfigPoolUpdating, corev1.ConditionFalse, "", "Pool update paused due to degraded condition")
	default:
		msg := "All nodes are updating to MachineConfig " + target
		if len(stalled) > 0 {
			msg += "; " + strings.Join(stalled, "; ")
		}
		set(mcfgv1.MachineConfigPoolUpdated, corev1.ConditionFalse, "", "")
		set(mcfgv1.MachineConfigPoolUpdating, corev1.ConditionTrue, "", msg)
	}
	var degradedMsg string
	if degraded > 0 {
		degradedMsg = strings.Join(degradedMsgs, ", ")
		set(mcfgv1.MachineConfigPoolNodeDegraded, corev1.ConditionTrue, fmt.Sprintf("%d nodes are reporting degraded status on sync", degraded), degradedMsg)
	} else {
		set(mcfgv1.MachineConfigPoolNodeDegraded, corev1.ConditionFalse, "", "")
	}
	if renderErr != nil {
		msg := fmt.Sprintf("Failed to render configuration for pool %s: %v", pool.Name, renderErr)
		set(mcfgv1.MachineConfigPoolRenderDegraded, corev1.ConditionTrue, "", msg)
		if degradedMsg == "" {
			degradedMsg = msg
		}
	} else {
		set(mcfgv1.MachineConfigPoolRenderDegraded, corev1.ConditionFalse, "", "")
	}
	if len(refused) > 0 {
		// Nodes its selector matches that it cannot take.
		degradedMsg = strings.Join(append([]string{degradedMsg}, refused...), ", ")
		degradedMsg = strings.TrimPrefix(degradedMsg, ", ")
	}
	if degradedMsg != "" {
		set(mcfgv1.MachineConfigPoolDegraded, corev1.ConditionTrue, "", degradedMsg)
	} else {
		set(mcfgv1.MachineConfigPoolDegraded, corev1.ConditionFalse, "", "")
	}
	wasUpdated := conditionTrue(pool.Status.Conditions, mcfgv1.MachineConfigPoolUpdated)
	if equality.Semantic.DeepEqual(&pool.Status, st) {
		return nil
	}
	pool.Status = *st
	if _, err := c.mcfg.MachineconfigurationV1().MachineConfigPools().UpdateStatus(ctx, pool, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if allUpdated && !wasUpdated {
		c.recorder.Eventf(pool, corev1.EventTypeNormal, "Completed", "Pool %s has completed update to %s", pool.Name, target)
	}
	return nil
}

func conditionTrue(conds []mcfgv1.MachineConfigPoolCondition, t mcfgv1.MachineConfigPoolConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func setPoolCondition(st *mcfgv1.MachineConfigPoolStatus, c mcfgv1.MachineConfigPoolCondition, now metav1.Time) {
	for i := range st.Conditions {
		cur := &st.Conditions[i]
		if cur.Type != c.Type {
			continue
		}
		if cur.Status == c.Status {
			c.LastTransitionTime = cur.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		*cur = c
		return
	}
	c.LastTransitionTime = now
	st.Conditions = append(st.Conditions, c)
}
