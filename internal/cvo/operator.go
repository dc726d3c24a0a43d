package cvo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/google/uuid"
	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Name is the ClusterVersion's (and the CVO's ClusterOperator's) name.
const Name = "version"

// Options configure the operator.
type Options struct {
	// Upstream is the update service asked when spec.upstream is unset
	// (the CVO's --update-service).
	Upstream string
	// PromQLURL is where PromQL risks are evaluated.
	PromQLURL string
	// Architecture of the cluster (GOARCH).
	Architecture string
	// Current is the release the cluster runs: the ClusterVersion's
	// desired and completed history when the operator creates it.
	Current configv1.Release
	// Channel is spec.channel of a ClusterVersion the operator creates.
	Channel string
	// MinimumUpdateCheckInterval is drawn anew for each check: the CVO
	// asks the update service every [2m, 4m) unless something changed.
	MinimumUpdateCheckInterval func() time.Duration
	Clock                      clock.Clock
}

// DefaultOptions are the CVO's timings.
func DefaultOptions() Options {
	return Options{
		Architecture:               "amd64",
		MinimumUpdateCheckInterval: func() time.Duration { return 2*time.Minute + rand.N(2*time.Minute) },
		Clock:                      clock.RealClock{},
	}
}

// Operator keeps the ClusterVersion's recommendations.
type Operator struct {
	client configclient.Interface
	opts   Options
	eval   *Evaluator
	http   *http.Client

	// What the last check asked, and when.
	lastAsked  string
	lastCheck  time.Time
	nextPeriod time.Duration
}

// New returns an operator.
func New(client configclient.Interface, opts Options) *Operator {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MinimumUpdateCheckInterval == nil {
		opts.MinimumUpdateCheckInterval = DefaultOptions().MinimumUpdateCheckInterval
	}
	return &Operator{client: client, opts: opts, http: httpClient(),
		eval: &Evaluator{PromQLURL: opts.PromQLURL, Clock: opts.Clock}}
}

// Run creates the ClusterVersion if there is none, then keeps its
// recommendations: at once when the channel, upstream or architecture
// change, every few minutes otherwise, and every second while a risk
// could not be evaluated.
func (o *Operator) Run(ctx context.Context) error {
	if err := o.ensure(ctx); err != nil {
		return err
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := o.Sync(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Syncing the ClusterVersion")
		}
	}, time.Second)
	return nil
}

// ensure creates the ClusterVersion and the CVO's ClusterOperator when
// they are missing, as an installed cluster has them.
func (o *Operator) ensure(ctx context.Context) error {
	cvs := o.client.ConfigV1().ClusterVersions()
	if _, err := cvs.Get(ctx, Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if o.opts.Current.Version == "" || o.opts.Current.Image == "" {
			return fmt.Errorf("no ClusterVersion %s and no current release to create it with", Name)
		}
		cv := &configv1.ClusterVersion{
			ObjectMeta: metav1.ObjectMeta{Name: Name},
			Spec:       configv1.ClusterVersionSpec{ClusterID: configv1.ClusterID(uuid.NewString()), Channel: o.opts.Channel},
		}
		created, err := cvs.Create(ctx, cv, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ClusterVersion %s: %w", Name, err)
		}
		if err == nil {
			now := metav1.NewTime(o.opts.Clock.Now())
			cur := o.opts.Current
			created.Status = configv1.ClusterVersionStatus{
				Desired: cur,
				History: []configv1.UpdateHistory{{State: configv1.CompletedUpdate, StartedTime: now, CompletionTime: &now,
					Version: cur.Version, Image: cur.Image, Verified: false}},
				ObservedGeneration: created.Generation,
				AvailableUpdates:   nil,
			}
			for _, c := range []configv1.ClusterOperatorStatusCondition{
				{Type: configv1.OperatorAvailable, Status: configv1.ConditionTrue, Message: "Done applying " + cur.Version},
				{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Message: "Cluster version is " + cur.Version},
				{Type: "Failing", Status: configv1.ConditionFalse},
				{Type: "ReleaseAccepted", Status: configv1.ConditionTrue, Reason: "PayloadLoaded",
					Message: fmt.Sprintf("Payload loaded version=%q image=%q architecture=%q", cur.Version, cur.Image, o.opts.Architecture)},
				{Type: configv1.RetrievedUpdates, Status: configv1.ConditionFalse},
			} {
				setCondition(&created.Status.Conditions, c, now)
			}
			if _, err := cvs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("writing the status of ClusterVersion %s: %w", Name, err)
			}
		}
	} else if err != nil {
		return err
	}
	return o.ensureClusterOperator(ctx)
}

// ensureClusterOperator reports the CVO itself as a ClusterOperator.
func (o *Operator) ensureClusterOperator(ctx context.Context) error {
	cos := o.client.ConfigV1().ClusterOperators()
	co, err := cos.Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		co, err = cos.Create(ctx, &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: Name}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("ClusterOperator %s: %w", Name, err)
	}
	cv, err := o.client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.NewTime(o.opts.Clock.Now())
	v := cv.Status.Desired.Version
	co.Status.Versions = []configv1.OperandVersion{{Name: "operator", Version: v}}
	for _, c := range []configv1.ClusterOperatorStatusCondition{
		{Type: configv1.OperatorAvailable, Status: configv1.ConditionTrue, Reason: "AsExpected", Message: "Done applying " + v},
		{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Reason: "AsExpected", Message: "Cluster version is " + v},
		{Type: configv1.OperatorDegraded, Status: configv1.ConditionFalse, Reason: "AsExpected"},
	} {
		setCondition(&co.Status.Conditions, c, now)
	}
	co.Status.RelatedObjects = []configv1.ObjectReference{{Group: "config.openshift.io", Resource: "clusterversions", Name: Name}}
	_, err = cos.UpdateStatus(ctx, co, metav1.UpdateOptions{})
	return err
}

// Sync checks for updates when it is time, and writes what it found.
func (o *Operator) Sync(ctx context.Context) error {
	cvs := o.client.ConfigV1().ClusterVersions()
	cv, err := cvs.Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
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
		// Between checks, only the risks are evaluated again.
		o.reevaluate(ctx, cv, metav1.NewTime(now))
		if _, err := cvs.UpdateStatus(ctx, cv, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("writing the status of ClusterVersion %s: %w", Name, err)
		}
		return nil
	}
	r := Recommend(ctx, o.http, cv, o.opts.Upstream, o.opts.Architecture, o.eval)
	o.lastAsked, o.lastCheck, o.nextPeriod = asked, now, o.opts.MinimumUpdateCheckInterval()
	r.Apply(cv, metav1.NewTime(now))
	if _, err := cvs.UpdateStatus(ctx, cv, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of ClusterVersion %s: %w", Name, err)
	}
	return nil
}

// reevaluate evaluates the known conditional updates' risks again and
// moves the updates that became recommended (or stopped being) in or out
// of the available updates.
func (o *Operator) reevaluate(ctx context.Context, cv *configv1.ClusterVersion, now metav1.Time) {
	available := map[string]bool{}
	for _, r := range cv.Status.AvailableUpdates {
		available[r.Image] = true
	}
	for i := range cv.Status.ConditionalUpdates {
		cu := &cv.Status.ConditionalUpdates[i]
		cond := o.eval.Recommended(ctx, cu.Risks)
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
// evaluated (the CVO asks again every second then).
func unknownRisk(cv *configv1.ClusterVersion) bool {
	for _, cu := range cv.Status.ConditionalUpdates {
		if c := meta.FindStatusCondition(cu.Conditions, RecommendedCondition); c == nil || c.Status == metav1.ConditionUnknown {
			return true
		}
	}
	return false
}
