package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// CVOResult is what a signed, verified update of the benchmark's release
// took, measured by the CVO itself (cvo.Timeline), to the millisecond.
type CVOResult struct {
	Operators, RunLevels int
	// Manifests are the tasks of the update's graph, counted; Applied and
	// Waits the applies and operator waits the CVO did.
	Manifests, Applied, Waits int
	// Total is from the request to the pass completing. Accept is until
	// the release was accepted (retrieved, signature verified,
	// preconditions checked). Applying is the wall time during which at
	// least one manifest was being applied; Waiting when only operators
	// were waited for; Between when the CVO ran no task (scheduling,
	// status). CVOTime is Total less Waiting: the CVO's own.
	Total, Accept, Applying, Waiting, Between, CVOTime time.Duration
	// ApplySum adds up each apply's own duration; ApplyPerSecond is
	// manifests applied per second of it (one worker's throughput), and
	// ApplyWallPerSecond per second of Applying.
	ApplySum                           time.Duration
	ApplyPerSecond, ApplyWallPerSecond float64
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
	timeline := &cvo.Timeline{}
	rel.CVO.Timeline = timeline
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
	// The releases carry the installed release's verification keys and
	// are signed with the cluster's key: the updates are verified, not
	// forced.
	installed, err := release.Read(ctx, mustParseRef(host+"/ocp/release:"+demo.Versions[0]+"-x86_64"))
	if err != nil {
		return nil, fmt.Errorf("reading the installed release: %w", err)
	}
	keys := installed.Payload.Manifests[demo.VerificationFile]
	if keys == nil {
		return nil, fmt.Errorf("the installed release has no %s", demo.VerificationFile)
	}
	var images []string
	for _, v := range []string{"4.10.90", "4.10.91"} {
		img, digest, err := publishBenchRelease(ctx, dir, host, v, ops, keys)
		if err != nil {
			return nil, err
		}
		if err := cl.SignRelease(ctx, digest, img); err != nil {
			return nil, fmt.Errorf("signing %s: %w", v, err)
		}
		images = append(images, img)
	}
	request := func(image string) error {
		patch := fmt.Sprintf(`{"spec":{"desiredUpdate":{"image":%q}}}`, image)
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
	cpu0 := cpuTime()
	start := time.Now()
	if err := request(images[1]); err != nil {
		return nil, err
	}
	if _, err := waitVersion(ctx, config, "4.10.91", o.Timeout); err != nil {
		return nil, err
	}
	res := &CVOResult{Operators: o.Operators, CPU: cpuTime() - cpu0}
	pass := timeline.Pass("4.10.91")
	if pass.Accepted.IsZero() || pass.Completed.IsZero() {
		return nil, fmt.Errorf("the CVO recorded no complete pass of 4.10.91")
	}
	res.Total, res.Accept = pass.Completed.Sub(start), pass.Accepted.Sub(start)
	b := pass.Breakdown(pass.Accepted, pass.Completed)
	res.Manifests, res.Applied, res.Waits = pass.Tasks, b.Applies, b.Waits
	res.Applying, res.Waiting, res.Between, res.ApplySum = b.Applying, b.Waiting, b.Between+res.Accept, b.ApplySum
	res.CVOTime = res.Total - res.Waiting
	if b.ApplySum > 0 {
		res.ApplyPerSecond = float64(b.Applies) / b.ApplySum.Seconds()
	}
	if b.Applying > 0 {
		res.ApplyWallPerSecond = float64(b.Applies) / b.Applying.Seconds()
	}
	levels := map[string]bool{}
	for _, op := range ops {
		levels[op.RunLevel] = true
	}
	res.RunLevels = len(levels)
	return res, nil
}

func mustParseRef(s string) release.Ref {
	r, err := release.ParseRef(s)
	if err != nil {
		panic(err)
	}
	return r
}

// publishBenchRelease builds a release of ops at version carrying the
// verification manifest keys, pushes it, and returns its pull spec by
// digest and the digest.
func publishBenchRelease(ctx context.Context, dir, host, version string, ops []demo.Operator, keys []byte) (string, string, error) {
	src := dir + "/src-" + version
	if err := demo.WriteSource(src, version, ops, nil); err != nil {
		return "", "", err
	}
	p, err := release.LoadDir(src, release.Metadata{Version: version})
	if err != nil {
		return "", "", err
	}
	p.Manifests[demo.VerificationFile] = keys
	img, err := release.Build(p, release.BuildOptions{})
	if err != nil {
		return "", "", err
	}
	ref, err := release.ParseRef(host + "/ocp/release:" + version + "-x86_64")
	if err != nil {
		return "", "", err
	}
	digest, err := release.Write(ctx, ref, img)
	if err != nil {
		return "", "", err
	}
	return host + "/ocp/release@" + digest.String(), digest.String(), nil
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

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
