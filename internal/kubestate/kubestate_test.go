package kubestate

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// What the collector keeps of an object (keepWhatIsCollected) gives the
// same series as the whole object, the pods' in the registry's order.
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
	collect := func(trim bool) []string {
		podIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		add := func(idx cache.Indexer, obj any) {
			if trim {
				var err error
				if obj, err = keepWhatIsCollected(obj); err != nil {
					t.Fatal(err)
				}
			}
			if err := idx.Add(obj); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range pods {
			add(podIdx, p.DeepCopy())
		}
		add(nodeIdx, node.DeepCopy())
		if trim {
			kept, _, _ := podIdx.GetByKey("ns/a")
			if p := kept.(*corev1.Pod); p.Spec.NodeName != "" || p.Labels != nil || p.ManagedFields != nil || len(p.Status.Conditions) > 0 {
				t.Errorf("the cache keeps more of a pod than its name, namespace, UID and phase: %+v", p)
			}
			kept, _, _ = nodeIdx.GetByKey("n1")
			if n := kept.(*corev1.Node); n.ManagedFields != nil || n.Status.Images != nil {
				t.Errorf("the cache keeps a node's managedFields or images: %+v", n)
			}
		}
		c := &Collector{nodes: corelisters.NewNodeLister(nodeIdx), pods: corelisters.NewPodLister(podIdx)}
		ch := make(chan prometheus.Metric, 100)
		c.Collect(ch)
		close(ch)
		var out []string
		var last []string
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, m.Desc().String()+" "+d.String())
			if m.Desc() != podPhase {
				continue
			}
			// The pods' series come in the order the registry sorts
			// them in: by their label values, the labels in name order.
			var values []string
			for _, l := range d.Label {
				values = append(values, l.GetValue())
			}
			if slices.Compare(values, last) < 0 {
				t.Errorf("series %v came after %v", values, last)
			}
			last = values
		}
		slices.Sort(out)
		return out
	}
	whole, trimmed := collect(false), collect(true)
	if len(whole) != 5*len(pods)+6 { // a node: its info, 3 Ready statuses, unschedulable, a taint
		t.Errorf("%d series from 3 pods and a node, want 21: %v", len(whole), whole)
	}
	if !slices.Equal(whole, trimmed) {
		t.Errorf("the trimmed cache gives other series:\nwhole:   %v\ntrimmed: %v", whole, trimmed)
	}
}

// BenchmarkGather30kPods gathers kube_pod_status_phase of 30,000 pods in
// 30 namespaces through a registry, as every scrape does.
func BenchmarkGather30kPods(b *testing.B) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range 30000 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: fmt.Sprintf("ns-%02d", i%30),
			UID: types.UID(fmt.Sprintf("uid-%05d", i))}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if err := idx.Add(p); err != nil {
			b.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&Collector{nodes: corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
		pods: corelisters.NewPodLister(idx)})
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || len(mfs[0].Metric) != 150000 {
			b.Fatalf("gathered %d families, %v", len(mfs), err)
		}
	}
}
