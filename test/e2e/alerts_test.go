package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// The cluster's Prometheus evaluates OpenShift's alerting rules on what it
// scrapes; each alert here fires from a fault injected as a user would and
// resolves once the fault is cleared. The test cluster shortens every
// alert's `for` to 3s (testenv).

const alertTimeout = 2 * time.Minute

func TestNodeAlertsFireAndResolve(t *testing.T) {
	node := "alert-node"
	capstanOK(t, "sim", "node", "add", "--kubeconfig", env.Kubeconfig, "--name", node)
	t.Cleanup(func() { _, _ = capstan(t, "sim", "node", "delete", node, "--kubeconfig", env.Kubeconfig) })
	waitNodeReady(t, node)
	labels := map[string]string{"node": node}

	// The kubelet reports Ready=False: KubeNodeNotReady.
	capstanOK(t, "sim", "node", "set-condition", node, "Ready=False", "--kubeconfig", env.Kubeconfig)
	a := env.WaitAlertFiring(t, "KubeNodeNotReady", labels, alertTimeout)
	if a.Labels["severity"] != "warning" || a.Annotations["summary"] != "Node is not ready." || !strings.Contains(a.Annotations["description"], node) {
		t.Errorf("KubeNodeNotReady: %+v", a)
	}
	capstanOK(t, "sim", "node", "set-condition", node, "Ready=True", "--kubeconfig", env.Kubeconfig)
	env.WaitAlertResolved(t, "KubeNodeNotReady", labels, alertTimeout)

	// The kubelet stops: the node lifecycle controller taints the node
	// unreachable, and KubeNodeUnreachable fires.
	capstanOK(t, "sim", "node", "stop", node, "--kubeconfig", env.Kubeconfig)
	env.WaitAlertFiring(t, "KubeNodeUnreachable", labels, alertTimeout)
	capstanOK(t, "sim", "node", "start", node, "--kubeconfig", env.Kubeconfig)
	env.WaitAlertResolved(t, "KubeNodeUnreachable", labels, alertTimeout)
	env.WaitAlertResolved(t, "KubeNodeNotReady", labels, alertTimeout)
}

func waitNodeReady(t *testing.T, node string) {
	t.Helper()
	err := waitfor.Poll(context.Background(), 200*time.Millisecond, time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == "True", "Ready=" + string(c.Status)
			}
		}
		return false, "no Ready condition"
	}))
	if err != nil {
		t.Fatal(err)
	}
}

func TestMachineAlertsFireAndResolve(t *testing.T) {
	ctx := context.Background()
	api := machines(t).MachineV1beta1()

	// A machine whose zone has no capacity goes Failed and stays there:
	// MachineWithNoRunningPhase, until the machine is deleted.
	zone := "alerts-exhausted"
	capstanOK(t, "sim", "zone", "exhaust", zone, "--kubeconfig", env.Kubeconfig)
	t.Cleanup(func() { _, _ = capstan(t, "sim", "zone", "restore", zone, "--kubeconfig", env.Kubeconfig) })
	newMachineSet(t, "alerts-failed", 1, func(ms *machinev1.MachineSet) { ms.Spec.Template.Spec = machineSpec(zone) })
	a := env.WaitAlertFiring(t, "MachineWithNoRunningPhase", map[string]string{"namespace": machine.Namespace}, alertTimeout)
	failed := a.Labels["name"]
	if !strings.HasPrefix(failed, "alerts-failed-") || !strings.Contains(a.Annotations["summary"], failed) {
		t.Errorf("MachineWithNoRunningPhase: %+v", a)
	}
	cleanupMachines(t, "alerts-failed")
	env.WaitAlertResolved(t, "MachineWithNoRunningPhase", map[string]string{"name": failed}, alertTimeout)

	// A machine held in Deleting by a preDrain hook: MachineNotYetDeleted.
	ms := newMachineSet(t, "alerts-held", 1)
	held := waitMachinesRunning(t, ms.Name, 1)[0].Name
	m := getMachine(t, held)
	m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{{Name: "alerts-hold", Owner: "e2e"}}
	if _, err := api.Machines(machine.Namespace).Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.MachineSets(machine.Namespace).Patch(ctx, ms.Name, "application/merge-patch+json", []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"name": held}
	env.WaitAlertFiring(t, "MachineNotYetDeleted", labels, alertTimeout)
	m = getMachine(t, held)
	m.Spec.LifecycleHooks = machinev1.LifecycleHooks{}
	if _, err := api.Machines(machine.Namespace).Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMachineGone(t, held, 2*time.Minute)
	// The expression averages the Deleting phase over 15 minutes: it
	// still holds now, and no longer once the window has passed the
	// machine's last sample.
	expr := `sum by (name, namespace) (avg_over_time(mapi_machine_created_timestamp_seconds{phase="Deleting",name="` + held + `"}[15m])) > 0`
	waitQueryLen(t, expr, time.Time{}, 1)
	waitQueryLen(t, expr, time.Now().Add(16*time.Minute), 0)
}

// waitQueryLen waits until the query answers n samples at time at.
func waitQueryLen(t *testing.T, q string, at time.Time, n int) {
	t.Helper()
	err := waitfor.Poll(context.Background(), 500*time.Millisecond, alertTimeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		ls, vs, err := env.Query(ctx, q, at)
		if err != nil {
			return false, err.Error()
		}
		return len(ls) == n, fmt.Sprintf("%d samples %v %v", len(ls), ls, vs)
	}))
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestAutoscalerAlertsFireAndResolve(t *testing.T) {
	ctx := context.Background()
	nodes, _ := clusterTotals(t)
	// maxNodesTotal at the nodes the cluster has: the count is at its
	// limit.
	createClusterAutoscaler(t, fmt.Sprintf(`apiVersion: autoscaling.openshift.io/v1
kind: ClusterAutoscaler
metadata:
  name: default
spec:
  resourceLimits:
    maxNodesTotal: %d
`, nodes))
	env.WaitAlertFiring(t, "ClusterAutoscalerNodeCountNearLimit", nil, alertTimeout)

	// A pod no node group can ever hold: ClusterAutoscalerUnschedulablePods.
	pod := autoscaledPod("alerts-unschedulable", "no-such-set", "1000")
	pod.Spec.Tolerations = nil
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitAlertFiring(t, "ClusterAutoscalerUnschedulablePods", nil, alertTimeout)
	if err := env.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	env.WaitAlertResolved(t, "ClusterAutoscalerUnschedulablePods", nil, alertTimeout)

	// Room again: the limit raised well above the count.
	patch := fmt.Sprintf(`{"spec":{"resourceLimits":{"maxNodesTotal":%d}}}`, nodes*4)
	if _, err := env.Dynamic.Resource(autoscaler.ClusterAutoscalerResource).Patch(ctx, "default", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitAlertResolved(t, "ClusterAutoscalerNodeCountNearLimit", nil, alertTimeout)
}

// The Route oc reads alerts from: admitted at the address capstan serves
// the Prometheus API on, over TLS with the cluster CA, to bearer tokens
// the API server authenticates and lets get namespaces.
func TestThanosQuerierRouteServesAlertsToBearerTokens(t *testing.T) {
	ctx := context.Background()
	route, err := env.Dynamic.Resource(cluster.RouteResource).Namespace(cluster.MonitoringNamespace).Get(ctx, cluster.ThanosQuerierName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ingress, _, _ := unstructured.NestedSlice(route.Object, "status", "ingress")
	if len(ingress) != 1 {
		t.Fatalf("status.ingress %v", ingress)
	}
	host, _ := ingress[0].(map[string]any)["host"].(string)
	if "https://"+host != env.Cluster.ThanosQuerierURL {
		t.Errorf("the Route is admitted at %s, served at %s", host, env.Cluster.ThanosQuerierURL)
	}
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token
	if admin == "" {
		t.Fatal("the admin kubeconfig has no bearer token for oc to present")
	}
	// The token expires (a TokenRequest's), and no never-expiring token
	// Secret is left for it.
	if exp := tokenExpiry(t, admin); exp.IsZero() || time.Until(exp) > cluster.AdminTokenLifetime {
		t.Errorf("the admin token expires at %v, want within %s", exp, cluster.AdminTokenLifetime)
	}
	secrets, err := env.Client.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Type == corev1.SecretTypeServiceAccountToken {
			t.Errorf("a never-expiring token Secret is there: %s (for %s)", s.Name, s.Annotations[corev1.ServiceAccountNameKey])
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].CertificateAuthorityData)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	get := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/api/v1/alerts", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get(admin); code != 200 || !strings.Contains(body, `"alerts":[`) {
		t.Errorf("with the admin token: %d %s", code, body)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d", code)
	}
	if code, _ := get("not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("with a bad token: %d", code)
	}
	// A service account that may not get namespaces is refused.
	ns := "default"
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-monitoring"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().ServiceAccounts(ns).Delete(ctx, "no-monitoring", metav1.DeleteOptions{})
	})
	tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "no-monitoring", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(tr.Status.Token); code != http.StatusForbidden || !strings.Contains(body, "cannot get namespaces") {
		t.Errorf("with a token that may not get namespaces: %d %s", code, body)
	}
}

// tokenExpiry is a service account JWT's exp claim (zero without one).
func tokenExpiry(t *testing.T, jwt string) time.Time {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("the token is not a JWT: %d parts", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	if claims.Exp == 0 {
		return time.Time{}
	}
	return time.Unix(claims.Exp, 0)
}
