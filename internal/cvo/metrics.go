package cvo

import (
	"context"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Platform is the infrastructure type capstan reports: its machines are
// simulated, with no cloud integration OpenShift knows.
const Platform = "None"

// The cluster version operator's metrics, with upstream's names, labels
// and help.
var (
	versionDesc = prometheus.NewDesc("cluster_version",
		"Reports the version of the cluster in terms of seconds since the epoch. Type 'current' is the version being applied; 'desired' a requested update not yet started; 'failure' an error preventing sync; 'completed' when the last release was applied; 'cluster' the creation of the ClusterVersion; 'updating' an update in progress since its start; 'initial' the oldest entry in the history.",
		[]string{"type", "version", "image", "from_version"}, nil)
	availableDesc = prometheus.NewDesc("cluster_version_available_updates",
		"Report the count of available versions for an upstream and channel.", []string{"upstream", "channel"}, nil)
	operatorUpDesc = prometheus.NewDesc("cluster_operator_up",
		"1 if a cluster operator is Available=True. 0 otherwise, including if a cluster operator sets no Available condition. The 'version' label tracks the 'operator' version. The 'reason' label is passed through from the Available condition, unless the cluster operator sets no Available condition, in which case NoAvailableCondition is used.",
		[]string{"name", "version", "reason"}, nil)
	conditionsDesc = prometheus.NewDesc("cluster_operator_conditions",
		"Report the conditions for active cluster operators. 0 is False and 1 is True.", []string{"name", "condition", "reason"}, nil)
	retrievalDesc = prometheus.NewDesc("cluster_version_operator_update_retrieval_timestamp_seconds",
		"Reports when updates were last successfully retrieved.", []string{"name"}, nil)
	conditionalDesc = prometheus.NewDesc("cluster_version_conditional_update_condition_seconds",
		"Reports when the conditions of conditional updates last changed, in seconds since the epoch.", []string{"version", "condition", "status", "reason"}, nil)
	infraDesc = prometheus.NewDesc("cluster_infrastructure_provider",
		"Reports whether the cluster is configured with an infrastructure provider. type is unset if no cloud provider is recognized or set to the constant used by the Infrastructure config.",
		[]string{"type", "region"}, nil)
	featureSetDesc = prometheus.NewDesc("cluster_feature_set",
		"Reports the feature set the cluster is configured to expose. name corresponds to the featureSet field of the cluster. The value is 1 if a cluster is in a default, supported configuration.",
		[]string{"name"}, nil)
)

// Metrics collects the operator's metrics from the ClusterVersion and the
// ClusterOperators, read when scraped.
type Metrics struct {
	Client configclient.Interface
	// Operator, when set, gives the running operator, which tells when
	// updates were last retrieved (nil while none runs).
	Operator func() *Operator
	// Upstream is the update service used when the ClusterVersion names
	// none.
	Upstream string
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{versionDesc, availableDesc, operatorUpDesc, conditionsDesc, retrievalDesc, conditionalDesc, infraDesc, featureSetDesc} {
		ch <- d
	}
}

func unix(t metav1.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}

func conditionValue(s configv1.ConditionStatus) (float64, bool) {
	switch s {
	case configv1.ConditionTrue:
		return 1, true
	case configv1.ConditionFalse:
		return 0, true
	}
	return 0, false
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(infraDesc, prometheus.GaugeValue, 1, Platform, "")
	// No feature set: the default, supported configuration.
	ch <- prometheus.MustNewConstMetric(featureSetDesc, prometheus.GaugeValue, 1, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cv, err := m.Client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{}); err == nil {
		m.collectVersion(ch, cv)
	}
	if cos, err := m.Client.ConfigV1().ClusterOperators().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range cos.Items {
			collectOperator(ch, &cos.Items[i])
		}
	}
}

func (m *Metrics) collectVersion(ch chan<- prometheus.Metric, cv *configv1.ClusterVersion) {
	desired := cv.Status.Desired
	var lastCompleted string
	for _, h := range cv.Status.History {
		if h.State == configv1.CompletedUpdate {
			lastCompleted = h.Version
			break
		}
	}
	if len(cv.Status.History) > 0 {
		cur := cv.Status.History[0]
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, unix(cur.StartedTime), "current", desired.Version, desired.Image, lastCompleted)
		if cur.State == configv1.PartialUpdate {
			ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, unix(cur.StartedTime), "updating", cur.Version, cur.Image, lastCompleted)
		}
		if lastCompleted != "" {
			for _, h := range cv.Status.History {
				if h.State == configv1.CompletedUpdate && h.CompletionTime != nil {
					ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, unix(*h.CompletionTime), "completed", h.Version, h.Image, "")
					break
				}
			}
		}
		initial := cv.Status.History[len(cv.Status.History)-1]
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, unix(initial.StartedTime), "initial", initial.Version, initial.Image, "")
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, unix(cv.CreationTimestamp), "cluster", initial.Version, initial.Image, initial.Version)
	}
	if u := cv.Spec.DesiredUpdate; u != nil && (u.Version != desired.Version || (u.Image != "" && u.Image != desired.Image)) {
		var at metav1.Time
		if c := FindCondition(cv.Status.Conditions, configv1.OperatorProgressing); c != nil {
			at = c.LastTransitionTime
		}
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, unix(at), "desired", u.Version, u.Image, lastCompleted)
	}
	if c := FindCondition(cv.Status.Conditions, Failing); c != nil && c.Status == configv1.ConditionTrue {
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, unix(c.LastTransitionTime), "failure", desired.Version, desired.Image, lastCompleted)
	}
	if cv.Spec.Channel != "" || len(cv.Status.AvailableUpdates) > 0 {
		upstream := string(cv.Spec.Upstream)
		if upstream == "" {
			upstream = m.Upstream
		}
		ch <- prometheus.MustNewConstMetric(availableDesc, prometheus.GaugeValue, float64(len(cv.Status.AvailableUpdates)), upstream, cv.Spec.Channel)
	}
	// The ClusterVersion's own conditions, as the operator "version".
	for _, c := range cv.Status.Conditions {
		if v, ok := conditionValue(c.Status); ok {
			ch <- prometheus.MustNewConstMetric(conditionsDesc, prometheus.GaugeValue, v, "version", string(c.Type), c.Reason)
		}
	}
	for _, cu := range cv.Status.ConditionalUpdates {
		for _, c := range cu.Conditions {
			ch <- prometheus.MustNewConstMetric(conditionalDesc, prometheus.GaugeValue, unix(c.LastTransitionTime), cu.Release.Version, c.Type, string(c.Status), c.Reason)
		}
	}
	var retrieved float64
	if m.Operator != nil {
		if op := m.Operator(); op != nil {
			retrieved = float64(op.retrievedAt.Load())
		}
	}
	ch <- prometheus.MustNewConstMetric(retrievalDesc, prometheus.GaugeValue, retrieved, "")
}

func collectOperator(ch chan<- prometheus.Metric, co *configv1.ClusterOperator) {
	version := ""
	for _, v := range co.Status.Versions {
		if v.Name == "operator" {
			version = v.Version
		}
	}
	up, reason := 0.0, "NoAvailableCondition"
	if c := FindCondition(co.Status.Conditions, configv1.OperatorAvailable); c != nil {
		reason = c.Reason
		if c.Status == configv1.ConditionTrue {
			up = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(operatorUpDesc, prometheus.GaugeValue, up, co.Name, version, reason)
	for _, c := range co.Status.Conditions {
		if v, ok := conditionValue(c.Status); ok {
			ch <- prometheus.MustNewConstMetric(conditionsDesc, prometheus.GaugeValue, v, co.Name, string(c.Type), c.Reason)
		}
	}
}
