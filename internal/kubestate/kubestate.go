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

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
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
	podPhase = prometheus.NewDesc("kube_pod_status_phase", "The pods current phase.",
		[]string{"namespace", "pod", "uid", "phase"}, nil)
)

// podPhases are the phases kube-state-metrics reports a series for,
// each 1 for the pod's phase and 0 for the others.
var podPhases = []corev1.PodPhase{corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown, corev1.PodRunning}

// Collector is a prometheus.Collector over nodes and pods.
type Collector struct {
	nodes   corelisters.NodeLister
	pods    corelisters.PodLister
	factory informers.SharedInformerFactory
}

// New makes a collector; Start runs its informers.
func New(client kubernetes.Interface) *Collector {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(keepWhatIsCollected))
	return &Collector{nodes: f.Core().V1().Nodes().Lister(), pods: f.Core().V1().Pods().Lister(), factory: f}
}

// keepWhatIsCollected keeps of an object what Collect reads: of a pod its
// name, namespace, UID and phase, for a cluster of 150,000 pods holds
// 150,000 of them; of a node all but its managedFields and images.
func keepWhatIsCollected(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID, ResourceVersion: o.ResourceVersion},
			Status: corev1.PodStatus{Phase: o.Status.Phase}}, nil
	case *corev1.Node:
		o.ManagedFields, o.Status.Images = nil, nil
		return o, nil
	}
	return obj, nil
}

// Start runs the informers until ctx ends and waits for their caches.
func (c *Collector) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("kube-state metrics: the %v cache did not sync", typ)
		}
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeInfo, nodeCondition, nodeUnschedulable, nodeTaint, podPhase} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	nodes, _ := c.nodes.List(labels.Everything())
	for _, n := range nodes {
		collectNode(ch, n)
	}
	pods, _ := c.pods.List(labels.Everything())
	// The series go out in the order the registry sorts them in (by the
	// values of namespace, phase, pod and uid: the labels in name order),
	// so that its sort of 750,000 series at 150,000 pods is one pass.
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(string(a.UID), string(b.UID)))
	})
	for start := 0; start < len(pods); {
		end := start + 1
		for end < len(pods) && pods[end].Namespace == pods[start].Namespace {
			end++
		}
		for _, phase := range podPhasesByName {
			for _, p := range pods[start:end] {
				ch <- prometheus.MustNewConstMetric(podPhase, prometheus.GaugeValue, boolValue(p.Status.Phase == phase),
					p.Namespace, p.Name, string(p.UID), string(phase))
			}
		}
		start = end
	}
}

// podPhasesByName are podPhases in the order of their names.
var podPhasesByName = func() []corev1.PodPhase {
	s := slices.Clone(podPhases)
	slices.Sort(s)
	return s
}()

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
