package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/chromedp/chromedp/kb"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/console"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// serviceAccountToken makes a ServiceAccount in default, bound to a
// ClusterRole of the rules given (none: no rights at all), and returns a
// token of it.
func serviceAccountToken(t *testing.T, name string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	ns := "default"
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().ServiceAccounts(ns).Delete(ctx, name, metav1.DeleteOptions{}) })
	if len(rules) > 0 {
		rbac := env.Client.RbacV1()
		if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{}) })
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func nodeNames(t *testing.T) []string {
	t.Helper()
	list, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return names
}

// logIn logs the tab in with a token through the login form.
// podOnNode runs a ReplicaSet's pod on node (selected by a label of its
// own, so that a replacement waits unscheduled once the node is
// cordoned; the hostname label is PodNodeConstraints' to refuse) and
// returns the pod, running.
func podOnNode(t *testing.T, name, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	const nodeLabel = "e2e.capstan.dev/node"
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, nodeLabel, node)
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": name}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{nodeLabel: node},
				Containers:   []corev1.Container{{Name: "c", Image: "nginx"}}}}}}
	if _, err := env.Client.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.AppsV1().ReplicaSets("default").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})
	var pod *corev1.Pod
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		pods, err := env.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
				pod = p
				return true, ""
			}
		}
		why := fmt.Sprintf("%d pods of %s, none running on %s", len(pods.Items), name, node)
		if got, err := env.Client.AppsV1().ReplicaSets("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
			for _, c := range got.Status.Conditions {
				why += fmt.Sprintf("; ReplicaSet %s=%s: %s", c.Type, c.Status, c.Message)
			}
		}
		return false, why
	})
	return pod
}

// waitPodGone waits until the pod (this very one, by UID) is gone.
func waitPodGone(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := env.Client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("pod %s/%s is still there (%s on %s)", pod.Namespace, pod.Name, p.Status.Phase, p.Spec.NodeName)
	})
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// csrfOf is the CSRF token of a console client's session.
func csrfOf(t *testing.T, client *http.Client, base string) string {
	t.Helper()
	resp, err := client.Get(base + "/api/session")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		CSRF string `json:"csrf"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.CSRF == "" {
		t.Fatalf("the session's CSRF token: %v", err)
	}
	return s.CSRF
}

// consoleClient is an HTTP client logged in to the console with token,
// as the console's page is: its cookie, and the session's secret on
// every request.
func consoleClient(t *testing.T, base, token string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar}
	body, _ := json.Marshal(map[string]string{"token": token})
	resp, err := client.Post(base+"/api/login", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		Secret string `json:"secret"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != http.StatusOK || s.Secret == "" {
		t.Fatalf("logging in: %d, secret %q: %v", resp.StatusCode, s.Secret, err)
	}
	client.Transport = withSessionSecret{s.Secret}
	return client
}

// withSessionSecret sends a console session's secret with every request.
type withSessionSecret struct{ secret string }

func (w withSessionSecret) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(console.SessionHeader, w.secret)
	return http.DefaultTransport.RoundTrip(r)
}

func logIn(t *testing.T, tab *testenv.Tab, token string) {
	t.Helper()
	tab.Go(env.Cluster.ConsoleURL + "/#/overview")
	tab.WaitText("main", "Paste a bearer token", 30*time.Second)
	tab.Fill("#token", token)
	tab.Click(".login button[type=submit]")
}

func logOut(t *testing.T, tab *testenv.Tab) {
	t.Helper()
	tab.Click("#logout")
	tab.WaitText("main", "Paste a bearer token", 30*time.Second)
}

// The console in a real Chromium: nobody gets in without a token the API
// server accepts, a user without rights sees an error and no data, and
// the admin sees every page live and acts from it.
func TestConsole(t *testing.T) {
	if env.Cluster.ConsoleURL == "" {
		t.Fatal("the test cluster serves no console")
	}
	ctx := context.Background()
	base := env.Cluster.ConsoleURL

	// The API proxy answers nothing without a session.
	resp, err := http.Get(base + "/api/kubernetes/api/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the API proxy without a session answered %s", resp.Status)
	}

	tab := testenv.NewTab(t)
	logIn(t, tab, "not-a-token")
	tab.WaitText("#result", "the API server did not accept the token", 30*time.Second)
	tab.A11y("login")
	tab.Screenshot("login")

	t.Run("a user without rights sees an error, not data", func(t *testing.T) {
		tab := tab.For(t)
		logIn(t, tab, serviceAccountToken(t, "console-nobody"))
		tab.WaitText("#who", "Logged in as system:serviceaccount:default:console-nobody", 30*time.Second)
		tab.Go(base + "/#/nodes")
		got := tab.WaitText("main", "Cannot read nodes: ", 30*time.Second)
		if !strings.Contains(got, "forbidden") {
			t.Errorf("the nodes page of a user without rights says:\n%s", got)
		}
		nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			if strings.Contains(got, n.Name) {
				t.Errorf("a user without rights sees node %s:\n%s", n.Name, got)
			}
		}
		logOut(t, tab)
	})

	t.Run("an action RBAC refuses is not offered, and says why", func(t *testing.T) {
		tab := tab.For(t)
		logIn(t, tab, serviceAccountToken(t, "console-node-reader",
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}))
		tab.Go(base + "/#/nodes")
		node := nodeNames(t)[0]
		tab.WaitText(`tr[data-key="`+node+`"]`, "Ready", 30*time.Second)
		// The page asked the API server (SelfSubjectAccessReviews) and
		// disabled what it would refuse; each answer shows as it comes,
		// the eviction's after the patch's.
		got := tab.WaitText("#nodes-rbac", "create pods/eviction", 30*time.Second)
		if !strings.Contains(got, "you may not patch nodes") {
			t.Errorf("the page says %q: the nodes' patch is not named", got)
		}
		for _, action := range []string{"Cordon", "Drain"} {
			disabled, err := testenv.Eval[bool](tab, `document.querySelector('button[aria-label="`+action+` `+node+`"]').disabled`)
			if err != nil || !disabled {
				t.Errorf("%s is offered to a user who may not patch nodes (disabled %v, %v)", action, disabled, err)
			}
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.Unschedulable {
			t.Errorf("a forbidden cordon cordoned %s", node)
		}
		logOut(t, tab)
	})

	// The admin, through the one-time link capstan up prints.
	tab.Go(env.Cluster.NewConsoleLoginLink(env.Cluster.AdminToken()))
	tab.WaitText("#who", "Logged in as system:serviceaccount:kube-system:capstan-admin", 30*time.Second)

	t.Run("a login link works once", func(t *testing.T) {
		other := testenv.NewTab(t)
		link := env.Cluster.NewConsoleLoginLink(env.Cluster.AdminToken())
		other.Go(link)
		other.WaitText("#who", "Logged in as", 30*time.Second)
		logOut(t, other)
		other.Go(link)
		other.WaitText("#result", "That login link was used already or has expired", 30*time.Second)
	})

	t.Run("a risk links to an http or https URL only", func(t *testing.T) {
		// L8: a risk's URL is the update service's to choose; a
		// javascript: or data: one is shown as text, never followed.
		tab := tab.For(t)
		got, err := testenv.EvalAwait[[]string](tab, `import("/assets/app.js").then((m) => ["javascript:alert(document.cookie)", "data:text/html,x", "not a url", "https://access.redhat.com/solutions/1"].map((u) => { const e = m.riskLink(u); return e.tagName + " " + (e.getAttribute("href") || ""); }))`)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"SPAN ", "SPAN ", "SPAN ", "A https://access.redhat.com/solutions/1"}
		if !slices.Equal(got, want) {
			t.Errorf("risk links %q, want %q", got, want)
		}
	})

	t.Run("overview: the version, the counts and a firing alert, live", func(t *testing.T) {
		tab := tab.For(t)
		tab.Go(base + "/#/overview")
		tab.WaitText("main", "Cluster version", 30*time.Second)
		tab.WaitText("main", "All available", 30*time.Second)
		// A node whose kubelet says NotReady: KubeNodeNotReady fires,
		// and the page shows it within its 15 s refresh.
		node := "console-alert-node"
		capstanOK(t, "sim", "node", "add", "--kubeconfig", env.Kubeconfig, "--name", node)
		t.Cleanup(func() { _, _ = capstan(t, "sim", "node", "delete", node, "--kubeconfig", env.Kubeconfig) })
		waitNodeReady(t, node)
		capstanOK(t, "sim", "node", "set-condition", node, "Ready=False", "--kubeconfig", env.Kubeconfig)
		env.WaitAlertFiring(t, "KubeNodeNotReady", map[string]string{"node": node}, alertTimeout)
		got := tab.WaitText("main", "KubeNodeNotReady", time.Minute)
		if !strings.Contains(got, "1 not ready") {
			t.Errorf("the overview does not count the node not ready:\n%s", got)
		}
		tab.A11y("overview")
		tab.Screenshot("overview-alert")
		capstanOK(t, "sim", "node", "delete", node, "--kubeconfig", env.Kubeconfig)
		env.WaitAlertResolved(t, "KubeNodeNotReady", map[string]string{"node": node}, alertTimeout)
	})

	// focusTop puts the keyboard at the top of the document, as a page
	// just loaded: the next Tab goes to its first link. (A blur alone
	// leaves the starting point where the focus was, inside main.)
	focusTop := func(t *testing.T, tab *testenv.Tab) {
		t.Helper()
		js := `document.activeElement.blur(); document.body.tabIndex = -1; document.body.focus(); document.body.removeAttribute("tabindex"); window.focus(); true`
		if _, err := testenv.Eval[bool](tab, js); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("the keyboard reaches every page", func(t *testing.T) {
		tab := tab.For(t)
		tab.Go(base + "/#/overview")
		tab.WaitText("main", "Cluster version", 30*time.Second)
		focusTop(t, tab)
		want := []string{"A Skip to content", "BUTTON Log out", "A Overview", "A Pending pods", "A Nodes"}
		for _, w := range want {
			tab.Press(kb.Tab)
			if got := tab.Focused(); got != w {
				t.Fatalf("Tab focused %q, want %q", got, w)
			}
		}
		tab.Press(kb.Enter)
		tab.WaitText("main h1", "Nodes", 30*time.Second)
		if got := tab.Focused(); !strings.HasPrefix(got, "MAIN ") {
			t.Errorf("after a page opens, the focus is on %q, not on its content", got)
		}
		// "Skip to content", used on the Nodes page, moves the focus to
		// its content and stays on the page.
		focusTop(t, tab)
		tab.Press(kb.Tab)
		if got := tab.Focused(); got != "A Skip to content" {
			t.Fatalf("Tab focused %q, want the skip link", got)
		}
		tab.Press(kb.Enter)
		if got := tab.Focused(); !strings.HasPrefix(got, "MAIN ") {
			t.Errorf("after Skip to content, the focus is on %q, not on the content", got)
		}
		if got := tab.Text("main h1"); got != "Nodes" {
			t.Errorf("Skip to content on the Nodes page led to %q", got)
		}
	})

	t.Run("nodes: every node, live", func(t *testing.T) {
		tab := tab.For(t)
		tab.Go(base + "/#/nodes")
		for _, n := range nodeNames(t) {
			tab.WaitText(`tr[data-key="`+n+`"]`, "Ready", 30*time.Second)
		}
		// Cordoned from the page, the node says so without a reload.
		node := nodeNames(t)[0]
		tab.Click(`button[aria-label="Cordon ` + node + `"]`)
		tab.WaitText(`tr[data-key="`+node+`"]`, "SchedulingDisabled", 30*time.Second)
		tab.Click(`button[aria-label="Uncordon ` + node + `"]`)
		tab.WaitText(`tr[data-key="`+node+`"]`, "Cordon", 30*time.Second)
		if got := tab.Text(`tr[data-key="` + node + `"]`); strings.Contains(got, "SchedulingDisabled") {
			t.Errorf("uncordoned, the row says %q", got)
		}
		// Drained from the page, once confirmed in a dialog that lists
		// the pod it evicts: cordoned, its pod evicted, the drain
		// followed to its end.
		drained := "console-drain-node"
		capstanOK(t, "sim", "node", "add", "--kubeconfig", env.Kubeconfig, "--name", drained)
		t.Cleanup(func() { _, _ = capstan(t, "sim", "node", "delete", drained, "--kubeconfig", env.Kubeconfig) })
		waitNodeReady(t, drained)
		victim := podOnNode(t, "console-drain-victim", drained)
		tab.WaitText(`tr[data-key="`+drained+`"]`, "Ready", 30*time.Second)
		tab.Click(`button[aria-label="Drain ` + drained + `"]`)
		tab.WaitText("dialog[open]", "default/"+victim.Name, 30*time.Second)
		tab.Click("dialog[open] button[data-confirm]")
		tab.WaitText("#result", "node/"+drained+" drained", time.Minute)
		waitPodGone(t, victim)
		tab.WaitText(`tr[data-key="`+drained+`"]`, "SchedulingDisabled", 30*time.Second)
		if n, err := env.Client.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable {
			t.Errorf("the drained node is not cordoned: %v", err)
		}
		tab.A11y("nodes")
		tab.Screenshot("nodes")
	})

	t.Run("pending pods: why, node by node", func(t *testing.T) {
		tab := tab.For(t)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "console-too-big", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}}}}}
		if _, err := env.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0))
		})
		tab.Go(base + "/#/pending")
		got := tab.WaitText(`section[data-pod="default/console-too-big"] table`, "Insufficient cpu", time.Minute)
		for _, n := range nodeNames(t) {
			if !strings.Contains(got, n) {
				t.Errorf("the pending pod's verdicts leave out node %s:\n%s", n, got)
			}
		}
		// What preemption would do: nothing, more than any node has.
		tab.WaitText(`section[data-pod="default/console-too-big"]`, "Preemption: 0/", time.Minute)
		tab.WaitText(`section[data-pod="default/console-too-big"]`, "Preemption is not helpful for scheduling", time.Minute)
		tab.A11y("pending pods")
		tab.Screenshot("pending")
	})

	t.Run("a drain outlives the request that started it", func(t *testing.T) {
		// The drain is started and the client goes away at once, as a
		// tab closed: the drain goes on to its end on the server.
		node := "console-drain-detached"
		capstanOK(t, "sim", "node", "add", "--kubeconfig", env.Kubeconfig, "--name", node)
		t.Cleanup(func() { _, _ = capstan(t, "sim", "node", "delete", node, "--kubeconfig", env.Kubeconfig) })
		waitNodeReady(t, node)
		victim := podOnNode(t, "console-drain-detached-victim", node)
		client := consoleClient(t, base, env.Cluster.AdminToken())
		session := client.Jar.Cookies(mustURL(t, base))[0]
		req, _ := http.NewRequest(http.MethodPost, base+"/api/capstan/nodes/"+node+"/drain", nil)
		req.Header.Set("X-CSRF-Token", csrfOf(t, client, base))
		reqCtx, cancel := context.WithCancel(ctx)
		resp, err := client.Do(req.WithContext(reqCtx))
		cancel()
		client.CloseIdleConnections()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("starting the drain: %d", resp.StatusCode)
		}
		waitPodGone(t, victim)
		// A new client with the same session reads how it ended.
		jar, _ := cookiejar.New(nil)
		jar.SetCookies(mustURL(t, base), []*http.Cookie{session})
		other := &http.Client{Jar: jar, Transport: client.Transport}
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			resp, err := other.Get(base + "/api/capstan/nodes/" + node + "/drain/status")
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			var st struct{ State, Message, Log string }
			_ = json.NewDecoder(resp.Body).Decode(&st)
			return st.State == "Drained", fmt.Sprintf("%d %+v", resp.StatusCode, st)
		})
		// L1: a user without rights reads no drain's status (who drained,
		// which pods moved), and a drain they may not start leaves the
		// record as it was.
		nobody := consoleClient(t, base, serviceAccountToken(t, "console-drain-nobody"))
		resp, err = nobody.Get(base + "/api/capstan/nodes/" + node + "/drain/status")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "Drained") {
			t.Errorf("a user without rights read a drain's status: %d %s", resp.StatusCode, body)
		}
		req, _ = http.NewRequest(http.MethodPost, base+"/api/capstan/nodes/"+node+"/drain", nil)
		req.Header.Set("X-CSRF-Token", csrfOf(t, nobody, base))
		if resp, err = nobody.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a drain by a user without rights: %d, want 403", resp.StatusCode)
		}
		resp, err = other.Get(base + "/api/capstan/nodes/" + node + "/drain/status")
		if err != nil {
			t.Fatal(err)
		}
		var st struct{ State, User string }
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if st.State != "Drained" || !strings.Contains(st.User, "capstan-admin") {
			t.Errorf("after a refused drain, the node's record says %+v, want the admin's drain", st)
		}
	})

	t.Run("pending pods: explained once for every tab", func(t *testing.T) {
		// Twenty tabs of the Pending page asking at once get one
		// computation (one read of the cluster and one autoscaler
		// simulation), and so does the next question within 10 s: each
		// answer says when it was computed.
		client := consoleClient(t, base, env.Cluster.AdminToken())
		ats := make(chan string, 20)
		var wg sync.WaitGroup
		for range cap(ats) {
			wg.Go(func() {
				resp, err := client.Get(base + "/api/capstan/pending/explain")
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var r struct {
					Total int    `json:"total"`
					At    string `json:"at"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("%d: %v", resp.StatusCode, err)
					return
				}
				ats <- r.At
			})
		}
		wg.Wait()
		close(ats)
		seen := map[string]int{}
		for at := range ats {
			seen[at]++
		}
		if len(seen) > 2 {
			t.Errorf("20 questions at once were computed %d times (%v), want once (twice if a computation ended between them)", len(seen), seen)
		}
	})

	t.Run("machines: a MachineSet scaled from the page, bad input refused", func(t *testing.T) {
		tab := tab.For(t)
		set := newMachineSet(t, "console-ms", 0)
		tab.Go(base + "/#/machines")
		key := machine.Namespace + "/" + set.Name
		tab.WaitText(`tr[data-key="`+key+`"]`, set.Name, 30*time.Second)
		tab.Fill("#scale-set", key)
		tab.Fill("#scale-replicas", "two")
		tab.Click(`#main form button[type=submit]`)
		tab.WaitText("#result", `replicas "two" is not a whole number`, 30*time.Second)
		if ms, err := machines(t).MachineV1beta1().MachineSets(machine.Namespace).Get(ctx, set.Name, metav1.GetOptions{}); err != nil || *ms.Spec.Replicas != 0 {
			t.Errorf("a malformed scale changed the MachineSet: %v %v", err, ms.Spec.Replicas)
		}
		tab.Fill("#scale-replicas", "2")
		tab.Click(`#main form button[type=submit]`)
		tab.WaitText("#result", "machineset.machine.openshift.io/console-ms scaled to 2", 30*time.Second)
		for _, m := range waitMachinesRunning(t, set.Name, 2) {
			tab.WaitText(`tr[data-key="`+machine.Namespace+"/"+m.Name+`"]`, "Running", time.Minute)
		}
		tab.A11y("machines")
		tab.Screenshot("machines")
	})

	t.Run("machine config pools, and cluster settings without a ClusterVersion", func(t *testing.T) {
		tab := tab.For(t)
		tab.Go(base + "/#/pools")
		pools, err := env.Dynamic.Resource(schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"}).
			List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pools.Items) == 0 {
			tab.WaitText("main", "No MachineConfigPool", 30*time.Second)
		}
		for _, p := range pools.Items {
			tab.WaitText("main", p.GetName()+"\nConfig ", 30*time.Second)
		}
		tab.A11y("machine config pools")
		tab.Go(base + "/#/updates")
		// This cluster runs no Cluster Version Operator (test/cvo drives
		// the page's updates).
		tab.WaitText("main", "This cluster has no ClusterVersion", 30*time.Second)
		tab.A11y("cluster settings")
	})
}

// capstan console serves the same console for any kubeconfig, with a
// one-time link for the kubeconfig's own token, and refuses bad flags.
func TestConsoleCommand(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--prometheus-url ftp://example.com", `--prometheus-url "ftp://example.com": want an http or https URL`},
		{"--listen not-an-address", "--listen not-an-address: address not-an-address: missing port in address"},
		{"--listen 0.0.0.0:0", `--listen 0.0.0.0:0: "0.0.0.0" is not a loopback address: the console serves plain HTTP only on loopback`},
		{"--listen 0.0.0.0:0 --tls-cert-file /no/such.crt --tls-key-file /no/such.key", "--listen 0.0.0.0:0: the TLS certificate and key: open /no/such.crt"},
		{"--policy /no/such/policy.json", "/no/such/policy.json"},
	} {
		out, err := testenv.CLI(append([]string{"console", "--kubeconfig", env.Kubeconfig, "--as-admin"}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("capstan console %s: %v (%s), want an error with %q", tc.args, err, out, tc.want)
		}
	}
	// A component acts as its own identity: not as capstan up's admin
	// unless told to, and not with a kubeconfig picked for it.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"console", "--kubeconfig", env.Kubeconfig, "--listen", "127.0.0.1:0"}, "is system:masters (the cluster's admin, beyond RBAC)"},
		{[]string{"console", "--listen", "127.0.0.1:0"}, "no --kubeconfig, and not in a pod"},
		{[]string{"scheduler", "--scheduler-name", "nobody"}, "no --kubeconfig, and not in a pod"},
	} {
		out, err := testenv.CLI(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("capstan %v: %v (%s), want an error with %q", tc.args, err, out, tc.want)
		}
	}
	// M1: a console out of the cluster never takes the thanos-querier
	// Route's host: whoever may write the Route could point it at a
	// server of their own, and receive every user's token. Pointed
	// elsewhere, the Route's host sees nothing, and the console says it
	// has no Prometheus.
	thief := newTokenThief(t)
	repointThanosRoute(t, thief.addr)
	out, err := testenv.CLI("console", "--kubeconfig", env.Kubeconfig, "--as-admin", "--listen", "127.0.0.1:0", "--tls-cert-file", "/no/such.crt")
	if err == nil || !strings.Contains(err.Error(), "a TLS certificate needs its key") {
		t.Errorf("a certificate without its key: %v (%s)", err, out)
	}
	routeOnly := testenv.StartCapstan(t, "console", "--kubeconfig", env.Kubeconfig, "--as-admin", "--listen", "127.0.0.1:0")
	routeOnly.WaitLine(t, "no alerts or charts: out of a cluster, the console asks only the Prometheus --prometheus-url names", time.Minute)
	routeBase := strings.TrimPrefix(routeOnly.WaitLine(t, "Console: ", time.Minute), "Console: ")
	client := consoleClient(t, routeBase, env.Cluster.AdminToken())
	resp, err := client.Get(routeBase + "/api/prometheus/api/v1/alerts")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || thief.saw() != "" {
		t.Errorf("a console without --prometheus-url, the Route pointed elsewhere: alerts %d, the Route's host saw %q", resp.StatusCode, thief.saw())
	}
	routeOnly.Stop(t)

	p := testenv.StartCapstan(t, "console", "--kubeconfig", env.Kubeconfig, "--as-admin", "--listen", "127.0.0.1:0", "--prometheus-url", env.Cluster.ThanosQuerierURL)
	t.Cleanup(func() { p.Stop(t) })
	base := strings.TrimPrefix(p.WaitLine(t, "Console: ", time.Minute), "Console: ")
	line := p.WaitLine(t, "Log in as the kubeconfig's user", 10*time.Second)
	link := line[strings.Index(line, "http://"):]
	if !strings.HasPrefix(link, base+"/login?code=") {
		t.Fatalf("login link %q is not on %s", link, base)
	}
	tab := testenv.NewTab(t)
	tab.Go(link)
	tab.WaitText("#who", "Logged in as system:serviceaccount:kube-system:capstan-admin", 30*time.Second)
	tab.Go(base + "/#/nodes")
	for _, n := range nodeNames(t) {
		tab.WaitText(`tr[data-key="`+n+`"]`, "Ready", 30*time.Second)
	}
	// Alerts come from --prometheus-url, with the user's token.
	tab.Go(base + "/#/overview")
	tab.WaitText("main", "Firing alerts", 30*time.Second)
	if got := tab.Text("main"); strings.Contains(got, "no Prometheus") || strings.Contains(got, "Cannot read alerts") {
		t.Errorf("capstan console found no Prometheus at --prometheus-url:\n%s", got)
	}
	if thief.saw() != "" {
		t.Errorf("the Route's host saw a token: %q", thief.saw())
	}
}

// tokenThief is a TLS server that records any Authorization it is sent.
type tokenThief struct {
	addr string
	mu   sync.Mutex
	auth string
}

func newTokenThief(t *testing.T) *tokenThief {
	th := &tokenThief{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		th.mu.Lock()
		th.auth += r.Header.Get("Authorization")
		th.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"alerts":[]}}`))
	}))
	t.Cleanup(srv.Close)
	th.addr = strings.TrimPrefix(srv.URL, "https://")
	return th
}

func (th *tokenThief) saw() string {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.auth
}

// repointThanosRoute admits the thanos-querier Route at addr for the
// test, as one who may write it could, and puts it back after.
func repointThanosRoute(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	routes := env.Dynamic.Resource(cluster.RouteResource).Namespace(cluster.MonitoringNamespace)
	route, err := routes.Get(ctx, cluster.ThanosQuerierName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, _, _ := unstructured.NestedSlice(route.Object, "status", "ingress")
	set := func(ingress []any) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			r, err := routes.Get(ctx, cluster.ThanosQuerierName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := unstructured.SetNestedSlice(r.Object, ingress, "status", "ingress"); err != nil {
				return err
			}
			_, err = routes.UpdateStatus(ctx, r, metav1.UpdateOptions{})
			return err
		})
	}
	if err := set([]any{map[string]any{"host": addr, "routerName": "default", "wildcardPolicy": "None",
		"conditions": []any{map[string]any{"type": "Admitted", "status": "True"}}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(old); err != nil {
			t.Errorf("putting the thanos-querier Route back: %v", err)
		}
	})
}
