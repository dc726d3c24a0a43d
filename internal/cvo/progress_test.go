package cvo

import (
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
)

func TestProgressConditions(t *testing.T) {
	updating := &payload.UpdateError{Effect: payload.EffectNone, Reason: "ClusterOperatorUpdating", Name: "machine-config", Message: "Cluster operator machine-config is updating versions"}
	degraded := &payload.UpdateError{Effect: payload.EffectFailAfterInterval, Reason: "ClusterOperatorDegraded", Name: "etcd", Message: "Cluster operator etcd is degraded"}
	missing := &payload.UpdateError{Effect: payload.EffectFail, Reason: "ClusterOperatorNotAvailable", Name: "dns", Message: "Cluster operator dns is not available"}
	for _, tc := range []struct {
		name                     string
		s                        SyncState
		progressing              string
		progStatus, failStatus   configv1.ConditionStatus
		failReason, availMessage string
	}{
		{"starting", SyncState{Version: "4.10.26", Mode: payload.Updating}, "Working towards 4.10.26", "True", "False", "", ""},
		{"applying", SyncState{Version: "4.10.26", Mode: payload.Updating, Done: 106, Total: 841}, "Working towards 4.10.26: 106 of 841 done (12% complete)", "True", "False", "", ""},
		{"waiting on an operator", SyncState{Version: "4.10.26", Mode: payload.Updating, Done: 815, Total: 841, Err: updating},
			"Working towards 4.10.26: 815 of 841 done (96% complete), waiting on machine-config", "True", "False", "", ""},
		{"degraded, within the interval", SyncState{Version: "4.10.26", Mode: payload.Updating, Done: 10, Total: 841, Err: degraded, ErrSince: time.Minute},
			"Working towards 4.10.26: 10 of 841 done (1% complete), waiting up to 40 minutes on etcd", "True", "False", "", ""},
		{"degraded past the interval", SyncState{Version: "4.10.26", Mode: payload.Updating, Done: 10, Total: 841, Err: degraded, ErrSince: 41 * time.Minute},
			"Unable to apply 4.10.26: the cluster operator etcd is degraded", "True", "True", "ClusterOperatorDegraded", ""},
		{"failing at once", SyncState{Version: "4.10.26", Mode: payload.Updating, Err: missing},
			"Unable to apply 4.10.26: the cluster operator dns is not available", "True", "True", "ClusterOperatorNotAvailable", ""},
		{"done", SyncState{Version: "4.10.26", Mode: payload.Updating, Done: 841, Total: 841, Completed: true},
			"Cluster version is 4.10.26", "False", "False", "", "Done applying 4.10.26"},
		{"reconciling, broken", SyncState{Version: "4.10.26", Mode: payload.Reconciling, Completed: true, Err: missing},
			"Error while reconciling 4.10.26: the cluster operator dns is not available", "False", "True", "ClusterOperatorNotAvailable", "Done applying 4.10.26"},
	} {
		p, f, a := Conditions(tc.s)
		if p.Message != tc.progressing || p.Status != tc.progStatus || f.Status != tc.failStatus || f.Reason != tc.failReason || a.Message != tc.availMessage {
			t.Errorf("%s: Progressing %s %q; Failing %s %s; Available %q", tc.name, p.Status, p.Message, f.Status, f.Reason, a.Message)
		}
	}
}
