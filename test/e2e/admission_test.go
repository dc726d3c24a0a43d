package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/testenv"
)

const (
	nodeSelectorAnnotation       = "scheduler.alpha.kubernetes.io/node-selector"
	defaultTolerationsAnnotation = "scheduler.alpha.kubernetes.io/defaultTolerations"
	tolerationsWhitelistAnnot    = "scheduler.alpha.kubernetes.io/tolerationsWhitelist"
)

// namespaceWith creates a namespace with annotations, removed at the end.
func namespaceWith(t *testing.T, name string, annotations map[string]string) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if err := cluster.WaitForServiceAccount(ctx, env.Client, name, 60e9); err != nil {
		t.Fatal(err)
	}
	return name
}

// 14.4.4: the project's node selector is merged into its pods; a pod
// whose selector conflicts with it is rejected.
func TestPodNodeSelectorProjectExample(t *testing.T) {
	ns := namespaceWith(t, "ns1", map[string]string{nodeSelectorAnnotation: "env=test,infra=fedora"})
	addNode(t, "fedora-node", map[string]string{"env": "test", "infra": "fedora", "os": "fedora"})
	ctx := context.Background()
	p := simplePod("hello-pod", map[string]string{"name": "hello-pod"})
	p.Spec.NodeSelector = map[string]string{"env": "test", "os": "fedora"}
	created, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"env": "test", "infra": "fedora", "os": "fedora"}
	if fmt.Sprint(created.Spec.NodeSelector) != fmt.Sprint(want) {
		t.Errorf("merged nodeSelector %v, want %v", created.Spec.NodeSelector, want)
	}
	if n := waitScheduled(t, ns, "hello-pod"); n != "fedora-node" {
		t.Errorf("hello-pod on %s", n)
	}
	bad := simplePod("production", nil)
	bad.Spec.NodeSelector = map[string]string{"env": "production", "infra": "fedora", "os": "fedora"}
	_, err = env.Client.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "pod node label selector conflicts with its namespace node label selector") {
		t.Errorf("conflicting pod: %v", err)
	}

	// An annotation that is not a selector: pods are refused with an error
	// naming it, nothing is admitted half-configured.
	broken := namespaceWith(t, "ns-broken-selector", map[string]string{nodeSelectorAnnotation: "env in (test"})
	_, err = env.Client.CoreV1().Pods(broken).Create(ctx, simplePod("x", nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "env in (test") {
		t.Errorf("pod in a namespace with a broken selector: %v", err)
	}
}

// 7.7.4-7.7.5 and 14.9.7.1-2: nodes dedicated to a group by a taint and a
// label; the group's project adds the toleration and the node selector to
// its pods (PodTolerationRestriction and PodNodeSelector), so its pods run
// only there, and nobody else's do.
func TestDedicatedNodesRecipe(t *testing.T) {
	// Tainted from registration, so no scheduling decision races the taint.
	addNode(t, "dedicated-1", map[string]string{"dedicated": "groupName", "e2e": "dedicated"},
		corev1.Taint{Key: "dedicated", Value: "groupName", Effect: corev1.TaintEffectNoSchedule})
	addNode(t, "shared-1", map[string]string{"e2e": "dedicated"})
	group := namespaceWith(t, "group-project", map[string]string{
		nodeSelectorAnnotation:       "dedicated=groupName",
		defaultTolerationsAnnotation: `[{"key":"dedicated","operator":"Equal","value":"groupName","effect":"NoSchedule"}]`,
		// DefaultTolerationSeconds adds the not-ready and unreachable
		// tolerations to every pod: a whitelist must allow them too.
		tolerationsWhitelistAnnot: `[{"key":"dedicated","operator":"Equal","value":"groupName","effect":"NoSchedule"},` +
			`{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute"},` +
			`{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute"}]`,
	})
	others := env.Namespace(t, "others")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("group-%d", i)
		created, err := env.Client.CoreV1().Pods(group).Create(ctx, simplePod(name, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, tl := range created.Spec.Tolerations {
			found = found || (tl.Key == "dedicated" && tl.Value == "groupName" && tl.Effect == corev1.TaintEffectNoSchedule)
		}
		if !found {
			t.Errorf("%s: the namespace default toleration was not added: %v", name, created.Spec.Tolerations)
		}
		if n := waitScheduled(t, group, name); n != "dedicated-1" {
			t.Errorf("%s on %s, want the dedicated node", name, n)
		}
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("other-%d", i)
		p := simplePod(name, nil)
		p.Spec.NodeSelector = map[string]string{"e2e": "dedicated"}
		env.CreatePod(t, others, p)
		if n := waitScheduled(t, others, name); n != "shared-1" {
			t.Errorf("%s on %s: another group's pod on the dedicated node", name, n)
		}
	}
	// The whitelist keeps the group from tolerating anything else.
	p := simplePod("escape", nil)
	p.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	_, err := env.Client.CoreV1().Pods(group).Create(ctx, p, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "pod tolerations (possibly merged with namespace default tolerations) conflict with its namespace whitelist") {
		t.Errorf("toleration outside the whitelist: %v", err)
	}
}

// 14.9.7.3: special hardware (disktype=ssd) kept for the pods that need it.
func TestSpecialHardwareRecipe(t *testing.T) {
	ns := env.Namespace(t, "hardware")
	addNode(t, "ssd-1", map[string]string{"disktype": "ssd", "e2e": "hardware"},
		corev1.Taint{Key: "disktype", Value: "ssd", Effect: corev1.TaintEffectNoSchedule})
	addNode(t, "plain-1", map[string]string{"e2e": "hardware"})
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("plain-%d", i)
		p := simplePod(name, nil)
		p.Spec.NodeSelector = map[string]string{"e2e": "hardware"}
		env.CreatePod(t, ns, p)
		if n := waitScheduled(t, ns, name); n != "plain-1" {
			t.Errorf("%s without the toleration on %s", name, n)
		}
	}
	needs := simplePod("needs-ssd", nil)
	needs.Spec.Tolerations = []corev1.Toleration{{Key: "disktype", Operator: corev1.TolerationOpEqual, Value: "ssd", Effect: corev1.TaintEffectNoSchedule}}
	needs.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disktype", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}}
	env.CreatePod(t, ns, needs)
	if n := waitScheduled(t, ns, "needs-ssd"); n != "ssd-1" {
		t.Errorf("needs-ssd on %s", n)
	}

	// PreferNoSchedule: the node is used when nothing else fits...
	// One update swaps the effects, so the scheduler never sees the node
	// without either.
	if out := capstanOK(t, "adm", "taint", "nodes", "ssd-1", "disktype:NoSchedule-", "disktype=ssd:PreferNoSchedule", "--kubeconfig", env.Kubeconfig); out != "node/ssd-1 modified\n" {
		t.Errorf("swap output %q", out)
	}
	// (this pod is unschedulable until the scheduler sees the swap, and
	// the swap's node event brings it back: once it is bound, the
	// scheduler's cache has the PreferNoSchedule taint)
	only := simplePod("only-ssd-left", nil)
	only.Spec.NodeSelector = map[string]string{"disktype": "ssd"}
	env.CreatePod(t, ns, only)
	if n := waitScheduled(t, ns, "only-ssd-left"); n != "ssd-1" {
		t.Errorf("only-ssd-left on %s", n)
	}
	// ...but pods stay off it while they can.
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("prefer-%d", i)
		p := simplePod(name, nil)
		p.Spec.NodeSelector = map[string]string{"e2e": "hardware"}
		env.CreatePod(t, ns, p)
		if n := waitScheduled(t, ns, name); n != "plain-1" {
			t.Errorf("%s on %s despite PreferNoSchedule", name, n)
		}
	}
}

// OpenShift's project node selector (openshift.io/node-selector, merged
// by scheduling.openshift.io/OriginPodNodeEnvironment) beside upstream's:
// a project's selector is merged into its pods, a conflicting pod is
// forbidden, a project without one takes the Scheduler configuration's
// defaultNodeSelector, and an empty one opts out of it.
func TestOpenShiftProjectNodeSelector(t *testing.T) {
	ctx := context.Background()
	addNode(t, "project-node", map[string]string{"e2e-project": "blue"})
	ns := namespaceWith(t, "os-project-blue", map[string]string{"openshift.io/node-selector": "e2e-project=blue"})
	created, err := env.Client.CoreV1().Pods(ns).Create(ctx, simplePod("in-blue", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(created.Spec.NodeSelector) != "map[e2e-project:blue]" {
		t.Errorf("nodeSelector %v, want the project's", created.Spec.NodeSelector)
	}
	if n := waitScheduled(t, ns, "in-blue"); n != "project-node" {
		t.Errorf("in-blue on %s", n)
	}
	bad := simplePod("in-red", nil)
	bad.Spec.NodeSelector = map[string]string{"e2e-project": "red"}
	_, err = env.Client.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `pods "in-red" is forbidden: pod node label selector conflicts with its project node label selector`) {
		t.Errorf("conflicting pod: %v", err)
	}
	broken := namespaceWith(t, "os-project-broken", map[string]string{"openshift.io/node-selector": "e2e-project"})
	if _, err = env.Client.CoreV1().Pods(broken).Create(ctx, simplePod("x", nil), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), `annotation openshift.io/node-selector: "e2e-project": "e2e-project" is not key=value`) {
		t.Errorf("pod in a project with a broken selector: %v", err)
	}

	// The cluster's default, for projects that set none.
	schedulers := env.Dynamic.Resource(schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "schedulers"})
	cfg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "config.openshift.io/v1", "kind": "Scheduler",
		"metadata": map[string]any{"name": "cluster"}, "spec": map[string]any{"defaultNodeSelector": "e2e-project=blue"}}}
	if _, err := schedulers.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plain := namespaceWith(t, "os-project-default", nil)
	optOut := namespaceWith(t, "os-project-anywhere", map[string]string{"openshift.io/node-selector": ""})
	// The default is read again within seconds of a change.
	defaultIs := func(want string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			probe := simplePod("", nil)
			probe.GenerateName = "probe-"
			p, err := env.Client.CoreV1().Pods(plain).Create(ctx, probe, metav1.CreateOptions{})
			if err != nil {
				return false, err.Error()
			}
			_ = env.Client.CoreV1().Pods(plain).Delete(ctx, p.Name, metav1.DeleteOptions{})
			return fmt.Sprint(p.Spec.NodeSelector) == want, fmt.Sprintf("a pod of a project without a selector got %v, want %s", p.Spec.NodeSelector, want)
		})
	}
	t.Cleanup(func() {
		_ = schedulers.Delete(context.Background(), "cluster", metav1.DeleteOptions{})
		// The tests after this one see no default.
		defaultIs("map[]")
	})
	defaultIs("map[e2e-project:blue]")
	p, err := env.Client.CoreV1().Pods(optOut).Create(ctx, simplePod("anywhere", nil), metav1.CreateOptions{})
	if err != nil || len(p.Spec.NodeSelector) != 0 {
		t.Errorf("a pod of a project whose selector is empty: %v %v", p, err)
	}
}
