package machine

import (
	"context"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Machine API's metrics, as the machine-api-operator exports them.
var (
	machineCreatedDesc = prometheus.NewDesc("mapi_machine_created_timestamp_seconds",
		"Timestamp of the mapi managed Machine creation time",
		[]string{"name", "namespace", "spec_provider_id", "node", "api_version", "phase"}, nil)
	machineItemsDesc = prometheus.NewDesc("mapi_machine_items",
		"Count of machine objects currently at the apiserver", nil, nil)
	machineSetItemsDesc = prometheus.NewDesc("mapi_machineset_items",
		"Count of machinesets at the apiserver", nil, nil)
	machineSetCreatedDesc = prometheus.NewDesc("mapi_machineset_created_timestamp_seconds",
		"Timestamp of the mapi managed Machineset creation time", []string{"name", "namespace", "api_version"}, nil)
	machineSetReplicasDesc = prometheus.NewDesc("mapi_machine_set_status_replicas",
		"Information of the mapi managed Machineset's status for replicas", []string{"name", "namespace"}, nil)
	machineSetAvailableDesc = prometheus.NewDesc("mapi_machine_set_status_replicas_available",
		"Information of the mapi managed Machineset's status for available replicas", []string{"name", "namespace"}, nil)
	machineSetReadyDesc = prometheus.NewDesc("mapi_machine_set_status_replicas_ready",
		"Information of the mapi managed Machineset's status for ready replicas", []string{"name", "namespace"}, nil)
	collectorUpDesc = prometheus.NewDesc("mapi_mao_collector_up",
		"Machine API Operator metrics are being collected and reported successfully", []string{"kind"}, nil)
	mhcShortCircuitDesc = prometheus.NewDesc("mapi_machinehealthcheck_short_circuit",
		"Short circuit status for MachineHealthCheck (0=no, 1=yes)", []string{"name", "namespace"}, nil)
	mhcNodesCoveredDesc = prometheus.NewDesc("mapi_machinehealthcheck_nodes_covered",
		"Number of nodes covered by MachineHealthChecks", []string{"name", "namespace"}, nil)
	// mhcRemediations counts, as the MachineHealthCheck controller does,
	// the machines it remediated since the process started.
	mhcRemediations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mapi_machinehealthcheck_remediation_success_total",
		Help: "Number of successful remediations performed by MachineHealthChecks"}, []string{"name", "namespace"})
)

// Metrics collects the Machine API's metrics from Machines and
// MachineSets, read when scraped (from a cache, as the manager's client
// reads).
type Metrics struct {
	Client    client.Reader
	Namespace string
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{machineCreatedDesc, machineItemsDesc, machineSetItemsDesc, machineSetCreatedDesc, machineSetReplicasDesc,
		machineSetAvailableDesc, machineSetReadyDesc, collectorUpDesc, mhcShortCircuitDesc, mhcNodesCoveredDesc} {
		ch <- d
	}
	mhcRemediations.Describe(ch)
}

// Collect implements prometheus.Collector. As upstream's collector, a
// list that fails sets mapi_mao_collector_up{kind} to 0 and leaves its
// families out; a machine without a phase (no machine controller has
// seen it) has no mapi_machine_created_timestamp_seconds.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	mhcRemediations.Collect(ch)
	up := func(kind string, err error) bool {
		v := 1.0
		if err != nil {
			v = 0
		}
		gauge(collectorUpDesc, v, kind)
		return err == nil
	}
	apiVersion := machinev1.GroupVersion.String()
	var machines machinev1.MachineList
	if up("mapi_machine_items", m.Client.List(ctx, &machines, client.InNamespace(m.Namespace))) {
		for i := range machines.Items {
			mc := &machines.Items[i]
			phase := ptr.Deref(mc.Status.Phase, "")
			if phase == "" {
				continue
			}
			node := ""
			if mc.Status.NodeRef != nil {
				node = mc.Status.NodeRef.Name
			}
			gauge(machineCreatedDesc, float64(mc.CreationTimestamp.Unix()), mc.Name, mc.Namespace, ptr.Deref(mc.Spec.ProviderID, ""), node, apiVersion, phase)
		}
		gauge(machineItemsDesc, float64(len(machines.Items)))
	}
	var sets machinev1.MachineSetList
	if up("mapi_machineset_items", m.Client.List(ctx, &sets, client.InNamespace(m.Namespace))) {
		gauge(machineSetItemsDesc, float64(len(sets.Items)))
		for i := range sets.Items {
			ms := &sets.Items[i]
			gauge(machineSetCreatedDesc, float64(ms.CreationTimestamp.Unix()), ms.Name, ms.Namespace, apiVersion)
			gauge(machineSetAvailableDesc, float64(ms.Status.AvailableReplicas), ms.Name, ms.Namespace)
			gauge(machineSetReadyDesc, float64(ms.Status.ReadyReplicas), ms.Name, ms.Namespace)
			gauge(machineSetReplicasDesc, float64(ms.Status.Replicas), ms.Name, ms.Namespace)
		}
	}
	// The MachineHealthCheck controller's gauges, from the checks'
	// status: short-circuited while remediation is not allowed.
	var checks machinev1.MachineHealthCheckList
	if err := m.Client.List(ctx, &checks, client.InNamespace(m.Namespace)); err != nil {
		ch <- prometheus.NewInvalidMetric(mhcShortCircuitDesc, err)
		return
	}
	for i := range checks.Items {
		c := &checks.Items[i]
		short := 0.0
		for _, cond := range c.Status.Conditions {
			if cond.Type == machinev1.RemediationAllowedCondition && cond.Status == corev1.ConditionFalse {
				short = 1
			}
		}
		gauge(mhcShortCircuitDesc, short, c.Name, c.Namespace)
		gauge(mhcNodesCoveredDesc, float64(ptr.Deref(c.Status.ExpectedMachines, 0)), c.Name, c.Namespace)
	}
}
