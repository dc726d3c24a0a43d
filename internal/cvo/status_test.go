package cvo

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
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
	if err := UpgradeStatus(&out, cv, cos, nil, nil, now, "operators"); err != nil {
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

	// Alerts, as oc reads them: those active since the update started,
	// or allowed from before it, are health insights; a failure to
	// fetch them is said first.
	alerts := func() ([]StatusAlert, error) {
		return []StatusAlert{
			{Name: "ClusterOperatorDown", Severity: "critical", Summary: "Cluster operator has not been available for 10 minutes.", ActiveAt: at(2 * time.Minute).Time},
			{Name: "KubeNodeNotReady", Severity: "warning", Summary: "Node is not ready.", ActiveAt: at(30 * time.Minute).Time},
			{Name: "PodDisruptionBudgetAtLimit", Severity: "warning", Summary: "The pod disruption budget is at the minimum disruptions allowed level.", ActiveAt: at(30 * time.Minute).Time},
		}, nil
	}
	out.Reset()
	if err := UpgradeStatus(&out, cv, cos, nil, alerts, now, "none"); err != nil {
		t.Fatal(err)
	}
	health := out.String()[strings.Index(out.String(), "= Update Health ="):]
	wantHealth := `= Update Health =
SINCE   LEVEL      IMPACT             MESSAGE
30m     Warning    Unknown            Alert: The pod disruption budget is at the minimum disruptions allowed level.
7m      Warning    API Availability   Cluster Operator dns is degraded (CoreDNSCrashLooping)
2m      Critical   Unknown            Alert: Cluster operator has not been available for 10 minutes.
`
	if health != wantHealth {
		t.Errorf("health with alerts:\n%s\nwant:\n%s", health, wantHealth)
	}
	out.Reset()
	if err := UpgradeStatus(&out, cv, cos, nil, func() ([]StatusAlert, error) {
		return nil, errors.New("failed to get alerts from Thanos: no token is currently in use for this session")
	}, now, "none"); err != nil {
		t.Fatal(err)
	}
	if first := strings.SplitN(out.String(), "\n", 2)[0]; first != "Unable to fetch alerts, ignoring alerts in 'Update Health':  failed to get alerts from Thanos: no token is currently in use for this session" {
		t.Errorf("first line %q", first)
	}

	cv.Status.Conditions[0] = configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Message: "Cluster version is 4.10.26"}
	out.Reset()
	if err := UpgradeStatus(&out, cv, cos, nil, nil, now, "none"); err != nil || out.String() != "The cluster is not updating.\n" {
		t.Errorf("not updating: %v %q", err, out.String())
	}
	if err := UpgradeStatus(&out, cv, cos, nil, nil, now, "everything"); err == nil || err.Error() != "invalid value for --details: everything (must be one of none, all, nodes, health, operators)" {
		t.Errorf("bad --details: %v", err)
	}
}

// TestUpgradeStatusPools: the control plane is done, the worker pool
// still rolls (one node draining, one degraded, one pending) and a paused
// custom pool holds its node: the update is still shown, in oc's shape.
func TestUpgradeStatusPools(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	done := at(2 * time.Minute)
	cv := &configv1.ClusterVersion{Status: configv1.ClusterVersionStatus{
		Desired: configv1.Release{Version: "4.10.26"},
		History: []configv1.UpdateHistory{
			{State: configv1.CompletedUpdate, Version: "4.10.26", StartedTime: at(20 * time.Minute), CompletionTime: &done},
			{State: configv1.CompletedUpdate, Version: "4.10.22", StartedTime: at(100 * time.Hour), CompletionTime: &done},
		},
		Conditions: []configv1.ClusterOperatorStatusCondition{
			{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Message: "Cluster version is 4.10.26"},
			{Type: Failing, Status: configv1.ConditionFalse},
		},
	}}
	cos := []configv1.ClusterOperator{{
		ObjectMeta: metav1.ObjectMeta{Name: "machine-config", Annotations: map[string]string{"include.release.openshift.io/self-managed-high-availability": "true"}},
		Status: configv1.ClusterOperatorStatus{Versions: []configv1.OperandVersion{{Name: "operator", Version: "4.10.26"}},
			Conditions: []configv1.ClusterOperatorStatusCondition{{Type: configv1.OperatorAvailable, Status: "True"}}},
	}}
	mc := func(name, version string) mcfgv1.MachineConfig {
		return mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{mcReleaseVersion: version}}}
	}
	pool := func(name, role string, paused bool) mcfgv1.MachineConfigPool {
		return mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: mcfgv1.MachineConfigPoolSpec{Paused: paused, NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"node-role.kubernetes.io/" + role: ""}}}}
	}
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node := func(name, role, current, desired, state string, extra map[string]string, unschedulable bool) corev1.Node {
		a := map[string]string{mcCurrentConfig: current, mcDesiredConfig: desired, mcState: state}
		for k, v := range extra {
			a[k] = v
		}
		labels := map[string]string{"node-role.kubernetes.io/" + role: ""}
		if role == "infra" {
			labels["node-role.kubernetes.io/worker"] = ""
		}
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: a},
			Spec: corev1.NodeSpec{Unschedulable: unschedulable}, Status: corev1.NodeStatus{Conditions: ready}}
	}
	m := &Machines{
		Pools: []mcfgv1.MachineConfigPool{pool("worker", "worker", false), pool("master", "master", false), pool("infra", "infra", true)},
		MachineConfigs: []mcfgv1.MachineConfig{mc("rendered-master-old", "4.10.22"), mc("rendered-master-new", "4.10.26"),
			mc("rendered-worker-old", "4.10.22"), mc("rendered-worker-new", "4.10.26"), mc("rendered-infra-old", "4.10.22")},
		Nodes: []corev1.Node{
			node("master-0", "master", "rendered-master-new", "rendered-master-new", "Done", nil, false),
			node("master-1", "master", "rendered-master-new", "rendered-master-new", "Done", nil, false),
			node("worker-b", "worker", "rendered-worker-old", "rendered-worker-new", "Working",
				map[string]string{mcDesiredDrain: "drain-rendered-worker-new", mcLastAppliedDrain: "uncordon-rendered-worker-old"}, true),
			node("worker-a", "worker", "rendered-worker-new", "rendered-worker-new", "Done", nil, false),
			node("worker-c", "worker", "rendered-worker-old", "rendered-worker-new", "Degraded",
				map[string]string{mcReason: "failed to drain node: worker-c after 1 hour"}, false),
			node("worker-d", "worker", "rendered-worker-old", "rendered-worker-old", "Done", nil, false),
			node("infra-1", "infra", "rendered-infra-old", "rendered-infra-old", "Done", nil, false),
		},
	}
	var out bytes.Buffer
	if err := UpgradeStatus(&out, cv, cos, m, nil, now, "none"); err != nil {
		t.Fatal(err)
	}
	want := `= Control Plane =
Update to 4.10.26 successfully completed at 2026-11-23T11:58:00Z (duration: 18m)

All control plane nodes successfully updated to 4.10.26

= Worker Upgrade =

WORKER POOL   ASSESSMENT   COMPLETION   STATUS
worker        Degraded     25% (1/4)    3 Available, 1 Progressing, 1 Draining, 1 Degraded
infra         Excluded     0% (0/1)     1 Available, 0 Progressing, 0 Draining, 1 Excluded

Worker Pool Nodes: worker
NAME       ASSESSMENT    PHASE      VERSION   EST    MESSAGE
worker-c   Degraded      Updating   4.10.22   ?      failed to drain node: <node> after 1 hour
worker-b   Progressing   Draining   4.10.22   +10m   
worker-d   Outdated      Pending    4.10.22   ?      
worker-a   Completed     Updated    4.10.26   -      

Worker Pool Nodes: infra
NAME      ASSESSMENT   PHASE    VERSION   EST   MESSAGE
infra-1   Excluded     Paused   4.10.22   -     

= Update Health =
SINCE   LEVEL     IMPACT           MESSAGE
-       Error     Update Stalled   Node worker-c is degraded
-       Warning   Update Stalled   Outdated nodes in a paused pool 'infra' will not be updated
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	// Once every pool is done, the cluster is not updating.
	for i := range m.Nodes {
		if m.Nodes[i].Labels["node-role.kubernetes.io/master"] == "" {
			m.Nodes[i] = node(m.Nodes[i].Name, "worker", "rendered-worker-new", "rendered-worker-new", "Done", nil, false)
		}
	}
	out.Reset()
	if err := UpgradeStatus(&out, cv, cos, m, nil, now, "none"); err != nil || out.String() != "The cluster is not updating.\n" {
		t.Errorf("all updated: %v\n%s", err, out.String())
	}
}
