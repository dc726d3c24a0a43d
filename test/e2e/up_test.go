package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"

	"github.com/capstan-dev/capstan/internal/testenv"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/cluster"
)

func TestUpRejectsBadInputWithOneClearLine(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(tmp, "newer")
	if err := os.MkdirAll(newer, 0o700); err != nil {
		t.Fatal(err)
	}
	stateFile := filepath.Join(newer, "capstan.json")
	state := []byte(`{"formatVersion": 99}` + "\n")
	if err := os.WriteFile(stateFile, state, 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(tmp, "foreign")
	if err := os.MkdirAll(filepath.Join(foreign, "etcd", "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	promConfig := filepath.Join(tmp, "prometheus.yaml")
	if err := os.WriteFile(promConfig, []byte("scrape_configs:\n- job_name: y\n  scrape_interval: often\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"up", "--bogus"}, "unknown flag: --bogus"},
		{"bad node count", []string{"up", "--data-dir", filepath.Join(tmp, "neg"), "--nodes", "-1"}, "must not be negative"},
		{"unwritable data dir", []string{"up", "--data-dir", filepath.Join(file, "sub")}, "is not writable"},
		{"incompatible data dir", []string{"up", "--data-dir", newer}, "format version 99"},
		{"foreign etcd data", []string{"up", "--data-dir", foreign}, "not a capstan data dir"},
		{"port in use", []string{"up", "--data-dir", filepath.Join(tmp, "ok"), "--port", busyPort}, "port " + busyPort + " on 127.0.0.1 is not available"},
		{"bad port", []string{"up", "--data-dir", filepath.Join(tmp, "ok2"), "--port", "70000"}, "not a TCP port"},
		{"negative retention", []string{"up", "--data-dir", filepath.Join(tmp, "unwritten"), "--metrics-retention", "-1h"}, "--metrics-retention -1h0m0s: must not be negative"},
		{"bad retention size", []string{"up", "--data-dir", filepath.Join(tmp, "unwritten"), "--metrics-retention-size", "12XB"}, `"12XB" is not a size such as 512MB or 10GB`},
		{"bad prometheus config", []string{"up", "--data-dir", filepath.Join(tmp, "unwritten"), "--prometheus-config", promConfig}, `not a valid duration string: "often"`},
		{"metrics on every interface", []string{"up", "--data-dir", filepath.Join(tmp, "unwritten"), "--metrics-address", ":8085"}, "--metrics-address :8085: every interface is not loopback only"},
		{"a plain-HTTP console off loopback", []string{"up", "--data-dir", filepath.Join(tmp, "unwritten"), "--console-address", "0.0.0.0:9000"}, `--console-address 0.0.0.0:9000: "0.0.0.0" is not a loopback address: the console serves plain HTTP only on loopback`},
		{"a console certificate without its key", []string{"up", "--data-dir", filepath.Join(tmp, "unwritten"), "--console-tls-cert-file", "/no/such.crt"}, "--console-address 127.0.0.1:9000: a TLS certificate needs its key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := testenv.RunCapstan(t, tc.args...)
			if code == 0 {
				t.Fatalf("exit 0, want failure; output:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "capstan: error: ") || !strings.Contains(last, tc.want) {
				t.Errorf("last line %q, want a capstan error containing %q; output:\n%s", last, tc.want, out)
			}
		})
	}
	if got, _ := os.ReadFile(stateFile); !bytes.Equal(got, state) {
		t.Errorf("incompatible data dir was modified: capstan.json now %q", got)
	}
	if _, err := os.Stat(filepath.Join(newer, "etcd")); err == nil {
		t.Errorf("etcd data was created in an incompatible data dir")
	}
	if _, err := os.Stat(filepath.Join(tmp, "unwritten")); err == nil {
		t.Errorf("bad monitoring flags left a data dir behind")
	}
}

func TestUpStopsCleanlyAndResumesTheSameCluster(t *testing.T) {
	dir := t.TempDir()
	port := strconv.Itoa(testenv.FreePort(t))
	// Installed, as an install configuration can, without the Console
	// capability: v4.11's set and Ingress.
	args := []string{"--data-dir", dir, "--port", port, "--nodes", "2", "--control-plane-nodes", "1",
		"--node-monitor-grace-period", "5s", "--node-monitor-period", "1s", "--console-address", "127.0.0.1:0",
		"--baseline-capability-set", "v4.11", "--additional-enabled-capabilities", "Ingress"}
	up := testenv.StartUp(t, args...)
	up.WaitLine(t, "export KUBECONFIG="+filepath.Join(dir, "kubeconfig"), 3*time.Minute)
	summary := up.WaitLine(t, "capstan is up", 10*time.Second)
	if !strings.Contains(summary, "1 control-plane and 2 worker nodes Ready") {
		t.Errorf("summary %q", summary)
	}
	// The console, with the admin's one-time login link.
	console := up.WaitLine(t, "Console: ", 10*time.Second)
	if !regexp.MustCompile(`^Console: http://127\.0\.0\.1:\d+ \(log in as the admin, once, within 10 minutes: http://127\.0\.0\.1:\d+/login\?code=[A-Za-z0-9_-]{43}\)$`).MatchString(console) {
		t.Errorf("console line %q", console)
	}

	// A second capstan on the same data dir is refused; the first runs on.
	code, out := testenv.RunCapstan(t, "up", "--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)))
	if code == 0 || !strings.Contains(out, "in use by another capstan") {
		t.Errorf("second up on a data dir in use: exit %d, output:\n%s", code, out)
	}

	cfg := testenv.Kubeconfig(t, filepath.Join(dir, "kubeconfig"))
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "keep-me"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForServiceAccount(ctx, client, "default", time.Minute); err != nil {
		t.Fatal(err)
	}
	// capstan up boots from Machines, as OpenShift does: three control-plane
	// Machines and a worker MachineSet per zone, nodes named after them.
	out = capstanOK(t, "kubectl", "--kubeconfig", filepath.Join(dir, "kubeconfig"), "get", "machines,machinesets", "-n", "openshift-machine-api")
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			name := f[0][strings.Index(f[0], "/")+1:]
			if i := strings.Index(name, "-master-"); i >= 0 {
				name = name[i:]
			} else if i := strings.Index(name, "-worker-"); i >= 0 {
				name = name[i:]
			}
			rows[name] = strings.Join(f[1:len(f)-1], " ")
		}
	}
	for name, want := range map[string]string{
		"-master-0":          "Running capstan.large sim-region sim-zone-a",
		"-worker-sim-zone-a": "1 1 1 1",
		"-worker-sim-zone-b": "1 1 1 1",
		"-worker-sim-zone-c": "0",
	} {
		if rows[name] != want {
			t.Errorf("%s: %q, want %q in:\n%s", name, rows[name], want, out)
		}
	}
	workers, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/worker"})
	if err != nil || len(workers.Items) != 2 {
		t.Fatalf("worker nodes: %v, %v", workers, err)
	}
	worker := workers.Items[0].Name
	if _, err := client.CoreV1().Pods("default").Create(ctx, boundPod("kept", worker), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodRunning(t, client, "default", "kept")
	installedWithoutConsole(t, cfg)
	up.Stop(t)

	up = testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	cm, err := client.CoreV1().ConfigMaps("default").Get(ctx, "keep-me", metav1.GetOptions{})
	if err != nil || cm.Data["k"] != "v" {
		t.Fatalf("configmap after restart: %v %v", cm, err)
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Errorf("%d nodes after restart, want the same 3", len(list.Items))
	}
	for i := range list.Items {
		if !nodes.Ready(&list.Items[i]) {
			t.Errorf("node %s not Ready after restart", list.Items[i].Name)
		}
	}
	waitPodRunning(t, client, "default", "kept")
	up.Stop(t)
	webhooksServedFirst(t, filepath.Join(dir, "logs", "capstan.log"), 2)
}

// installedWithoutConsole checks a cluster installed with the
// capabilities v4.11 and Ingress: the release's console operator, which
// needs Console, is not applied while the ingress and Machine API
// operators are, and the ClusterVersion lists what is enabled.
func installedWithoutConsole(t *testing.T, cfg *rest.Config) {
	t.Helper()
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cfg)
	config := configclient.NewForConfigOrDie(cfg)
	var cv *configv1.ClusterVersion
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		var err error
		if cv, err = config.ConfigV1().ClusterVersions().Get(ctx, "version", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		h := cv.Status.History
		return len(h) == 1 && h[0].State == configv1.CompletedUpdate, fmt.Sprintf("the install is not complete: %+v", h)
	})
	if got := fmt.Sprint(cv.Status.Capabilities.EnabledCapabilities); got != "[Ingress MachineAPI baremetal marketplace openshift-samples]" {
		t.Errorf("enabled capabilities %s", got)
	}
	for ns, want := range map[string]bool{"openshift-console-operator": false, "openshift-ingress-operator": true, "openshift-dns-operator": true} {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if got := err == nil; got != want {
			t.Errorf("namespace %s there: %v, want %v (%v)", ns, got, want, err)
		}
	}
	if _, err := config.ConfigV1().ClusterOperators().Get(ctx, "console", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ClusterOperator console of a disabled capability: %v", err)
	}
}

// webhooksServedFirst checks, in the log of a data dir, that each of the
// starts of capstan up (at least starts) served its admission webhooks
// before its controller manager started: the webhooks fail closed, and a
// controller whose write was refused at its start may not try again.
func webhooksServedFirst(t *testing.T, logFile string, starts int) {
	t.Helper()
	raw, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	// klog lines: Lmmdd hh:mm:ss.uuuuuu PID file:line] msg
	served, kcm := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		pid := f[2]
		switch {
		case strings.Contains(line, `"Serving the admission webhooks"`):
			served[pid] = true
		case strings.Contains(line, `"Starting kube-controller-manager"`):
			if !served[pid] {
				t.Errorf("process %s started its controller manager before its admission webhooks served", pid)
			}
			kcm[pid] = true
		}
	}
	if len(kcm) < starts {
		t.Errorf("%d starts of the controller manager in %s, want %d", len(kcm), logFile, starts)
	}
}

// waitPodRunning waits until a pod runs and is Ready. A pod may wait for a
// whole scale-up (a machine, its boot, its node's readiness): the wait is
// generous, and says where the pod is if it runs out.
func waitPodRunning(t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		why := fmt.Sprintf("pod %s/%s is %s on node %q", ns, name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				why += fmt.Sprintf("; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		ok := p.Status.Phase == corev1.PodRunning && testenv.PodConditionTrue(p, corev1.PodReady)
		if !ok && p.Spec.NodeName == "" {
			why += schedulingHistory(client, p)
		}
		return ok, why
	})
}

// schedulingHistory says how often and when the scheduler last tried a
// pending pod, and which nodes the API has: a pod that waits for ever
// shows whether the scheduler stopped trying or did not see the nodes.
func schedulingHistory(client kubernetes.Interface, p *corev1.Pod) string {
	ctx := context.Background()
	var out string
	events, err := client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
	if err == nil {
		for _, e := range events.Items {
			last := e.LastTimestamp.Time
			if last.IsZero() {
				last = e.EventTime.Time
			}
			out += fmt.Sprintf("; event %s x%d last at %s: %s", e.Reason, max(e.Count, 1), last.Format(time.TimeOnly), e.Message)
		}
	}
	if nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		var names []string
		for _, n := range nodes.Items {
			names = append(names, n.Name)
		}
		out += fmt.Sprintf("; nodes %v", names)
	}
	return out
}

// PodNodeSelector configured through capstan: flags and the file in the
// data dir; a file that stops parsing is reported and the last good
// configuration stays in force.
func TestUpAdmissionConfiguration(t *testing.T) {
	dir := t.TempDir()
	port := strconv.Itoa(testenv.FreePort(t))
	args := []string{"--data-dir", dir, "--port", port, "--nodes", "1", "--control-plane-nodes", "0",
		"--cluster-default-node-selector", "env=prod", "--project-node-selector", "wl=env=test,infra=fedora",
		"--default-unreachable-toleration-seconds", "42"}
	up := testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	cfg := testenv.Kubeconfig(t, filepath.Join(dir, "kubeconfig"))
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	checkDefault := func(nsName string) {
		t.Helper()
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitForServiceAccount(ctx, client, nsName, time.Minute); err != nil {
			t.Fatal(err)
		}
		p, err := client.CoreV1().Pods(nsName).Create(ctx, simplePod("p", nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeSelector["env"] != "prod" {
			t.Errorf("pod in a namespace without selector got %v, want the cluster default env=prod", p.Spec.NodeSelector)
		}
	}
	checkDefault("plain")

	// The DefaultTolerationSeconds setting of capstan up.
	p, err := client.CoreV1().Pods("plain").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seconds := map[string]int64{}
	for _, tl := range p.Spec.Tolerations {
		if tl.TolerationSeconds != nil {
			seconds[tl.Key] = *tl.TolerationSeconds
		}
	}
	if seconds["node.kubernetes.io/unreachable"] != 42 || seconds["node.kubernetes.io/not-ready"] != 300 {
		t.Errorf("default tolerations %v, want unreachable 42s and not-ready 300s", seconds)
	}

	// The whitelist of namespace wl: its own selector must stay within it.
	for name, sel := range map[string]string{"wl": "env=prod"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{"scheduler.alpha.kubernetes.io/node-selector": sel}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitForServiceAccount(ctx, client, name, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	_, err = client.CoreV1().Pods("wl").Create(ctx, simplePod("outside", nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "conflict with its namespace whitelist") {
		t.Errorf("pod in a namespace whose selector leaves its whitelist: %v", err)
	}
	up.Stop(t)

	if err := os.WriteFile(filepath.Join(dir, "admission", "podnodeselector.yaml"),
		[]byte("podNodeSelectorPluginConfig:\n  clusterDefaultNodeSelector: \"env in (prod\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up = testenv.StartUp(t, "--data-dir", dir, "--port", port, "--nodes", "1", "--control-plane-nodes", "0")
	warning := up.WaitLine(t, "capstan: warning: admission/", 3*time.Minute)
	if !strings.Contains(warning, `admission/podnodeselector.yaml: clusterDefaultNodeSelector: selector "env in (prod"`) ||
		!strings.Contains(warning, "keeping the last good configuration") {
		t.Errorf("warning %q", warning)
	}
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	checkDefault("plain2")
	up.Stop(t)

	code, out := testenv.RunCapstan(t, "up", "--data-dir", dir, "--port", port, "--project-node-selector", "no-equals-sign")
	if code == 0 || !strings.Contains(out, `--project-node-selector "no-equals-sign" is not NAMESPACE=SELECTOR`) {
		t.Errorf("bad flag: exit %d\n%s", code, out)
	}
}
