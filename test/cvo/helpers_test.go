package cvo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// condition finds a ClusterVersion or ClusterOperator condition.
func condition(conds []configv1.ClusterOperatorStatusCondition, t configv1.ClusterStatusConditionType) configv1.ClusterOperatorStatusCondition {
	for _, c := range conds {
		if c.Type == t {
			return c
		}
	}
	return configv1.ClusterOperatorStatusCondition{Type: t}
}

// describeCV says where a ClusterVersion stands, for failure messages.
func describeCV(cv *configv1.ClusterVersion) string {
	var b strings.Builder
	fmt.Fprintf(&b, "desired %s %s;", cv.Status.Desired.Version, cv.Status.Desired.Image)
	for _, c := range cv.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s %s %q;", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, h := range cv.Status.History {
		fmt.Fprintf(&b, " history %s %s verified=%v;", h.Version, h.State, h.Verified)
	}
	return b.String()
}

// waitCV waits up to timeout until done holds of the ClusterVersion.
func waitCV(t *testing.T, timeout time.Duration, what string, done func(*configv1.ClusterVersion) bool) *configv1.ClusterVersion {
	t.Helper()
	var cv *configv1.ClusterVersion
	testenv.Eventually(t, timeout, func() (bool, string) {
		cv = clusterVersion(t)
		return done(cv), what + ": " + describeCV(cv)
	})
	return cv
}

// waitCompleted waits until the cluster has completed version.
func waitCompleted(t *testing.T, version string) *configv1.ClusterVersion {
	t.Helper()
	return waitCV(t, 3*time.Minute, "update to "+version+" never completed", func(cv *configv1.ClusterVersion) bool {
		h := cv.Status.History
		p := condition(cv.Status.Conditions, configv1.OperatorProgressing)
		return len(h) > 0 && h[0].Version == version && h[0].State == configv1.CompletedUpdate &&
			p.Status == configv1.ConditionFalse && p.Message == "Cluster version is "+version
	})
}

// annotateNamespace sets (or, with value "", removes) an annotation of a
// namespace, removing it again when the test ends.
func annotateNamespace(t *testing.T, ns, key, value string) {
	t.Helper()
	patch := func(v any) error {
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
		_, err := env.Client.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, raw, metav1.PatchOptions{})
		return err
	}
	var v any = value
	if value == "" {
		v = nil
	}
	if err := patch(v); err != nil {
		t.Fatalf("annotating namespace %s: %v", ns, err)
	}
	t.Cleanup(func() { _ = patch(nil) })
}

// pushContext authenticates pushes to the cluster's registry with the
// credentials capstan up wrote.
func pushContext(t *testing.T) context.Context {
	t.Helper()
	kc, err := release.ReadAuthFile(env.RegistryAuth)
	if err != nil {
		t.Fatal(err)
	}
	return release.WithKeychain(context.Background(), kc)
}

// publishRelease builds a release of the demo operators at version, with
// edit applied to its source directory, pushes it unsigned to the
// cluster's registry and returns its pull spec by digest.
func publishRelease(t *testing.T, version string, edit func(p *release.Payload)) string {
	t.Helper()
	host := strings.TrimPrefix(env.ReleasesURL, "http://")
	digest, err := release.Write(pushContext(t), mustRef(t, host+"/ocp/release:"+version+"-x86_64"), buildRelease(t, version, edit))
	if err != nil {
		t.Fatal(err)
	}
	return host + "/ocp/release@" + digest.String()
}

// buildRelease builds a release of the demo operators at version, with
// edit applied to its source directory. It carries the verification
// manifest of the installed demo release, as a release built from the
// same sources would: updates from it are verified with the cluster's key.
func buildRelease(t *testing.T, version string, edit func(p *release.Payload)) v1.Image {
	t.Helper()
	src := t.TempDir()
	if err := demo.WriteSource(src, version, demo.Operators, nil); err != nil {
		t.Fatal(err)
	}
	p, err := release.LoadDir(src, release.Metadata{Version: version})
	if err != nil {
		t.Fatal(err)
	}
	installed, err := release.Read(context.Background(), mustRef(t, demoImage(t, demo.Versions[0])))
	if err != nil {
		t.Fatal(err)
	}
	keys, ok := installed.Payload.Manifests[demo.VerificationFile]
	if !ok {
		t.Fatalf("the installed release has no %s", demo.VerificationFile)
	}
	p.Manifests[demo.VerificationFile] = keys
	if edit != nil {
		edit(p)
	}
	img, err := release.Build(p, release.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// demoImage is the pull spec of a demo release in the cluster's registry.
func demoImage(t *testing.T, version string) string {
	t.Helper()
	img, err := release.Read(context.Background(), mustRef(t, strings.TrimPrefix(env.ReleasesURL, "http://")+"/ocp/release:"+version+"-x86_64"))
	if err != nil {
		t.Fatal(err)
	}
	return img.PullSpec
}

func mustRef(t *testing.T, s string) release.Ref {
	t.Helper()
	r, err := release.ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runLevels maps each ClusterOperator of the demo release to its run
// level; the CVO's own comes first.
func runLevels() map[string]string {
	m := map[string]string{cvo.Name: "00"}
	for _, op := range demo.Operators {
		m[op.Name] = op.RunLevel
	}
	return m
}

// updateRecorder records, from a watch, the order in which the cluster
// operators report a version, and the CVO's events.
type updateRecorder struct {
	mu      sync.Mutex
	version string
	order   []string
	seenOps map[string]bool
	// early are operators that reported the version while one of a lower
	// run level had not.
	early  []string
	events []corev1.Event
	cvs    []*configv1.ClusterVersion
	stop   func()
}

// recordUpdate starts recording the operators of the test cluster
// reaching version.
func recordUpdate(t *testing.T, version string) *updateRecorder {
	t.Helper()
	return recordUpdateOf(t, env.Client, configClient(t), version)
}

// recordUpdateOf records the operators of a cluster reaching version.
func recordUpdateOf(t *testing.T, kube kubernetes.Interface, config configclient.Interface, version string) *updateRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &updateRecorder{version: version, seenOps: map[string]bool{}, stop: cancel}
	t.Cleanup(cancel)
	cos, err := config.ConfigV1().ClusterOperators().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Those already there reported before: only the set is known.
	for _, co := range cos.Items {
		r.observe(&co, false)
	}
	r.checkLevels("")
	coWatch, err := config.ConfigV1().ClusterOperators().Watch(ctx, metav1.ListOptions{ResourceVersion: cos.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := kube.CoreV1().Events(cvo.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evWatch, err := kube.CoreV1().Events(cvo.Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: evs.ResourceVersion,
		FieldSelector: fields.OneTermEqualSelector("involvedObject.kind", "ClusterVersion").String()})
	if err != nil {
		t.Fatal(err)
	}
	cvList, err := config.ConfigV1().ClusterVersions().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cvWatch, err := config.ConfigV1().ClusterVersions().Watch(ctx, metav1.ListOptions{ResourceVersion: cvList.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	drain := func(w watch.Interface, on func(any)) {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				on(ev.Object)
			}
		}
	}
	go drain(coWatch, func(o any) { r.observe(o.(*configv1.ClusterOperator), true) })
	go drain(evWatch, func(o any) {
		r.mu.Lock()
		r.events = append(r.events, *o.(*corev1.Event))
		r.mu.Unlock()
	})
	go drain(cvWatch, func(o any) {
		r.mu.Lock()
		r.cvs = append(r.cvs, o.(*configv1.ClusterVersion))
		r.mu.Unlock()
	})
	return r
}

// observe records an operator reaching the version; live, as it
// happens, when every operator of a lower run level must have done so.
func (r *updateRecorder) observe(co *configv1.ClusterOperator, live bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range co.Status.Versions {
		if v.Name == "operator" && v.Version == r.version && !r.seenOps[co.Name] {
			r.seenOps[co.Name] = true
			r.order = append(r.order, co.Name)
			if live {
				r.checkLevelsLocked(co.Name)
			}
		}
	}
}

func (r *updateRecorder) checkLevels(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkLevelsLocked(name)
}

// checkLevelsLocked notes the operators updated ahead of an operator of
// a lower run level: name's (when it just reported), or any seen.
func (r *updateRecorder) checkLevelsLocked(name string) {
	levels := runLevels()
	for done := range r.seenOps {
		if name != "" && done != name {
			continue
		}
		for other, l := range levels {
			if l < levels[done] && !r.seenOps[other] {
				r.early = append(r.early, fmt.Sprintf("%s (run level %s) before %s (run level %s)", done, levels[done], other, l))
			}
		}
	}
}

// outOfOrder lists the operators updated ahead of a lower run level.
func (r *updateRecorder) outOfOrder() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.early...)
}

// updated is the order the operators reported the version in.
func (r *updateRecorder) updated() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// reasons are the CVO's event reasons, in order.
func (r *updateRecorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Reason)
	}
	return out
}

// snapshots are the ClusterVersions the watch saw, in order.
func (r *updateRecorder) snapshots() []*configv1.ClusterVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*configv1.ClusterVersion(nil), r.cvs...)
}

// inOrder reports whether want appears in got in that order.
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// editFile changes a file of a release's manifests.
func editFile(p *release.Payload, name, old, new string) {
	p.Manifests[name] = []byte(strings.Replace(string(p.Manifests[name]), old, new, 1))
}

// seen reports whether an operator has reported the version.
func (r *updateRecorder) seen(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seenOps[name]
}

// consoleTab is a browser tab logged in to the cluster's console as the
// admin, through a one-time link as capstan up prints.
func consoleTab(t *testing.T) *testenv.Tab {
	t.Helper()
	tab := testenv.NewTab(t)
	tab.Go(env.Cluster.NewConsoleLoginLink(env.Cluster.AdminToken()))
	tab.WaitText("#who", "Logged in as system:serviceaccount:kube-system:capstan-admin", 30*time.Second)
	return tab
}
