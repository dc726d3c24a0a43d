package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/audit"
)

// TestInProcessComponentsShareOneCacheOfPodsAndNodes: in capstan up the
// scheduler, the autoscaler, the simulated kubelets and metrics-server
// (and kube-state, which has no identity of its own) read pods and nodes
// through the informers they share, as kube-controller-manager's
// controllers do: the audit log shows the shared identity watching every
// pod and node, and none of the others listing or watching them itself.
func TestInProcessComponentsShareOneCacheOfPodsAndNodes(t *testing.T) {
	names := map[string]string{}
	for _, name := range []string{"informers", "scheduler", "autoscaler", "sim", "metrics-server"} {
		comp, err := deploy.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		names[comp.Username()] = name
	}
	// What each read of every pod or node: cluster-wide lists and
	// watches (client-go lists by a watch that sends the initial events).
	reads := map[string]map[string]int{}
	err := audit.Read(env.Cluster.ControlPlane.DataDir().AuditLogPath(), func(e *audit.Event) {
		name, ok := names[e.User.Username]
		if !ok || e.ObjectRef == nil || (e.Verb != "list" && e.Verb != "watch") {
			return
		}
		r := e.ObjectRef
		if (r.Resource == "pods" || r.Resource == "nodes") && r.APIGroup == "" && r.Subresource == "" && r.Namespace == "" && r.Name == "" {
			if reads[name] == nil {
				reads[name] = map[string]int{}
			}
			reads[name][r.Resource]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, resource := range []string{"pods", "nodes"} {
		if reads["informers"][resource] == 0 {
			t.Errorf("the shared informers never listed or watched every one of the %s: their reads were %v", resource, reads["informers"])
		}
	}
	for _, name := range []string{"scheduler", "autoscaler", "sim", "metrics-server"} {
		if len(reads[name]) > 0 {
			t.Errorf("%s listed or watched every pod or node itself, not through the shared informers: %v", name, reads[name])
		}
	}
}

// TestInProcessComponentsHaveTheirUpstreamPriorities: API Priority and
// Fairness classes the simulated kubelets' requests as upstream classes
// real kubelets' (node status and leases at node-high, the rest at
// system), and the scheduler's and the shared informers' as
// kube-scheduler's and kube-controller-manager's (workload-high), not as
// any ServiceAccount's (workload-low). The API server names the priority
// level of every request in a response header.
func TestInProcessComponentsHaveTheirUpstreamPriorities(t *testing.T) {
	ctx := t.Context()
	levels, err := env.Client.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byUID := map[string]string{}
	for _, l := range levels.Items {
		byUID[string(l.UID)] = l.Name
	}
	node := env.Cluster.BootNodeNames()[0]
	for _, c := range []struct{ component, path, want string }{
		{"sim", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + node, "node-high"},
		{"sim", "/api/v1/nodes/" + node, "node-high"},
		{"sim", "/api/v1/namespaces/kube-system/pods?limit=1", "system"},
		{"scheduler", "/api/v1/pods?limit=1", "workload-high"},
		{"informers", "/api/v1/nodes?limit=1", "workload-high"},
		// Any other ServiceAccount stays where upstream puts it.
		{"console", "/api/v1/nodes?limit=1", "workload-low"},
	} {
		comp, err := deploy.Lookup(c.component)
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: comp.Username(), Groups: append(comp.Groups(), "system:authenticated")}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(cfg.Host + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		uid := resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
		if got := byUID[uid]; got != c.want {
			t.Errorf("%s GET %s: priority level %q (UID %q, answer %s), want %s", c.component, c.path, got, uid, resp.Status, c.want)
		}
	}
}

// TestKubeStateFollowsAPod: the embedded Prometheus scrapes a pod's
// kube_pod_status_phase series as its phase changes, and none once it is
// gone (kube-state keeps the series up to date as the pod changes rather
// than making them at each scrape).
func TestKubeStateFollowsAPod(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t, "kube-state")
	// Gated, the pod stays Pending until the gate is lifted.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "followed", Namespace: ns},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/hold"}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	phase := func(p string) string {
		return `kube_pod_status_phase{namespace="` + ns + `",pod="followed",phase="` + p + `"} == 1`
	}
	waitQueryLen(t, phase("Pending"), time.Time{}, 1)
	if _, err := env.Client.CoreV1().Pods(ns).Patch(ctx, "followed", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitQueryLen(t, phase("Running"), time.Time{}, 1)
	waitQueryLen(t, phase("Pending"), time.Time{}, 0)
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "followed", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitQueryLen(t, `kube_pod_status_phase{namespace="`+ns+`",pod="followed"}`, time.Time{}, 0)
}
