package cvo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	configinformers "github.com/openshift/client-go/config/informers/externalversions"
	configlisters "github.com/openshift/client-go/config/listers/config/v1"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Platform is the infrastructure type capstan reports: its machines are
// simulated, with no cloud integration OpenShift knows.
const Platform = "None"

// The cluster version operator's metrics, with upstream's names, labels,
// help and values.
var (
	versionDesc = prometheus.NewDesc("cluster_version",
		"Reports the version of the cluster in terms of seconds since the epoch. Type 'current' is the version being applied and the value is the creation date of the payload. "+
			"The type 'desired' is returned if spec.desiredUpdate is set but the operator has not yet updated and the value is the most recent status transition time. "+
			"The type 'failure' is set if an error is preventing sync or upgrade with the last transition timestamp of the condition. "+
			"The type 'completed' is the timestamp when the last image was successfully applied. "+
			"The type 'cluster' is the creation date of the cluster version object and the current version. "+
			"The type 'updating' is set when the cluster is transitioning to a new version but has not reached the completed state and is the time the update was started. "+
			"The type 'initial' is set to the oldest entry in the history. "+
			"The from_version label will be set to the last completed version for most types, the initial version for 'cluster', empty for 'initial', and the penultimate completed version for 'completed'.",
		[]string{"type", "version", "image", "from_version"}, nil)
	availableDesc = prometheus.NewDesc("cluster_version_available_updates",
		"Report the count of available versions for an upstream and channel.", []string{"upstream", "channel"}, nil)
	capabilityDesc = prometheus.NewDesc("cluster_version_capability",
		"Report currently enabled cluster capabilities.  0 is disabled, and 1 is enabled.", []string{"name"}, nil)
	operatorUpDesc = prometheus.NewDesc("cluster_operator_up",
		"1 if a cluster operator is Available=True.  0 otherwise, including if a cluster operator sets no Available condition.  The 'version' label tracks the 'operator' version.  The 'reason' label is passed through from the Available condition, unless the cluster operator sets no Available condition, in which case NoAvailableCondition is used.",
		[]string{"name", "version", "reason"}, nil)
	conditionsDesc = prometheus.NewDesc("cluster_operator_conditions",
		"Report the conditions for active cluster operators. 0 is False and 1 is True.", []string{"name", "condition", "reason"}, nil)
	transitionsDesc = prometheus.NewDesc("cluster_operator_condition_transitions",
		"Reports the number of times that a condition on a cluster operator changes status", []string{"name", "condition"}, nil)
	retrievalDesc = prometheus.NewDesc("cluster_version_operator_update_retrieval_timestamp_seconds",
		"Reports when updates were last successfully retrieved.", []string{"name"}, nil)
	conditionalDesc = prometheus.NewDesc("cluster_version_conditional_update_condition_seconds",
		"Reports when the Recommended condition status on a conditional update changed to its current state.", []string{"version", "condition", "status", "reason"}, nil)
	infraDesc = prometheus.NewDesc("cluster_infrastructure_provider",
		"Reports whether the cluster is configured with an infrastructure provider. type is unset if no cloud provider is recognized or set to the constant used by the Infrastructure config.",
		[]string{"type", "region"}, nil)
	featureSetDesc = prometheus.NewDesc("cluster_feature_set",
		"Reports the feature set the cluster is configured to expose. name corresponds to the featureSet field of the cluster. The value is 1 if a cluster is in a default, supported configuration.",
		[]string{"name"}, nil)
)

// Metrics collects the operator's metrics from its informers' copies of
// the ClusterVersion and the ClusterOperators, as upstream's collector
// does: a scrape reads no API, and while the informers have not synced it
// fails (the target is down) rather than leaving series out.
type Metrics struct {
	versions  configlisters.ClusterVersionLister
	operators configlisters.ClusterOperatorLister
	synced    func() bool
	// operator gives the running operator, which tells when updates
	// were last retrieved and when its release was created (nil while
	// none runs).
	operator func() *Operator
	// upstream is the update service used when the ClusterVersion names
	// none.
	upstream string

	mu sync.Mutex
	// transitions counts the ClusterOperators' condition changes seen.
	transitions map[conditionKey]int
}

type conditionKey struct{ name, condition string }

// NewMetrics starts informers on the ClusterVersion and ClusterOperators,
// until ctx ends, and returns their collector. operator gives the running
// operator (nil while none runs); upstream is the update service used
// when the ClusterVersion names none.
func NewMetrics(ctx context.Context, client configclient.Interface, operator func() *Operator, upstream string) (*Metrics, error) {
	f := configinformers.NewSharedInformerFactory(client, 0)
	cvs, cos := f.Config().V1().ClusterVersions(), f.Config().V1().ClusterOperators()
	cvInformer, coInformer := cvs.Informer(), cos.Informer()
	m := newMetrics(cvs.Lister(), cos.Lister(), func() bool { return cvInformer.HasSynced() && coInformer.HasSynced() }, operator, upstream)
	if _, err := coInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: m.operatorChanged}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	return m, nil
}

func newMetrics(versions configlisters.ClusterVersionLister, operators configlisters.ClusterOperatorLister, synced func() bool, operator func() *Operator, upstream string) *Metrics {
	if operator == nil {
		operator = func() *Operator { return nil }
	}
	return &Metrics{versions: versions, operators: operators, synced: synced, operator: operator, upstream: upstream, transitions: map[conditionKey]int{}}
}

// operatorChanged counts the condition transitions between two copies of
// a ClusterOperator: a condition whose status changed or that went away,
// and one that appeared.
func (m *Metrics) operatorChanged(oldObj, newObj any) {
	older, ok1 := oldObj.(*configv1.ClusterOperator)
	newer, ok2 := newObj.(*configv1.ClusterOperator)
	if !ok1 || !ok2 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[configv1.ClusterStatusConditionType]bool{}
	for _, o := range older.Status.Conditions {
		if seen[o.Type] {
			continue
		}
		seen[o.Type] = true
		if n := FindCondition(newer.Status.Conditions, o.Type); n == nil || n.Status != o.Status {
			m.transitions[conditionKey{newer.Name, string(o.Type)}]++
		}
	}
	for _, n := range newer.Status.Conditions {
		if !seen[n.Type] {
			seen[n.Type] = true
			m.transitions[conditionKey{newer.Name, string(n.Type)}]++
		}
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{versionDesc, availableDesc, capabilityDesc, operatorUpDesc, conditionsDesc, transitionsDesc, retrievalDesc, conditionalDesc, infraDesc, featureSetDesc} {
		ch <- d
	}
}

// errNotSynced fails a scrape made before the informers have synced.
var errNotSynced = errors.New("the cluster version operator's ClusterVersion and ClusterOperator informers have not synced")

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// unix is t in seconds since the epoch, 0 for the zero time.
func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if !m.synced() {
		ch <- prometheus.NewInvalidMetric(versionDesc, errNotSynced)
		return
	}
	gauge(ch, infraDesc, 1, Platform, "")
	// No feature set: the default, supported configuration.
	gauge(ch, featureSetDesc, 1, "")
	op := m.operator()
	var current configv1.Release
	var completed string
	cv, err := m.versions.Get(Name)
	switch {
	case apierrors.IsNotFound(err):
		gauge(ch, operatorUpDesc, 0, "version", "", "ClusterVersionNotFound")
		gauge(ch, conditionsDesc, 0, "version", string(configv1.OperatorAvailable), "ClusterVersionNotFound")
	case err != nil:
		ch <- prometheus.NewInvalidMetric(versionDesc, fmt.Errorf("reading the ClusterVersion: %w", err))
		return
	default:
		current = cv.Status.Desired
		completed = m.collectVersion(ch, cv)
	}
	var created time.Time
	if op != nil && current.Image != "" {
		created = op.releaseCreated(current.Image)
	}
	gauge(ch, versionDesc, unix(created), "current", current.Version, current.Image, completed)
	cos, err := m.operators.List(labels.Everything())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(operatorUpDesc, fmt.Errorf("listing the ClusterOperators: %w", err))
		return
	}
	for _, co := range cos {
		collectOperator(ch, co)
	}
	m.mu.Lock()
	for k, n := range m.transitions {
		gauge(ch, transitionsDesc, float64(n), k.name, k.condition)
	}
	m.mu.Unlock()
	if op != nil {
		if at := op.retrievedAt.Load(); at != 0 {
			gauge(ch, retrievalDesc, float64(at), "")
		}
	}
}

// collectVersion collects the ClusterVersion's series and returns the
// version last completed.
func (m *Metrics) collectVersion(ch chan<- prometheus.Metric, cv *configv1.ClusterVersion) string {
	current := cv.Status.Desired
	history := cv.Status.History
	var initial, completed configv1.UpdateHistory
	if n := len(history); n > 0 {
		initial = history[n-1]
	}
	for i, h := range history {
		if h.State != configv1.CompletedUpdate {
			continue
		}
		completed = h
		var previous string
		for _, p := range history[i+1:] {
			if p.State == configv1.CompletedUpdate {
				previous = p.Version
				break
			}
		}
		var at time.Time
		if h.CompletionTime != nil {
			at = h.CompletionTime.Time
		}
		gauge(ch, versionDesc, unix(at), "completed", h.Version, h.Image, previous)
		break
	}
	gauge(ch, versionDesc, unix(cv.CreationTimestamp.Time), "initial", initial.Version, initial.Image, "")
	// The cluster's age at its version, and the version it started at
	// once it has completed one (not while it installs).
	from := initial.Version
	if completed.Version == "" {
		from = ""
	}
	gauge(ch, versionDesc, unix(cv.CreationTimestamp.Time), "cluster", current.Version, current.Image, from)
	pending := false
	if u := cv.Spec.DesiredUpdate; u != nil {
		// An update asked by version alone names no image yet.
		pending = u.Image != current.Image && (u.Image != "" || u.Version != current.Version)
		if pending {
			gauge(ch, versionDesc, unix(mostRecentTransition(cv)), "desired", u.Version, u.Image, completed.Version)
		}
	}
	if c := FindCondition(cv.Status.Conditions, Failing); c != nil && c.Status == configv1.ConditionTrue {
		version, image := current.Version, current.Image
		if pending {
			version, image = cv.Spec.DesiredUpdate.Version, cv.Spec.DesiredUpdate.Image
		}
		gauge(ch, versionDesc, unix(c.LastTransitionTime.Time), "failure", version, image, completed.Version)
	}
	if len(history) > 0 && history[0].State == configv1.PartialUpdate {
		gauge(ch, versionDesc, unix(history[0].StartedTime.Time), "updating", history[0].Version, history[0].Image, completed.Version)
	}
	if cv.Spec.Upstream != "" || len(cv.Status.AvailableUpdates) > 0 || conditionTrue(cv.Status.Conditions, configv1.RetrievedUpdates) {
		upstream := string(cv.Spec.Upstream)
		if upstream == "" {
			upstream = m.upstream
		}
		if upstream == "" {
			upstream = "<default>"
		}
		gauge(ch, availableDesc, float64(len(cv.Status.AvailableUpdates)), upstream, cv.Spec.Channel)
	}
	enabled := map[configv1.ClusterVersionCapability]bool{}
	for _, c := range cv.Status.Capabilities.EnabledCapabilities {
		enabled[c] = true
		gauge(ch, capabilityDesc, 1, string(c))
	}
	for _, c := range cv.Status.Capabilities.KnownCapabilities {
		if !enabled[c] {
			gauge(ch, capabilityDesc, 0, string(c))
		}
	}
	// The ClusterVersion's own conditions, as the operator "version".
	for _, c := range cv.Status.Conditions {
		v, ok := conditionValue(c.Status)
		if !ok {
			continue
		}
		if c.Type == configv1.OperatorAvailable {
			gauge(ch, operatorUpDesc, v, "version", completed.Version, c.Reason)
		}
		gauge(ch, conditionsDesc, v, "version", string(c.Type), c.Reason)
	}
	for _, cu := range cv.Status.ConditionalUpdates {
		for _, c := range cu.Conditions {
			if c.Type == "Recommended" {
				gauge(ch, conditionalDesc, unix(c.LastTransitionTime.Time), cu.Release.Version, c.Type, string(c.Status), c.Reason)
			}
		}
	}
	return completed.Version
}

// mostRecentTransition is the latest change the ClusterVersion's status
// records: its newest history entry's start or completion, or a
// condition's transition.
func mostRecentTransition(cv *configv1.ClusterVersion) time.Time {
	var latest time.Time
	if len(cv.Status.History) > 0 {
		latest = cv.Status.History[0].StartedTime.Time
		if t := cv.Status.History[0].CompletionTime; t != nil && t.After(latest) {
			latest = t.Time
		}
	}
	for _, c := range cv.Status.Conditions {
		if c.LastTransitionTime.After(latest) {
			latest = c.LastTransitionTime.Time
		}
	}
	return latest
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

func collectOperator(ch chan<- prometheus.Metric, co *configv1.ClusterOperator) {
	version := ""
	for _, v := range co.Status.Versions {
		if v.Name == "operator" {
			version = v.Version
			break
		}
	}
	up, reason := 0.0, "NoAvailableCondition"
	if c := FindCondition(co.Status.Conditions, configv1.OperatorAvailable); c != nil {
		reason = c.Reason
		if c.Status == configv1.ConditionTrue {
			up = 1
		}
	}
	gauge(ch, operatorUpDesc, up, co.Name, version, reason)
	for _, c := range co.Status.Conditions {
		if v, ok := conditionValue(c.Status); ok {
			gauge(ch, conditionsDesc, v, co.Name, string(c.Type), c.Reason)
		}
	}
}
