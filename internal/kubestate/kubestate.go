// Package kubestate exports the Kubernetes object facts OpenShift's
// alerts and update risks read, under kube-state-metrics' names, labels
// and types: kube_node_info, kube_node_status_condition,
// kube_node_spec_unschedulable, kube_node_spec_taint and
// kube_pod_status_phase. It reads informers' caches, so a scrape costs
// no request to the API server.
package kubestate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

var (
	nodeInfo = prometheus.NewDesc("kube_node_info", "Information about a cluster node.",
		[]string{"node", "kernel_version", "os_image", "container_runtime_version", "kubelet_version", "kubeproxy_version", "provider_id", "pod_cidr", "system_uuid", "internal_ip"}, nil)
	nodeCondition = prometheus.NewDesc("kube_node_status_condition", "The condition of a cluster node.",
		[]string{"node", "condition", "status"}, nil)
	nodeUnschedulable = prometheus.NewDesc("kube_node_spec_unschedulable", "Whether a node can schedule new pods.",
		[]string{"node"}, nil)
	nodeTaint = prometheus.NewDesc("kube_node_spec_taint", "The taint of a cluster node.",
		[]string{"node", "key", "value", "effect"}, nil)
)

// kube_pod_status_phase, as kube-state-metrics names and describes it.
const (
	podPhaseName = "kube_pod_status_phase"
	podPhaseHelp = "The pods current phase."
)

// podPhases are the phases kube-state-metrics reports a series for,
// each 1 for the pod's phase and 0 for the others.
var podPhases = [...]corev1.PodPhase{corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown, corev1.PodRunning}

// Collector gathers the facts: nodes' from their cache at each gather,
// pods' from series kept up to date as the pods change. As upstream's
// kube-state-metrics renders an object's series when the object changes
// rather than at each scrape, so a scrape of 150,000 pods makes none of
// their 750,000 series again: it only puts them in order.
type Collector struct {
	nodes   corelisters.NodeLister
	factory informers.SharedInformerFactory
	synced  []cache.InformerSynced

	mu   sync.RWMutex
	pods map[types.UID]*podSeries
}

// podSeries are one pod's kube_pod_status_phase series. They are made
// anew when its phase changes, never changed: a gather shares them.
type podSeries struct {
	namespace, name string
	uid             types.UID
	phase           corev1.PodPhase
	// byPhase are its series in the order of podPhasesByName.
	byPhase [len(podPhases)]*dto.Metric
}

// New makes a collector; Start runs its informers.
func New(client kubernetes.Interface) *Collector {
	return NewShared(informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(keepWhatIsCollected)))
}

// NewShared builds a collector on a factory of node and pod informers
// shared with other components of the process, so that each watch event
// is decoded once (upstream's kube-state-metrics watches on its own; the
// series are the same). Start starts the informers it asks for; shutting
// the factory down is its owner's.
func NewShared(f informers.SharedInformerFactory) *Collector {
	c := &Collector{nodes: f.Core().V1().Nodes().Lister(), factory: f, pods: map[types.UID]*podSeries{}}
	pods := f.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.setPod(obj) },
		UpdateFunc: func(_, obj any) { c.setPod(obj) },
		DeleteFunc: c.deletePod,
	})
	c.synced = []cache.InformerSynced{f.Core().V1().Nodes().Informer().HasSynced, pods.HasSynced}
	return c
}

// keepWhatIsCollected keeps of an object what the collector reads: of a
// pod its name, namespace, UID and phase (a cluster of 150,000 pods holds
// 150,000 of them); of a node all but its managedFields and images.
func keepWhatIsCollected(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &podPhaseOnly{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID, ResourceVersion: o.ResourceVersion},
			Phase: o.Status.Phase}, nil
	case *corev1.Node:
		o.ManagedFields, o.Status.Images = nil, nil
		return o, nil
	}
	return obj, nil
}

// podPhaseOnly is what the pod cache keeps of a pod: a fifth of the
// memory of even an empty corev1.Pod.
type podPhaseOnly struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Phase corev1.PodPhase
}

// DeepCopyObject implements runtime.Object.
func (p *podPhaseOnly) DeepCopyObject() runtime.Object {
	c := &podPhaseOnly{TypeMeta: p.TypeMeta, Phase: p.Phase}
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// phaseOf reads a pod's identity and phase from what the cache holds of
// it (or from a whole pod).
func phaseOf(obj any) (*metav1.ObjectMeta, corev1.PodPhase, bool) {
	switch p := obj.(type) {
	case *podPhaseOnly:
		return &p.ObjectMeta, p.Phase, true
	case *corev1.Pod:
		return &p.ObjectMeta, p.Status.Phase, true
	}
	return nil, "", false
}

// Start runs the informers until ctx ends and waits for their caches.
func (c *Collector) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("kube-state metrics: the node and pod caches did not sync: %w", ctx.Err())
	}
	return nil
}

// setPod makes a pod's series when it is new or its phase changed.
func (c *Collector) setPod(obj any) {
	m, phase, ok := phaseOf(obj)
	if !ok {
		return
	}
	c.mu.RLock()
	old := c.pods[m.UID]
	c.mu.RUnlock()
	if old != nil && old.phase == phase && old.name == m.Name && old.namespace == m.Namespace {
		return
	}
	ps := newPodSeries(m, phase)
	c.mu.Lock()
	c.pods[m.UID] = ps
	c.mu.Unlock()
}

func (c *Collector) deletePod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, _, ok := phaseOf(obj); ok {
		c.mu.Lock()
		delete(c.pods, m.UID)
		c.mu.Unlock()
	}
}

func newPodSeries(m *metav1.ObjectMeta, phase corev1.PodPhase) *podSeries {
	ps := &podSeries{namespace: m.Namespace, name: m.Name, uid: m.UID, phase: phase}
	// The labels in name order, as a registry writes them. What every
	// pod's series have alike (a phase label, a value) is shared.
	ns, name, uid := labelPair("namespace", m.Namespace), labelPair("pod", m.Name), labelPair("uid", string(m.UID))
	for i, p := range podPhasesByName {
		value := gaugeZero
		if p == phase {
			value = gaugeOne
		}
		ps.byPhase[i] = &dto.Metric{Label: []*dto.LabelPair{ns, phaseLabels[i], name, uid}, Gauge: value}
	}
	return ps
}

var (
	// phaseLabels are the phase labels of podPhasesByName.
	phaseLabels = func() []*dto.LabelPair {
		var l []*dto.LabelPair
		for _, phase := range podPhasesByName {
			l = append(l, labelPair("phase", string(phase)))
		}
		return l
	}()
	gaugeZero, gaugeOne = &dto.Gauge{Value: proto.Float64(0)}, &dto.Gauge{Value: proto.Float64(1)}
)

func labelPair(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: proto.String(name), Value: proto.String(value)}
}

// Gather implements prometheus.Gatherer: the nodes' families, then the
// pods', each family's series in the order a registry sorts them in (by
// their label values, the labels in name order).
func (c *Collector) Gather() ([]*dto.MetricFamily, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(nodeCollector{c.nodes}); err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	c.mu.RLock()
	pods := make([]*podSeries, 0, len(c.pods))
	for _, ps := range c.pods {
		pods = append(pods, ps)
	}
	c.mu.RUnlock()
	if len(pods) == 0 {
		return mfs, nil
	}
	slices.SortFunc(pods, func(a, b *podSeries) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name), strings.Compare(string(a.uid), string(b.uid)))
	})
	family := &dto.MetricFamily{Name: proto.String(podPhaseName), Help: proto.String(podPhaseHelp), Type: dto.MetricType_GAUGE.Enum(),
		Metric: make([]*dto.Metric, 0, len(pods)*len(podPhases))}
	for start := 0; start < len(pods); {
		end := start + 1
		for end < len(pods) && pods[end].namespace == pods[start].namespace {
			end++
		}
		for i := range podPhasesByName {
			for _, ps := range pods[start:end] {
				family.Metric = append(family.Metric, ps.byPhase[i])
			}
		}
		start = end
	}
	// kube_pod_* sorts after every kube_node_* family.
	return append(mfs, family), nil
}

// podPhasesByName are podPhases in the order of their names.
var podPhasesByName = func() []corev1.PodPhase {
	s := slices.Clone(podPhases[:])
	slices.Sort(s)
	return s
}()

// nodeCollector collects the nodes' facts from their cache.
type nodeCollector struct{ nodes corelisters.NodeLister }

func (nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeInfo, nodeCondition, nodeUnschedulable, nodeTaint} {
		ch <- d
	}
}

func (n nodeCollector) Collect(ch chan<- prometheus.Metric) {
	nodes, _ := n.nodes.List(labels.Everything())
	for _, node := range nodes {
		collectNode(ch, node)
	}
}

func collectNode(ch chan<- prometheus.Metric, n *corev1.Node) {
	info := n.Status.NodeInfo
	internalIP := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internalIP = a.Address
			break
		}
	}
	ch <- prometheus.MustNewConstMetric(nodeInfo, prometheus.GaugeValue, 1, n.Name, info.KernelVersion, info.OSImage,
		info.ContainerRuntimeVersion, info.KubeletVersion, info.KubeProxyVersion, n.Spec.ProviderID, n.Spec.PodCIDR, info.SystemUUID, internalIP)
	// Each condition is three series, true, false and unknown, one of
	// them 1.
	for _, cond := range n.Status.Conditions {
		for _, s := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown} {
			ch <- prometheus.MustNewConstMetric(nodeCondition, prometheus.GaugeValue, boolValue(cond.Status == s),
				n.Name, string(cond.Type), strings.ToLower(string(s)))
		}
	}
	ch <- prometheus.MustNewConstMetric(nodeUnschedulable, prometheus.GaugeValue, boolValue(n.Spec.Unschedulable), n.Name)
	for _, t := range n.Spec.Taints {
		ch <- prometheus.MustNewConstMetric(nodeTaint, prometheus.GaugeValue, 1, n.Name, t.Key, t.Value, string(t.Effect))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
