package cvo

import (
	"bytes"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUpgradeStatusGolden(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	done := at(50 * time.Minute)
	cv := &configv1.ClusterVersion{Status: configv1.ClusterVersionStatus{
		Desired: configv1.Release{Version: "4.10.26"},
		History: []configv1.UpdateHistory{
			{State: configv1.PartialUpdate, Version: "4.10.26", StartedTime: at(14 * time.Minute)},
			{State: configv1.CompletedUpdate, Version: "4.10.23", StartedTime: at(80 * time.Minute), CompletionTime: &done},
			{State: configv1.CompletedUpdate, Version: "4.10.22", StartedTime: at(100 * time.Hour)},
		},
		Conditions: []configv1.ClusterOperatorStatusCondition{
			{Type: configv1.OperatorProgressing, Status: configv1.ConditionTrue, Message: "Working towards 4.10.26: 27 of 34 done (79% complete), waiting on console"},
			{Type: Failing, Status: configv1.ConditionFalse},
		},
	}}
	co := func(name, version string, conds ...configv1.ClusterOperatorStatusCondition) configv1.ClusterOperator {
		return configv1.ClusterOperator{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"include.release.openshift.io/self-managed-high-availability": "true"}},
			Status:     configv1.ClusterOperatorStatus{Versions: []configv1.OperandVersion{{Name: "operator", Version: version}}, Conditions: conds},
		}
	}
	ok := []configv1.ClusterOperatorStatusCondition{{Type: configv1.OperatorAvailable, Status: "True"}, {Type: configv1.OperatorDegraded, Status: "False"}}
	cos := []configv1.ClusterOperator{
		co("kube-apiserver", "4.10.26", ok...),
		co("console", "4.10.23", configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorAvailable, Status: "True"},
			configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: "True", Reason: "Deploying", Message: "deployment openshift-console-operator/console-operator is rolling out version 4.10.26", LastTransitionTime: at(3 * time.Minute)}),
		co("dns", "4.10.23", configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorAvailable, Status: "True"},
			configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorDegraded, Status: "True", Reason: "CoreDNSCrashLooping", LastTransitionTime: at(7 * time.Minute)}),
		co("machine-config", "4.10.23", ok...),
		{ObjectMeta: metav1.ObjectMeta{Name: "not-in-the-payload"}},
	}
	var out bytes.Buffer
	if err := UpgradeStatus(&out, cv, cos, now, "operators"); err != nil {
		t.Fatal(err)
	}
	want := `= Control Plane =
Assessment:      Progressing
Target Version:  4.10.26 (from 4.10.23)
Updating:        console
Completion:      25% (1 operators updated, 1 updating, 2 waiting)
Duration:        14m (Est. Time Remaining: 16m)
Operator Health: 3 Healthy, 1 Available but degraded

Updating Cluster Operators
NAME      SINCE   REASON      MESSAGE
console   3m      Deploying   deployment openshift-console-operator/console-operator is rolling out version 4.10.26

= Update Health =
SINCE   LEVEL     IMPACT             MESSAGE
7m      Warning   API Availability   Cluster Operator dns is degraded (CoreDNSCrashLooping)
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}

	cv.Status.Conditions[0] = configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Message: "Cluster version is 4.10.26"}
	out.Reset()
	if err := UpgradeStatus(&out, cv, cos, now, "none"); err != nil || out.String() != "The cluster is not updating.\n" {
		t.Errorf("not updating: %v %q", err, out.String())
	}
	if err := UpgradeStatus(&out, cv, cos, now, "everything"); err == nil || err.Error() != "invalid value for --details: everything (must be one of none, all, nodes, health, operators)" {
		t.Errorf("bad --details: %v", err)
	}
}
