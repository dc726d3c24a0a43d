package kubestate

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// What the collector keeps of an object (keepWhatIsCollected) gives the
// same series as the whole object, and the same, in the same order, as a
// registry of the same facts made at the scrape (what kube-state-metrics
// exports: names, help, types, labels and values).
func TestTheTrimmedCacheCollectsTheSameSeries(t *testing.T) {
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "u2"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
		{ObjectMeta: metav1.ObjectMeta{Name: "z", Namespace: "default", UID: "u3"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo:   corev1.NodeSystemInfo{KernelVersion: "6.1", OSImage: "RHCOS", KubeletVersion: "v1.36.3"},
			Images:     []corev1.ContainerImage{{Names: []string{"i"}, SizeBytes: 1 << 20}},
		}}
	gather := func(trim bool) []string {
		nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		keep := func(obj any) any {
			if trim {
				var err error
				if obj, err = keepWhatIsCollected(obj); err != nil {
					t.Fatal(err)
				}
			}
			return obj
		}
		c := newTestCollector(nodeIdx)
		for _, p := range pods {
			c.setPod(keep(p.DeepCopy()))
		}
		if err := nodeIdx.Add(keep(node.DeepCopy())); err != nil {
			t.Fatal(err)
		}
		if trim {
			kept, _ := keepWhatIsCollected(pods[0].DeepCopy())
			want := &podPhaseOnly{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1"}, Phase: corev1.PodRunning}
			if !reflect.DeepEqual(kept, want) {
				t.Errorf("the cache keeps of a pod %+v, want its name, namespace, UID and phase only", kept)
			}
			if copied := kept.(runtime.Object).DeepCopyObject(); !reflect.DeepEqual(copied, want) {
				t.Errorf("a deep copy of what the cache keeps: %+v", copied)
			}
			kept, _, _ = nodeIdx.GetByKey("n1")
			if n := kept.(*corev1.Node); n.ManagedFields != nil || n.Status.Images != nil {
				t.Errorf("the cache keeps a node's managedFields or images: %+v", n)
			}
		}
		return series(t, c)
	}
	whole, trimmed := gather(false), gather(true)
	// Five families; a node's info, 3 Ready statuses, unschedulable and
	// a taint; five series a pod.
	if len(whole) != 5+6+5*len(pods) {
		t.Errorf("%d lines from 3 pods and a node, want 26: %v", len(whole), whole)
	}
	if !slices.Equal(whole, trimmed) {
		t.Errorf("the trimmed cache gives other series:\nwhole:   %v\ntrimmed: %v", whole, trimmed)
	}
	// The same facts as const metrics in a registry, which sorts them.
	reg := prometheus.NewRegistry()
	reg.MustRegister(nodeCollector{corelisters.NewNodeLister(indexerOf(t, node.DeepCopy()))}, refPods(pods))
	if want := series(t, reg); !slices.Equal(whole, want) {
		t.Errorf("the series differ from a registry's:\ngot:  %v\nwant: %v", whole, want)
	}
}

// A pod's series follow its phase, go with it, and are not made again
// while its phase stays.
func TestPodSeriesFollowThePod(t *testing.T) {
	c := newTestCollector(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1", ResourceVersion: "1"},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	phaseOf := func() string {
		t.Helper()
		var ones []string
		for _, s := range series(t, c) {
			if strings.HasPrefix(s, "kube_pod_status_phase") && strings.HasSuffix(s, " 1") {
				ones = append(ones, s)
			}
		}
		return strings.Join(ones, "; ")
	}
	c.setPod(p)
	if got, want := phaseOf(), `kube_pod_status_phase{namespace="ns",phase="Pending",pod="a",uid="u1"} 1`; got != want {
		t.Errorf("a Pending pod: %s, want %s", got, want)
	}
	first := c.pods["u1"]
	p = p.DeepCopy()
	p.ResourceVersion = "2"
	c.setPod(p)
	if c.pods["u1"] != first {
		t.Error("the series were made again though the phase stayed")
	}
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	c.setPod(p)
	if got, want := phaseOf(), `kube_pod_status_phase{namespace="ns",phase="Running",pod="a",uid="u1"} 1`; got != want {
		t.Errorf("once Running: %s, want %s", got, want)
	}
	if first.byPhase[slices.Index(podPhasesByName, corev1.PodPending)].Gauge.GetValue() != 1 {
		t.Error("the series a gather may still hold were changed")
	}
	c.deletePod(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: p})
	if got := series(t, c); len(got) != 0 {
		t.Errorf("a deleted pod still has series: %v", got)
	}
}

func newTestCollector(nodes cache.Indexer) *Collector {
	return &Collector{nodes: corelisters.NewNodeLister(nodes), pods: map[types.UID]*podSeries{}}
}

func indexerOf(t *testing.T, objs ...any) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

// series gathers g through prometheus.Gatherers, which refuses an
// inconsistent or duplicate series, and writes each series as a line, in
// the order gathered, with its family's help and type first.
func series(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := prometheus.Gatherers{g}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		out = append(out, "# "+mf.GetName()+" "+mf.GetType().String()+" "+mf.GetHelp())
		for _, m := range mf.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	return out
}

// refPods is kube_pod_status_phase made at each collection, as const
// metrics: what a registry exports for the pods.
type refPods []*corev1.Pod

var refPodPhase = prometheus.NewDesc(podPhaseName, podPhaseHelp, []string{"namespace", "pod", "uid", "phase"}, nil)

func (refPods) Describe(ch chan<- *prometheus.Desc) { ch <- refPodPhase }

func (r refPods) Collect(ch chan<- prometheus.Metric) {
	for _, p := range r {
		for _, phase := range podPhases {
			ch <- prometheus.MustNewConstMetric(refPodPhase, prometheus.GaugeValue, boolValue(p.Status.Phase == phase),
				p.Namespace, p.Name, string(p.UID), string(phase))
		}
	}
}

// BenchmarkGather30kPods gathers kube_pod_status_phase of 30,000 pods in
// 30 namespaces, as every scrape does.
func BenchmarkGather30kPods(b *testing.B) {
	c := newTestCollector(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	for i := range 30000 {
		c.setPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: fmt.Sprintf("ns-%02d", i%30),
			UID: types.UID(fmt.Sprintf("uid-%05d", i))}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	gs := prometheus.Gatherers{c}
	for b.Loop() {
		mfs, err := gs.Gather()
		if err != nil || len(mfs) != 1 || len(mfs[0].Metric) != 150000 {
			b.Fatalf("gathered %d families, %v", len(mfs), err)
		}
	}
}
