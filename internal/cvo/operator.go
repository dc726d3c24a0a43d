package cvo

import (
	"context"
	"fmt"
	promconfig "github.com/prometheus/common/config"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/seeded"
)

// Name is the ClusterVersion's (and the CVO's ClusterOperator's) name.
const Name = "version"

// Options configure the operator.
type Options struct {
	// Timeline, when set, records each update pass with in-process
	// times (the CVO benchmark's instrument).
	Timeline *Timeline
	// Upstream is the update service asked when spec.upstream is unset
	// (the CVO's --update-service).
	Upstream string
	// PromQLURL is where PromQL risks are evaluated, PromQLHTTP how it
	// is reached (CA, bearer token).
	PromQLURL  string
	PromQLHTTP promconfig.HTTPClientConfig
	// Architecture of the cluster (GOARCH).
	Architecture string
	// Current is the release the cluster runs: the ClusterVersion's
	// desired and completed history when the operator creates it.
	Current configv1.Release
	// Channel is spec.channel of a ClusterVersion the operator creates.
	Channel string
	// Capabilities is spec.capabilities of a ClusterVersion the operator
	// creates (the install configuration's); nil is the default, vCurrent.
	Capabilities *configv1.ClusterVersionCapabilitiesSpec
	// MinimumUpdateCheckInterval is drawn anew for each check: the CVO
	// asks the update service every [2m, 4m) unless something changed.
	MinimumUpdateCheckInterval func() time.Duration
	Clock                      clock.Clock

	// Kube and Applier apply releases; without them the operator only
	// keeps the recommendations.
	Kube    kubernetes.Interface
	Applier *Applier
	// Filter picks the manifests for this cluster (profile, capabilities).
	Filter payload.Filter
	// ReconcileInterval is how often an applied release is applied
	// again, putting back what drifted.
	ReconcileInterval time.Duration
	// RetryInterval is the first wait after a failed pass (doubling up to
	// MaxRetryInterval), and between attempts at one manifest.
	RetryInterval, MaxRetryInterval time.Duration
	// ApplyAttempts is how often a manifest is tried within a pass.
	ApplyAttempts int
	// RetrieveTimeout bounds retrieving a release (half of it for the
	// signatures).
	RetrieveTimeout time.Duration
	// OperatorPollInterval is how often a ClusterOperator waited for is
	// looked at.
	OperatorPollInterval time.Duration
	// SlowOperatorAfter and SlowMachineConfigAfter are how long an
	// operator may take before Failing says it is slow.
	SlowOperatorAfter, SlowMachineConfigAfter time.Duration
}

// DefaultOptions are the CVO's timings.
func DefaultOptions() Options {
	return Options{
		Architecture:               "amd64",
		MinimumUpdateCheckInterval: func() time.Duration { return 2*time.Minute + time.Duration(seeded.IntN(int(2*time.Minute))) },
		Clock:                      clock.RealClock{},
		ReconcileInterval:          3 * time.Minute,
		RetryInterval:              time.Second,
		MaxRetryInterval:           15 * time.Second,
		ApplyAttempts:              3,
		RetrieveTimeout:            4 * time.Minute,
		OperatorPollInterval:       500 * time.Millisecond,
		SlowOperatorAfter:          30 * time.Minute,
		SlowMachineConfigAfter:     90 * time.Minute,
	}
}

// Operator is the Cluster Version Operator: it keeps the ClusterVersion's
// recommendations and applies the release it asks for.
type Operator struct {
	client   configclient.Interface
	kube     kubernetes.Interface
	applier  *Applier
	opts     Options
	eval     *Evaluator
	http     *http.Client
	recorder record.EventRecorder

	// work is the worker applying the current target.
	work     *worker
	statusMu sync.Mutex

	runningMu sync.Mutex
	running   string

	loadedMu sync.Mutex
	loaded   map[string]*release.Image

	// What the last check asked, and when.
	lastAsked  string
	lastCheck  time.Time
	nextPeriod time.Duration
	// retrievedAt is when updates were last retrieved, or the service
	// asked changed, or the first check was made (Unix seconds; 0 before
	// the first check): upstream's LastSyncOrConfigChange.
	retrievedAt atomic.Int64
	// retrievedFrom is the update service, channel and architecture of
	// the last check.
	retrievedFrom string
}

// New returns an operator.
func New(client configclient.Interface, opts Options) *Operator {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	def := DefaultOptions()
	if opts.MinimumUpdateCheckInterval == nil {
		opts.MinimumUpdateCheckInterval = def.MinimumUpdateCheckInterval
	}
	for _, d := range []struct{ v, def *time.Duration }{{&opts.ReconcileInterval, &def.ReconcileInterval}, {&opts.RetryInterval, &def.RetryInterval},
		{&opts.MaxRetryInterval, &def.MaxRetryInterval}, {&opts.RetrieveTimeout, &def.RetrieveTimeout}, {&opts.OperatorPollInterval, &def.OperatorPollInterval},
		{&opts.SlowOperatorAfter, &def.SlowOperatorAfter}, {&opts.SlowMachineConfigAfter, &def.SlowMachineConfigAfter}} {
		if *d.v <= 0 {
			*d.v = *d.def
		}
	}
	if opts.ApplyAttempts <= 0 {
		opts.ApplyAttempts = def.ApplyAttempts
	}
	return &Operator{client: client, kube: opts.Kube, applier: opts.Applier, opts: opts, http: httpClient(),
		eval: &Evaluator{PromQLURL: opts.PromQLURL, HTTP: opts.PromQLHTTP, Clock: opts.Clock}, loaded: map[string]*release.Image{},
		recorder: &record.FakeRecorder{}}
}

// Run creates the ClusterVersion if there is none, then keeps its
// recommendations: at once when the channel, upstream or architecture
// change, every few minutes otherwise, and every second while a risk
// could not be evaluated.
func (o *Operator) Run(ctx context.Context) error {
	if o.kube != nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: o.kube.CoreV1().Events("")})
		defer b.Shutdown()
		o.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "openshift-cluster-version-operator"})
	}
	if err := o.ensure(ctx); err != nil {
		return err
	}
	defer func() {
		if o.work != nil {
			o.work.cancel()
			<-o.work.done
		}
	}()
	// The update service and the PromQL endpoint are asked in a loop of
	// their own (the CVO's availableUpdates queue): an upstream that does
	// not answer never delays taking a new target, Invalid or
	// Upgradeable.
	recommended := make(chan struct{})
	go func() {
		defer close(recommended)
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			if err := o.SyncRecommendations(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Syncing the ClusterVersion's recommendations")
			}
		}, time.Second)
	}()
	defer func() { <-recommended }()
	if o.applier == nil {
		<-ctx.Done()
		return nil
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := o.Sync(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Syncing the ClusterVersion")
		}
	}, time.Second)
	return nil
}

// ensure creates the ClusterVersion when it is missing, as the installer
// does: its desired release is the one the cluster installs, with a
// Partial history entry the CVO completes once the release is applied
// (Initializing). It then reports the CVO's own ClusterOperator.
func (o *Operator) ensure(ctx context.Context) error {
	if o.kube != nil {
		_, err := o.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", Namespace, err)
		}
	}
	cvs := o.client.ConfigV1().ClusterVersions()
	cv, err := cvs.Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if o.opts.Current.Version == "" || o.opts.Current.Image == "" {
			return fmt.Errorf("no ClusterVersion %s and no current release to create it with", Name)
		}
		cv = &configv1.ClusterVersion{
			ObjectMeta: metav1.ObjectMeta{Name: Name},
			Spec:       configv1.ClusterVersionSpec{ClusterID: configv1.ClusterID(uuid.NewString()), Channel: o.opts.Channel, Capabilities: o.opts.Capabilities.DeepCopy()},
		}
		created, err := cvs.Create(ctx, cv, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ClusterVersion %s: %w", Name, err)
		}
		if err == nil {
			cv = created
			now := metav1.NewTime(o.opts.Clock.Now())
			cur := o.opts.Current
			// Without an applier there is nothing to initialize: the
			// release counts as installed.
			installed := o.applier == nil
			cv.Status = configv1.ClusterVersionStatus{
				Desired:            cur,
				History:            MergeHistory(nil, cur, installed, false, "", now),
				ObservedGeneration: created.Generation,
			}
			progressing := configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: configv1.ConditionTrue, Message: "Working towards " + cur.Version}
			available := configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorAvailable, Status: configv1.ConditionFalse}
			if installed {
				progressing.Status, progressing.Message = configv1.ConditionFalse, "Cluster version is "+cur.Version
				available.Status, available.Message = configv1.ConditionTrue, "Done applying "+cur.Version
			}
			for _, c := range []configv1.ClusterOperatorStatusCondition{
				available, progressing,
				{Type: Failing, Status: configv1.ConditionFalse},
				{Type: ReleaseAccepted, Status: configv1.ConditionTrue, Reason: "PayloadLoaded",
					Message: fmt.Sprintf("Payload loaded version=%q image=%q architecture=%q", cur.Version, cur.Image, o.opts.Architecture)},
				{Type: configv1.RetrievedUpdates, Status: configv1.ConditionFalse},
			} {
				SetCondition(&cv.Status.Conditions, c, now)
			}
			if _, err := cvs.UpdateStatus(ctx, cv, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("writing the status of ClusterVersion %s: %w", Name, err)
			}
		}
	} else if err != nil {
		return err
	}
	if o.kube != nil {
		o.setRunning(o.runningVersion(ctx, cv.Status.Desired.Version))
	} else {
		o.setRunning(cv.Status.Desired.Version)
	}
	return o.reportOperator(ctx)
}

// reportOperator reports the CVO itself as the ClusterOperator version:
// the version it runs as.
func (o *Operator) reportOperator(ctx context.Context) error {
	cos := o.client.ConfigV1().ClusterOperators()
	co, err := cos.Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		co, err = cos.Create(ctx, &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: Name}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("ClusterOperator %s: %w", Name, err)
	}
	now := metav1.NewTime(o.opts.Clock.Now())
	v := o.Running()
	co.Status.Versions = []configv1.OperandVersion{{Name: "operator", Version: v}}
	for _, c := range []configv1.ClusterOperatorStatusCondition{
		{Type: configv1.OperatorAvailable, Status: configv1.ConditionTrue, Reason: "AsExpected", Message: "Running version " + v},
		{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Reason: "AsExpected"},
		{Type: configv1.OperatorDegraded, Status: configv1.ConditionFalse, Reason: "AsExpected"},
	} {
		SetCondition(&co.Status.Conditions, c, now)
	}
	co.Status.RelatedObjects = []configv1.ObjectReference{{Group: "config.openshift.io", Resource: "clusterversions", Name: Name},
		{Resource: "namespaces", Name: Namespace}}
	_, err = cos.UpdateStatus(ctx, co, metav1.UpdateOptions{})
	return err
}

// Sync computes Upgradeable from the cluster operators and sets the
// worker on the release the ClusterVersion asks for.
func (o *Operator) Sync(ctx context.Context) error {
	if err := o.syncUpgradeable(ctx); err != nil {
		return err
	}
	cv, err := o.client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return o.syncWork(ctx, cv)
}

// SyncRecommendations checks for updates when it is time and writes what
// it found.
func (o *Operator) SyncRecommendations(ctx context.Context) error {
	cv, err := o.client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return o.syncRecommendations(ctx, cv)
}

// syncRecommendations asks the update service when it is time and writes
// the recommendations; between checks it only evaluates unknown risks.
func (o *Operator) syncRecommendations(ctx context.Context, cv *configv1.ClusterVersion) error {
	upstream := string(cv.Spec.Upstream)
	if upstream == "" {
		upstream = o.opts.Upstream
	}
	asked := fmt.Sprintf("%s|%s|%s|%s", upstream, cv.Spec.Channel, o.opts.Architecture, cv.Status.Desired.Version)
	now := o.opts.Clock.Now()
	if asked == o.lastAsked && now.Sub(o.lastCheck) < o.nextPeriod {
		if !unknownRisk(cv) {
			return nil
		}
		// Between checks, only the risks are evaluated again: queried
		// first, written after (no status write waits on a query).
		verdicts := map[string]metav1.Condition{}
		for _, cu := range cv.Status.ConditionalUpdates {
			verdicts[cu.Release.Image] = o.eval.Recommended(ctx, cu.Risks)
		}
		return o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) { reevaluate(cv, verdicts, now) })
	}
	r := Recommend(ctx, o.http, cv, o.opts.Upstream, o.opts.Architecture, o.eval)
	o.lastAsked, o.lastCheck, o.nextPeriod = asked, now, o.opts.MinimumUpdateCheckInterval()
	// As upstream's LastSyncOrConfigChange: the first check, a check of
	// another service, channel or architecture, or one that succeeded
	// restarts the clock CannotRetrieveUpdates reads.
	from := fmt.Sprintf("%s|%s|%s", upstream, cv.Spec.Channel, o.opts.Architecture)
	if o.retrievedAt.Load() == 0 || from != o.retrievedFrom || r.Condition.Status == configv1.ConditionTrue {
		o.retrievedAt.Store(now.Unix())
	}
	o.retrievedFrom = from
	return o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) { r.Apply(cv, now) })
}

// reevaluate records the known conditional updates' risks as evaluated
// again (verdicts, by release image) and moves the updates that became
// recommended (or stopped being) in or out of the available updates.
func reevaluate(cv *configv1.ClusterVersion, verdicts map[string]metav1.Condition, now metav1.Time) {
	available := map[string]bool{}
	for _, r := range cv.Status.AvailableUpdates {
		available[r.Image] = true
	}
	for i := range cv.Status.ConditionalUpdates {
		cu := &cv.Status.ConditionalUpdates[i]
		cond, ok := verdicts[cu.Release.Image]
		if !ok {
			continue // appeared since the evaluation
		}
		cond.LastTransitionTime = now
		meta.SetStatusCondition(&cu.Conditions, cond)
		switch {
		case cond.Status == metav1.ConditionTrue && !available[cu.Release.Image]:
			cv.Status.AvailableUpdates = append(cv.Status.AvailableUpdates, cu.Release)
		case cond.Status != metav1.ConditionTrue && available[cu.Release.Image]:
			kept := cv.Status.AvailableUpdates[:0]
			for _, r := range cv.Status.AvailableUpdates {
				if r.Image != cu.Release.Image {
					kept = append(kept, r)
				}
			}
			cv.Status.AvailableUpdates = kept
		}
	}
	sortReleases(cv.Status.AvailableUpdates)
}

// unknownRisk reports whether a conditional update's risks could not be
// evaluated: the CVO asks the evaluator again at every sync then, which
// queries again once the cached answer (an error too) is MinForCondition
// old, as upstream's cache does.
func unknownRisk(cv *configv1.ClusterVersion) bool {
	for _, cu := range cv.Status.ConditionalUpdates {
		if c := meta.FindStatusCondition(cu.Conditions, RecommendedCondition); c == nil || c.Status == metav1.ConditionUnknown {
			return true
		}
	}
	return false
}
