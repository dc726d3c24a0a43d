// Package testenv starts one embedded capstan cluster for a test package:
// a fresh data dir, a free port, node lifecycle timings shortened to
// seconds, and clients to drive it. Call Start from TestMain and Stop after
// m.Run.
package testenv

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// Timings of a test cluster: a node whose kubelet stops is unreachable
// after NodeMonitorGracePeriod.
const (
	NodeMonitorPeriod      = time.Second
	NodeMonitorGracePeriod = 5 * time.Second
	LeaseDuration          = 4 * time.Second
)

// Env is a running test cluster.
type Env struct {
	*cluster.Cluster
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface
	Kubeconfig string
	DataDir    string
}

// Options adjust the test cluster before it starts.
type Options struct {
	ControlPlaneNodes int
	Workers           int
	// Configure, when set, may change any option.
	Configure func(*cluster.Options)
}

// Start brings up a cluster in a new temporary data dir and waits until its
// boot nodes are Ready and the default namespace can hold pods.
func Start(opts Options) (*Env, error) {
	dir, err := os.MkdirTemp("", "capstan-test-")
	if err != nil {
		return nil, err
	}
	co := cluster.DefaultOptions()
	co.ControlPlane.DataDir = dir
	co.ControlPlane.Port = 0
	co.ControlPlane.EtcdNoFsync = true
	co.ControlPlane.NodeMonitorPeriod = NodeMonitorPeriod
	co.ControlPlane.NodeMonitorGracePeriod = NodeMonitorGracePeriod
	co.ControlPlane.NodeStartupGracePeriod = 10 * time.Second
	co.ControlPlaneNodes = opts.ControlPlaneNodes
	co.Workers = opts.Workers
	co.Sim.LeaseDuration = LeaseDuration
	co.Sim.NodeStatusReportFrequency = time.Minute
	// Tests boot plain instances with fixed names and create the machines
	// they need; the Machine API runs with timings of seconds.
	co.BootFromMachines = false
	// Nor do they hand etcd to control-plane machines: the single
	// bootstrap member serves them (the etcd tests run capstan up).
	co.EtcdOperator = false
	co.MachineAPI.DrainTimeout = 3 * time.Second
	co.MachineAPI.DrainBackoffBase = 500 * time.Millisecond
	co.MachineAPI.DrainBackoffMax = 4 * time.Second
	co.MachineAPI.InstancePollInterval = 500 * time.Millisecond
	co.Autoscaler.ScanInterval = time.Second
	// The HorizontalPodAutoscaler at test speed: a metrics window, an HPA
	// sync and a downscale stabilization of seconds.
	co.ResourceMetrics.Window = time.Second
	co.Releases.Address = "127.0.0.1:0"
	// The metrics endpoint also answers the CVO's PromQL risk queries;
	// its Prometheus scrapes every 5s and evaluates every 2s, and alerts
	// fire 3s after their expression holds, whatever `for` OpenShift
	// gives them.
	co.MetricsAddress = "127.0.0.1:0"
	co.Monitoring = cluster.MonitoringOptions{ScrapeInterval: 5 * time.Second, EvaluationInterval: 2 * time.Second, MaxAlertFor: 3 * time.Second,
		ThanosAddress: "127.0.0.1:0"}
	co.ConsoleAddress = "127.0.0.1:0"
	co.ControlPlane.ExtraControllerManagerFlags = append(co.ControlPlane.ExtraControllerManagerFlags,
		"--horizontal-pod-autoscaler-sync-period=1s", "--horizontal-pod-autoscaler-downscale-stabilization=2s")
	if opts.Configure != nil {
		opts.Configure(&co)
	}
	if err := co.SetLeaseDuration(); err != nil {
		return nil, err
	}
	// Upstream libraries log straight to file descriptor 2; send that to
	// the cluster's log file, keeping crashes visible on the terminal.
	if fd, err := unix.Dup(2); err == nil {
		_ = debug.SetCrashOutput(os.NewFile(uintptr(fd), "/dev/stderr"), debug.CrashOptions{})
		co.ControlPlane.RedirectStderr = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := cluster.Start(ctx, co)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting test cluster: %w", err)
	}
	env := &Env{Cluster: cl, Config: cl.RESTConfig(), Client: cl.Client, Kubeconfig: cl.ControlPlane.KubeconfigPath(), DataDir: dir}
	if env.Dynamic, err = dynamic.NewForConfig(env.Config); err != nil {
		env.Stop()
		return nil, err
	}
	if err := cl.EnsureNodes(ctx); err != nil {
		env.Stop()
		return nil, err
	}
	if err := cl.WaitBootNodesReady(ctx, 2*time.Minute); err != nil {
		env.Stop()
		return nil, err
	}
	if err := cluster.WaitForServiceAccount(ctx, cl.Client, "default", time.Minute); err != nil {
		env.Stop()
		return nil, fmt.Errorf("default service account never appeared: %w", err)
	}
	return env, nil
}

// Finish stops the cluster after the package's tests ran, and turns a
// passing run (code 0) into a failing one when a component of capstan
// was refused anything it asked the API server for: each acts with only
// its deploy/COMPONENT/rbac.yaml rights, and the audit log shows every
// refusal. It returns the exit code.
func (e *Env) Finish(code int) int {
	if err := e.Cluster.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping test cluster: %v\n", err)
	}
	forbidden, err := deploy.Refused(e.Cluster.ControlPlane.DataDir().AuditLogPath())
	switch {
	case err != nil:
		fmt.Printf("reading the audit log: %v\n", err)
		code = max(code, 1)
	case len(forbidden) > 0:
		fmt.Printf("RBAC refused capstan's components these requests; their rbac.yaml lacks the rights:\n  %s\n",
			strings.Join(forbidden, "\n  "))
		code = max(code, 1)
	}
	e.removeData()
	return code
}

// Stop tears the cluster down and removes its data dir.
func (e *Env) Stop() {
	if err := e.Cluster.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping test cluster: %v\n", err)
	}
	e.removeData()
}

func (e *Env) removeData() {
	if os.Getenv(KeepDataEnv) != "" {
		fmt.Fprintf(os.Stderr, "test cluster data and logs kept in %s\n", e.DataDir)
		return
	}
	os.RemoveAll(e.DataDir)
}

// KeepDataEnv set (to anything) keeps a test cluster's data dir, logs
// included, for a post-mortem.
const KeepDataEnv = "CAPSTAN_KEEP_TEST_DATA"

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
	Name() string
}

// Namespace creates a namespace for one test, waits until pods can be
// created in it, and deletes it when the test ends.
func (e *Env) Namespace(t TB, prefix string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = e.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	if err := cluster.WaitForServiceAccount(ctx, e.Client, ns.Name, time.Minute); err != nil {
		t.Fatalf("namespace %s: default service account never appeared: %v", ns.Name, err)
	}
	return ns.Name
}

// Eventually polls cond every 100ms until it holds, and fails the test with
// cond's last explanation if it does not within timeout. It is the one way
// tests wait: on something observable, never on a fixed sleep.
func Eventually(t TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	err := waitfor.Poll(context.Background(), 100*time.Millisecond, timeout, waitfor.Simple(func(context.Context) (bool, string) {
		return cond()
	}))
	if err != nil {
		t.Fatalf("condition %v", err)
	}
}
