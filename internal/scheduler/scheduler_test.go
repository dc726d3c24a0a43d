package scheduler

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"k8s.io/client-go/util/retry"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

func testNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		}}
}

func podsOn(c *nodeCache, node string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ni := c.infos[node]; ni != nil {
		return len(ni.Pods)
	}
	return 0
}

func assume(c *nodeCache, p *corev1.Pod, node string) {
	c.mu.Lock()
	c.assumeLocked(p, node, nil)
	c.mu.Unlock()
}

func TestCacheAssumeAndConfirm(t *testing.T) {
	c := newNodeCache(nil)
	c.setNode(testNode("n"))
	p := qpod("p", 0)
	assume(c, p, "n")
	if got := podsOn(c, "n"); got != 1 {
		t.Fatalf("%d pods after assume", got)
	}
	// The binding failed: the assumption goes.
	c.unassume(p)
	if got := podsOn(c, "n"); got != 0 {
		t.Fatalf("%d pods after unassume", got)
	}
	// Assumed, then observed bound: counted once.
	assume(c, p, "n")
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n"
	c.accountPod(bound)
	if got := podsOn(c, "n"); got != 1 {
		t.Fatalf("%d pods after confirmation", got)
	}
	c.unassume(p) // no longer an assumption: kept
	if got := podsOn(c, "n"); got != 1 {
		t.Fatalf("%d pods after a late unassume", got)
	}
	c.removeNode("n")
	if c.hasNode("n") || len(c.list) != 0 {
		t.Errorf("node still listed")
	}
	c.forgetPod(bound)
	if _, ok := c.infos["n"]; ok {
		t.Errorf("placeholder of a deleted node kept")
	}
}

// An assumed pod whose binding was accepted but that never shows up bound
// gives its place back 15 minutes after the binding finished, not before.
func TestAssumedPodExpires(t *testing.T) {
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	c := newNodeCache(nil)
	c.setNode(testNode("n"))
	p := qpod("p", 0)
	assume(c, p, "n")
	// Not expiring while the binding is under way, however long it takes.
	if got := c.expireAssumed(now.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("expired before the binding finished: %v", got)
	}
	c.finishBinding(p, now)
	if got := c.expireAssumed(now.Add(assumedPodExpiry - time.Second)); len(got) != 0 {
		t.Fatalf("expired early: %v", got)
	}
	got := c.expireAssumed(now.Add(assumedPodExpiry))
	if len(got) != 1 || got[0].Name != "p" || podsOn(c, "n") != 0 {
		t.Fatalf("expired %v, %d pods left on the node", got, podsOn(c, "n"))
	}
	// A confirmed pod never expires.
	q := qpod("q", 0)
	assume(c, q, "n")
	c.finishBinding(q, now)
	bound := q.DeepCopy()
	bound.Spec.NodeName = "n"
	c.accountPod(bound)
	if got := c.expireAssumed(now.Add(24 * time.Hour)); len(got) != 0 || podsOn(c, "n") != 1 {
		t.Fatalf("confirmed pod expired: %v", got)
	}
}

// Volumes a decision reserved stay out of the next decisions' reach until
// the API shows them bound, or the decision is given up.
func TestCacheReservesVolumes(t *testing.T) {
	c := newNodeCache(nil)
	c.setNode(testNode("n"))
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"}}
	reserved := func() map[string]string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return maps.Clone(c.snapshotLocked(algorithm.Listers{}).AssumedVolumes)
	}
	p := qpod("p", 0)
	c.mu.Lock()
	c.assumeLocked(p, "n", []algorithm.VolumeBinding{{Claim: claim, Volume: "pv-1", Node: "n"}})
	c.mu.Unlock()
	if got := reserved(); got["pv-1"] != "ns/data" {
		t.Fatalf("reserved %v", got)
	}
	c.unassume(p) // the binding failed
	if got := reserved(); len(got) != 0 {
		t.Fatalf("reserved after unassume: %v", got)
	}
	c.mu.Lock()
	c.assumeLocked(p, "n", []algorithm.VolumeBinding{{Claim: claim, Volume: "pv-1", Node: "n"}})
	c.mu.Unlock()
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n"
	c.accountPod(bound)
	if got := reserved(); got["pv-1"] != "ns/data" {
		t.Fatalf("reservation dropped before the volume showed bound: %v", got)
	}
	c.volumeObserved(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "data"}}})
	if got := reserved(); len(got) != 0 {
		t.Fatalf("reserved after the volume showed bound: %v", got)
	}
}

func newTestScheduler(t *testing.T, objs ...runtime.Object) (*Scheduler, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	s, err := New(client, Config{Seed: 1, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}

// A deleted pod leaves the cache whatever the scheduler last saw of it:
// here it was only assumed, and its final state is unbound.
func TestDeletedPodAlwaysLeavesTheCache(t *testing.T) {
	s, _ := newTestScheduler(t)
	s.cache.setNode(testNode("n"))
	p := qpod("p", 0)
	assume(s.cache, p, "n")
	s.podDeleted(p) // final state without a node name
	if got := podsOn(s.cache, "n"); got != 0 {
		t.Fatalf("%d pods on the node after the deletion", got)
	}
	// Observed bound, deleted as a tombstone.
	bound := qpod("b", 0)
	bound.Spec.NodeName = "n"
	s.podChanged(nil, bound)
	stale := bound.DeepCopy()
	stale.Spec.NodeName = ""
	s.podDeleted(stale)
	if got := podsOn(s.cache, "n"); got != 0 {
		t.Fatalf("%d pods on the node after a stale deletion", got)
	}
}

// A pod bound by someone else while this scheduler is deciding for it
// leaves the queue for good.
func TestPodBoundElsewhereWhileInFlight(t *testing.T) {
	s, _ := newTestScheduler(t)
	p := qpod("p", 0)
	p.Spec.SchedulerName = DefaultSchedulerName
	s.podChanged(nil, p)
	qp, _, cycle, _ := s.queue.Pop()
	bound := p.DeepCopy()
	bound.Spec.NodeName = "elsewhere"
	bound.ResourceVersion = "2"
	s.podChanged(p, bound)
	if s.queue.Requeue(qp, cycle, true) || s.queue.Len() != 0 {
		t.Fatal("a pod bound elsewhere came back to the queue")
	}
}

// Pods with scheduling gates wait, unqueued and counted as gated in
// scheduler_pending_pods, until the last gate goes.
func TestGatedPodsWaitForTheirGates(t *testing.T) {
	s, _ := newTestScheduler(t)
	gated := func(want int) {
		t.Helper()
		text := fmt.Sprintf("# HELP scheduler_pending_pods %s\n# TYPE scheduler_pending_pods gauge\n", pendingHelp)
		for _, q := range []string{"active", "backoff", "gated", "unschedulable"} {
			n := 0
			switch q {
			case "active":
				n = s.queue.Len()
			case "gated":
				n = want
			}
			text += fmt.Sprintf("scheduler_pending_pods{queue=%q} %d\n", q, n)
		}
		if err := testutil.CollectAndCompare(&pendingCollector{q: s.queue}, strings.NewReader(text)); err != nil {
			t.Error(err)
		}
	}
	p := qpod("p", 0)
	p.Spec.SchedulerName = DefaultSchedulerName
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
	s.podChanged(nil, p)
	if s.queue.Len() != 0 {
		t.Fatal("gated pod queued")
	}
	gated(1)
	open := p.DeepCopy()
	open.Spec.SchedulingGates = nil
	open.ResourceVersion = "2"
	s.podChanged(p, open)
	if s.queue.Len() != 1 {
		t.Fatal("pod not queued once its gates were gone")
	}
	gated(0)
	other := qpod("q", 0)
	other.Spec.SchedulerName = DefaultSchedulerName
	other.Spec.SchedulingGates = p.Spec.SchedulingGates
	s.podChanged(nil, other)
	gated(1)
	s.podDeleted(other)
	gated(0)
}

// apiserverPods makes the fake clientset keep pods as the apiserver does:
// every write gets a new resourceVersion, an update of a stale version is
// a conflict, and pods/binding sets the node once.
func apiserverPods(client *fake.Clientset) {
	var mu sync.Mutex
	rv := 0
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	next := func(p *corev1.Pod) {
		rv++
		p.ResourceVersion = fmt.Sprint(rv)
	}
	current := func(ns, name string) (*corev1.Pod, error) {
		obj, err := client.Tracker().Get(gvr, ns, name)
		if err != nil {
			return nil, err
		}
		return obj.(*corev1.Pod).DeepCopy(), nil
	}
	client.PrependReactor("*", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch action.GetVerb() {
		case "create":
			a := action.(k8stesting.CreateAction)
			if action.GetSubresource() == "binding" {
				b := a.GetObject().(*corev1.Binding)
				pod, err := current(b.Namespace, b.Name)
				if err != nil {
					return true, nil, err
				}
				if pod.Spec.NodeName != "" {
					return true, nil, apierrors.NewConflict(gvr.GroupResource(), b.Name, fmt.Errorf("pod %s is already assigned to node %q", b.Name, pod.Spec.NodeName))
				}
				pod.Spec.NodeName = b.Target.Name
				next(pod)
				return true, nil, client.Tracker().Update(gvr, pod, b.Namespace)
			}
			pod := a.GetObject().(*corev1.Pod).DeepCopy()
			next(pod)
			return true, pod, client.Tracker().Create(gvr, pod, a.GetNamespace())
		case "update":
			a := action.(k8stesting.UpdateAction)
			pod := a.GetObject().(*corev1.Pod).DeepCopy()
			cur, err := current(pod.Namespace, pod.Name)
			if err != nil {
				return true, nil, err
			}
			if cur.ResourceVersion != pod.ResourceVersion {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), pod.Name, fmt.Errorf("the object has been modified"))
			}
			next(pod)
			return true, pod, client.Tracker().Update(gvr, pod, a.GetNamespace())
		}
		return false, nil, nil
	})
}

// The scheduling loop, its bind workers and the informers' handlers run
// concurrently while pods are created, changed again and again while they
// are being scheduled, and deleted: run with -race, this proves the queue
// and cache are shared safely; every surviving pod ends up bound, and no
// deleted pod stays queued.
// runScheduler runs a scheduler on client until the test ends, once its
// caches have synced.
func runScheduler(t *testing.T, client *fake.Clientset) (*Scheduler, context.Context) {
	t.Helper()
	apiserverPods(client)
	s, err := New(client, Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		t.Fatal("caches did not sync")
	}
	return s, ctx
}

func TestSchedulerLoopUnderConcurrentChanges(t *testing.T) {
	client := fake.NewClientset(testNode("small"))
	s, ctx := runScheduler(t, client)
	const n, changes = 24, 3
	pods := client.CoreV1().Pods("ns")
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Too big for the small node: each change sends the pod
			// through another attempt.
			p := qpod(fmt.Sprintf("p%d", i), int32(i%3))
			p.UID = ""
			p.Spec.SchedulerName = DefaultSchedulerName
			p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}}}}
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Error(err)
				return
			}
			for c := range changes {
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					got.Labels = map[string]string{"change": fmt.Sprint(c)}
					_, err = pods.Update(ctx, got, metav1.UpdateOptions{})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
			if i%4 == 0 {
				if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	big := testNode("big")
	big.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1000")
	if _, err := client.CoreV1().Nodes().Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := waitfor.Poll(ctx, 20*time.Millisecond, 30*time.Second, waitfor.Simple(func(ctx context.Context) (bool, string) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		unbound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "big" {
				unbound++
			}
		}
		return unbound == 0 && len(list.Items) == n-n/4, fmt.Sprintf("%d of %d pods not on the big node", unbound, len(list.Items))
	}))
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is left queued: deleted pods did not come back.
	if err := waitfor.Poll(ctx, 20*time.Millisecond, 10*time.Second, waitfor.Simple(func(context.Context) (bool, string) {
		return s.queue.Len() == 0, fmt.Sprintf("%d pods still queued", s.queue.Len())
	})); err != nil {
		t.Fatal(err)
	}
}

// The apiserver answers a binding whose etcd write failed with a 409
// ("Operation cannot be fulfilled on pods/binding: etcdserver: request
// timed out"), like one for a pod already bound. The pod, still pending,
// must be tried again, never dropped: a dropped pod waits for ever.
func TestBindingConflictFromEtcdIsTriedAgain(t *testing.T) {
	p := qpod("p", 0)
	p.Spec.SchedulerName = DefaultSchedulerName
	s, client := newTestScheduler(t, p)
	apiserverPods(client)
	failed := false
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" || failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, apierrors.NewConflict(corev1.Resource("pods/binding"), "p", fmt.Errorf("etcdserver: request timed out, possibly due to previous leader failure"))
	})
	s.cache.setNode(testNode("n"))
	s.podChanged(nil, p)
	ctx := context.Background()
	qp, pod, cycle, _ := s.queue.Pop()
	s.bind(ctx, bindRequest{qp: qp, pod: pod, cycle: cycle, node: "n"})
	if !failed {
		t.Fatal("the failing binding was never attempted")
	}
	if s.queue.Len() != 1 {
		t.Fatal("a pod whose binding failed in etcd left the queue")
	}
	if got := podsOn(s.cache, "n"); got != 0 {
		t.Fatalf("%d pods still assumed on the node after the failed binding", got)
	}
	s.cfg.Clock.(*clocktesting.FakeClock).Step(initialBackoff)
	if activeLen(s.queue) != 1 {
		t.Fatal("the pod did not come back after its backoff")
	}
	qp, pod, cycle, _ = s.queue.Pop()
	s.bind(ctx, bindRequest{qp: qp, pod: pod, cycle: cycle, node: "n"})
	got, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || got.Spec.NodeName != "n" {
		t.Fatalf("pod after the second attempt: node %q, err %v", got.Spec.NodeName, err)
	}
}

// Nominations follow the pod: set, moved, dropped when it is placed, and
// seen by the snapshots decisions read.
func TestCacheKeepsNominations(t *testing.T) {
	c := newNodeCache(nil)
	c.setNode(testNode("a"))
	c.setNode(testNode("b"))
	p := qpod("waiting", 100)
	nominated := func() map[string]int {
		c.mu.Lock()
		defer c.mu.Unlock()
		out := map[string]int{}
		for node, pods := range c.snapshotLocked(algorithm.Listers{}).Nominated {
			out[node] = len(pods)
		}
		return out
	}
	c.nominate(p, "a")
	if got := nominated(); !maps.Equal(got, map[string]int{"a": 1}) {
		t.Fatalf("nominated %v, want a:1", got)
	}
	c.nominate(p, "b")
	if got := nominated(); !maps.Equal(got, map[string]int{"b": 1}) {
		t.Fatalf("after moving: nominated %v, want b:1", got)
	}
	if low := c.nominatedBelow("b", 1000); len(low) != 1 || c.nominatedBelow("b", 100) != nil {
		t.Fatalf("nominatedBelow: %d below 1000, %d below 100", len(low), len(c.nominatedBelow("b", 100)))
	}
	assume(c, p, "b")
	if got := nominated(); len(got) != 0 {
		t.Fatalf("after placing it: nominated %v", got)
	}
}

// A pod that fits nowhere preempts: run with -race, the preemption's
// goroutine, the loop and the informers share the cache and queue safely.
// The fewest victims go (two of four 1-CPU pods for 2 CPUs on a 4-CPU
// node), each marked DisruptionTarget before it is deleted, and the
// preemptor binds where it was nominated.
func TestPreemptionMakesRoomAndBinds(t *testing.T) {
	client := fake.NewClientset(testNode("small"))
	s, ctx := runScheduler(t, client)
	pods := client.CoreV1().Pods("ns")
	request := func(p *corev1.Pod, cpu string) *corev1.Pod {
		p.UID = types.UID("uid-" + p.Name)
		p.Spec.SchedulerName = DefaultSchedulerName
		p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}
		return p
	}
	for i := range 4 {
		p := request(qpod(fmt.Sprintf("low-%d", i), -10), "1")
		p.Spec.NodeName = "small"
		p.Status.StartTime = &metav1.Time{Time: time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC)}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var marked sync.Map
	client.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		name := action.(k8stesting.DeleteAction).GetName()
		p, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns", name)
		if err == nil {
			for _, c := range p.(*corev1.Pod).Status.Conditions {
				if c.Type == corev1.DisruptionTarget && c.Reason == corev1.PodReasonPreemptionByScheduler {
					marked.Store(name, true)
				}
			}
		}
		return false, nil, nil
	})
	if _, err := pods.Create(ctx, request(qpod("high", 100), "2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := waitfor.Poll(ctx, 20*time.Millisecond, 30*time.Second, waitfor.Simple(func(ctx context.Context) (bool, string) {
		high, err := pods.Get(ctx, "high", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return high.Spec.NodeName == "small", fmt.Sprintf("high on %q, nominated %q", high.Spec.NodeName, high.Status.NominatedNodeName)
	}))
	if err != nil {
		t.Fatal(err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range list.Items {
		left = append(left, p.Name)
	}
	// The oldest are the most important of equal priority: the two
	// youngest go.
	if strings.Join(left, ",") != "high,low-0,low-1" {
		t.Errorf("pods left %v, want high, low-0, low-1", left)
	}
	for _, victim := range []string{"low-2", "low-3"} {
		if _, ok := marked.Load(victim); !ok {
			t.Errorf("%s was deleted without the DisruptionTarget condition", victim)
		}
	}
	if got := testutil.ToFloat64(s.metrics.preemptionAttempts); got < 1 {
		t.Errorf("scheduler_preemption_attempts_total %g", got)
	}
}
