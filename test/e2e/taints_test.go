package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/taints"
	"github.com/capstan-dev/capstan/internal/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestAdmTaintMatchesOc(t *testing.T) {
	addNode(t, "adm-node1", map[string]string{"e2e": "adm", "adm-disk": "ssd"})
	addNode(t, "adm-node2", map[string]string{"e2e": "adm"})
	kc := []string{"--kubeconfig", env.Kubeconfig}
	run := func(args ...string) string {
		return capstanOK(t, append(append([]string{"adm", "taint"}, args...), kc...)...)
	}

	if out := run("nodes", "adm-node1", "key1=value1:NoSchedule", "key1=value1:NoExecute", "key2=value2:NoSchedule"); out != "node/adm-node1 tainted\n" {
		t.Errorf("add: %q", out)
	}
	n := env.GetNode(t, "adm-node1")
	for _, want := range []corev1.Taint{{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoSchedule},
		{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoExecute}, {Key: "key2", Value: "value2", Effect: corev1.TaintEffectNoSchedule}} {
		if !taints.Has(n.Spec.Taints, want.Key, want.Effect) {
			t.Errorf("missing %v in %v", want, n.Spec.Taints)
		}
	}
	_, err := capstan(t, append([]string{"adm", "taint", "nodes", "adm-node1", "key2=other:NoSchedule"}, kc...)...)
	if err == nil || !strings.Contains(err.Error(), "already has key2 taint(s) with same effect(s) and --overwrite is false") {
		t.Errorf("existing taint without --overwrite: %v", err)
	}
	if out := run("nodes", "adm-node1", "key2=other:NoSchedule", "--overwrite"); out != "node/adm-node1 modified\n" {
		t.Errorf("overwrite: %q", out)
	}
	if out := run("nodes", "adm-node1", "key1:NoExecute-"); out != "node/adm-node1 untainted\n" {
		t.Errorf("remove one effect: %q", out)
	}
	n = env.GetNode(t, "adm-node1")
	if taints.Has(n.Spec.Taints, "key1", corev1.TaintEffectNoExecute) || !taints.Has(n.Spec.Taints, "key1", corev1.TaintEffectNoSchedule) {
		t.Errorf("after key1:NoExecute-: %v", n.Spec.Taints)
	}
	run("nodes", "adm-node1", "key1-", "key2-")
	if n = env.GetNode(t, "adm-node1"); taints.Has(n.Spec.Taints, "key1", corev1.TaintEffectNoSchedule) || taints.Has(n.Spec.Taints, "key2", corev1.TaintEffectNoSchedule) {
		t.Errorf("after key1- key2-: %v", n.Spec.Taints)
	}
	if out := run("nodes", "-l", "e2e=adm", "dedicated=groupName:NoSchedule"); out != "node/adm-node1 tainted\nnode/adm-node2 tainted\n" {
		t.Errorf("-l: %q", out)
	}
	if out := run("nodes", "-l", "adm-disk=ssd", "dedicated-"); out != "node/adm-node1 untainted\n" {
		t.Errorf("-l removal: %q", out)
	}

	for arg, want := range map[string]string{
		"key1=value1:Sometimes":                           `taint "key1=value1:Sometimes": effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute`,
		"key 1=value1:NoSchedule":                         `taint "key 1=value1:NoSchedule": key "key 1" must start with a letter or digit and contain only letters, digits, hyphens, dots and underscores`,
		"key1=" + strings.Repeat("v", 64) + ":NoSchedule": "value is 64 characters long, the limit is 63",
		"key1=value1":                                     "effect missing",
	} {
		before := env.GetNode(t, "adm-node2").ResourceVersion
		_, err := capstan(t, append([]string{"adm", "taint", "nodes", "adm-node2", "ok=fine:NoSchedule", arg}, kc...)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", arg, err, want)
		}
		if after := env.GetNode(t, "adm-node2").ResourceVersion; after != before {
			t.Errorf("%s: the node was changed despite the invalid taint", arg)
		}
	}
	if _, err := capstan(t, append([]string{"adm", "taint", "nodes", "adm-node2", "nope-"}, kc...)...); err == nil || !strings.Contains(err.Error(), `taint "nope" not found`) {
		t.Errorf("removing a missing taint: %v", err)
	}
}

// 7.7.1.1 and 7.7.1.4: NoExecute taints evict pods that do not tolerate
// them at once, pods with tolerationSeconds after that time, and never
// pods tolerating them forever; removing the taint in time cancels.
func TestNoExecuteTaintEvictions(t *testing.T) {
	ns := env.Namespace(t, "noexec")
	addNode(t, "noexec-node", map[string]string{"e2e": "noexec"})
	tol := func(seconds *int64) []corev1.Toleration {
		return []corev1.Toleration{{Key: "key1", Operator: corev1.TolerationOpEqual, Value: "value1", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}}
	}
	mk := func(name string, tols []corev1.Toleration) {
		p := simplePod(name, nil)
		p.Spec.NodeName = "noexec-node"
		p.Spec.Tolerations = tols
		env.CreatePod(t, ns, p)
		env.WaitPodRunning(t, ns, name)
	}
	mk("intolerant", nil)
	mk("for-3s", tol(ptr.To[int64](3)))
	mk("forever", tol(nil))
	mk("tolerate-all", []corev1.Toleration{{Operator: corev1.TolerationOpExists}})
	tainted := time.Now()
	capstanOK(t, "adm", "taint", "nodes", "noexec-node", "key1=value1:NoExecute", "--kubeconfig", env.Kubeconfig)

	env.WaitPodGone(t, ns, "intolerant", 10*time.Second)
	if !env.PodAlive(t, ns, "for-3s") {
		t.Errorf("for-3s evicted after %s, before its 3s", time.Since(tainted))
	}
	env.WaitPodGone(t, ns, "for-3s", 20*time.Second)
	if d := time.Since(tainted); d < 3*time.Second {
		t.Errorf("for-3s evicted after %s", d)
	}
	// The controller decided on every pod of the node when the taint came
	// (it evicted intolerant at once): the two that tolerate it for ever
	// are never scheduled for eviction.
	for _, name := range []string{"forever", "tolerate-all"} {
		if !env.PodAlive(t, ns, name) {
			t.Errorf("%s was evicted", name)
		}
	}

	// The 3600-second example at test speed: the taint goes before the
	// toleration runs out, and the pod stays. A second taint, key2, stays
	// on: for-10s tolerates it for ever, witness for 12s, so once witness
	// is evicted, for-10s's 10 seconds have run out too. brief, gone after
	// a second, shows the controller saw the taints before key1 goes.
	capstanOK(t, "adm", "taint", "nodes", "noexec-node", "key1-", "--kubeconfig", env.Kubeconfig)
	key2 := func(seconds *int64) corev1.Toleration {
		return corev1.Toleration{Key: "key2", Operator: corev1.TolerationOpEqual, Value: "value2", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
	}
	mk("for-10s", append(tol(ptr.To[int64](10)), key2(nil)))
	mk("witness", append(tol(nil), key2(ptr.To[int64](12))))
	mk("brief", append(tol(ptr.To[int64](1)), key2(nil)))
	capstanOK(t, "adm", "taint", "nodes", "noexec-node", "key1=value1:NoExecute", "key2=value2:NoExecute", "--kubeconfig", env.Kubeconfig)
	env.WaitPodGone(t, ns, "brief", 20*time.Second)
	capstanOK(t, "adm", "taint", "nodes", "noexec-node", "key1-", "--kubeconfig", env.Kubeconfig)
	env.WaitPodGone(t, ns, "witness", 30*time.Second)
	if !env.PodAlive(t, ns, "for-10s") {
		t.Errorf("for-10s evicted although the taint was removed before its 10s ran out")
	}
	// forever tolerates key1 only: key2 evicted it at once.
	if env.PodAlive(t, ns, "forever") {
		t.Error("forever survived key2, which it does not tolerate")
	}
	capstanOK(t, "adm", "taint", "nodes", "noexec-node", "key2-", "--kubeconfig", env.Kubeconfig)

	// Other taints: tolerate-all survives them; a pod tolerating none of
	// them goes at once, decided in the same pass. It tolerates key2, just
	// removed: the taint controller may not have seen the removal yet.
	mk("intolerant-2", []corev1.Toleration{key2(nil)})
	capstanOK(t, "adm", "taint", "nodes", "noexec-node", "a=b:NoExecute", "c=d:NoSchedule", "--kubeconfig", env.Kubeconfig)
	env.WaitPodGone(t, ns, "intolerant-2", 10*time.Second)
	if !env.PodAlive(t, ns, "tolerate-all") {
		t.Errorf("tolerate-all evicted")
	}
}

// 7.7.1.4: unreachable nodes are tainted NoExecute by the node lifecycle
// controller; pods go after their (default) tolerationSeconds, DaemonSet
// pods never.
func TestUnreachableNodeEvictions(t *testing.T) {
	ns := env.Namespace(t, "unreach")
	// A zone of its own: the node lifecycle controller's per-zone eviction
	// rate and disruption state then depend on this node alone.
	addNodeInZone(t, "unreach-node", "zone-unreach", map[string]string{"e2e": "unreach"})
	short := simplePod("short", nil)
	short.Spec.NodeName = "unreach-node"
	short.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)}}
	env.CreatePod(t, ns, short)
	defaulted := simplePod("defaulted", nil)
	defaulted.Spec.NodeName = "unreach-node"
	env.CreatePod(t, ns, defaulted)
	// DefaultTolerationSeconds gave it 300s for not-ready and unreachable;
	// the pod that set its own unreachable toleration keeps it.
	got, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "defaulted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{corev1.TaintNodeNotReady: 300, corev1.TaintNodeUnreachable: 300}
	for _, tl := range got.Spec.Tolerations {
		if s, ok := want[tl.Key]; ok && tl.TolerationSeconds != nil && *tl.TolerationSeconds == s && tl.Effect == corev1.TaintEffectNoExecute {
			delete(want, tl.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("default tolerations missing %v: %v", want, got.Spec.Tolerations)
	}
	gotShort, _ := env.Client.CoreV1().Pods(ns).Get(context.Background(), "short", metav1.GetOptions{})
	for _, tl := range gotShort.Spec.Tolerations {
		if tl.Key == corev1.TaintNodeUnreachable && (tl.TolerationSeconds == nil || *tl.TolerationSeconds != 2) {
			t.Errorf("the pod's own unreachable toleration was changed: %v", tl)
		}
	}

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"e2e": "unreach"}, Containers: simplePod("", nil).Spec.Containers}},
		},
	}
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var dsPod string
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		pods, _ := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=agent"})
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				dsPod = p.Name
				return true, ""
			}
		}
		return false, "daemon pod not running"
	})
	env.WaitPodRunning(t, ns, "short")
	env.WaitPodRunning(t, ns, "defaulted")

	capstanOK(t, "sim", "node", "stop", "unreach-node", "--kubeconfig", env.Kubeconfig)
	t.Cleanup(func() { capstan(t, "sim", "node", "start", "unreach-node", "--kubeconfig", env.Kubeconfig) })
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n := env.GetNode(t, "unreach-node")
		return taints.Has(n.Spec.Taints, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute), fmt.Sprintf("taints %v", n.Spec.Taints)
	})
	env.WaitPodGone(t, ns, "short", 20*time.Second)
	// The controller decided on every pod of the node when the taint came:
	// short after its 2s, defaulted after 300s, the daemon pod never.
	if !env.PodAlive(t, ns, "defaulted") {
		t.Errorf("pod with the default 300s toleration evicted within seconds")
	}
	if !env.PodAlive(t, ns, dsPod) {
		t.Errorf("daemon pod %s evicted from an unreachable node", dsPod)
	}
	p, _ := env.Client.CoreV1().Pods(ns).Get(context.Background(), dsPod, metav1.GetOptions{})
	auto := map[string]bool{}
	for _, tl := range p.Spec.Tolerations {
		if tl.Effect == corev1.TaintEffectNoExecute && tl.TolerationSeconds == nil {
			auto[tl.Key] = true
		}
	}
	if !auto[corev1.TaintNodeUnreachable] || !auto[corev1.TaintNodeNotReady] {
		t.Errorf("daemon pod tolerations %v lack the automatic NoExecute ones", p.Spec.Tolerations)
	}
}

// 7.7.1.3: nodes under pressure are tainted by condition and the scheduler
// avoids them.
func TestSchedulerAvoidsNodesTaintedByCondition(t *testing.T) {
	ns := env.Namespace(t, "bycond")
	addNode(t, "cond-ok", map[string]string{"e2e": "bycond"})
	addNode(t, "cond-bad", map[string]string{"e2e": "bycond"})
	for _, cond := range []string{"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"} {
		capstanOK(t, "sim", "node", "set-condition", "cond-bad", cond+"=True", "--kubeconfig", env.Kubeconfig)
		// Wait until the scheduler's cache has the taint by condition.
		schedulerSees(t, ns, "cond-bad", false, "untolerated taint")
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("%s-%d", strings.ToLower(cond), i)
			p := simplePod(name, nil)
			p.Spec.NodeSelector = map[string]string{"e2e": "bycond"}
			env.CreatePod(t, ns, p)
			if node := waitScheduled(t, ns, name); node != "cond-ok" {
				t.Errorf("%s: pod on %s, which has %s", name, node, cond)
			}
		}
		capstanOK(t, "sim", "node", "set-condition", "cond-bad", cond+"=False", "--kubeconfig", env.Kubeconfig)
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			n := env.GetNode(t, "cond-bad")
			return len(n.Spec.Taints) == 0, fmt.Sprintf("taints %v", n.Spec.Taints)
		})
		schedulerSees(t, ns, "cond-bad", true, "")
	}
	capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "cordon", "cond-bad")
	schedulerSees(t, ns, "cond-bad", false, algorithm.ReasonNodeUnschedulable)
	p := simplePod("cordoned", nil)
	p.Spec.NodeSelector = map[string]string{"e2e": "bycond"}
	env.CreatePod(t, ns, p)
	if node := waitScheduled(t, ns, "cordoned"); node != "cond-ok" {
		t.Errorf("pod on cordoned %s", node)
	}
}
