// Package eviction proves the node lifecycle controller's zone-aware
// eviction rate limits on a 64-node simulated cluster: a small zone of 4
// nodes and a large one of 60, with eviction rates raised so the test runs
// in seconds (primary 2 nodes/s, secondary 0.2 nodes/s).
package eviction

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
)

const (
	smallZone, largeZone = "zone-small", "zone-large"
	smallNodes           = 4
	largeNodes           = 60
	primaryRate          = 2.0
	secondaryRate        = 0.2
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(testenv.Options{Configure: func(o *cluster.Options) {
		o.ControlPlane.NodeEvictionRate = primaryRate
		o.ControlPlane.SecondaryNodeEvictionRate = secondaryRate
		o.ControlPlane.LargeClusterSizeThreshold = 50
		o.ControlPlane.UnhealthyZoneThreshold = 0.55
	}})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if err := addNodes(); err != nil {
		fmt.Println(err)
		env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

func nodeName(zone string, i int) string { return fmt.Sprintf("%s-%02d", zone, i) }

func addNodes() error {
	ctx := context.Background()
	var names []string
	for zone, n := range map[string]int{smallZone: smallNodes, largeZone: largeNodes} {
		for i := 0; i < n; i++ {
			name := nodeName(zone, i)
			_, err := env.Cloud.CreateInstance(ctx, sim.InstanceSpec{Name: name, Zone: zone,
				CPU: resource.MustParse("4"), Memory: resource.MustParse("8Gi"), Pods: 110})
			if err != nil {
				return err
			}
			names = append(names, name)
		}
	}
	return cluster.WaitNodesReady(ctx, env.Client, names, 2*time.Minute)
}

func zoneNodes(zone string) []string {
	n := smallNodes
	if zone == largeZone {
		n = largeNodes
	}
	out := make([]string, n)
	for i := range out {
		out[i] = nodeName(zone, i)
	}
	return out
}

func setStopped(t *testing.T, stopped bool, names ...string) {
	t.Helper()
	for _, n := range names {
		var err error
		if stopped {
			err = sim.StopNode(context.Background(), env.Client, n)
		} else {
			err = sim.StartNode(context.Background(), env.Client, n)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// noExecuteTainted returns the nodes among names with the unreachable
// NoExecute taint.
func noExecuteTainted(t *testing.T, names []string) []string {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	list, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		if !want[n.Name] {
			continue
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeUnreachable && taint.Effect == corev1.TaintEffectNoExecute {
				out = append(out, n.Name)
			}
		}
	}
	return out
}

func unknownCount(t *testing.T, names []string) int {
	t.Helper()
	c := 0
	for _, name := range names {
		n, err := env.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionUnknown {
				c++
			}
		}
	}
	return c
}

func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not met within %s: %s", timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// recoverAll restarts every kubelet and waits until no node is tainted.
func recoverAll(t *testing.T) {
	t.Helper()
	all := append(zoneNodes(smallZone), zoneNodes(largeZone)...)
	setStopped(t, false, all...)
	eventually(t, time.Minute, func() (bool, string) {
		tainted := noExecuteTainted(t, all)
		return len(tainted) == 0 && unknownCount(t, all) == 0, fmt.Sprintf("%d nodes still tainted", len(tainted))
	})
}

// evictablePod runs on a node and tolerates unreachability for a second.
func evictablePod(t *testing.T, ns, node string) string {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "on-" + node},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](1)}}},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p.Name
}

func alive(t *testing.T, ns, name string) bool {
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil && p.DeletionTimestamp == nil
}

// A small zone (4 nodes, under the 50-node threshold): one lost node is
// tainted at once; with more than 55% lost the zone is PartialDisruption
// and evictions stop; when the whole zone is lost it is FullDisruption and
// evictions resume at the normal rate.
func TestSmallZoneDisruption(t *testing.T) {
	defer recoverAll(t)
	ns := env.Namespace(t, "small")
	nodes := zoneNodes(smallZone)
	pods := map[string]string{}
	for _, n := range nodes {
		pods[n] = evictablePod(t, ns, n)
	}
	setStopped(t, true, nodes[0])
	eventually(t, 30*time.Second, func() (bool, string) {
		got := noExecuteTainted(t, nodes)
		return len(got) == 1, fmt.Sprintf("tainted %v", got)
	})
	eventually(t, 20*time.Second, func() (bool, string) { return !alive(t, ns, pods[nodes[0]]), "pod of the lost node not evicted" })

	// 3 of 4 lost: 75% > 55%.
	setStopped(t, true, nodes[1], nodes[2])
	eventually(t, 30*time.Second, func() (bool, string) {
		return unknownCount(t, nodes) == 3, "nodes not yet unknown"
	})
	time.Sleep(8 * time.Second)
	if got := noExecuteTainted(t, nodes[1:3]); len(got) != 0 {
		t.Errorf("PartialDisruption in a small zone: %v tainted NoExecute, want evictions stopped", got)
	}
	for _, n := range nodes[1:3] {
		if !alive(t, ns, pods[n]) {
			t.Errorf("pod on %s evicted during PartialDisruption", n)
		}
	}

	// The whole zone lost: FullDisruption, evictions at the normal rate
	// (the other zone is healthy).
	setStopped(t, true, nodes[3])
	eventually(t, 30*time.Second, func() (bool, string) {
		got := noExecuteTainted(t, nodes)
		return len(got) == smallNodes, fmt.Sprintf("tainted %v", got)
	})
	for _, n := range nodes[1:] {
		name := pods[n]
		eventually(t, 20*time.Second, func() (bool, string) { return !alive(t, ns, name), name + " not evicted" })
	}
}

// A large zone (60 nodes, over the threshold): with more than 55% lost,
// taints go on at the secondary rate, not the primary one.
func TestLargeZoneSecondaryRate(t *testing.T) {
	defer recoverAll(t)
	nodes := zoneNodes(largeZone)
	lost := nodes[:40] // 66%
	setStopped(t, true, lost...)
	eventually(t, 30*time.Second, func() (bool, string) {
		return unknownCount(t, lost) == len(lost), "nodes not yet unknown"
	})
	start := time.Now()
	time.Sleep(10 * time.Second)
	first := len(noExecuteTainted(t, lost))
	elapsed := time.Since(start)
	// At 0.2 nodes/s about 2-3 nodes in 10s (plus the burst); at the
	// primary 2 nodes/s it would be all 40 already.
	maxExpected := int(elapsed.Seconds()*secondaryRate) + 6
	if first > maxExpected {
		t.Errorf("%d of %d nodes tainted %s after PartialDisruption, want at most %d at the secondary rate", first, len(lost), elapsed.Round(time.Second), maxExpected)
	}
	eventually(t, 30*time.Second, func() (bool, string) {
		now := len(noExecuteTainted(t, lost))
		return now > first, fmt.Sprintf("still %d tainted: evictions stopped instead of slowing", now)
	})
}

// Every zone lost: the controller suspects its own connectivity, enters
// "master disruption mode" and evicts nothing more (nodes caught in the
// moment before every zone was down may keep a taint).
func TestAllZonesDown(t *testing.T) {
	defer recoverAll(t)
	ns := env.Namespace(t, "alldown")
	all := append(zoneNodes(smallZone), zoneNodes(largeZone)...)
	pods := map[string]string{}
	for _, n := range all[10:15] {
		pods[n] = evictablePod(t, ns, n)
	}
	setStopped(t, true, all...)
	eventually(t, 60*time.Second, func() (bool, string) {
		return unknownCount(t, all) == len(all), "not all nodes unknown yet"
	})
	time.Sleep(2 * time.Second)
	before := noExecuteTainted(t, all)
	time.Sleep(8 * time.Second)
	after := noExecuteTainted(t, all)
	if len(after) > len(before) || len(after) > 3 {
		t.Errorf("all zones down: %d nodes tainted NoExecute, then %d; want evictions stopped", len(before), len(after))
	}
	tainted := map[string]bool{}
	for _, n := range after {
		tainted[n] = true
	}
	for n, pod := range pods {
		if !tainted[n] && !alive(t, ns, pod) {
			t.Errorf("pod %s evicted while every zone was down", pod)
		}
	}
}
