package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testenv"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/cli"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func impersonate(t *testing.T, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	return kubernetes.NewForConfigOrDie(cfg)
}

func grant(t *testing.T, ns, name string, rules []rbacv1.PolicyRule, subjects ...rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
	if _, err := env.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer reads roles and bindings from its informers:
	// wait until it has both, or the first request may be refused.
	r := rules[0]
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}}}
	switch s := subjects[0]; s.Kind {
	case "User":
		sar.Spec.User = s.Name
	case "Group":
		sar.Spec.User, sar.Spec.Groups = "someone", []string{s.Name}
	default:
		sar.Spec.User = "system:serviceaccount:" + s.Namespace + ":" + s.Name
	}
	if res, sub, ok := strings.Cut(r.Resources[0], "/"); ok {
		sar.Spec.ResourceAttributes.Resource, sar.Spec.ResourceAttributes.Subresource = res, sub
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		return err == nil && got.Status.Allowed, fmt.Sprintf("role %s not in force yet (%v)", name, err)
	})
}

// PodNodeConstraints: without pods/binding, no nodeName and no nodeSelector
// on a blacklisted label (kubernetes.io/hostname); with it, anything.
func TestPodNodeConstraintsWebhook(t *testing.T) {
	ns := env.Namespace(t, "pnc")
	ctx := context.Background()
	podRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}}}
	grant(t, ns, "developers", podRules,
		rbacv1.Subject{Kind: "User", Name: "alice"}, rbacv1.Subject{Kind: "User", Name: "bob"},
		rbacv1.Subject{Kind: "Group", Name: "binders"},
		rbacv1.Subject{Kind: "ServiceAccount", Name: "deployer", Namespace: ns})
	grant(t, ns, "binders", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/binding"}, Verbs: []string{"create"}}},
		rbacv1.Subject{Kind: "User", Name: "bob"}, rbacv1.Subject{Kind: "Group", Name: "binders"},
		rbacv1.Subject{Kind: "ServiceAccount", Name: "deployer", Namespace: ns})

	withNode := func(name string) *corev1.Pod {
		p := simplePod(name, nil)
		p.Spec.NodeName = "worker-0"
		return p
	}
	withHostname := func(name string) *corev1.Pod {
		p := simplePod(name, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "worker-0"}
		return p
	}
	alice := impersonate(t, "alice")
	cases := []struct {
		pod  *corev1.Pod
		want string
	}{
		{withNode("a1"), "node selection by nodeName is prohibited by policy for your role"},
		{withHostname("a2"), "node selection by label(s) [kubernetes.io/hostname] is prohibited by policy for your role"},
		{func() *corev1.Pod { p := withHostname("a3"); p.Spec.NodeName = "worker-0"; return p }(),
			"node selection by nodeName and label(s) [kubernetes.io/hostname] is prohibited by policy for your role"},
	}
	for _, tc := range cases {
		_, err := alice.CoreV1().Pods(ns).Create(ctx, tc.pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("alice creating %s: %v, want %q", tc.pod.Name, err, tc.want)
		}
	}
	// Other labels are fine.
	ok := simplePod("a4", nil)
	ok.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
	if _, err := alice.CoreV1().Pods(ns).Create(ctx, ok, metav1.CreateOptions{}); err != nil {
		t.Errorf("alice with a non-blacklisted selector: %v", err)
	}
	// Pod templates are checked too.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "pinned"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pinned"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "pinned"}}, Spec: withHostname("").Spec}}}
	if _, err := alice.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "node selection by label(s) [kubernetes.io/hostname]") {
		t.Errorf("alice's pinned deployment: %v", err)
	}

	// Users, groups and service accounts with pods/binding may.
	for who, client := range map[string]kubernetes.Interface{
		"bob":   impersonate(t, "bob"),
		"carol": impersonate(t, "carol", "binders"),
		"sa":    impersonate(t, "system:serviceaccount:"+ns+":deployer", "system:serviceaccounts", "system:serviceaccounts:"+ns),
	} {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, withNode(who+"-pinned"), metav1.CreateOptions{}); err != nil {
			t.Errorf("%s with pods/binding: %v", who, err)
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, withHostname(who+"-hostname"), metav1.CreateOptions{}); err != nil {
			t.Errorf("%s with pods/binding, hostname selector: %v", who, err)
		}
	}
	// The cluster admin may too.
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, withNode("admin-pinned"), metav1.CreateOptions{}); err != nil {
		t.Errorf("admin: %v", err)
	}
}

// The manifests for another cluster are valid (server-side dry run), and
// `capstan admission serve` with their certificate answers as in capstan up.
func TestAdmissionManifestsAndServe(t *testing.T) {
	out := capstanOK(t, "admission", "manifests", "--image", "registry.example/capstan:dev", "--namespace", "pnc-remote")
	for _, want := range []string{"kind: ValidatingWebhookConfiguration", "name: podnodeconstraints.scheduling.openshift.io",
		"path: /validate-podnodeconstraints", "caBundle:", "kind: Deployment", "- serve", "kubernetes.io/hostname"} {
		if !strings.Contains(out, want) {
			t.Errorf("manifests lack %q", want)
		}
	}
	// This cluster already has capstan's own registration under the same
	// name; check the manifests' one under another.
	checked := strings.Replace(out, "metadata:\n  name: podnodeconstraints.scheduling.openshift.io", "metadata:\n  name: pnc-remote-check", 1)
	// The namespace is created for real below (namespaced objects cannot be
	// dry-run into a namespace that does not exist).
	var docs []string
	for _, doc := range strings.Split(checked, "---\n") {
		if strings.TrimSpace(doc) != "" && !strings.Contains(doc, "kind: Namespace") {
			docs = append(docs, doc)
		}
	}
	checked = "---\n" + strings.Join(docs, "---\n")
	path := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(path, []byte(checked), 0o600); err != nil {
		t.Fatal(err)
	}
	// The namespace must exist for the server to dry-run namespaced objects.
	namespaceWith(t, "pnc-remote", nil)
	// kubectl exits the process on errors: run it as a child.
	if code, res := testenv.RunCapstan(t, "kubectl", "--kubeconfig", env.Kubeconfig, "create", "--dry-run=server", "-f", path); code != 0 ||
		strings.Count(res, "(server dry run)") != 8 {
		t.Fatalf("server-side dry run: exit %d\n%s", code, res)
	}
	if _, err := capstan(t, "admission", "manifests"); err == nil {
		t.Errorf("manifests without --image succeeded")
	}

	// Serve with the manifests' certificate and ask as alice.
	var secret corev1.Secret
	var webhook admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range strings.Split(out, "\n---\n") {
		switch {
		case strings.Contains(doc, "kind: Secret"):
			if err := yaml.Unmarshal([]byte(doc), &secret); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(doc, "kind: ValidatingWebhookConfiguration"):
			if err := yaml.Unmarshal([]byte(doc), &webhook); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(certFile, secret.Data["tls.crt"], 0o600)
	_ = os.WriteFile(keyFile, secret.Data["tls.key"], 0o600)
	port := testenv.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		root := cli.NewRootCommand(io.Discard, io.Discard)
		root.SetArgs([]string{"admission", "serve", "--kubeconfig", env.Kubeconfig, "--as-admin", "--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--bind-address", fmt.Sprintf("127.0.0.1:%d", port)})
		_ = root.ExecuteContext(ctx)
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(webhook.Webhooks[0].ClientConfig.CABundle)
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "capstan-admission.pnc-remote.svc"}}}
	pod := simplePod("pinned", nil)
	pod.Spec.NodeName = "worker-0"
	rawPod, _ := json.Marshal(pod)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "pnc-remote", Name: "pinned",
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
			Object:   runtime.RawExtension{Raw: rawPod}},
	}
	body, _ := json.Marshal(review)
	var resp *http.Response
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		var err error
		resp, err = httpClient.Post(fmt.Sprintf("https://127.0.0.1:%d%s", port, "/validate-podnodeconstraints"), "application/json", bytes.NewReader(body))
		return err == nil, fmt.Sprint(err)
	})
	defer resp.Body.Close()
	var answer admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatal(err)
	}
	if answer.Response == nil || answer.Response.Allowed || !strings.Contains(answer.Response.Result.Message, "node selection by nodeName is prohibited by policy for your role") {
		t.Errorf("answer %+v", answer.Response)
	}
}
