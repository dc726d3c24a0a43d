package machine

import (
	"context"
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
)

// The collector's families as upstream's: a machine without a phase has
// no created series; machine sets under mapi_machine_set_*; the
// MachineHealthCheck gauges from the checks' status; the collector up
// per list.
func TestMachineMetrics(t *testing.T) {
	created := metav1.NewTime(time.Unix(100, 0))
	running := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: Namespace, CreationTimestamp: created},
		Spec:   machinev1.MachineSpec{ProviderID: ptr.To("sim://m1")},
		Status: machinev1.MachineStatus{Phase: ptr.To("Running"), NodeRef: &corev1.ObjectReference{Name: "n1"}}}
	fresh := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m2", Namespace: Namespace, CreationTimestamp: created}}
	set := &machinev1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: Namespace, CreationTimestamp: created},
		Status: machinev1.MachineSetStatus{Replicas: 2, ReadyReplicas: 1, AvailableReplicas: 1}}
	check := &machinev1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: Namespace},
		Status: machinev1.MachineHealthCheckStatus{ExpectedMachines: ptr.To(3), Conditions: []machinev1.Condition{
			{Type: machinev1.RemediationAllowedCondition, Status: corev1.ConditionFalse}}}}
	m := &Metrics{Client: newFakeClient(running, fresh, set, check), Namespace: Namespace}
	want := `
# HELP mapi_machine_created_timestamp_seconds Timestamp of the mapi managed Machine creation time
# TYPE mapi_machine_created_timestamp_seconds gauge
mapi_machine_created_timestamp_seconds{api_version="machine.openshift.io/v1beta1",name="m1",namespace="openshift-machine-api",node="n1",phase="Running",spec_provider_id="sim://m1"} 100
# HELP mapi_machine_items Count of machine objects currently at the apiserver
# TYPE mapi_machine_items gauge
mapi_machine_items 2
# HELP mapi_machine_set_status_replicas Information of the mapi managed Machineset's status for replicas
# TYPE mapi_machine_set_status_replicas gauge
mapi_machine_set_status_replicas{name="s",namespace="openshift-machine-api"} 2
# HELP mapi_machineset_created_timestamp_seconds Timestamp of the mapi managed Machineset creation time
# TYPE mapi_machineset_created_timestamp_seconds gauge
mapi_machineset_created_timestamp_seconds{api_version="machine.openshift.io/v1beta1",name="s",namespace="openshift-machine-api"} 100
# HELP mapi_mao_collector_up Machine API Operator metrics are being collected and reported successfully
# TYPE mapi_mao_collector_up gauge
mapi_mao_collector_up{kind="mapi_machine_items"} 1
mapi_mao_collector_up{kind="mapi_machineset_items"} 1
# HELP mapi_machinehealthcheck_short_circuit Short circuit status for MachineHealthCheck (0=no, 1=yes)
# TYPE mapi_machinehealthcheck_short_circuit gauge
mapi_machinehealthcheck_short_circuit{name="workers",namespace="openshift-machine-api"} 1
# HELP mapi_machinehealthcheck_nodes_covered Number of nodes covered by MachineHealthChecks
# TYPE mapi_machinehealthcheck_nodes_covered gauge
mapi_machinehealthcheck_nodes_covered{name="workers",namespace="openshift-machine-api"} 3
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "mapi_machine_created_timestamp_seconds", "mapi_machine_items", "mapi_machine_set_status_replicas",
		"mapi_machineset_created_timestamp_seconds", "mapi_mao_collector_up", "mapi_machinehealthcheck_short_circuit", "mapi_machinehealthcheck_nodes_covered"); err != nil {
		t.Error(err)
	}
}

// A remediation counts in mapi_machinehealthcheck_remediation_success_total
// of its check; a machine no MachineSet owns is not remediated, nor
// counted.
func TestRemediationsAreCounted(t *testing.T) {
	check := &machinev1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "remediating", Namespace: Namespace}}
	owned := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "owned", Namespace: Namespace,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: machinev1.GroupVersion.String(), Kind: "MachineSet", Name: "s", UID: "u", Controller: ptr.To(true)}}}}
	loose := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "loose", Namespace: Namespace}}
	r := &mhcReconciler{client: newFakeClient(owned, loose), recorder: record.NewFakeRecorder(10)}
	before := testutil.ToFloat64(mhcRemediations.WithLabelValues(check.Name, check.Namespace))
	for _, m := range []*machinev1.Machine{owned, loose} {
		if err := r.remediate(context.Background(), check, healthTarget{machine: m}); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(mhcRemediations.WithLabelValues(check.Name, check.Namespace)) - before; got != 1 {
		t.Errorf("%v remediations counted, want 1", got)
	}
}
