package simulate

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/updateservice"
)

// updateSnapshot is a cluster at 4.16.3 in stable-4.17 offered 4.16.5
// and, conditionally, 4.17.1 (one risk inline, one by name), whose
// ingress operator holds minor updates, with a ready master unless
// masterReady is false.
func updateSnapshot(t *testing.T, masterReady bool) *Snapshot {
	t.Helper()
	cv := &configv1.ClusterVersion{
		TypeMeta:   metav1.TypeMeta{APIVersion: "config.openshift.io/v1", Kind: "ClusterVersion"},
		ObjectMeta: metav1.ObjectMeta{Name: "version"},
		Spec:       configv1.ClusterVersionSpec{Channel: "stable-4.17", ClusterID: "c0ffee00-0000-4000-8000-000000000000"},
		Status: configv1.ClusterVersionStatus{
			Desired:          configv1.Release{Version: "4.16.3"},
			AvailableUpdates: []configv1.Release{{Version: "4.16.5", Image: "quay.io/openshift-release-dev/ocp-release@sha256:05"}},
			ConditionalUpdates: []configv1.ConditionalUpdate{{
				Release: configv1.Release{Version: "4.17.1", Image: "quay.io/openshift-release-dev/ocp-release@sha256:71"},
				Risks: []configv1.ConditionalUpdateRisk{{Name: "AzureDiskDetach", Message: "Disks may not detach", URL: "https://issues.redhat.com/browse/OCPBUGS-1",
					MatchingRules: []configv1.ClusterCondition{{Type: "PromQL", PromQL: &configv1.PromQLClusterCondition{PromQL: "cluster_infrastructure_provider{type=\"Azure\"}"}}}}},
				RiskNames: []string{"AzureDiskDetach", "OldKernel"},
				Conditions: []metav1.Condition{{Type: "Recommended", Status: metav1.ConditionFalse, Reason: "MultipleReasons",
					Message: "Disks may not detach\n\nOld kernels panic"}},
			}},
			ConditionalUpdateRisks: []configv1.ConditionalUpdateRisk{{Name: "OldKernel", Message: "Old kernels panic", URL: "https://issues.redhat.com/browse/OCPBUGS-2",
				MatchingRules: []configv1.ClusterCondition{{Type: "Always"}}}},
			Conditions: []configv1.ClusterOperatorStatusCondition{{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse,
				Reason: "AdminAckRequired", Message: "Kubernetes 1.30 removes APIs"}},
		},
	}
	ingress := &configv1.ClusterOperator{
		TypeMeta:   metav1.TypeMeta{APIVersion: "config.openshift.io/v1", Kind: "ClusterOperator"},
		ObjectMeta: metav1.ObjectMeta{Name: "ingress"},
		Status: configv1.ClusterOperatorStatus{Conditions: []configv1.ClusterOperatorStatusCondition{{Type: configv1.OperatorUpgradeable,
			Status: configv1.ConditionFalse, Reason: "AdminAckRequired", Message: "Kubernetes 1.30 removes APIs"}}},
	}
	status := corev1.ConditionTrue
	if !masterReady {
		status = corev1.ConditionFalse
	}
	master := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "master-0", Labels: map[string]string{masterLabel: ""}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
	objs := []unstructured.Unstructured{*toUnstructured(t, cv), *toUnstructured(t, ingress), *toUnstructured(t, master),
		object("config.openshift.io/v1", "ClusterOperator", "", "version"), object("config.openshift.io/v1", "ClusterOperator", "", "storage")}
	snap, _, err := SnapshotOf(objs, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestAnUpdateIsReadAgainstTheSnapshotsGraph(t *testing.T) {
	snap := updateSnapshot(t, true)
	p, err := planUpdate(snap, "4.16.5")
	if err != nil {
		t.Fatal(err)
	}
	if p.From != "4.16.3" || p.To != "4.16.5" || p.Channel != "stable-4.17" || p.Conditional || len(p.Risks) != 0 || p.minor() {
		t.Errorf("the patch update %+v", p)
	}
	// The CVO's own ClusterOperator is carried; storage is not.
	if !slices.Equal(p.Others, []string{"storage"}) || p.Held["ingress"] != "AdminAckRequired: Kubernetes 1.30 removes APIs" {
		t.Errorf("operators not carried %v, held %v", p.Others, p.Held)
	}
	p, err = planUpdate(snap, "4.17.1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range p.Risks {
		names = append(names, r.Name)
	}
	if !p.Conditional || !p.minor() || !slices.Equal(names, []string{"AzureDiskDetach", "OldKernel"}) || p.Recommended == nil || p.Recommended.Reason != "MultipleReasons" {
		t.Errorf("the conditional update %+v (risks %v)", p, names)
	}
	for _, tc := range []struct{ version, want string }{
		{"4.18.0", `4.18.0 is not an update the snapshot's graph offers from 4.16.3 in channel "stable-4.17" (it offers: 4.16.5, 4.17.1 (conditional))`},
		{"4.16.3", "the cluster already runs 4.16.3"},
	} {
		if _, err := planUpdate(snap, tc.version); err == nil || err.Error() != tc.want {
			t.Errorf("update to %s: %v, want %q", tc.version, err, tc.want)
		}
	}
	plain, _, err := SnapshotOf([]unstructured.Unstructured{object("v1", "Node", "", "n")}, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseChange("update=4.16.5")
	if err != nil || c.Version != "4.16.5" {
		t.Fatalf("update=4.16.5: %+v %v", c, err)
	}
	if err := checkAgainst(plain, []Change{c}); err == nil || !strings.Contains(err.Error(), "the snapshot has no ClusterVersion") {
		t.Errorf("an update of a plain Kubernetes snapshot: %v", err)
	}
	if err := checkAgainst(snap, []Change{c}); err != nil {
		t.Errorf("an update the graph offers: %v", err)
	}
	if err := checkAgainst(updateSnapshot(t, false), []Change{c}); err == nil || !strings.Contains(err.Error(), "no Ready node labelled node-role.kubernetes.io/master") {
		t.Errorf("an update without a ready master: %v", err)
	}
	if _, err := ParseChange("update=4.16"); err == nil || !strings.Contains(err.Error(), `"4.16" is not a release version`) {
		t.Errorf("update=4.16: %v", err)
	}
	if err := CheckOrder([]Change{c, c}); err == nil || !strings.Contains(err.Error(), "2 update changes") {
		t.Errorf("two updates: %v", err)
	}
}

// The graph the simulation's update service serves is the snapshot's
// edge: a channel with both releases and, for a conditional update, a
// blocked edge per risk with its rules, which the update service loads.
func TestTheSimulatedGraphIsTheSnapshotsEdgeWithItsRisks(t *testing.T) {
	p, err := planUpdate(updateSnapshot(t, true), "4.17.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.writeGraph(dir); err != nil {
		t.Fatal(err)
	}
	g, err := updateservice.LoadGraphData(dir)
	if err != nil {
		t.Fatal(err)
	}
	if vs := g.Channels["stable-4.17"]; len(vs) != 2 || vs[0].String() != "4.16.3" || vs[1].String() != "4.17.1" {
		t.Errorf("channel stable-4.17: %v", g.Channels)
	}
	if len(g.Blocked) != 2 {
		t.Fatalf("blocked edges %+v", g.Blocked)
	}
	for _, b := range g.Blocked {
		if b.To.String() != "4.17.1" || !b.From.MatchString("4.16.3") || b.From.MatchString("4.16.30") || b.From.MatchString("4x16x3") || len(b.MatchingRules) != 1 {
			t.Errorf("blocked edge %+v", b)
		}
	}
	if r := g.Blocked[0]; r.Name != "AzureDiskDetach" || r.MatchingRules[0].PromQL == nil || r.URL != "https://issues.redhat.com/browse/OCPBUGS-1" {
		t.Errorf("risk AzureDiskDetach %+v", r)
	}
	if r := g.Blocked[1]; r.Name != "OldKernel" || r.MatchingRules[0].Type != "Always" {
		t.Errorf("risk OldKernel %+v", r)
	}
}

func TestTheSimulatedCVORunsOnTheSimulationsClock(t *testing.T) {
	p, err := planUpdate(updateSnapshot(t, true), "4.16.5")
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	o := releaseOptions(p, 20, hold)
	if o.InstallVersion != "4.16.3" || o.Channel != "stable-4.17" || !slices.Equal(o.Versions, []string{"4.16.3", "4.16.5"}) || o.Hold == nil || o.CVO.Timeline == nil {
		t.Errorf("release options %+v", o)
	}
	c := o.CVO
	if c.ReconcileInterval != 9*time.Second || c.SlowOperatorAfter != 90*time.Second || c.SlowMachineConfigAfter != 270*time.Second || c.OperatorPollInterval != 100*time.Millisecond {
		t.Errorf("CVO timings: reconcile %s, slow %s and %s, poll %s", c.ReconcileInterval, c.SlowOperatorAfter, c.SlowMachineConfigAfter, c.OperatorPollInterval)
	}
	if d := c.MinimumUpdateCheckInterval(); d < 6*time.Second || d >= 12*time.Second {
		t.Errorf("update checks every %s, want [2m, 4m) / 20", d)
	}
}

func TestTheTableTellsAnUpdatesCourse(t *testing.T) {
	r := &Report{Speed: 20, Settled: true, Changes: []AppliedChange{{Change: "update=4.17.1"}},
		Update: &UpdateRun{From: "4.16.3", To: "4.17.1", Channel: "stable-4.17", Conditional: true, State: "Completed",
			Progress: "Progressing=False Cluster version is 4.17.1; Failing=False", Accepted: ptr.To(Duration(30 * time.Second)),
			Completed: ptr.To(Duration(40 * time.Minute)), Took: ptr.To(Duration(39*time.Minute + 30*time.Second)),
			Recommended: "False: OldKernel: Old kernels panic", NotUpgradeable: "AdminAckRequired: Kubernetes 1.30 removes APIs",
			Risks: []UpdateRisk{{Name: "OldKernel", Message: "Old kernels panic", URL: "https://issues.redhat.com/browse/OCPBUGS-2", Rules: []string{"Always"}}},
			RunLevels: []RunLevelTime{{RunLevel: "00", Started: Duration(30 * time.Second), Finished: Duration(31 * time.Second)},
				{RunLevel: "80", Started: Duration(2 * time.Minute), Finished: Duration(40 * time.Minute), Operator: "machine-config", Waited: ptr.To(Duration(38 * time.Minute))}},
			LongestOperator: "machine-config", LongestOperatorWait: ptr.To(Duration(38 * time.Minute)), NotSimulated: []string{"storage"}}}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Conditional update from 4.16.3 to 4.17.1 (channel stable-4.17): accepted at 30s, completed after 39m30s. Progressing=False Cluster version is 4.17.1; Failing=False.",
		"Waited longest on ClusterOperator machine-config: 38m0s.",
		"00         30s      31s       1s     -",
		"80         2m0s     40m0s     38m0s  machine-config (38m0s)",
		"The cluster evaluated the update as Recommended=False: OldKernel: Old kernels panic",
		"Risk OldKernel: Old kernels panic (https://issues.redhat.com/browse/OCPBUGS-2; Always)",
		"Upgradeable=False in the snapshot, which holds a minor update: AdminAckRequired: Kubernetes 1.30 removes APIs",
		"ClusterOperators of the snapshot the simulated release does not carry: storage",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
}
