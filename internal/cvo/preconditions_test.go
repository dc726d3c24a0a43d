package cvo

import (
	"strings"
	"testing"

	configv1 "github.com/openshift/api/config/v1"
)

func TestPreconditions(t *testing.T) {
	at := func(version string, history ...string) *configv1.ClusterVersion {
		cv := &configv1.ClusterVersion{Status: configv1.ClusterVersionStatus{Desired: configv1.Release{Version: version, Image: "img-" + version}}}
		for _, h := range append([]string{version}, history...) {
			cv.Status.History = append(cv.Status.History, configv1.UpdateHistory{Version: h, Image: "img-" + h})
		}
		return cv
	}
	notUpgradeable := func(cv *configv1.ClusterVersion) *configv1.ClusterVersion {
		cv.Status.Conditions = append(cv.Status.Conditions, configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse,
			Reason: "AdminAckRequired", Message: "Kubernetes 1.25 and therefore OpenShift 4.12 remove several APIs which require admin consideration."})
		return cv
	}
	for _, tc := range []struct {
		name   string
		cv     *configv1.ClusterVersion
		target string
		want   string
	}{
		{"a patch update", at("4.10.22"), "4.10.26", ""},
		{"the next minor", at("4.10.22"), "4.11.0", ""},
		{"two minors", at("4.10.22"), "4.12.0", `Precondition "ClusterVersionGiantHop" failed because of "MultipleMinorVersionsUpdate": 4.12.0 is more than one minor version beyond the current target 4.10.22 (4.12 > 4.(10+1)), and only updates within the current minor version or to the next minor version are supported.`},
		{"a major", at("4.10.22"), "5.1.0", `Precondition "ClusterVersionGiantHop" failed because of "MajorVersionUpdate": 5.1.0 has a larger major version than the current target 4.10.22 (5 > 4), and only updates within the current major version are supported.`},
		{"rollback to the previous z-stream", at("4.10.26", "4.10.22"), "4.10.22", ""},
		{"rollback elsewhere", at("4.10.26", "4.10.22"), "4.10.23", `Precondition "ClusterVersionRollback" failed because of "LowDesiredVersion": 4.10.23 is less than the current target 4.10.26, and the only supported rollback is to the cluster's previous version 4.10.22 (img-4.10.22)`},
		{"rollback across minors", at("4.11.0", "4.10.26"), "4.10.26", `Precondition "ClusterVersionRollback" failed because of "LowDesiredVersion": 4.10.26 is less than the current target 4.11.0 and matches the cluster's previous version, but rollbacks that change major or minor versions are not recommended`},
		{"rollback without history", at("4.10.26"), "4.10.22", `4.10.22 is less than the current target 4.10.26, and the cluster has no previous Semantic Version`},
		{"not upgradeable blocks a minor", notUpgradeable(at("4.10.22")), "4.11.0", `Precondition "ClusterVersionUpgradeable" failed because of "AdminAckRequired": Kubernetes 1.25 and therefore OpenShift 4.12 remove several APIs which require admin consideration.`},
		{"not upgradeable allows a patch", notUpgradeable(at("4.10.22")), "4.10.26", ""},
		{"two at once", notUpgradeable(at("4.10.22")), "4.12.0", "Multiple precondition checks failed:\n* Precondition \"ClusterVersionGiantHop\""},
	} {
		msg, blocking := SummarizePreconditions(Preconditions(tc.cv, tc.target))
		if (tc.want == "") != (msg == "") || !strings.Contains(msg, tc.want) || blocking != (tc.want != "") {
			t.Errorf("%s: %q (blocking %v), want %q", tc.name, msg, blocking, tc.want)
		}
	}
}
