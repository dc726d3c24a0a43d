package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/controller/nodelifecycle"
	"k8s.io/kubernetes/pkg/controller/tainteviction"
	"k8s.io/utils/ptr"
)

// lifecycle is what the node lifecycle and taint eviction controllers did
// to a cluster that lost a zone, in the bubble's time since the loss.
type lifecycle struct {
	notReady map[string]time.Duration // node: Ready no longer True
	tainted  map[string]time.Duration // node: the NoExecute unreachable taint
	evicted  map[string]time.Duration // pod: deleted
	podsDown map[string]time.Duration // pod: Ready False
}

const (
	// lostPeriod is the monitor period: not a multiple of the taint
	// queue's 100 ms, so that no monitor pass comes at the instant of a
	// tainting pass, whose order the bubble leaves to chance, in either
	// path. The grace is whole periods, as upstream's (40 s or 50 s of
	// 5 s) are.
	lostPeriod   = 5*time.Second + 3*time.Millisecond
	lostGrace    = 8 * lostPeriod
	lostRenewal  = 10 * time.Second
	lostSettling = 3 * time.Minute
)

// TestTheLostNodeShortcutTaintsAndEvictsAsTheController runs upstream's
// node lifecycle and taint eviction controllers twice on the loss of a
// zone: once unmodified (the lost kubelets' leases go stale for the
// grace period), once with an hour's grace and the simulator's shortcut
// (DeclareNodeLost when Lost.after says). The taints (rate-limited in
// the zone, one every 10 s) and the evictions must come at the same
// instants, the NotReady conditions within a monitor period. The
// controllers run in a synctest bubble, so the instants are exact.
func TestTheLostNodeShortcutTaintsAndEvictsAsTheController(t *testing.T) {
	unmodified := runLifecycle(t, false)
	shortcut := runLifecycle(t, true)
	t.Logf("unmodified: %+v", unmodified)
	t.Logf("shortcut:   %+v", shortcut)

	if len(unmodified.tainted) != 4 || len(unmodified.evicted) != 8 {
		t.Fatalf("the unmodified controllers tainted %d nodes and evicted %d pods; the test wants the 4 nodes of the lost zone tainted and its 8 evictable pods evicted", len(unmodified.tainted), len(unmodified.evicted))
	}
	// The zone is fully disrupted: its nodes are tainted at 0.1 a second.
	times := sortedTimes(unmodified.tainted)
	for i := 1; i < len(times); i++ {
		if gap := times[i] - times[i-1]; gap < 9*time.Second {
			t.Errorf("the unmodified controller tainted two nodes %s apart; a fully disrupted zone is tainted at 0.1 nodes a second", gap)
		}
	}
	same := func(what string, a, b map[string]time.Duration, within time.Duration) {
		t.Helper()
		if len(a) != len(b) {
			t.Errorf("%s: %d unmodified, %d with the shortcut", what, len(a), len(b))
		}
		for k, at := range a {
			bt, ok := b[k]
			switch {
			case !ok:
				t.Errorf("%s: %s at %s unmodified, never with the shortcut", what, k, at)
			case bt-at > within || at-bt > within:
				t.Errorf("%s: %s at %s unmodified, at %s with the shortcut", what, k, at, bt)
			}
		}
	}
	// Which node of a zone is tainted first is the controller's queue's
	// order, in either path: the instants are the same, and each pod is
	// evicted the same time after its node's taint.
	if a, b := sortedTimes(unmodified.tainted), sortedTimes(shortcut.tainted); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("the zone's nodes were tainted at %v unmodified, at %v with the shortcut", a, b)
	}
	sinceTaint := func(c lifecycle) map[string]time.Duration {
		out := map[string]time.Duration{}
		for pod, at := range c.evicted {
			node := pod[:len("node-a0")]
			out[pod] = at - c.tainted[node]
		}
		return out
	}
	same("eviction after the node's taint", sinceTaint(unmodified), sinceTaint(shortcut), 0)
	same("node not ready", unmodified.notReady, shortcut.notReady, lostPeriod)
	same("pod not ready", unmodified.podsDown, shortcut.podsDown, lostPeriod)
}

func sortedTimes(m map[string]time.Duration) []time.Duration {
	var out []time.Duration
	for _, d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// runLifecycle runs the controllers in a bubble over three zones of four
// nodes, each node with a pod that tolerates unreachable nodes for 60 s,
// one that does not, and one that tolerates them for ever, and loses
// zone a at 2 minutes.
func runLifecycle(t *testing.T, shortcut bool) lifecycle {
	t.Helper()
	got := lifecycle{notReady: map[string]time.Duration{}, tainted: map[string]time.Duration{},
		evicted: map[string]time.Duration{}, podsDown: map[string]time.Duration{}}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var objs []runtime.Object
		lost := Lost{Grace: lostGrace, MonitorPeriod: lostPeriod, Renewal: lostRenewal}
		var names []string
		for _, zone := range []string{"a", "b", "c"} {
			for i := range 4 {
				name := fmt.Sprintf("node-%s%d", zone, i)
				names = append(names, name)
				objs = append(objs, lifecycleNode(name, zone, start))
				for _, p := range lifecyclePods(name) {
					objs = append(objs, p)
				}
			}
		}
		client := fake.NewClientset(objs...)
		// The node lifecycle controller posts its events through the
		// core client's REST client, which the fake has not.
		controllerClient := eventlessClient{client}
		ctx, cancel := context.WithCancel(t.Context())
		factory := informers.NewSharedInformerFactory(client, 0)
		grace := lostGrace
		if shortcut {
			grace = time.Hour
		}
		nc, err := nodelifecycle.NewNodeLifecycleController(ctx, factory.Coordination().V1().Leases(), factory.Core().V1().Pods(),
			factory.Core().V1().Nodes(), factory.Apps().V1().DaemonSets(), controllerClient, lostPeriod, grace, grace, 0.1, 0.01, 50, 0.55)
		if err != nil {
			t.Fatal(err)
		}
		te, err := tainteviction.New(ctx, client, factory.Core().V1().Pods(), factory.Core().V1().Nodes(), "taint-eviction-controller")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		lossAt := start.Add(2 * time.Minute)
		since := func() time.Duration { return time.Since(lossAt) }
		first := func(m map[string]time.Duration, k string) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := m[k]; !ok {
				m[k] = since()
			}
		}
		_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
			n := obj.(*corev1.Node)
			if c := condition(n, corev1.NodeReady); c != nil && c.Status != corev1.ConditionTrue {
				first(got.notReady, n.Name)
			}
			for _, taint := range n.Spec.Taints {
				if taint.Key == corev1.TaintNodeUnreachable && taint.Effect == corev1.TaintEffectNoExecute {
					first(got.tainted, n.Name)
				}
			}
		}})
		_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, obj any) {
				p := obj.(*corev1.Pod)
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
						first(got.podsDown, p.Name)
					}
				}
			},
			DeleteFunc: func(obj any) {
				if p, ok := obj.(*corev1.Pod); ok {
					first(got.evicted, p.Name)
				}
			},
		})
		factory.Start(ctx.Done())
		factory.WaitForCacheSync(ctx.Done())
		var wg sync.WaitGroup
		wg.Go(func() { nc.Run(ctx) })
		wg.Go(func() { te.Run(ctx) })

		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "node-controller"})
		for _, name := range names {
			// Each kubelet renews every 10 s; those of zone a last
			// renewed when the simulator takes it they did.
			firstRenewal := lossAt.Add(-lost.lastRenewal(name)).Sub(start) % lostRenewal
			inLostZone := name[len("node-")] == 'a'
			wg.Go(func() {
				renew := time.NewTimer(firstRenewal)
				defer renew.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-renew.C:
					}
					if inLostZone && !time.Now().Before(lossAt) {
						break
					}
					now := metav1.NewMicroTime(time.Now())
					if err := renewLease(ctx, client, name, now); err != nil {
						t.Errorf("renewing the lease of %s: %v", name, err)
						return
					}
					renew.Reset(lostRenewal)
				}
				if !shortcut {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(lossAt.Add(lost.after(name)))):
				}
				node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				all, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				var pods []*corev1.Pod
				for i := range all.Items {
					if all.Items[i].Spec.NodeName == name {
						pods = append(pods, &all.Items[i])
					}
				}
				if declared, err := DeclareNodeLost(ctx, client, recorder, node, pods, time.Now()); err != nil || !declared {
					t.Errorf("declaring %s lost: declared %t, %v", name, declared, err)
				}
			})
		}
		time.Sleep(time.Until(lossAt.Add(lostSettling)))
		cancel()
		wg.Wait()
		broadcaster.Shutdown()
		factory.Shutdown()
	})
	return got
}

func renewLease(ctx context.Context, client *fake.Clientset, name string, now metav1.MicroTime) error {
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func lifecycleNode(name, zone string, at time.Time) *corev1.Node {
	t := metav1.NewTime(at)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: t,
		Labels: map[string]string{corev1.LabelTopologyZone: zone, corev1.LabelTopologyRegion: "r"}}}
	for _, c := range nodeConditionsLost {
		status := corev1.ConditionFalse
		if c == corev1.NodeReady {
			status = corev1.ConditionTrue
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: status, LastHeartbeatTime: t, LastTransitionTime: t})
	}
	return n
}

func lifecyclePods(node string) []*corev1.Pod {
	toleration := func(seconds *int64) []corev1.Toleration {
		return []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}}
	}
	var pods []*corev1.Pod
	for suffix, tolerations := range map[string][]corev1.Toleration{
		"tolerates-60s": toleration(ptr.To(int64(60))),
		"intolerant":    nil,
		"tolerates-all": toleration(nil),
	} {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + suffix, Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: node, Tolerations: tolerations},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	return pods
}

// eventlessClient is a fake clientset whose core client has a REST client
// that takes every request and keeps nothing.
type eventlessClient struct{ *fake.Clientset }

func (c eventlessClient) CoreV1() typedcorev1.CoreV1Interface {
	return eventlessCore{c.Clientset.CoreV1()}
}

type eventlessCore struct{ typedcorev1.CoreV1Interface }

func (eventlessCore) RESTClient() rest.Interface {
	rc, err := rest.RESTClientFor(&rest.Config{Host: "http://events.invalid", APIPath: "/api",
		ContentConfig: rest.ContentConfig{GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()},
		Transport: roundTrip(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader("{}"))}, nil
		})})
	if err != nil {
		panic(err)
	}
	return rc
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
