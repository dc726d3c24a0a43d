package algorithm

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

func scoreOf(d *Decision, nodeName, prio string) int64 {
	for _, ns := range d.Scored {
		if ns.Node == nodeName {
			for _, s := range ns.Scores {
				if s.Priority == prio {
					return s.Score
				}
			}
		}
	}
	return -1
}

func TestResourcePriorities(t *testing.T) {
	// Node a has 2 of 4 cpu and 4Gi of 16Gi requested; b is empty.
	nodes := []*corev1.Node{node("a", nil), node("b", nil)}
	existing := []*corev1.Pod{onNode(withRequests(pod("x", nil), "2", "4Gi"), "a")}
	p := withRequests(pod("p", nil), "1", "4Gi")
	a := mustAlgorithm(t, policyOf(nil, prios("LeastRequestedPriority", "MostRequestedPriority", "BalancedResourceAllocation")))
	d := a.Schedule(t.Context(), p, snapshot(nodes, existing, Listers{}), Options{Explain: true})
	// a: cpu 3/4 -> least 2, most 7; mem 8/16 -> least 5, most 5.
	cases := []struct {
		node, prio string
		want       int64
	}{
		{"a", "LeastRequestedPriority", (2 + 5) / 2},
		{"a", "MostRequestedPriority", (7 + 5) / 2},
		{"a", "BalancedResourceAllocation", 7}, // (1 - |0.75 - 0.5|) * 10
		{"b", "LeastRequestedPriority", (7 + 7) / 2},
		{"b", "BalancedResourceAllocation", 10},
	}
	for _, tc := range cases {
		if got := scoreOf(d, tc.node, tc.prio); got != tc.want {
			t.Errorf("%s on %s = %d, want %d", tc.prio, tc.node, got, tc.want)
		}
	}
}

func serviceLister(svcs ...*corev1.Service) corelisters.ServiceLister {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, s := range svcs {
		_ = idx.Add(s)
	}
	return corelisters.NewServiceLister(idx)
}

func service(name string, sel map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.ServiceSpec{Selector: sel}}
}

func TestSelectorSpreadWeighsZones(t *testing.T) {
	z := func(zone string) map[string]string { return map[string]string{corev1.LabelTopologyZone: zone} }
	nodes := []*corev1.Node{node("a1", z("a")), node("a2", z("a")), node("b1", z("b"))}
	app := map[string]string{"app": "web"}
	existing := []*corev1.Pod{onNode(pod("w1", app), "a1"), onNode(pod("w2", app), "a1")}
	l := Listers{Services: serviceLister(service("web", app))}
	a := mustAlgorithm(t, policyOf(nil, prios("SelectorSpreadPriority", "ServiceSpreadingPriority")))
	d := a.Schedule(t.Context(), pod("w3", app), snapshot(nodes, existing, l), Options{Explain: true})
	// maxNode=2, zone a has 2, zone b 0 (maxZone=2).
	want := map[string]int64{
		"a1": 0,  // node 0, zone 0
		"a2": 3,  // node 10 * 1/3, zone 0
		"b1": 10, // node 10 * 1/3 + zone 10 * 2/3
	}
	for n, w := range want {
		if got := scoreOf(d, n, "SelectorSpreadPriority"); got != w {
			t.Errorf("SelectorSpread %s = %d, want %d", n, got, w)
		}
		if got := scoreOf(d, n, "ServiceSpreadingPriority"); got != w {
			t.Errorf("ServiceSpreading %s = %d, want %d", n, got, w)
		}
	}
	if d.Selected != "b1" {
		t.Errorf("selected %s, want b1", d.Selected)
	}
}

// TestServiceAffinityAndAntiAffinity follows the sample policy
// RegionZoneAffinity + RackSpread: the service's pods stay in the region
// and zone of its first pod, spread over racks.
func TestServiceAffinityAndAntiAffinity(t *testing.T) {
	lbl := func(region, zone, rack string) map[string]string {
		return map[string]string{"region": region, "zone": zone, "rack": rack}
	}
	nodes := []*corev1.Node{
		node("r1z1a", lbl("r1", "z1", "a")), node("r1z1b", lbl("r1", "z1", "b")),
		node("r1z2a", lbl("r1", "z2", "a")), node("r2z1a", lbl("r2", "z1", "a")),
	}
	app := map[string]string{"app": "db"}
	existing := []*corev1.Pod{onNode(pod("db-0", app), "r1z1a")}
	l := Listers{Services: serviceLister(service("db", app))}
	p := policyOf(
		[]policy.PredicatePolicy{{Name: "RegionZoneAffinity", Argument: &policy.PredicateArgument{
			ServiceAffinity: &policy.ServiceAffinity{Labels: []string{"region", "zone"}}}}},
		[]policy.PriorityPolicy{{Name: "RackSpread", Weight: 1, Argument: &policy.PriorityArgument{
			ServiceAntiAffinity: &policy.ServiceAntiAffinity{Label: "rack"}}}})
	a := mustAlgorithm(t, p)
	d := a.Schedule(t.Context(), pod("db-1", app), snapshot(nodes, existing, l), Options{Explain: true})
	if d.Selected != "r1z1b" {
		t.Errorf("selected %s, want r1z1b (same region and zone, other rack)", d.Selected)
	}
	for _, n := range []string{"r1z2a", "r2z1a"} {
		if f := d.Filtered[n]; f == nil || f.Reasons[0] != ReasonServiceAffinityViolated {
			t.Errorf("%s: %+v, want service affinity violation", n, f)
		}
	}
	if s := scoreOf(d, "r1z1a", "RackSpread"); s != 0 {
		t.Errorf("rack a score %d, want 0", s)
	}
	// The first pod of a service goes anywhere.
	d = a.Schedule(t.Context(), pod("db-0", app), snapshot(nodes, nil, l), Options{Explain: true})
	if len(d.Filtered) != 0 {
		t.Errorf("first pod filtered: %v", d.Filtered)
	}
}

func TestNodeAffinityAndTaintTolerationPriorities(t *testing.T) {
	nodes := []*corev1.Node{
		node("ssd", map[string]string{"disktype": "ssd"}),
		node("hdd", map[string]string{"disktype": "hdd"}, corev1.Taint{Key: "slow", Effect: corev1.TaintEffectPreferNoSchedule}),
	}
	p := pod("p", nil)
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 50,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "disktype", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}}
	a := mustAlgorithm(t, policyOf(nil, prios("NodeAffinityPriority", "TaintTolerationPriority", "EqualPriority")))
	d := a.Schedule(t.Context(), p, snapshot(nodes, nil, Listers{}), Options{Explain: true})
	want := map[[2]string]int64{
		{"ssd", "NodeAffinityPriority"}: 10, {"hdd", "NodeAffinityPriority"}: 0,
		{"ssd", "TaintTolerationPriority"}: 10, {"hdd", "TaintTolerationPriority"}: 0,
		{"ssd", "EqualPriority"}: 1, {"hdd", "EqualPriority"}: 1,
	}
	for k, w := range want {
		if got := scoreOf(d, k[0], k[1]); got != w {
			t.Errorf("%s on %s = %d, want %d", k[1], k[0], got, w)
		}
	}
	if d.Selected != "ssd" || d.Scored[0].Total != 21 {
		t.Errorf("selected %s total %d", d.Selected, d.Scored[0].Total)
	}
}

func TestLabelPreferenceAndWeights(t *testing.T) {
	nodes := []*corev1.Node{node("z", map[string]string{"zone": "z1"}), node("nz", nil)}
	p := policyOf(nil, []policy.PriorityPolicy{{Name: "ZonePreferred", Weight: 3, Argument: &policy.PriorityArgument{
		LabelPreference: &policy.LabelPreference{Label: "zone", Presence: true}}}})
	d := mustAlgorithm(t, p).Schedule(t.Context(), pod("p", nil), snapshot(nodes, nil, Listers{}), Options{Explain: true})
	if d.Selected != "z" || d.Scored[0].Total != 30 || d.Scored[1].Total != 0 {
		t.Errorf("scores %+v", d.Scored)
	}
}

func TestTiesBrokenAtRandomReproducibly(t *testing.T) {
	var nodes []*corev1.Node
	for _, n := range []string{"a", "b", "c", "d"} {
		nodes = append(nodes, node(n, nil))
	}
	picks := func(seed uint64) []string {
		a, _ := New(policyOf(nil, prios("EqualPriority")), seed)
		var out []string
		for i := 0; i < 20; i++ {
			out = append(out, a.Schedule(t.Context(), pod("p", nil), snapshot(nodes, nil, Listers{}), Options{}).Selected)
		}
		return out
	}
	first, again := picks(7), picks(7)
	seen := map[string]bool{}
	for i := range first {
		if first[i] != again[i] {
			t.Fatalf("same seed, different picks: %v vs %v", first, again)
		}
		seen[first[i]] = true
	}
	if len(seen) < 2 {
		t.Errorf("ties always resolved to %v", seen)
	}
}

func TestPreferAvoidPods(t *testing.T) {
	n := node("avoid", nil)
	n.Annotations = map[string]string{preferAvoidPodsAnnotation: `{"preferAvoidPods":[{"podSignature":{"podController":{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"rs-uid","controller":true}}}]}`}
	p := pod("p", nil)
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: &yes}}
	d := mustAlgorithm(t, policyOf(nil, prios("NodePreferAvoidPodsPriority"))).
		Schedule(t.Context(), p, snapshot([]*corev1.Node{n, node("ok", nil)}, nil, Listers{}), Options{Explain: true})
	if scoreOf(d, "avoid", "NodePreferAvoidPodsPriority") != 0 || scoreOf(d, "ok", "NodePreferAvoidPodsPriority") != 10 {
		t.Errorf("scores %+v", d.Scored)
	}
}

var _ = labels.Everything

// SelectorSpread counts, as the legacy implementation did, only the pods
// matching every selector the new pod belongs to: here the pod is in the
// service web (app=web) and the replica set web-v2 (app=web, version=v2).
// Pods of the old replica set (version=v1) on a1 are not its siblings; with
// "any selector" they would be, and a1 would score 0 instead of 10.
func TestSelectorSpreadCountsPodsMatchingEverySelector(t *testing.T) {
	nodes := []*corev1.Node{node("a1", nil), node("b1", nil)}
	v1 := map[string]string{"app": "web", "version": "v1"}
	v2 := map[string]string{"app": "web", "version": "v2"}
	existing := []*corev1.Pod{onNode(pod("old-1", v1), "a1"), onNode(pod("old-2", v1), "a1"), onNode(pod("new-1", v2), "b1")}
	rsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = rsIdx.Add(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-v2", Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: v2}}})
	l := Listers{Services: serviceLister(service("web", map[string]string{"app": "web"})), ReplicaSets: appslisters.NewReplicaSetLister(rsIdx)}
	a := mustAlgorithm(t, policyOf(nil, prios("SelectorSpreadPriority")))
	d := a.Schedule(t.Context(), pod("new-2", v2), snapshot(nodes, existing, l), Options{Explain: true})
	for n, want := range map[string]int64{"a1": 10, "b1": 0} {
		if got := scoreOf(d, n, "SelectorSpreadPriority"); got != want {
			t.Errorf("SelectorSpread %s = %d, want %d", n, got, want)
		}
	}
}

// Ties are broken by picking the n-th tied node in name order; finding it
// without sorting gives the same node a sort would.
func TestNthByNameMatchesSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(60)
		scored := make([]NodeScore, n)
		tied := make([]int, n)
		for i := range scored {
			scored[i].Node = fmt.Sprintf("node-%04d", rng.IntN(10000)*1000+i)
			tied[i] = i
		}
		rng.Shuffle(n, func(i, j int) { tied[i], tied[j] = tied[j], tied[i] })
		names := make([]string, n)
		for i, ti := range tied {
			names[i] = scored[ti].Node
		}
		sort.Strings(names)
		pick := rng.IntN(n)
		if got := scored[nthByName(scored, tied, pick)].Node; got != names[pick] {
			t.Fatalf("round %d: pick %d of %v: got %s, want %s", round, pick, names, got, names[pick])
		}
	}
}
