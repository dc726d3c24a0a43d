package mco

import (
	"context"
	"strings"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgfake "github.com/openshift/client-go/machineconfiguration/clientset/versioned/fake"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// rolePool is a pool selecting the nodes with role label node-role.kubernetes.io/ROLE.
func rolePool(name, role string) *mcfgv1.MachineConfigPool {
	return &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: mcfgv1.MachineConfigPoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"node-role.kubernetes.io/" + role: ""}}}}
}

func roleNode(name string, roles ...string) *corev1.Node {
	n := node(name, "", 1, "")
	n.Annotations = map[string]string{}
	for _, r := range roles {
		n.Labels["node-role.kubernetes.io/"+r] = ""
	}
	return n
}

func TestPrimaryPool(t *testing.T) {
	pools := []*mcfgv1.MachineConfigPool{rolePool("master", "master"), rolePool("worker", "worker"), rolePool("infra", "infra"), rolePool("gpu", "gpu"),
		{ObjectMeta: metav1.ObjectMeta{Name: "everything"}, Spec: mcfgv1.MachineConfigPoolSpec{NodeSelector: &metav1.LabelSelector{}}}}
	for _, tc := range []struct {
		roles   []string
		want    string
		wantErr string
	}{
		{roles: []string{"worker"}, want: "worker"},
		{roles: []string{"master"}, want: "master"},
		// A compact cluster's schedulable masters stay masters.
		{roles: []string{"master", "worker"}, want: "master"},
		{roles: []string{"worker", "infra"}, want: "infra"},
		{roles: []string{"master", "infra"}, want: "master"},
		{roles: []string{"worker", "infra", "gpu"}, wantErr: "node n belongs to 2 custom roles (gpu, infra), cannot proceed with this Node"},
		// An empty selector selects nothing.
		{roles: nil, want: ""},
	} {
		got, err := PrimaryPool(pools, roleNode("n", tc.roles...))
		name := ""
		if got != nil {
			name = got.Name
		}
		switch {
		case tc.wantErr != "":
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("roles %v: %q, %v; want the error %q", tc.roles, name, err, tc.wantErr)
			}
		case err != nil || name != tc.want:
			t.Errorf("roles %v: %q, %v; want %q", tc.roles, name, err, tc.want)
		}
	}
}

// testController is a controller whose listers hold objs.
func testController(t *testing.T, pools []*mcfgv1.MachineConfigPool, nodes []*corev1.Node) (*Controller, *fake.Clientset, *mcfgfake.Clientset) {
	t.Helper()
	var kubeObjs, mcfgObjs []runtime.Object
	poolIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range pools {
		if err := poolIdx.Add(p); err != nil {
			t.Fatal(err)
		}
		mcfgObjs = append(mcfgObjs, p)
	}
	for _, n := range nodes {
		if err := nodeIdx.Add(n); err != nil {
			t.Fatal(err)
		}
		kubeObjs = append(kubeObjs, n)
	}
	kube := fake.NewClientset(kubeObjs...)
	mcfg := mcfgfake.NewSimpleClientset(mcfgObjs...)
	c := New(kube, mcfg, Options{})
	c.pools, c.nodes = mcfglisters.NewMachineConfigPoolLister(poolIdx), corelisters.NewNodeLister(nodeIdx)
	return c, kube, mcfg
}

// A node two custom pools select is in neither: each says why in its
// Degraded condition, and neither targets it.
func TestNodeInTwoCustomPoolsIsRefused(t *testing.T) {
	infra, gpu := rolePool("infra", "infra"), rolePool("gpu", "gpu")
	infra.Spec.Configuration.Name = "rendered-infra-1"
	both, only := roleNode("both", "worker", "infra", "gpu"), roleNode("only", "worker", "infra")
	c, _, mcfg := testController(t, []*mcfgv1.MachineConfigPool{rolePool("worker", "worker"), infra, gpu}, []*corev1.Node{both, only})
	nodes, refused, err := c.poolNodes(infra)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].Name != "only" {
		t.Errorf("infra's nodes %v, want only", nodes)
	}
	want := "node both belongs to 2 custom roles (gpu, infra), cannot proceed with this Node"
	if len(refused) != 1 || refused[0] != want {
		t.Fatalf("refused %q, want %q", refused, want)
	}
	if err := c.updateStatus(context.Background(), infra, nodes, nil, refused); err != nil {
		t.Fatal(err)
	}
	got, err := mcfg.MachineconfigurationV1().MachineConfigPools().Get(context.Background(), "infra", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var degraded *mcfgv1.MachineConfigPoolCondition
	for i := range got.Status.Conditions {
		if got.Status.Conditions[i].Type == mcfgv1.MachineConfigPoolDegraded {
			degraded = &got.Status.Conditions[i]
		}
	}
	if degraded == nil || degraded.Status != corev1.ConditionTrue || !strings.Contains(degraded.Message, want) {
		t.Errorf("infra's Degraded condition %+v, want True with %q", degraded, want)
	}
	if workers, _, _ := c.poolNodes(rolePool("worker", "worker")); len(workers) != 0 {
		t.Errorf("the worker pool took %v: a node of a custom pool, or refused by two, is not a worker's", workers)
	}
}

// A node that joins a paused pool boots into the configuration the
// machine-config server would serve it: the pool's current one until a
// node runs the target, then the target.
func TestJoiningNodeBootsIntoTheServedConfigurationEvenPaused(t *testing.T) {
	for _, tc := range []struct {
		updated int32
		want    string
	}{{0, "rendered-worker-old"}, {1, "rendered-worker-new"}} {
		pool := rolePool("worker", "worker")
		pool.Spec.Paused = true
		pool.Spec.Configuration.Name = "rendered-worker-new"
		pool.Status.Configuration.Name = "rendered-worker-old"
		pool.Status.UpdatedMachineCount = tc.updated
		running, joining := roleNode("running", "worker"), roleNode("joining", "worker")
		running.Annotations = map[string]string{CurrentConfigAnnotation: "rendered-worker-old", DesiredConfigAnnotation: "rendered-worker-old", StateAnnotation: StateDone}
		c, kube, _ := testController(t, []*mcfgv1.MachineConfigPool{pool}, []*corev1.Node{running, joining})
		managed, err := c.bootJoining(context.Background(), pool, []*corev1.Node{running, joining})
		if err != nil {
			t.Fatal(err)
		}
		if len(managed) != 1 || managed[0].Name != "running" {
			t.Errorf("managed %v, want running", managed)
		}
		n, err := kube.CoreV1().Nodes().Get(context.Background(), "joining", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a := n.Annotations
		if a[CurrentConfigAnnotation] != tc.want || a[DesiredConfigAnnotation] != tc.want || a[StateAnnotation] != StateDone {
			t.Errorf("%d updated: the joining node's annotations %v, want it booted into %s", tc.updated, a, tc.want)
		}
	}
}
