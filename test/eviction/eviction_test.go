// Package eviction proves the node lifecycle controller's zone-aware
// eviction rate limits on a 65-node simulated cluster: a small zone of 5
// nodes and a large one of 60, with eviction rates raised so the test runs
// in seconds (primary 2 nodes/s, secondary 0.2 nodes/s).
//
// The tests never guess how long the controller takes: they wait for what
// it reports. The controller runs in this process and publishes, after
// every pass over the nodes, how many nodes of each zone it counted not
// Ready (the input of its zone state) and how many passes it completed;
// the tests wait on those and on the taints it writes.
package eviction

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/taints"
	"github.com/capstan-dev/capstan/internal/testenv"
)

const (
	smallZone, largeZone = "zone-small", "zone-large"
	smallNodes           = 5
	largeNodes           = 60
	primaryRate          = 2.0
	secondaryRate        = 0.2
	// A zone is PartialDisruption once more than 2 of its nodes, and at
	// least this share, are not Ready.
	unhealthyThreshold = 0.55
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(testenv.Options{Configure: func(o *cluster.Options) {
		o.ControlPlane.NodeEvictionRate = primaryRate
		o.ControlPlane.SecondaryNodeEvictionRate = secondaryRate
		o.ControlPlane.LargeClusterSizeThreshold = 50
		o.ControlPlane.UnhealthyZoneThreshold = unhealthyThreshold
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
	os.Exit(env.Finish(m.Run()))
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

// nodeStates reads the named nodes: those with the unreachable NoExecute
// taint, and how many are Unknown.
func nodeStates(t *testing.T, names []string) (tainted []string, unknown int) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	list, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		n := &list.Items[i]
		if !want[n.Name] {
			continue
		}
		if taints.Has(n.Spec.Taints, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
			tainted = append(tainted, n.Name)
		}
		if nodes.Unreachable(n) {
			unknown++
		}
	}
	return tainted, unknown
}

// waitZoneUnhealthy waits until the controller's last pass counted n nodes
// of the zone not Ready.
func waitZoneUnhealthy(t *testing.T, zone string, n int) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		got, ok := testenv.ZoneUnhealthy(zone)
		return ok && got == float64(n), fmt.Sprintf("controller counts %v unhealthy nodes in %s (reported: %v), want %d", got, zone, ok, n)
	})
}

// waitPasses waits until the node lifecycle controller has completed two
// more passes: one that may have been under way, and a whole one after.
func waitPasses(t *testing.T) {
	t.Helper()
	start := testenv.NodeHealthPasses()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		now := testenv.NodeHealthPasses()
		return now >= start+2, fmt.Sprintf("%d passes since, want 2", now-start)
	})
}

// recoverAll restarts every kubelet and waits until no node is tainted or
// Unknown and the controller counts every zone healthy again.
func recoverAll(t *testing.T) {
	t.Helper()
	all := append(zoneNodes(smallZone), zoneNodes(largeZone)...)
	setStopped(t, false, all...)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		tainted, unknown := nodeStates(t, all)
		return len(tainted) == 0 && unknown == 0, fmt.Sprintf("%d nodes still tainted, %d Unknown", len(tainted), unknown)
	})
	for _, z := range []string{smallZone, largeZone} {
		waitZoneUnhealthy(t, z, 0)
	}
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
	return env.CreatePod(t, ns, p).Name
}

// A small zone (5 nodes, under the 50-node threshold): a lost node is
// tainted at once; once more than 55% (and more than 2) are lost the zone
// is PartialDisruption and no further node is tainted; when the whole zone
// is lost it is FullDisruption and evictions resume at the normal rate.
func TestSmallZoneDisruption(t *testing.T) {
	defer recoverAll(t)
	ns := env.Namespace(t, "small")
	zone := zoneNodes(smallZone)
	pods := map[string]string{}
	for _, n := range zone {
		pods[n] = evictablePod(t, ns, n)
		env.WaitPodRunning(t, ns, pods[n])
	}
	setStopped(t, true, zone[0])
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		tainted, _ := nodeStates(t, zone)
		return len(tainted) == 1, fmt.Sprintf("tainted %v", tainted)
	})
	env.WaitPodGone(t, ns, pods[zone[0]], 20*time.Second)

	// 3 of 5 lost: 60% > 55%, PartialDisruption. Whichever of these two
	// went Unknown first, while the zone was still Normal, may have been
	// tainted; that is the controller's rule, not a failure.
	setStopped(t, true, zone[1], zone[2])
	waitZoneUnhealthy(t, smallZone, 3)

	// A node lost while the zone is PartialDisruption is never tainted:
	// the controller counts it, and two whole passes later it has still
	// not been tainted (at the primary rate it would be within 100ms).
	setStopped(t, true, zone[3])
	waitZoneUnhealthy(t, smallZone, 4)
	waitPasses(t)
	if tainted, _ := nodeStates(t, zone[3:4]); len(tainted) != 0 {
		t.Errorf("PartialDisruption in a small zone: %v tainted NoExecute, want evictions stopped", tainted)
	}
	if !env.PodAlive(t, ns, pods[zone[3]]) {
		t.Errorf("pod on %s evicted during PartialDisruption", zone[3])
	}

	// The whole zone lost: FullDisruption, evictions at the normal rate
	// (the other zone is healthy).
	setStopped(t, true, zone[4])
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		tainted, _ := nodeStates(t, zone)
		return len(tainted) == smallNodes, fmt.Sprintf("tainted %v", tainted)
	})
	for _, n := range zone[1:] {
		env.WaitPodGone(t, ns, pods[n], 20*time.Second)
	}
}

// A large zone (60 nodes, over the threshold): with more than 55% lost,
// taints go on at the secondary rate, not the primary one.
func TestLargeZoneSecondaryRate(t *testing.T) {
	defer recoverAll(t)
	lost := zoneNodes(largeZone)[:40] // 66%
	setStopped(t, true, lost...)
	waitZoneUnhealthy(t, largeZone, len(lost))
	// From now on the zone's limiter is the secondary one: it allows one
	// node at once (its burst), one more already on its way, then 0.2
	// nodes/s. The first three further taints therefore take at least 5s;
	// at the primary 2 nodes/s they would take about 1s. A slow machine
	// can only make this longer, never shorter.
	start := time.Now()
	before, _ := nodeStates(t, lost)
	const more = 3
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		now, _ := nodeStates(t, lost)
		return len(now) >= len(before)+more, fmt.Sprintf("%d tainted, %d before: evictions stopped instead of slowing", len(now), len(before))
	})
	minimum := time.Duration(float64(more-2) / secondaryRate * float64(time.Second))
	if elapsed := time.Since(start); elapsed < minimum {
		t.Errorf("%d more nodes tainted %s after PartialDisruption, faster than the secondary rate allows (at least %s)", more, elapsed.Round(time.Millisecond), minimum)
	}
}

// taintRecorder remembers every node that carried the unreachable NoExecute
// taint at any moment while it ran.
type taintRecorder struct {
	mu      sync.Mutex
	tainted map[string]bool
	stop    func()
}

func recordTaints(t *testing.T) *taintRecorder {
	t.Helper()
	r := &taintRecorder{tainted: map[string]bool{}}
	f := informers.NewSharedInformerFactory(env.Client, 0)
	inf := f.Core().V1().Nodes().Informer()
	see := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && taints.Has(n.Spec.Taints, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
			r.mu.Lock()
			r.tainted[n.Name] = true
			r.mu.Unlock()
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, n any) { see(n) }})
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("node informer did not sync")
	}
	r.stop = func() { cancel(); f.Shutdown() }
	return r
}

func (r *taintRecorder) ever(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tainted[name]
}

// Every zone lost: the controller suspects its own connectivity, enters
// "master disruption mode", takes its taints back off the nodes and evicts
// nothing more. (A taint written just before the mode began may stay: the
// controller writes taints from a separate loop, and takes back those its
// node lister has seen.)
func TestAllZonesDown(t *testing.T) {
	defer recoverAll(t)
	ns := env.Namespace(t, "alldown")
	all := append(zoneNodes(smallZone), zoneNodes(largeZone)...)
	pods := map[string]string{}
	for _, n := range all[10:15] {
		pods[n] = evictablePod(t, ns, n)
		env.WaitPodRunning(t, ns, pods[n])
	}
	rec := recordTaints(t)
	defer rec.stop()
	setStopped(t, true, all...)
	// Every node Unknown and both zones at 0% health: the pass that saw
	// this entered master disruption mode (at the latest when this wait
	// saw it); two passes later it is done.
	var entered time.Time
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		_, unknown := nodeStates(t, all)
		small, _ := testenv.ZoneHealth(smallZone)
		large, _ := testenv.ZoneHealth(largeZone)
		entered = time.Now()
		return unknown == len(all) && small == 0 && large == 0,
			fmt.Sprintf("%d/%d Unknown, zone health %v%%/%v%%", unknown, len(all), small, large)
	})
	waitPasses(t)
	// The pass entering the mode takes back every taint its node lister
	// holds. A taint the controller's tainting loop wrote just before,
	// not yet in that lister, stays: how many depends on the informer's
	// lag, not on the controller's rules. What the mode forbids is a
	// taint written after it began (taints carry the second they were
	// added).
	tainted, _ := nodeStates(t, all)
	for _, name := range tainted {
		n, err := env.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range n.Spec.Taints {
			if tt.Key == corev1.TaintNodeUnreachable && tt.TimeAdded != nil && tt.TimeAdded.After(entered.Add(time.Second)) {
				t.Errorf("node %s tainted at %s, after master disruption mode began (by %s)", name, tt.TimeAdded.Format(time.RFC3339), entered.Format(time.RFC3339))
			}
		}
	}
	evictions := testenv.ZoneEvictions(smallZone) + testenv.ZoneEvictions(largeZone)
	// Two whole passes later nothing more was tainted.
	waitPasses(t)
	if now := testenv.ZoneEvictions(smallZone) + testenv.ZoneEvictions(largeZone); now != evictions {
		t.Errorf("all zones down: %v more nodes tainted NoExecute, want evictions stopped", now-evictions)
	}
	if after, _ := nodeStates(t, all); len(after) > len(tainted) {
		t.Errorf("all zones down: tainted %v, then %v", tainted, after)
	}
	for n, pod := range pods {
		if !rec.ever(n) && !env.PodAlive(t, ns, pod) {
			t.Errorf("pod %s evicted from %s, which was never tainted, while every zone was down", pod, n)
		}
	}
}
