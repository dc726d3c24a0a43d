package algorithm

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// randomTerm draws a pod affinity term over the labels app/tier, in one of
// the topologies, sometimes across namespaces.
func randomTerm(r *rand.Rand) corev1.PodAffinityTerm {
	apps := []string{"a", "b", "c"}
	var req metav1.LabelSelectorRequirement
	switch r.Intn(5) {
	case 0:
		req = metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{apps[r.Intn(3)]}}
	case 1:
		req = metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", apps[r.Intn(3)]}}
	case 2:
		req = metav1.LabelSelectorRequirement{Key: "tier", Operator: metav1.LabelSelectorOpExists}
	case 3:
		req = metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{apps[r.Intn(3)]}}
	case 4:
		req = metav1.LabelSelectorRequirement{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}
	}
	t := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req}},
		TopologyKey:   []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone", "rack"}[r.Intn(3)],
	}
	switch r.Intn(4) {
	case 0:
		t.Namespaces = []string{"default", "other"}
	case 1:
		t.NamespaceSelector = &metav1.LabelSelector{}
	}
	return t
}

func randomAffinityPod(r *rand.Rand, i int) *corev1.Pod {
	lbls := map[string]string{"app": []string{"a", "b", "c"}[r.Intn(3)]}
	if r.Intn(2) == 0 {
		lbls["tier"] = "web"
	}
	p := pod(fmt.Sprintf("p%d", i), lbls)
	if r.Intn(3) == 0 {
		p.Namespace = "other"
	}
	a := &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}, PodAntiAffinity: &corev1.PodAntiAffinity{}}
	for range r.Intn(2) {
		a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, randomTerm(r))
	}
	for range r.Intn(2) {
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, randomTerm(r))
	}
	for range r.Intn(2) {
		a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
			corev1.WeightedPodAffinityTerm{Weight: int32(1 + r.Intn(3)), PodAffinityTerm: randomTerm(r)})
	}
	for range r.Intn(2) {
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
			corev1.WeightedPodAffinityTerm{Weight: int32(1 + r.Intn(3)), PodAffinityTerm: randomTerm(r)})
	}
	p.Spec.Affinity = a
	return p
}

// bruteInterPod computes the MatchInterPodAffinity state by scanning every
// pod of every node, the definition the index must agree with.
func bruteInterPod(s *Snapshot, pi *PodInfo) *interPodState {
	st := &interPodState{}
	podNS := s.NamespaceLabels(pi.Pod.Namespace)
	for _, ni := range s.Nodes {
		for _, ep := range ni.Pods {
			if ep.Pod.UID == pi.Pod.UID {
				continue
			}
			nsl := s.NamespaceLabels(ep.Pod.Namespace)
			for _, t := range ep.RequiredAntiAffinity {
				if v, ok := ni.Labels[t.TopologyKey]; ok && t.Matches(pi.Pod, podNS) {
					st.existingAnti.add(t.TopologyKey, v, 1)
				}
			}
			if matchesAllTerms(pi.RequiredAffinity, ep.Pod, nsl) {
				for _, t := range pi.RequiredAffinity {
					if v, ok := ni.Labels[t.TopologyKey]; ok {
						st.affinity.add(t.TopologyKey, v, 1)
					}
				}
			}
			for _, t := range pi.RequiredAntiAffinity {
				if v, ok := ni.Labels[t.TopologyKey]; ok && t.Matches(ep.Pod, nsl) {
					st.anti.add(t.TopologyKey, v, 1)
				}
			}
		}
	}
	st.selfMatch = matchesAllTerms(pi.RequiredAffinity, pi.Pod, podNS)
	return st
}

// bruteAffinityDomains is InterPodAffinityPriority's raw per-domain sums by
// scanning every pod.
func bruteAffinityDomains(s *Snapshot, pi *PodInfo) *topologyCounts {
	d := &topologyCounts{}
	podNS := s.NamespaceLabels(pi.Pod.Namespace)
	add := func(ni *NodeInfo, key string, w int64) {
		if v, ok := ni.Labels[key]; ok {
			d.add(key, v, w)
		}
	}
	for _, ni := range s.Nodes {
		for _, ep := range ni.Pods {
			if ep.Pod.UID == pi.Pod.UID {
				continue
			}
			nsl := s.NamespaceLabels(ep.Pod.Namespace)
			for _, t := range pi.PreferredAffinity {
				if t.Matches(ep.Pod, nsl) {
					add(ni, t.TopologyKey, int64(t.Weight))
				}
			}
			for _, t := range pi.PreferredAntiAffinity {
				if t.Matches(ep.Pod, nsl) {
					add(ni, t.TopologyKey, -int64(t.Weight))
				}
			}
			for _, t := range ep.RequiredAffinity {
				if t.Matches(pi.Pod, podNS) {
					add(ni, t.TopologyKey, hardPodAffinityWeight)
				}
			}
			for _, t := range ep.PreferredAffinity {
				if t.Matches(pi.Pod, podNS) {
					add(ni, t.TopologyKey, int64(t.Weight))
				}
			}
			for _, t := range ep.PreferredAntiAffinity {
				if t.Matches(pi.Pod, podNS) {
					add(ni, t.TopologyKey, -int64(t.Weight))
				}
			}
		}
	}
	return d
}

// dropZeros flattens counts to key/value -> count, without zeros, for
// comparison whatever the order keys were met in.
func dropZeros(c *topologyCounts) map[[2]string]int64 {
	out := map[[2]string]int64{}
	for i, k := range c.keys {
		for v, n := range c.counts[i] {
			if n != 0 {
				out[[2]string{k, v}] = n
			}
		}
	}
	return out
}

func TestPodIndexAgreesWithFullScan(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for round := range 30 {
		var nodes []*NodeInfo
		for i := range 12 {
			n := node(fmt.Sprintf("n%d", i), map[string]string{
				"kubernetes.io/hostname":      fmt.Sprintf("n%d", i),
				"topology.kubernetes.io/zone": fmt.Sprintf("z%d", i%3),
			})
			if i%4 != 0 { // some nodes lack the rack label
				n.Labels["rack"] = fmt.Sprintf("r%d", i%2)
			}
			nodes = append(nodes, NewNodeInfo(n))
		}
		// The cache's way: one index kept through adds and removes.
		idx := NewPodIndex()
		var placed []*PodInfo
		for i := range 60 {
			pi := NewPodInfo(randomAffinityPod(r, i))
			ni := nodes[r.Intn(len(nodes))]
			ni.AddPod(pi)
			idx.Add(pi, ni)
			placed = append(placed, pi)
			if r.Intn(4) == 0 { // and remove one at random
				j := r.Intn(len(placed))
				victim := placed[j]
				placed = append(placed[:j], placed[j+1:]...)
				for _, n := range nodes {
					if n.RemovePod(victim.Pod) != nil {
						idx.Remove(victim)
					}
				}
			}
		}
		shared := NewSharedSnapshot(nodes, idx, Listers{})
		fresh := NewSnapshot(nodes, Listers{})
		if shared.Pods.Len() != len(placed) || fresh.Pods.Len() != len(placed) {
			t.Fatalf("round %d: index holds %d/%d pods, want %d", round, shared.Pods.Len(), fresh.Pods.Len(), len(placed))
		}
		// Incoming pods: new ones, and ones already placed (explain).
		var incoming []*PodInfo
		for i := range 20 {
			incoming = append(incoming, NewPodInfo(randomAffinityPod(r, 1000+i)))
		}
		incoming = append(incoming, placed[:5]...)
		for _, s := range []*Snapshot{shared, fresh} {
			for _, pi := range incoming {
				cs := NewCycleState(s)
				matchInterPodAffinity{}.PreFilter(cs, pi)
				got := cs.Read(interPodKey).(*interPodState)
				want := bruteInterPod(s, pi)
				for _, c := range []struct {
					name      string
					got, want *topologyCounts
				}{{"existing anti-affinity", &got.existingAnti, &want.existingAnti}, {"affinity", &got.affinity, &want.affinity}, {"anti-affinity", &got.anti, &want.anti}} {
					if g, w := dropZeros(c.got), dropZeros(c.want); !reflect.DeepEqual(g, w) {
						t.Fatalf("round %d pod %s: PreFilter %s\n got %v\nwant %v", round, pi.Pod.Name, c.name, g, w)
					}
				}
				if got.selfMatch != want.selfMatch {
					t.Fatalf("round %d pod %s: selfMatch %v, want %v", round, pi.Pod.Name, got.selfMatch, want.selfMatch)
				}
				if got, want := dropZeros(affinityDomains(s, pi)), dropZeros(bruteAffinityDomains(s, pi)); !reflect.DeepEqual(got, want) {
					t.Fatalf("round %d pod %s: priority domains\n got %v\nwant %v", round, pi.Pod.Name, got, want)
				}
			}
		}
	}
}

// Removing every pod leaves the index empty: nothing leaks.
func TestPodIndexRemoveLeavesNothing(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	ni := NewNodeInfo(node("n", map[string]string{"kubernetes.io/hostname": "n"}))
	idx := NewPodIndex()
	var pis []*PodInfo
	for i := range 40 {
		pi := NewPodInfo(randomAffinityPod(r, i))
		idx.Add(pi, ni)
		pis = append(pis, pi)
	}
	for _, pi := range pis {
		idx.Remove(pi)
		idx.Remove(pi) // twice is harmless
	}
	if idx.Len() != 0 || len(idx.byLabel) != 0 || len(idx.byUID) != 0 {
		t.Errorf("index not empty: %d pods, %d label keys, %d uids", idx.Len(), len(idx.byLabel), len(idx.byUID))
	}
	for k, g := range idx.groups {
		if len(g) != 0 {
			t.Errorf("term kind %d: %d groups left", k, len(g))
		}
	}
}

// BenchmarkInterPodPreFilter measures one pod's MatchInterPodAffinity
// pre-computation in the benchmark's pod-anti-affinity shape: 5,000 nodes,
// 10,000 pods in groups of 50, each with required anti-affinity to its
// group by hostname, with the index and with the full scan it replaced.
func BenchmarkInterPodPreFilter(b *testing.B) {
	nodes := make([]*NodeInfo, 5000)
	for i := range nodes {
		name := fmt.Sprintf("n%d", i)
		nodes[i] = NewNodeInfo(node(name, map[string]string{"kubernetes.io/hostname": name}))
	}
	groupPod := func(i int) *PodInfo {
		group := fmt.Sprintf("g%d", i/50)
		p := pod(fmt.Sprintf("p%d", i), map[string]string{"group": group})
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}},
				TopologyKey:   "kubernetes.io/hostname"}}}}
		return NewPodInfo(p)
	}
	for i := range 10000 {
		nodes[i%len(nodes)].AddPod(groupPod(i))
	}
	s := NewSnapshot(nodes, Listers{})
	incoming := groupPod(5025)
	b.Run("index", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			matchInterPodAffinity{}.PreFilter(NewCycleState(s), incoming)
		}
	})
	// The scan over every pod that the index replaced, for comparison.
	b.Run("full-scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bruteInterPod(s, incoming)
		}
	})
}

// A NodeInfo answers the Policy's label keys from its own copy, others from
// the node's labels, and follows the node when it changes.
func TestNodeInfoLabels(t *testing.T) {
	ni := &NodeInfo{}
	ni.UseLabelKeys([]string{"zone", "region"})
	ni.SetNode(node("n", map[string]string{"zone": "a", "rack": "r1"}))
	for key, want := range map[string][2]any{"zone": {"a", true}, "region": {"", false}, "rack": {"r1", true}, "other": {"", false}} {
		if v, ok := ni.Label(key); v != want[0] || ok != want[1] {
			t.Errorf("%s: %q %v, want %v", key, v, ok, want)
		}
	}
	ni.SetNode(node("n", map[string]string{"zone": "b", "region": "r"}))
	if v, _ := ni.Label("zone"); v != "b" {
		t.Errorf("zone after the update: %q", v)
	}
	if v, ok := ni.Label("region"); v != "r" || !ok {
		t.Errorf("region after the update: %q %v", v, ok)
	}
}
