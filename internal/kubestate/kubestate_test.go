package kubestate

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// What the collector keeps of an object (keepWhatIsCollected) gives the
// same series as the whole object.
func TestTheTrimmedCacheCollectsTheSameSeries(t *testing.T) {
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "u2"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
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
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, m.Desc().String()+" "+d.String())
		}
		slices.Sort(out)
		return out
	}
	whole, trimmed := collect(false), collect(true)
	if len(whole) != 5*len(pods)+6 { // a node: its info, 3 Ready statuses, unschedulable, a taint
		t.Errorf("%d series from 2 pods and a node, want 16: %v", len(whole), whole)
	}
	if !slices.Equal(whole, trimmed) {
		t.Errorf("the trimmed cache gives other series:\nwhole:   %v\ntrimmed: %v", whole, trimmed)
	}
}
