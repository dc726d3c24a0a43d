package resourcemetrics

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/sim"
)

func indexer(objs ...any) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			panic(err)
		}
	}
	return idx
}

// trimmed is objs as the model's cache keeps them (keepWhatIsRead): the
// tests see what the model sees.
func trimmed(objs []any) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		var err error
		if out[i], err = keepWhatIsRead(o); err != nil {
			panic(err)
		}
	}
	return out
}

type world struct {
	pods  []any
	nodes []any
	rs    []any
	deps  []any
	sts   []any
}

func (w *world) model() (*model, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(10)
	return &model{
		listers: listers{
			pods:         corelisters.NewPodLister(indexer(trimmed(w.pods)...)),
			nodes:        corelisters.NewNodeLister(indexer(w.nodes...)),
			replicaSets:  appslisters.NewReplicaSetLister(indexer(w.rs...)),
			deployments:  appslisters.NewDeploymentLister(indexer(w.deps...)),
			statefulSets: appslisters.NewStatefulSetLister(indexer(w.sts...)),
		},
		clock: clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), window: 15 * time.Second,
		recorder: rec, reported: map[string]bool{},
	}, rec
}

func node(name string, stopped bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if stopped {
		n.Annotations = map[string]string{sim.StoppedAnnotation: "true"}
	}
	return n
}

func pod(name, nodeName string, phase corev1.PodPhase, owner metav1.Object, ownerKind string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec: corev1.PodSpec{NodeName: nodeName}, Status: corev1.PodStatus{Phase: phase}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true)}}
	}
	return p
}

func TestWorkloadLoadIsSharedByItsRunningPods(t *testing.T) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "dep",
		Annotations: map[string]string{sim.LoadAnnotation: "cpu=900m,memory=300Mi"}}}
	// Two revisions; the Deployment controller copied the annotation onto
	// both ReplicaSets (one with an older value), which is not read.
	rsOld := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", UID: "rs1",
		Annotations:     map[string]string{sim.LoadAnnotation: "cpu=90"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", UID: "dep", Controller: ptr.To(true)}}}}
	rsNew := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "ns", UID: "rs2",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", UID: "dep", Controller: ptr.To(true)}}}}
	own := pod("own", "n1", corev1.PodRunning, nil, "", "a", "b")
	own.Annotations = map[string]string{sim.LoadAnnotation: "cpu=1,memory=1Gi"}
	w := &world{
		nodes: []any{node("n1", false), node("n2", false), node("n3", true)},
		deps:  []any{dep},
		rs:    []any{rsOld, rsNew},
		pods: []any{
			pod("web-a", "n1", corev1.PodRunning, rsOld, "ReplicaSet", "c"),
			pod("web-b", "n2", corev1.PodRunning, rsNew, "ReplicaSet", "c"),
			pod("web-c", "n2", corev1.PodRunning, rsNew, "ReplicaSet", "c"),
			pod("web-pending", "", corev1.PodPending, rsNew, "ReplicaSet", "c"),
			// On a stopped kubelet: not measured, and takes no share.
			pod("web-stopped", "n3", corev1.PodRunning, rsNew, "ReplicaSet", "c"),
			own,
			pod("idle", "n2", corev1.PodRunning, nil, "", "c"),
		},
	}
	m, _ := w.model()
	s, err := m.scrape()
	if err != nil {
		t.Fatal(err)
	}
	cpu := func(name string) int64 {
		ps := s.pods[types.NamespacedName{Namespace: "ns", Name: name}]
		if ps == nil {
			return -1
		}
		var sum int64
		for _, c := range ps.containers {
			sum += c.usage.Cpu().MilliValue()
		}
		return sum
	}
	for name, want := range map[string]int64{"web-a": 300, "web-b": 300, "web-c": 300, "own": 1000, "idle": 0, "web-pending": -1, "web-stopped": -1} {
		if got := cpu(name); got != want {
			t.Errorf("pod %s uses %dm cpu, want %dm", name, got, want)
		}
	}
	if mem := s.pods[types.NamespacedName{Namespace: "ns", Name: "web-b"}].containers[0].usage.Memory(); mem.String() != "100Mi" {
		t.Errorf("web-b uses %s memory, want 100Mi", mem)
	}
	// A pod's usage is split among its containers.
	if c := s.pods[types.NamespacedName{Namespace: "ns", Name: "own"}].containers; len(c) != 2 || c[0].usage.Cpu().MilliValue() != 500 || c[1].name != "b" {
		t.Errorf("containers of own: %+v", c)
	}
	if got := ptr.To(s.nodes["n1"]).Cpu().MilliValue(); got != 1300 {
		t.Errorf("node n1 uses %dm, want 1300m (web-a 300m + own 1000m)", got)
	}
	if got := ptr.To(s.nodes["n2"]).Cpu().MilliValue(); got != 600 {
		t.Errorf("node n2 uses %dm, want 600m", got)
	}
	if _, ok := s.nodes["n3"]; ok {
		t.Error("a stopped node's kubelet reported usage")
	}
}

func TestInvalidLoadIsReportedOnceAndCountsAsNone(t *testing.T) {
	ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "ss",
		Annotations: map[string]string{sim.LoadAnnotation: "gpu=1"}}}
	w := &world{nodes: []any{node("n1", false)}, sts: []any{ss},
		pods: []any{pod("db-0", "n1", corev1.PodRunning, ss, "StatefulSet", "c")}}
	m, rec := w.model()
	for range 3 {
		s, err := m.scrape()
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.To(s.nodes["n1"]).Cpu().MilliValue(); got != 0 {
			t.Fatalf("an invalid load counted as %dm", got)
		}
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d events for one invalid value, want 1", len(rec.Events))
	}
	if e := <-rec.Events; !strings.Contains(e, ReasonInvalidLoad) || !strings.Contains(e, `unknown resource "gpu"`) {
		t.Errorf("event %q", e)
	}
}

func TestParseLoad(t *testing.T) {
	for in, want := range map[string]string{
		"cpu=250m":                "cpu=250m",
		"memory=1Gi":              "memory=1Gi",
		" cpu = 2 , memory=512Mi": "cpu=2 memory=512Mi",
	} {
		got, err := sim.ParseLoad(in)
		if err != nil {
			t.Errorf("ParseLoad(%q): %v", in, err)
			continue
		}
		var parts []string
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := got[r]; ok {
				parts = append(parts, string(r)+"="+q.String())
			}
		}
		if s := strings.Join(parts, " "); s != want {
			t.Errorf("ParseLoad(%q) = %s, want %s", in, s, want)
		}
	}
	for in, want := range map[string]string{
		"":                  "is empty",
		"cpu":               "is not resource=quantity",
		"gpu=1":             `unknown resource "gpu"`,
		"cpu=1,cpu=2":       "cpu given twice",
		"cpu=lots":          "cpu: quantities must match",
		"memory=-1Gi":       "memory must not be negative",
		"cpu=1,,memory=1Gi": "is not resource=quantity",
	} {
		if _, err := sim.ParseLoad(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLoad(%q) = %v, want an error saying %q", in, err, want)
		}
	}
}

func TestTheCacheKeepsWhatTheModelReads(t *testing.T) {
	whole := pod("web-1", "n1", corev1.PodRunning, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "rs"}}, "ReplicaSet", "app", "sidecar")
	whole.Labels = map[string]string{"app": "web"}
	whole.Annotations = map[string]string{sim.LoadAnnotation: "cpu=100m"}
	whole.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	whole.Spec.Containers[0].Image = "nginx"
	whole.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
	whole.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	whole.Status.PodIP = "10.0.0.1"
	got, err := keepWhatIsRead(whole.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := pod("web-1", "n1", corev1.PodRunning, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "rs"}}, "ReplicaSet", "app", "sidecar")
	want.Labels, want.Annotations = whole.Labels, whole.Annotations
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("kept %+v\nwant %+v", got, want)
	}
}
