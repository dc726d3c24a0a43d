package payload

import (
	"strings"
	"testing"

	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func co(name string, versions map[string]string, conds ...configv1.ClusterOperatorStatusCondition) *configv1.ClusterOperator {
	c := &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for n, v := range versions {
		c.Status.Versions = append(c.Status.Versions, configv1.OperandVersion{Name: n, Version: v})
	}
	c.Status.Conditions = conds
	return c
}

func cond(t configv1.ClusterStatusConditionType, s configv1.ConditionStatus, reason, msg string) configv1.ClusterOperatorStatusCondition {
	return configv1.ClusterOperatorStatusCondition{Type: t, Status: s, Reason: reason, Message: msg}
}

func TestOperatorHealth(t *testing.T) {
	want := co("dns", map[string]string{"operator": "4.10.26", "coredns": "4.10.26"})
	healthy := []configv1.ClusterOperatorStatusCondition{
		cond(configv1.OperatorAvailable, configv1.ConditionTrue, "", ""),
		cond(configv1.OperatorProgressing, configv1.ConditionFalse, "", ""),
		cond(configv1.OperatorDegraded, configv1.ConditionFalse, "", ""),
	}
	for _, tc := range []struct {
		name   string
		actual *configv1.ClusterOperator
		mode   Mode
		reason string
		effect Effect
		nested string
	}{
		{"done", co("dns", map[string]string{"operator": "4.10.26", "coredns": "4.10.26"}, healthy...), Updating, "", 0, ""},
		{"updating", co("dns", map[string]string{"operator": "4.10.22"}, healthy...), Updating, "ClusterOperatorUpdating", EffectNone,
			"cluster operator dns is available and not degraded but has not finished updating to target version"},
		{"undone versions are fine while installing", co("dns", nil, healthy...), Initializing, "", 0, ""},
		{"not available", co("dns", nil, cond(configv1.OperatorAvailable, configv1.ConditionFalse, "NoPods", "no dns pods")), Updating,
			"ClusterOperatorNotAvailable", EffectFail, "cluster operator dns is Available=False: NoPods: no dns pods"},
		{"degraded", co("dns", nil, cond(configv1.OperatorAvailable, configv1.ConditionTrue, "", ""), cond(configv1.OperatorDegraded, configv1.ConditionTrue, "Crash", "coredns crashes")), Updating,
			"ClusterOperatorDegraded", EffectFailAfterInterval, "cluster operator dns is Degraded=True: Crash, coredns crashes"},
		{"no Degraded condition counts as degraded", co("dns", map[string]string{"operator": "4.10.26", "coredns": "4.10.26"}, cond(configv1.OperatorAvailable, configv1.ConditionTrue, "", "")), Updating,
			"ClusterOperatorDegraded", EffectFailAfterInterval, "undone="},
		{"degraded while installing is reported", co("dns", nil, cond(configv1.OperatorAvailable, configv1.ConditionTrue, "", "")), Initializing,
			"ClusterOperatorDegraded", EffectReport, ""},
		{"not there yet", nil, Updating, "ClusterOperatorNotAvailable", EffectFail, "undone=coredns to 4.10.26, operator to 4.10.26"},
	} {
		got := OperatorHealth(want, tc.actual, tc.mode)
		switch {
		case tc.reason == "" && got != nil:
			t.Errorf("%s: %v (%s)", tc.name, got, got.Reason)
		case tc.reason != "" && (got == nil || got.Reason != tc.reason || got.Effect != tc.effect || !strings.Contains(got.Nested.Error(), tc.nested)):
			t.Errorf("%s: %+v, want %s effect %d nested %q", tc.name, got, tc.reason, tc.effect, tc.nested)
		}
	}
	if e := OperatorHealth(co("x", nil), nil, Updating); e == nil || e.Reason != "ClusterOperatorNoVersions" || e.Message != "Cluster operator x does not declare expected versions" {
		t.Errorf("no versions: %+v", e)
	}
}

func TestSummarize(t *testing.T) {
	degraded := func(n string) *UpdateError {
		return OperatorHealth(co(n, map[string]string{"operator": "1"}), co(n, nil, cond(configv1.OperatorAvailable, configv1.ConditionTrue, "", "")), Updating)
	}
	updating := OperatorHealth(co("etcd", map[string]string{"operator": "1"}), co("etcd", nil, cond(configv1.OperatorAvailable, configv1.ConditionTrue, "", ""), cond(configv1.OperatorDegraded, configv1.ConditionFalse, "", "")), Updating)
	if s := Summarize([]*UpdateError{degraded("dns"), degraded("console")}); s.Reason != "ClusterOperatorsDegraded" || s.Message != "Cluster operators console, dns are degraded" {
		t.Errorf("two degraded: %s %q", s.Reason, s.Message)
	}
	s := Summarize([]*UpdateError{degraded("dns"), updating, degraded("console")})
	if s.Reason != "MultipleErrors" || s.Message != "Multiple errors are preventing progress:\n* Cluster operators console, dns are degraded\n* Cluster operator etcd is updating versions" || s.Effect != EffectFailAfterInterval {
		t.Errorf("mixed: %s %q %d", s.Reason, s.Message, s.Effect)
	}
	if Summarize(nil) != nil || Summarize([]*UpdateError{updating}) != updating {
		t.Error("zero or one error")
	}
}
