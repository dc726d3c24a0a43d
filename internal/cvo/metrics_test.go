package cvo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configfake "github.com/openshift/client-go/config/clientset/versioned/fake"
	configlisters "github.com/openshift/client-go/config/listers/config/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

func at(sec int64) metav1.Time { return metav1.NewTime(time.Unix(sec, 0)) }

// metricsOver is a collector over these objects, as its informers would
// hold them.
func metricsOver(t *testing.T, objs ...any) *Metrics {
	t.Helper()
	cvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	cos := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *configv1.ClusterVersion:
			err = cvs.Add(o)
		case *configv1.ClusterOperator:
			err = cos.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return newMetrics(configlisters.NewClusterVersionLister(cvs), configlisters.NewClusterOperatorLister(cos), func() bool { return true }, nil, "")
}

func compare(t *testing.T, m *Metrics, want string, names ...string) {
	t.Helper()
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

const versionHelp = "# HELP cluster_version Reports the version of the cluster in terms of seconds since the epoch. Type 'current' is the version being applied and the value is the creation date of the payload. " +
	"The type 'desired' is returned if spec.desiredUpdate is set but the operator has not yet updated and the value is the most recent status transition time. " +
	"The type 'failure' is set if an error is preventing sync or upgrade with the last transition timestamp of the condition. " +
	"The type 'completed' is the timestamp when the last image was successfully applied. " +
	"The type 'cluster' is the creation date of the cluster version object and the current version. " +
	"The type 'updating' is set when the cluster is transitioning to a new version but has not reached the completed state and is the time the update was started. " +
	"The type 'initial' is set to the oldest entry in the history. " +
	"The from_version label will be set to the last completed version for most types, the initial version for 'cluster', empty for 'initial', and the penultimate completed version for 'completed'.\n# TYPE cluster_version gauge\n"

// cluster_version as upstream's collector gives it: the current version
// in 'cluster', the installed one in 'from_version' only once a version
// completed, the penultimate completed version in 'completed', the
// ClusterVersion's creation in 'initial'.
func TestClusterVersionSeries(t *testing.T) {
	done := func(v string, start, end int64) configv1.UpdateHistory {
		e := at(end)
		return configv1.UpdateHistory{State: configv1.CompletedUpdate, Version: v, Image: "r@" + v, StartedTime: at(start), CompletionTime: &e}
	}
	cv := func(history ...configv1.UpdateHistory) *configv1.ClusterVersion {
		return &configv1.ClusterVersion{ObjectMeta: metav1.ObjectMeta{Name: Name, CreationTimestamp: at(100)},
			Status: configv1.ClusterVersionStatus{Desired: configv1.Release{Version: history[0].Version, Image: history[0].Image}, History: history}}
	}
	t.Run("installing", func(t *testing.T) {
		compare(t, metricsOver(t, cv(configv1.UpdateHistory{State: configv1.PartialUpdate, Version: "4.10.22", Image: "r@4.10.22", StartedTime: at(110)})), versionHelp+`
cluster_version{from_version="",image="r@4.10.22",type="cluster",version="4.10.22"} 100
cluster_version{from_version="",image="r@4.10.22",type="current",version="4.10.22"} 0
cluster_version{from_version="",image="r@4.10.22",type="initial",version="4.10.22"} 100
cluster_version{from_version="",image="r@4.10.22",type="updating",version="4.10.22"} 110
`, "cluster_version")
	})
	t.Run("updating after two updates", func(t *testing.T) {
		c := cv(configv1.UpdateHistory{State: configv1.PartialUpdate, Version: "4.11.0", Image: "r@4.11.0", StartedTime: at(400)},
			done("4.10.26", 300, 350), done("4.10.22", 110, 200))
		c.Spec.DesiredUpdate = &configv1.Update{Version: "4.11.0", Image: "r@4.11.0"}
		c.Status.Conditions = []configv1.ClusterOperatorStatusCondition{{Type: Failing, Status: configv1.ConditionTrue, LastTransitionTime: at(420)}}
		compare(t, metricsOver(t, c), versionHelp+`
cluster_version{from_version="4.10.22",image="r@4.10.26",type="completed",version="4.10.26"} 350
cluster_version{from_version="4.10.22",image="r@4.11.0",type="cluster",version="4.11.0"} 100
cluster_version{from_version="4.10.26",image="r@4.11.0",type="current",version="4.11.0"} 0
cluster_version{from_version="4.10.26",image="r@4.11.0",type="failure",version="4.11.0"} 420
cluster_version{from_version="",image="r@4.10.22",type="initial",version="4.10.22"} 100
cluster_version{from_version="4.10.26",image="r@4.11.0",type="updating",version="4.11.0"} 400
`, "cluster_version")
	})
	t.Run("an update asked, not yet taken", func(t *testing.T) {
		c := cv(done("4.10.22", 110, 200))
		c.Spec.DesiredUpdate = &configv1.Update{Version: "4.10.26", Image: "r@4.10.26"}
		c.Status.Conditions = []configv1.ClusterOperatorStatusCondition{{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, LastTransitionTime: at(250)}}
		compare(t, metricsOver(t, c), versionHelp+`
cluster_version{from_version="",image="r@4.10.22",type="completed",version="4.10.22"} 200
cluster_version{from_version="4.10.22",image="r@4.10.22",type="cluster",version="4.10.22"} 100
cluster_version{from_version="4.10.22",image="r@4.10.22",type="current",version="4.10.22"} 0
cluster_version{from_version="4.10.22",image="r@4.10.26",type="desired",version="4.10.26"} 250
cluster_version{from_version="",image="r@4.10.22",type="initial",version="4.10.22"} 100
`, "cluster_version")
	})
}

// The ClusterVersion's Available is cluster_operator_up{name="version"},
// with the completed version; only Recommended conditional-update
// conditions are exported; capabilities known and not enabled are 0; a
// missing ClusterVersion is reported as such.
func TestVersionOperatorSeries(t *testing.T) {
	e := at(200)
	c := &configv1.ClusterVersion{ObjectMeta: metav1.ObjectMeta{Name: Name},
		Status: configv1.ClusterVersionStatus{Desired: configv1.Release{Version: "4.10.22"},
			History:      []configv1.UpdateHistory{{State: configv1.CompletedUpdate, Version: "4.10.22", CompletionTime: &e}},
			Capabilities: configv1.ClusterVersionCapabilitiesStatus{EnabledCapabilities: []configv1.ClusterVersionCapability{"baremetal"}, KnownCapabilities: []configv1.ClusterVersionCapability{"baremetal", "Console"}},
			Conditions: []configv1.ClusterOperatorStatusCondition{
				{Type: configv1.OperatorAvailable, Status: configv1.ConditionTrue, Reason: "Done"},
				{Type: configv1.RetrievedUpdates, Status: configv1.ConditionUnknown},
			},
			ConditionalUpdates: []configv1.ConditionalUpdate{{Release: configv1.Release{Version: "4.11.0"}, Conditions: []metav1.Condition{
				{Type: "Recommended", Status: metav1.ConditionUnknown, Reason: "EvaluationFailed", LastTransitionTime: at(300)},
				{Type: "Other", Status: metav1.ConditionTrue, LastTransitionTime: at(300)},
			}}}}}
	co := &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: "etcd"}, Status: configv1.ClusterOperatorStatus{
		Versions:   []configv1.OperandVersion{{Name: "operator", Version: "4.10.22"}},
		Conditions: []configv1.ClusterOperatorStatusCondition{{Type: configv1.OperatorDegraded, Status: configv1.ConditionFalse, Reason: "AsExpected"}}}}
	compare(t, metricsOver(t, c, co), `
# HELP cluster_operator_up 1 if a cluster operator is Available=True.  0 otherwise, including if a cluster operator sets no Available condition.  The 'version' label tracks the 'operator' version.  The 'reason' label is passed through from the Available condition, unless the cluster operator sets no Available condition, in which case NoAvailableCondition is used.
# TYPE cluster_operator_up gauge
cluster_operator_up{name="etcd",reason="NoAvailableCondition",version="4.10.22"} 0
cluster_operator_up{name="version",reason="Done",version="4.10.22"} 1
# HELP cluster_operator_conditions Report the conditions for active cluster operators. 0 is False and 1 is True.
# TYPE cluster_operator_conditions gauge
cluster_operator_conditions{condition="Available",name="version",reason="Done"} 1
cluster_operator_conditions{condition="Degraded",name="etcd",reason="AsExpected"} 0
# HELP cluster_version_conditional_update_condition_seconds Reports when the Recommended condition status on a conditional update changed to its current state.
# TYPE cluster_version_conditional_update_condition_seconds gauge
cluster_version_conditional_update_condition_seconds{condition="Recommended",reason="EvaluationFailed",status="Unknown",version="4.11.0"} 300
# HELP cluster_version_capability Report currently enabled cluster capabilities.  0 is disabled, and 1 is enabled.
# TYPE cluster_version_capability gauge
cluster_version_capability{name="Console"} 0
cluster_version_capability{name="baremetal"} 1
`, "cluster_operator_up", "cluster_operator_conditions", "cluster_version_conditional_update_condition_seconds", "cluster_version_available_updates", "cluster_version_capability")

	compare(t, metricsOver(t), `
# HELP cluster_operator_up 1 if a cluster operator is Available=True.  0 otherwise, including if a cluster operator sets no Available condition.  The 'version' label tracks the 'operator' version.  The 'reason' label is passed through from the Available condition, unless the cluster operator sets no Available condition, in which case NoAvailableCondition is used.
# TYPE cluster_operator_up gauge
cluster_operator_up{name="version",reason="ClusterVersionNotFound",version=""} 0
`, "cluster_operator_up")
}

// Before its informers have synced the collector fails the scrape rather
// than report no operators; condition transitions are counted as the
// informer sees them.
func TestMetricsSyncAndTransitions(t *testing.T) {
	m := metricsOver(t)
	m.synced = func() bool { return false }
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "have not synced") {
		t.Errorf("a scrape before the sync: %v, want the informers not synced", err)
	}
	m.synced = func() bool { return true }
	co := func(conds ...configv1.ClusterOperatorStatusCondition) *configv1.ClusterOperator {
		return &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: "dns"}, Status: configv1.ClusterOperatorStatus{Conditions: conds}}
	}
	avail := func(s configv1.ConditionStatus) configv1.ClusterOperatorStatusCondition {
		return configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorAvailable, Status: s}
	}
	degraded := configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorDegraded, Status: configv1.ConditionFalse}
	m.operatorChanged(co(avail(configv1.ConditionTrue)), co(avail(configv1.ConditionFalse), degraded)) // Available flips, Degraded appears
	m.operatorChanged(co(avail(configv1.ConditionFalse), degraded), co(avail(configv1.ConditionFalse), degraded))
	m.operatorChanged(co(avail(configv1.ConditionFalse), degraded), co(avail(configv1.ConditionTrue))) // both
	compare(t, m, `
# HELP cluster_operator_condition_transitions Reports the number of times that a condition on a cluster operator changes status
# TYPE cluster_operator_condition_transitions gauge
cluster_operator_condition_transitions{condition="Available",name="dns"} 2
cluster_operator_condition_transitions{condition="Degraded",name="dns"} 2
`, "cluster_operator_condition_transitions")
}

// The retrieval timestamp is upstream's LastSyncOrConfigChange: absent
// before the first check, set by the first check whatever its outcome, by
// a check of another channel, and by a check that succeeds; a failed
// check of the same service leaves it, so CannotRetrieveUpdates counts
// from there.
func TestRetrievalTimestamp(t *testing.T) {
	var ok atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"version":1,"nodes":[{"version":"4.10.22","payload":"r@sha256:22"}],"edges":[]}`))
	}))
	defer srv.Close()
	cv := &configv1.ClusterVersion{ObjectMeta: metav1.ObjectMeta{Name: Name},
		Spec:   configv1.ClusterVersionSpec{ClusterID: "a7c5b5b4-1f3e-4d4b-9a3e-2f1c0d9e8b7a", Channel: "stable-4.10"},
		Status: configv1.ClusterVersionStatus{Desired: configv1.Release{Version: "4.10.22"}}}
	config := configfake.NewSimpleClientset(cv)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	o := New(config, Options{Kube: fake.NewClientset(), Applier: &Applier{}, Architecture: "amd64", Upstream: srv.URL, Clock: clk,
		MinimumUpdateCheckInterval: func() time.Duration { return time.Minute }})
	m := metricsOver(t, cv)
	m.operator = func() *Operator { return o }
	retrieval := func(want string) {
		t.Helper()
		text := ""
		if want != "" {
			text = "# HELP cluster_version_operator_update_retrieval_timestamp_seconds Reports when updates were last successfully retrieved.\n" +
				"# TYPE cluster_version_operator_update_retrieval_timestamp_seconds gauge\n" +
				`cluster_version_operator_update_retrieval_timestamp_seconds{name=""} ` + want + "\n"
		}
		compare(t, m, text, "cluster_version_operator_update_retrieval_timestamp_seconds")
	}
	check := func(c *configv1.ClusterVersion) {
		t.Helper()
		if err := o.syncRecommendations(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	retrieval("")
	check(cv)
	retrieval("1000") // the first check, failed
	clk.Step(time.Hour)
	check(cv)
	retrieval("1000") // failed again: an hour without updates
	clk.Step(time.Hour)
	other := cv.DeepCopy()
	other.Spec.Channel = "fast-4.10"
	check(other)
	retrieval("8200") // another channel
	clk.Step(time.Hour)
	ok.Store(true)
	check(other)
	retrieval("11800") // retrieved
}
