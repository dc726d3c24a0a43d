package cvo

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
)

func TestResolveDesiredUpdate(t *testing.T) {
	cv := &configv1.ClusterVersion{Status: configv1.ClusterVersionStatus{
		Desired:          configv1.Release{Version: "4.10.22", Image: "r@sha256:22"},
		AvailableUpdates: []configv1.Release{{Version: "4.10.26", Image: "r@sha256:26"}},
		ConditionalUpdates: []configv1.ConditionalUpdate{{Release: configv1.Release{Version: "4.11.0", Image: "r@sha256:110"}},
			{Release: configv1.Release{Version: "4.10.26", Image: "r@sha256:26"}}},
	}}
	for _, tc := range []struct {
		name   string
		update *configv1.Update
		want   target
		err    string
	}{
		{"no update: the current release", nil, target{Version: "4.10.22", Image: "r@sha256:22"}, ""},
		{"an image is taken as given", &configv1.Update{Image: "x@sha256:1", Force: true}, target{Image: "x@sha256:1", Force: true}, ""},
		{"a version found once among the updates", &configv1.Update{Version: "4.10.26"}, target{Version: "4.10.26", Image: "r@sha256:26"}, ""},
		{"a conditional update's version alone", &configv1.Update{Version: "4.11.0"}, target{Version: "4.10.22", Image: "r@sha256:22"},
			`spec.desiredUpdate.version: Invalid value: "4.11.0": when image is empty the update must be an available update`},
		{"a conditional update by version and image", &configv1.Update{Version: "4.11.0", Image: "r@sha256:110"}, target{Version: "4.11.0", Image: "r@sha256:110"}, ""},
		{"an unknown version", &configv1.Update{Version: "4.12.0"}, target{Version: "4.10.22", Image: "r@sha256:22"},
			`spec.desiredUpdate.version: Invalid value: "4.12.0": when image is empty the update must be an available update`},
	} {
		c := cv.DeepCopy()
		c.Spec.DesiredUpdate = tc.update
		got, err := resolve(c)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%s: got %+v, %v; want %+v, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestModeOf(t *testing.T) {
	h := func(entries ...configv1.UpdateHistory) *configv1.ClusterVersion {
		return &configv1.ClusterVersion{Status: configv1.ClusterVersionStatus{History: entries}}
	}
	completed := func(img string) configv1.UpdateHistory {
		return configv1.UpdateHistory{Image: img, State: configv1.CompletedUpdate}
	}
	partial := func(img string) configv1.UpdateHistory {
		return configv1.UpdateHistory{Image: img, State: configv1.PartialUpdate}
	}
	for _, tc := range []struct {
		name string
		cv   *configv1.ClusterVersion
		t    string
		want payload.Mode
	}{
		{"installing", h(partial("a")), "a", payload.Initializing},
		{"installed and reconciled", h(completed("a")), "a", payload.Reconciling},
		{"a new target", h(completed("a")), "b", payload.Updating},
		{"resuming an update", h(partial("b"), completed("a")), "b", payload.Updating},
	} {
		if got := modeOf(tc.cv, target{Image: tc.t}); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestApplyErrorReasons(t *testing.T) {
	m := &payload.Manifest{Kind: "Deployment", Namespace: "ns", Name: "d"}
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "d", field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), -1, "must be greater than or equal to 0")}), "UpdatePayloadResourceInvalid"},
		{apierrors.NewForbidden(gr, "d", errors.New("no")), "UpdatePayloadResourceForbidden"},
		{apierrors.NewConflict(gr, "d", errors.New("changed")), "UpdatePayloadResourceConflict"},
		{apierrors.NewInternalError(errors.New("etcd")), "UpdatePayloadClusterError"},
		{errors.New("the cluster does not serve example.com/v1, Kind=Widget"), "UpdatePayloadResourceTypeMissing"},
		{errors.New("something else"), "UpdatePayloadFailed"},
	} {
		e := applyError(m, tc.err, 4, 10)
		if e.Reason != tc.want || !strings.HasPrefix(e.Message, `Could not update deployment "ns/d" (5 of 10): `) || e.Effect != payload.EffectFail {
			t.Errorf("%v: %s %q", tc.err, e.Reason, e.Message)
		}
	}
}

func TestSlowOperators(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := now
	p := newProgress(func() time.Time { return clock })
	p.start("4.10.26", payload.Updating, 100)
	updating := func(n string) *payload.UpdateError {
		return &payload.UpdateError{Effect: payload.EffectNone, Reason: "ClusterOperatorUpdating", PluralReason: "ClusterOperatorsUpdating", Name: n,
			Message: "Cluster operator " + n + " is updating versions", PluralMessageFormat: "Cluster operators %s are updating versions"}
	}
	p.waiting("console", "50", updating("console"))
	p.waiting("machine-config", "80", updating("machine-config"))
	limits := func(n string) time.Duration {
		if n == "machine-config" {
			return 90 * time.Minute
		}
		return 30 * time.Minute
	}
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{
		{29 * time.Minute, ""},
		{31 * time.Minute, "waiting on console over 30 minutes which is longer than expected"},
		{91 * time.Minute, "waiting on console over 30 minutes and machine-config over 90 minutes which is longer than expected"},
	} {
		clock = now.Add(tc.after)
		s, slow := p.state(limits)
		if slow != tc.want {
			t.Errorf("after %s: %q, want %q", tc.after, slow, tc.want)
		}
		if s.Err == nil || s.Err.Reason != "ClusterOperatorsUpdating" {
			t.Errorf("after %s: error %+v", tc.after, s.Err)
		}
	}
	p.operatorDone("console")
	clock = now.Add(91 * time.Minute)
	if _, slow := p.state(limits); slow != "waiting on machine-config over 90 minutes which is longer than expected" {
		t.Errorf("machine-config alone: %q", slow)
	}
}

func TestFailureClearsWhenAPassGetsFurther(t *testing.T) {
	p := newProgress(time.Now)
	p.start("4.10.26", payload.Updating, 10)
	p.taskDone()
	p.taskDone()
	_ = p.fail(&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadResourceInvalid", Message: "bad"})
	// The next pass starts again from the top: the failure stands until
	// it gets past where the last one stopped.
	p.start("4.10.26", payload.Updating, 10)
	p.taskDone()
	p.taskDone()
	if e := p.waitErr(); e == nil || e.Reason != "UpdatePayloadResourceInvalid" {
		t.Fatalf("the failure was forgotten before the pass got further: %+v", e)
	}
	p.taskDone()
	if e := p.waitErr(); e != nil {
		t.Fatalf("the failure outlived a pass that got further: %+v", e)
	}
}

func TestUpgradeableFromOperators(t *testing.T) {
	co := func(name, status, reason, msg string) configv1.ClusterOperator {
		return configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: configv1.ClusterOperatorStatus{Conditions: []configv1.ClusterOperatorStatusCondition{
			{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionStatus(status), Reason: reason, Message: msg}}}}
	}
	if c := Upgradeable([]configv1.ClusterOperator{co("dns", "True", "AsExpected", "")}); c != nil {
		t.Errorf("all upgradeable: %+v", c)
	}
	c := Upgradeable([]configv1.ClusterOperator{co("dns", "True", "", ""), co("ingress", "False", "AdminAckRequired", "ack first")})
	if c == nil || c.Reason != "AdminAckRequired" || c.Message != "Cluster operator ingress should not be upgraded between minor or major versions: ack first" {
		t.Errorf("one: %+v", c)
	}
	c = Upgradeable([]configv1.ClusterOperator{co("storage", "False", "A", "a"), co("ingress", "False", "B", "b")})
	want := "Multiple cluster operators should not be upgraded between minor or major versions:\n* Cluster operator ingress should not be upgraded between minor or major versions: B: b\n* Cluster operator storage should not be upgraded between minor or major versions: A: a"
	if c == nil || c.Reason != "ClusterOperatorsNotUpgradeable" || c.Message != want {
		t.Errorf("several: %+v", c)
	}
}

// A pass whose components failed for several reasons reports them all,
// as MultipleErrors; one failure is reported as it is.
func TestRunFailureFoldsEveryComponentsError(t *testing.T) {
	a := &payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadResourceInvalid", Message: "Could not update configmap a"}
	b := &payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadFailed", Message: "Could not update deployment b"}
	both := runFailure(&payload.IncompleteError{Errs: []error{fmt.Errorf("a: %w", a), fmt.Errorf("b: %w", b)}})
	if both.Reason != "MultipleErrors" || !strings.Contains(both.Message, "* Could not update configmap a\n* Could not update deployment b") {
		t.Errorf("two failures reported as %s: %q", both.Reason, both.Message)
	}
	if one := runFailure(&payload.IncompleteError{Errs: []error{a}}); one != a {
		t.Errorf("one failure reported as %+v", one)
	}
	if plain := runFailure(errors.New("connection refused")); plain.Reason != "UpdatePayloadFailed" || plain.Message != "connection refused" {
		t.Errorf("a plain error reported as %+v", plain)
	}
}
