package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// CVOOptions configure the CVO benchmark.
type CVOOptions struct {
	Operators, Manifests int
	EtcdNoFsync          bool
	Timeout              time.Duration
}

// CVOResult is what an update of the benchmark's release took.
type CVOResult struct {
	Operators, Manifests, RunLevels int
	// Total is from the request to Completed; Accept until the release
	// was accepted (retrieved, verified, checked); Operators the time
	// the run levels spent waiting for their operators to roll out and
	// report; Overhead the rest, the CVO's own.
	Total, Accept, OperatorTime, Overhead time.Duration
	// ApplyPerSecond is manifests applied per second of the CVO's own
	// apply time (the apply phase less the operators' time).
	ApplyPerSecond float64
	// CPU is the process's CPU time during the update (the CVO, the
	// operators' reports, the API server and etcd together).
	CPU time.Duration
}

// benchRunLevels spreads operators over run levels as a real release
// does: a few alone early, most at 50, some late.
func benchRunLevels(n int) []string {
	early := []string{"03", "10", "12", "20", "25", "25", "26", "27", "28", "29", "30", "30", "31", "32", "40"}
	late := []string{"60", "70", "70", "80", "90"}
	var out []string
	for i := range n {
		switch {
		case i < len(early):
			out = append(out, early[i])
		case i >= n-len(late) && n-len(late) >= len(early):
			out = append(out, late[i-(n-len(late))])
		default:
			out = append(out, "50")
		}
	}
	return out
}

// benchOperators are n operators with manifests each (a namespace, a
// Deployment, a ClusterOperator and ConfigMaps).
func benchOperators(n, manifests int) []demo.Operator {
	levels := benchRunLevels(n)
	per := max(manifests/n-3, 0)
	ops := make([]demo.Operator, n)
	for i := range ops {
		name := fmt.Sprintf("bench-%02d", i)
		ops[i] = demo.Operator{RunLevel: levels[i], Component: name + "-operator", Name: name, Namespace: "openshift-" + name, Deployment: name + "-operator", Extra: per}
	}
	return ops
}

// CVO measures an update between two releases of o.Operators operators
// and o.Manifests manifests: the first update creates them all, the
// second, measured, rolls every operator to a new version.
func CVO(ctx context.Context, o CVOOptions, log io.Writer) (*CVOResult, error) {
	if o.Operators <= 0 || o.Manifests < 3*o.Operators {
		return nil, fmt.Errorf("--operators must be positive and --manifests at least 3 per operator")
	}
	dir, err := os.MkdirTemp("", "capstan-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	opts := clusterOptions(dir, o.EtcdNoFsync)
	opts.ControlPlaneNodes = 3
	rel := cluster.DefaultReleaseOptions()
	rel.Address = "127.0.0.1:0"
	rel.CVO.OperatorPollInterval = 100 * time.Millisecond
	rel.CVO.RetryInterval = 200 * time.Millisecond
	opts.Releases = &rel
	cl, err := startCluster(ctx, opts, dir, log)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	if err := cl.EnsureNodes(ctx); err != nil {
		return nil, err
	}
	config, err := configclient.NewForConfig(cl.RESTConfig())
	if err != nil {
		return nil, err
	}
	if _, err := waitVersion(ctx, config, demo.Versions[0], o.Timeout); err != nil {
		return nil, fmt.Errorf("installing: %w", err)
	}
	ops := benchOperators(o.Operators, o.Manifests)
	host := strings.TrimPrefix(cl.ReleasesURL, "http://")
	kc, err := release.ReadAuthFile(cl.RegistryAuth)
	if err != nil {
		return nil, err
	}
	ctx = release.WithKeychain(ctx, kc)
	var images []string
	for _, v := range []string{"4.10.90", "4.10.91"} {
		img, err := publishBenchRelease(ctx, dir, host, v, ops)
		if err != nil {
			return nil, err
		}
		images = append(images, img)
	}
	request := func(image string) error {
		patch := fmt.Sprintf(`{"spec":{"desiredUpdate":{"image":%q,"force":true}}}`, image)
		_, err := config.ConfigV1().ClusterVersions().Patch(ctx, cvo.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	fmt.Fprintf(log, "Creating %d operators (%d manifests) with an update to 4.10.90 ...\n", o.Operators, o.Manifests)
	if err := request(images[0]); err != nil {
		return nil, err
	}
	if _, err := waitVersion(ctx, config, "4.10.90", o.Timeout); err != nil {
		return nil, err
	}

	fmt.Fprintln(log, "Updating every operator to 4.10.91 ...")
	w, err := watchUpdate(ctx, cl, config, "4.10.91")
	if err != nil {
		return nil, err
	}
	defer w.stop()
	cpu0 := cpuTime()
	start := time.Now()
	if err := request(images[1]); err != nil {
		return nil, err
	}
	cv, err := waitVersion(ctx, config, "4.10.91", o.Timeout)
	if err != nil {
		return nil, err
	}
	done := time.Now()
	res := &CVOResult{Operators: o.Operators, Total: done.Sub(start), CPU: cpuTime() - cpu0}
	res.Accept = cv.Status.History[0].StartedTime.Sub(start)
	// The operators' time: for each run level, from its first operator's
	// Deployment changing to its last operator reporting the version.
	byLevel := map[string][]string{}
	for _, op := range ops {
		byLevel[op.RunLevel] = append(byLevel[op.RunLevel], op.Name)
	}
	w.mu.Lock()
	for _, names := range byLevel {
		var first, last time.Time
		for _, n := range names {
			if a, ok := w.applied[n]; ok && (first.IsZero() || a.Before(first)) {
				first = a
			}
			if r := w.reported[n]; r.After(last) {
				last = r
			}
		}
		if !first.IsZero() && last.After(first) {
			res.OperatorTime += last.Sub(first)
		}
	}
	w.mu.Unlock()
	res.RunLevels = len(byLevel)
	res.Manifests = (3 + max(o.Manifests/o.Operators-3, 0)) * o.Operators
	res.Overhead = res.Total - res.OperatorTime
	if apply := res.Total - res.Accept - res.OperatorTime; apply > 0 {
		res.ApplyPerSecond = float64(res.Manifests) / apply.Seconds()
	}
	return res, nil
}

// publishBenchRelease builds and pushes a release of ops at version.
func publishBenchRelease(ctx context.Context, dir, host, version string, ops []demo.Operator) (string, error) {
	src := dir + "/src-" + version
	if err := demo.WriteSource(src, version, ops, nil); err != nil {
		return "", err
	}
	p, err := release.LoadDir(src, release.Metadata{Version: version})
	if err != nil {
		return "", err
	}
	img, err := release.Build(p, release.BuildOptions{})
	if err != nil {
		return "", err
	}
	ref, err := release.ParseRef(host + "/ocp/release:" + version + "-x86_64")
	if err != nil {
		return "", err
	}
	digest, err := release.Write(ctx, ref, img)
	if err != nil {
		return "", err
	}
	return host + "/ocp/release@" + digest.String(), nil
}

// waitVersion waits until the cluster has completed version.
func waitVersion(ctx context.Context, config configclient.Interface, version string, timeout time.Duration) (*configv1.ClusterVersion, error) {
	var cv *configv1.ClusterVersion
	err := waitfor.Poll(ctx, 50*time.Millisecond, timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		var err error
		cv, err = config.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		h := cv.Status.History
		for _, c := range cv.Status.Conditions {
			if c.Type == configv1.OperatorProgressing && len(h) > 0 && h[0].Version == version && h[0].State == configv1.CompletedUpdate {
				return true, ""
			}
			if c.Type == configv1.OperatorProgressing {
				return false, fmt.Sprintf("%s not completed: %s", version, c.Message)
			}
		}
		return false, "no Progressing condition"
	}))
	return cv, err
}

// updateWatch times each operator's Deployment change and report.
type updateWatch struct {
	mu       sync.Mutex
	applied  map[string]time.Time
	reported map[string]time.Time
	stop     context.CancelFunc
}

func watchUpdate(ctx context.Context, cl *cluster.Cluster, config configclient.Interface, version string) (*updateWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &updateWatch{applied: map[string]time.Time{}, reported: map[string]time.Time{}, stop: cancel}
	deps, err := cl.Client.AppsV1().Deployments("").Watch(ctx, metav1.ListOptions{LabelSelector: demo.OperatorLabel})
	if err != nil {
		cancel()
		return nil, err
	}
	cos, err := config.ConfigV1().ClusterOperators().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		for ev := range deps.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if e.Name == demo.VersionEnv && e.Value == version {
					w.mu.Lock()
					if _, ok := w.applied[d.Labels[demo.OperatorLabel]]; !ok {
						w.applied[d.Labels[demo.OperatorLabel]] = time.Now()
					}
					w.mu.Unlock()
				}
			}
		}
	}()
	go func() {
		for ev := range cos.ResultChan() {
			co, ok := ev.Object.(*configv1.ClusterOperator)
			if !ok {
				continue
			}
			for _, v := range co.Status.Versions {
				if v.Name == "operator" && v.Version == version {
					w.mu.Lock()
					if _, ok := w.reported[co.Name]; !ok {
						w.reported[co.Name] = time.Now()
					}
					w.mu.Unlock()
				}
			}
		}
	}()
	return w, nil
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
