package cvo

import (
	"context"
	"errors"
	"net/http"

	"github.com/blang/semver/v4"
	"github.com/google/uuid"
	configv1 "github.com/openshift/api/config/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RetrievedUpdates condition reasons the CVO sets besides those of
// UpdatesError.
const (
	ReasonNoUpstream            = "NoUpstream"
	ReasonNoChannel             = "NoChannel"
	ReasonInvalidID             = "InvalidID"
	ReasonNoCurrentVersion      = "NoCurrentVersion"
	ReasonInvalidCurrentVersion = "InvalidCurrentVersion"
	ReasonNoArchitecture        = "NoArchitecture"
)

// Recommendations is one evaluation of the update service's answer.
type Recommendations struct {
	// Upstream, Channel and Architecture were asked.
	Upstream, Channel, Architecture string
	// Current is the graph's node of the running version (URL, channels).
	Current *configv1.Release
	// Available and Conditional go to the ClusterVersion's status.
	Available   []configv1.Release
	Conditional []configv1.ConditionalUpdate
	Condition   configv1.ClusterOperatorStatusCondition
}

// Recommend asks upstream (spec.upstream, or defaultUpstream when unset)
// for the updates of the running version in spec.channel and evaluates
// the risks of each conditional update. Failures become the
// RetrievedUpdates condition, with OpenShift's reasons.
func Recommend(ctx context.Context, client *http.Client, cv *configv1.ClusterVersion, defaultUpstream, arch string, eval *Evaluator) *Recommendations {
	upstream := string(cv.Spec.Upstream)
	if upstream == "" {
		upstream = defaultUpstream
	}
	r := &Recommendations{Upstream: upstream, Channel: cv.Spec.Channel, Architecture: arch}
	fail := func(reason, message string) *Recommendations {
		r.Condition = configv1.ClusterOperatorStatusCondition{Type: configv1.RetrievedUpdates, Status: configv1.ConditionFalse,
			Reason: reason, Message: message}
		return r
	}
	switch {
	case upstream == "":
		return fail(ReasonNoUpstream, "No updateService server has been set to retrieve updates.")
	case arch == "":
		return fail(ReasonNoArchitecture, "Architecture has not been configured.")
	case cv.Status.Desired.Version == "":
		return fail(ReasonNoCurrentVersion, "The cluster version does not have a semantic version assigned and cannot calculate valid upgrades.")
	case cv.Spec.Channel == "":
		return fail(ReasonNoChannel, "The update channel has not been configured.")
	}
	id, err := uuid.Parse(string(cv.Spec.ClusterID))
	if err != nil {
		return fail(ReasonInvalidID, "invalid cluster ID: "+err.Error())
	}
	version, err := semver.Parse(cv.Status.Desired.Version)
	if err != nil {
		return fail(ReasonInvalidCurrentVersion, "The current cluster version is not a valid semantic version and cannot be used to calculate upgrades.")
	}
	got, err := FetchUpdates(ctx, client, upstream, arch, cv.Spec.Channel, id.String(), version)
	if err != nil {
		var ue *UpdatesError
		if errors.As(err, &ue) {
			return fail(ue.Reason, "Unable to retrieve available updates: "+ue.Message)
		}
		return fail("Unknown", "Unable to retrieve available updates: "+err.Error())
	}
	r.Current = &got.Current
	r.Available = append(r.Available, got.Recommended...)
	for _, cu := range got.Conditional {
		cond := eval.Recommended(ctx, cu.Risks)
		// The time of a change is kept from the last status.
		for _, old := range cv.Status.ConditionalUpdates {
			if old.Release.Image == cu.Release.Image {
				cu.Conditions = old.Conditions
			}
		}
		cond.LastTransitionTime = metav1.NewTime(eval.Clock.Now())
		meta.SetStatusCondition(&cu.Conditions, cond)
		if cond.Status == metav1.ConditionTrue {
			r.Available = append(r.Available, cu.Release)
		}
		r.Conditional = append(r.Conditional, cu)
	}
	sortReleases(r.Available)
	r.Condition = configv1.ClusterOperatorStatusCondition{Type: configv1.RetrievedUpdates, Status: configv1.ConditionTrue}
	return r
}

// Apply writes the recommendations into a ClusterVersion's status: the
// updates, the RetrievedUpdates condition, and the channels and URL of
// the running release. A failed retrieval keeps the updates known before
// when the cause is transient, as the CVO does.
func (r *Recommendations) Apply(cv *configv1.ClusterVersion, now metav1.Time) {
	transient := r.Condition.Status != configv1.ConditionTrue &&
		(r.Condition.Reason == "RemoteFailed" || r.Condition.Reason == "ResponseFailed" || r.Condition.Reason == "ResponseInvalid")
	if r.Condition.Status == configv1.ConditionTrue || !transient {
		cv.Status.AvailableUpdates = r.Available
		cv.Status.ConditionalUpdates = r.Conditional
	}
	if r.Current != nil {
		cv.Status.Desired.Channels = r.Current.Channels
		if r.Current.URL != "" {
			cv.Status.Desired.URL = r.Current.URL
		}
	}
	SetCondition(&cv.Status.Conditions, r.Condition, now)
}

// SetCondition sets a ClusterOperatorStatusCondition, keeping its
// transition time unless its status changed.
func SetCondition(conds *[]configv1.ClusterOperatorStatusCondition, c configv1.ClusterOperatorStatusCondition, now metav1.Time) {
	for i := range *conds {
		old := &(*conds)[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status != c.Status {
			old.LastTransitionTime = now
		}
		old.Status, old.Reason, old.Message = c.Status, c.Reason, c.Message
		return
	}
	c.LastTransitionTime = now
	*conds = append(*conds, c)
}
