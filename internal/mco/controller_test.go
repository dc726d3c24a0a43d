package mco

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func node(name, zone string, age int, config string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Duration(age) * time.Hour)),
		Annotations:       map[string]string{CurrentConfigAnnotation: config, DesiredConfigAnnotation: config, StateAnnotation: StateDone}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if zone != "" {
		n.Labels[ZoneLabel] = zone
	}
	return n
}

func poolWith(max *intstr.IntOrString) *mcfgv1.MachineConfigPool {
	return &mcfgv1.MachineConfigPool{Spec: mcfgv1.MachineConfigPoolSpec{MaxUnavailable: max}}
}

func TestMaxUnavailable(t *testing.T) {
	for _, tc := range []struct {
		max   *intstr.IntOrString
		nodes int
		want  int
	}{
		{nil, 10, 1},
		{ptr.To(intstr.FromInt32(3)), 5, 3},
		{ptr.To(intstr.FromString("10%")), 500, 50},
		{ptr.To(intstr.FromString("10%")), 9, 1}, // rounds down to 0, then 1
		{ptr.To(intstr.FromInt32(0)), 5, 1},
	} {
		if got := MaxUnavailable(poolWith(tc.max), tc.nodes); got != tc.want {
			t.Errorf("maxUnavailable %v of %d nodes: %d, want %d", tc.max, tc.nodes, got, tc.want)
		}
	}
}

func TestCandidatesZoneThenOldest(t *testing.T) {
	nodes := []*corev1.Node{
		node("b-young", "zone-b", 1, "old"), node("none-old", "", 9, "old"), node("a-young", "zone-a", 1, "old"),
		node("b-old", "zone-b", 5, "old"), node("a-old", "zone-a", 5, "old"),
	}
	got := Candidates(poolWith(ptr.To(intstr.FromInt32(4))), nodes, "new")
	var names []string
	for _, n := range got {
		names = append(names, n.Name)
	}
	if fmt.Sprint(names) != "[a-old a-young b-old b-young]" {
		t.Errorf("candidates %v", names)
	}
	// A degraded node that failed its update holds a slot.
	nodes[4].Annotations[DesiredConfigAnnotation], nodes[4].Annotations[StateAnnotation] = "new", StateDegraded
	if got := Candidates(poolWith(ptr.To(intstr.FromInt32(2))), nodes, "new"); len(got) != 1 || got[0].Name != "a-young" {
		t.Errorf("with a failing node: %v", got)
	}
	// A node that failed on an earlier configuration holds no slot, and
	// is itself told to run the new one (upstream's way out of a bad
	// MachineConfig: fix it, and the new rendered configuration reaches
	// the failed node).
	if got := Candidates(poolWith(ptr.To(intstr.FromInt32(1))), nodes, "newer"); len(got) != 1 || got[0].Name != "a-old" {
		t.Errorf("a new target with a node failing on the last one: candidates %v, want a-old retargeted", got)
	}
	// A node that is not Ready takes a slot.
	nodes[3].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	if got := Candidates(poolWith(ptr.To(intstr.FromInt32(1))), nodes, "newer"); len(got) != 0 {
		t.Errorf("with a node not Ready and maxUnavailable 1: candidates %v, want none", got)
	}
}

// Property: over random pools, maxUnavailable values and finish orders,
// the node controller never has more than maxUnavailable nodes
// unavailable, updates every node exactly once, and targets them in zone
// order, oldest first.
func TestRolloutProperty(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		count := 1 + r.IntN(30)
		var nodes []*corev1.Node
		for i := range count {
			zone := fmt.Sprintf("zone-%c", 'a'+r.IntN(3))
			if r.IntN(5) == 0 {
				zone = ""
			}
			n := node(fmt.Sprintf("n%02d", i), zone, r.IntN(100), "old")
			if r.IntN(6) == 0 {
				// Failed on an earlier target; the new one fixes it.
				n.Annotations[DesiredConfigAnnotation], n.Annotations[StateAnnotation] = "broken", StateDegraded
			}
			nodes = append(nodes, n)
		}
		var max intstr.IntOrString
		if r.IntN(2) == 0 {
			max = intstr.FromInt32(int32(r.IntN(6)))
		} else {
			max = intstr.FromString(fmt.Sprintf("%d%%", r.IntN(101)))
		}
		pool := poolWith(&max)
		limit := MaxUnavailable(pool, count)
		expected := append([]*corev1.Node(nil), nodes...)
		SortForUpdate(expected)
		var order []string
		updates := map[string]int{}
		for step := 0; step < 10*count+10; step++ {
			for _, n := range Candidates(pool, nodes, "new") {
				// The daemon picks the new target up.
				n.Annotations[DesiredConfigAnnotation], n.Annotations[StateAnnotation] = "new", StateWorking
				order = append(order, n.Name)
			}
			var busy []*corev1.Node
			for _, n := range nodes {
				if unavailable(n) {
					busy = append(busy, n)
				}
			}
			if len(busy) > limit {
				t.Fatalf("seed %d: %d nodes unavailable, maxUnavailable %d", seed, len(busy), limit)
			}
			if len(busy) == 0 {
				break
			}
			done := busy[r.IntN(len(busy))]
			done.Annotations[CurrentConfigAnnotation], done.Annotations[StateAnnotation] = "new", StateDone
			updates[done.Name]++
		}
		if len(order) != count {
			t.Fatalf("seed %d: %d of %d nodes targeted: %v", seed, len(order), count, order)
		}
		for i, n := range expected {
			if order[i] != n.Name {
				t.Fatalf("seed %d: targeted %v, want zone then oldest order at %d (%s)", seed, order, i, n.Name)
			}
			if updates[n.Name] != 1 {
				t.Fatalf("seed %d: node %s updated %d times", seed, n.Name, updates[n.Name])
			}
		}
	}
}

// A pool is synced again for what its status reads of a node, not for a
// status report that changes none of it.
func TestPoolsCareOnlyForWhatTheyRead(t *testing.T) {
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"node-role.kubernetes.io/worker": ""},
		Annotations: map[string]string{CurrentConfigAnnotation: "a", DesiredConfigAnnotation: "a", StateAnnotation: StateDone, "other": "x"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, c := range []struct {
		name   string
		change func(n *corev1.Node)
		care   bool
	}{
		{"a heartbeat", func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
			n.Status.Images = []corev1.ContainerImage{{Names: []string{"i"}}}
		}, false},
		{"another annotation", func(n *corev1.Node) { n.Annotations["other"] = "y" }, false},
		{"a label", func(n *corev1.Node) { n.Labels["node-role.kubernetes.io/infra"] = "" }, true},
		{"a label removed", func(n *corev1.Node) { delete(n.Labels, "node-role.kubernetes.io/worker") }, true},
		{"the desired config", func(n *corev1.Node) { n.Annotations[DesiredConfigAnnotation] = "b" }, true},
		{"the state", func(n *corev1.Node) { n.Annotations[StateAnnotation] = StateWorking }, true},
		{"an MCO annotation removed", func(n *corev1.Node) { delete(n.Annotations, StateAnnotation) }, true},
		{"NotReady", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
	} {
		n := base.DeepCopy()
		c.change(n)
		if got := poolsCare(base, n); got != c.care {
			t.Errorf("%s: pools care %v, want %v", c.name, got, c.care)
		}
	}
}
