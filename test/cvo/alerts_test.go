package cvo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// The cluster's Prometheus evaluates OpenShift's alerting rules on what
// it scrapes; each alert fires from a fault injected as a user would and
// resolves once the fault is cleared (every `for` shortened to 3s by
// testenv). These run first, at the installed release.

const alertTimeout = 2 * time.Minute

// TestMetricFamilies checks every row of docs/metrics.md that names it
// against this cluster: the family's series are scraped under the row's
// job, its type is the row's, and its series carry no label outside the
// row's and the target's. It runs first, at the installed release, with a
// ClusterAutoscaler so that the autoscaler loops.
func TestMetricFamilies(t *testing.T) {
	raw, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	createAutoscaler(t)
	failedMachine(t)
	prom := env.Prom()
	rows := 0
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 8 || !strings.Contains(cells[6], "`TestMetricFamilies`") {
			continue
		}
		rows++
		family := strings.Trim(strings.TrimSpace(cells[1]), "`")
		typ, job := strings.TrimSpace(cells[2]), strings.TrimSpace(cells[4])
		allowed := map[string]bool{"__name__": true, "job": true, "instance": true, "namespace": true, "service": true, "endpoint": true}
		for _, l := range strings.Split(cells[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				allowed[l] = true
			}
		}
		selector := `{__name__="` + family + `"}`
		if typ == "histogram" {
			selector = `{__name__=~"` + family + `_(bucket|sum|count)"}`
			allowed["le"] = true
		}
		t.Run(family, func(t *testing.T) {
			testenv.Eventually(t, time.Minute, func() (bool, string) {
				ctx := context.Background()
				series, _, err := prom.Query(ctx, selector, time.Time{})
				if err != nil {
					return false, err.Error()
				}
				if len(series) == 0 {
					return false, "no series"
				}
				for _, ls := range series {
					if job != "every job" && ls["job"] != job {
						return false, fmt.Sprintf("a series of job %q, want %q: %v", ls["job"], job, ls)
					}
					for l := range ls {
						if !allowed[l] {
							return false, fmt.Sprintf("label %q is not the row's: %v", l, ls)
						}
					}
				}
				if family == "up" {
					// Prometheus writes up itself: no target gives its type.
					return true, ""
				}
				types, err := prom.MetricTypes(ctx, family)
				if err != nil {
					return false, err.Error()
				}
				for _, got := range types {
					if got != typ {
						return false, fmt.Sprintf("type %s, want %s", got, typ)
					}
				}
				return len(types) > 0, "no metadata"
			})
		})
	}
	if rows < 40 {
		t.Errorf("docs/metrics.md: %d rows name TestMetricFamilies", rows)
	}
	// The components share one process: its go_* and process_* come
	// from one job, or a sum over jobs would count the process twice.
	// (etcd's members are processes of their own.)
	dup := `count by (__name__) (group by (__name__, job) ({__name__=~"go_.+|process_.+", job!="etcd"})) > 1`
	if series, _, err := prom.Query(context.Background(), dup, time.Time{}); err != nil || len(series) != 0 {
		t.Errorf("%s: %v %v", dup, series, err)
	}
}

// failedMachine makes a MachineSet whose one machine goes Failed in a
// zone without capacity, so that the Machine API's families have series
// in a cluster booted without machines; all gone when the test ends.
func failedMachine(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	zone := "metric-families"
	capstanOK(t, "sim", "zone", "exhaust", zone, "--kubeconfig", env.Kubeconfig)
	t.Cleanup(func() { _, _ = capstan(t, "sim", "zone", "restore", zone, "--kubeconfig", env.Kubeconfig) })
	mc := machineclient.NewForConfigOrDie(env.Config).MachineV1beta1()
	lbl := map[string]string{machine.MachineSetLabel: zone}
	ms := &machinev1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: zone, Namespace: machine.Namespace},
		Spec: machinev1.MachineSetSpec{Replicas: ptr.To[int32](1), Selector: metav1.LabelSelector{MatchLabels: lbl},
			Template: machinev1.MachineTemplateSpec{ObjectMeta: machinev1.ObjectMeta{Labels: lbl},
				Spec: machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{
					InstanceType: "capstan.medium", Region: sim.DefaultRegion, Zone: zone})}}}}}
	if _, err := mc.MachineSets(machine.Namespace).Create(ctx, ms, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mc.MachineSets(machine.Namespace).Delete(ctx, zone, metav1.DeleteOptions{})
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			list, err := mc.Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=" + zone})
			if err != nil {
				return false, err.Error()
			}
			for _, m := range list.Items {
				_ = mc.Machines(machine.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{})
			}
			return len(list.Items) == 0, fmt.Sprintf("%d machines left", len(list.Items))
		})
	})
}

// createAutoscaler creates a ClusterAutoscaler "default" with room to
// spare, and deletes it when the test ends.
func createAutoscaler(t *testing.T) {
	t.Helper()
	api := env.Dynamic.Resource(autoscaler.ClusterAutoscalerResource)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.openshift.io/v1", "kind": "ClusterAutoscaler",
		"metadata": map[string]any{"name": "default"},
		"spec":     map[string]any{"resourceLimits": map[string]any{"maxNodesTotal": int64(100)}},
	}}
	if _, err := api.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), "default", metav1.DeleteOptions{}) })
}

func TestOperatorAlertsFireAndResolve(t *testing.T) {
	labels := map[string]string{"name": "dns"}
	annotateNamespace(t, "openshift-dns-operator", operators.UnavailableAnnotation, "DNSUnavailable: no DNS pod is running")
	// The alert of this reason: one of another (NoAvailableCondition,
	// from the moment the CVO made the ClusterOperator and its operator
	// had not reported yet) may not have resolved yet.
	a := env.WaitAlertFiring(t, "ClusterOperatorDown", map[string]string{"name": "dns", "reason": "DNSUnavailable"}, alertTimeout)
	if a.Labels["reason"] != "DNSUnavailable" || a.Labels["severity"] != "critical" || !strings.Contains(a.Annotations["description"], "The dns operator") {
		t.Errorf("ClusterOperatorDown: %+v", a)
	}
	annotateNamespace(t, "openshift-dns-operator", operators.UnavailableAnnotation, "")
	env.WaitAlertResolved(t, "ClusterOperatorDown", labels, alertTimeout)

	annotateNamespace(t, "openshift-dns-operator", operators.DegradedAnnotation, "CoreDNSCrashLooping: coredns pods are crash looping")
	a = env.WaitAlertFiring(t, "ClusterOperatorDegraded", map[string]string{"name": "dns", "reason": "CoreDNSCrashLooping"}, alertTimeout)
	if a.Labels["reason"] != "CoreDNSCrashLooping" || a.Labels["severity"] != "warning" {
		t.Errorf("ClusterOperatorDegraded: %+v", a)
	}
	annotateNamespace(t, "openshift-dns-operator", operators.DegradedAnnotation, "")
	env.WaitAlertResolved(t, "ClusterOperatorDegraded", labels, alertTimeout)
}

func TestClusterVersionAlertsFireAndResolve(t *testing.T) {
	ctx := context.Background()
	config := configClient(t)
	cvs := config.ConfigV1().ClusterVersions()

	// The installed 4.10.22 has recommended updates in fast-4.11.
	a := env.WaitAlertFiring(t, "UpdateAvailable", map[string]string{"channel": "fast-4.11"}, alertTimeout)
	if a.Labels["severity"] != "info" || a.Value != "4e+00" {
		t.Errorf("UpdateAvailable: %+v", a)
	}
	// No channel, no recommendations: resolved. The channel back, it
	// fires again.
	capstanOK(t, "adm", "upgrade", "channel", "--allow-explicit-channel", "--kubeconfig", env.Kubeconfig)
	env.WaitAlertResolved(t, "UpdateAvailable", nil, alertTimeout)
	capstanOK(t, "adm", "upgrade", "channel", "fast-4.11", "--kubeconfig", env.Kubeconfig)
	env.WaitAlertFiring(t, "UpdateAvailable", map[string]string{"channel": "fast-4.11"}, alertTimeout)

	// The operator stopped: ClusterVersionOperatorDown. While it is down
	// the update service becomes unreachable; started afresh, its first
	// check fails, and the clock CannotRetrieveUpdates reads (an hour of
	// it, in the rule tests) starts at that check, as upstream's
	// LastSyncOrConfigChange: it does not fire at once.
	capstanOK(t, "sim", "cvo", "stop", "--kubeconfig", env.Kubeconfig)
	restart := true
	t.Cleanup(func() {
		if restart {
			_, _ = capstan(t, "sim", "cvo", "start", "--kubeconfig", env.Kubeconfig)
		}
	})
	env.WaitAlertFiring(t, "ClusterVersionOperatorDown", map[string]string{"namespace": "openshift-cluster-version"}, alertTimeout)
	if _, err := cvs.Patch(ctx, "version", types.MergePatchType, []byte(`{"spec":{"upstream":"http://127.0.0.1:1/api/upgrades_info/v1/graph"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cvs.Patch(ctx, "version", types.MergePatchType, []byte(`{"spec":{"upstream":null}}`), metav1.PatchOptions{})
	})
	started := time.Now().Add(-time.Second).Unix()
	capstanOK(t, "sim", "cvo", "start", "--kubeconfig", env.Kubeconfig)
	restart = false
	env.WaitAlertResolved(t, "ClusterVersionOperatorDown", nil, alertTimeout)
	waitCV(t, alertTimeout, "the unreachable update service reported", func(cv *configv1.ClusterVersion) bool {
		c := condition(cv.Status.Conditions, configv1.RetrievedUpdates)
		return c.Status == configv1.ConditionFalse && c.Reason == "RemoteFailed"
	})
	query := fmt.Sprintf(`cluster_version_operator_update_retrieval_timestamp_seconds >= %d and ignoring(condition, name, reason) cluster_operator_conditions{name="version", condition="RetrievedUpdates", reason="RemoteFailed"} == 0`, started)
	err := waitfor.Poll(ctx, time.Second, alertTimeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		series, _, err := env.Query(ctx, query, time.Now())
		if err != nil {
			return false, err.Error()
		}
		return len(series) == 1, fmt.Sprintf("%d series for %s", len(series), query)
	}))
	if err != nil {
		t.Fatalf("the retrieval clock did not start at the failed first check: %v", err)
	}
	if vs, _, err := env.Query(ctx, `ALERTS{alertname="CannotRetrieveUpdates"}`, time.Now()); err != nil || len(vs) != 0 {
		t.Errorf("CannotRetrieveUpdates right after the CVO started: %v %v", vs, err)
	}
	// The update service back: retrieved.
	if _, err := cvs.Patch(ctx, "version", types.MergePatchType, []byte(`{"spec":{"upstream":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCV(t, alertTimeout, "updates retrieved again", func(cv *configv1.ClusterVersion) bool {
		return condition(cv.Status.Conditions, configv1.RetrievedUpdates).Status == configv1.ConditionTrue && len(cv.Status.AvailableUpdates) > 0
	})
}

// TestRiskExpressions evaluates update risks of the shapes OpenShift's
// update graph data uses (internal/monitoring/testdata/risks) with the
// cluster version operator's evaluator against this cluster's Prometheus:
// each gives the Recommended condition upstream would give for the
// cluster's state, and one that cannot be evaluated gives Unknown,
// EvaluationFailed.
func TestRiskExpressions(t *testing.T) {
	ctx := context.Background()
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unschedulable := false
	for _, n := range nodes.Items {
		unschedulable = unschedulable || n.Spec.Unschedulable
	}
	cv, err := configClient(t).ConfigV1().ClusterVersions().Get(ctx, "version", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mco, err := configClient(t).ConfigV1().ClusterOperators().Get(ctx, "machine-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		match bool
		err   string
	}
	wants := map[string]want{
		"01-platform-aws":                {},
		"02-platform-none":               {match: true},
		"03-topk-platform":               {},
		"04-operator-not-installed":      {err: "invalid PromQL result length must be one, but is 0"},
		"05-absent-telemetry":            {},
		"06-platform-changed-last-hour":  {},
		"07-large-cluster":               {match: len(nodes.Items) > 5},
		"08-degraded-operator-or-vector": {match: condition(mco.Status.Conditions, configv1.OperatorDegraded).Status == configv1.ConditionTrue},
		"09-unschedulable-nodes":         {match: unschedulable},
		"10-label-replace-minor":         {match: strings.HasPrefix(cv.Status.Desired.Version, "4.10.")},
		"11-tech-preview":                {},
		"12-was-on-4.9-last-hour":        {},
		"13-not-promql":                  {err: "bad_data"},
		"14-many-samples":                {err: "invalid PromQL result length must be one"},
	}
	dir := "../../internal/monitoring/testdata/risks"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(wants) {
		t.Fatalf("%d risks in %s, %d expected verdicts", len(entries), dir, len(wants))
	}
	for _, e := range entries {
		w, ok := wants[e.Name()]
		if !ok {
			t.Fatalf("no expected verdict for %s", e.Name())
		}
		raw, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		risk := configv1.ConditionalUpdateRisk{Name: "Risk" + strings.SplitN(e.Name(), "-", 2)[0], Message: e.Name(), URL: "https://example.invalid/" + e.Name(),
			MatchingRules: []configv1.ClusterCondition{{Type: "PromQL", PromQL: &configv1.PromQLClusterCondition{PromQL: string(raw)}}}}
		t.Run(e.Name(), func(t *testing.T) {
			testenv.Eventually(t, time.Minute, func() (bool, string) {
				// A fresh evaluator: no cache, no throttle from the last.
				eval := &cvo.Evaluator{PromQLURL: env.Cluster.PrometheusURL, Clock: clock.RealClock{}}
				c := eval.Recommended(ctx, []configv1.ConditionalUpdateRisk{risk})
				switch {
				case w.err != "":
					return c.Status == metav1.ConditionUnknown && c.Reason == cvo.ReasonEvaluationFailed && strings.Contains(c.Message, w.err),
						fmt.Sprintf("%s %s %q, want Unknown EvaluationFailed with %q", c.Status, c.Reason, c.Message, w.err)
				case w.match:
					return c.Status == metav1.ConditionFalse && c.Reason == risk.Name, fmt.Sprintf("%s %s %q, want False %s", c.Status, c.Reason, c.Message, risk.Name)
				}
				return c.Status == metav1.ConditionTrue && c.Reason == cvo.ReasonNotExposedToRisks, fmt.Sprintf("%s %s %q, want True", c.Status, c.Reason, c.Message)
			})
		})
	}
}
