package machine

import (
	"context"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	"github.com/prometheus/client_golang/prometheus"
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
	machineSetReplicasDesc = prometheus.NewDesc("mapi_machineset_status_replicas",
		"Information of the mapi managed Machineset's status for replicas", []string{"name", "namespace"}, nil)
	machineSetAvailableDesc = prometheus.NewDesc("mapi_machineset_status_replicas_available",
		"Information of the mapi managed Machineset's status for available replicas", []string{"name", "namespace"}, nil)
	machineSetReadyDesc = prometheus.NewDesc("mapi_machineset_status_replicas_ready",
		"Information of the mapi managed Machineset's status for ready replicas", []string{"name", "namespace"}, nil)
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
	for _, d := range []*prometheus.Desc{machineCreatedDesc, machineItemsDesc, machineSetItemsDesc, machineSetReplicasDesc, machineSetAvailableDesc, machineSetReadyDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var machines machinev1.MachineList
	if err := m.Client.List(ctx, &machines, client.InNamespace(m.Namespace)); err == nil {
		ch <- prometheus.MustNewConstMetric(machineItemsDesc, prometheus.GaugeValue, float64(len(machines.Items)))
		for i := range machines.Items {
			mc := &machines.Items[i]
			providerID, node, phase := "", "", ""
			if mc.Spec.ProviderID != nil {
				providerID = *mc.Spec.ProviderID
			}
			if mc.Status.NodeRef != nil {
				node = mc.Status.NodeRef.Name
			}
			if mc.Status.Phase != nil {
				phase = *mc.Status.Phase
			}
			ch <- prometheus.MustNewConstMetric(machineCreatedDesc, prometheus.GaugeValue, float64(mc.CreationTimestamp.Unix()),
				mc.Name, mc.Namespace, providerID, node, machinev1.GroupVersion.String(), phase)
		}
	}
	var sets machinev1.MachineSetList
	if err := m.Client.List(ctx, &sets, client.InNamespace(m.Namespace)); err == nil {
		ch <- prometheus.MustNewConstMetric(machineSetItemsDesc, prometheus.GaugeValue, float64(len(sets.Items)))
		for i := range sets.Items {
			ms := &sets.Items[i]
			ch <- prometheus.MustNewConstMetric(machineSetReplicasDesc, prometheus.GaugeValue, float64(ms.Status.Replicas), ms.Name, ms.Namespace)
			ch <- prometheus.MustNewConstMetric(machineSetAvailableDesc, prometheus.GaugeValue, float64(ms.Status.AvailableReplicas), ms.Name, ms.Namespace)
			ch <- prometheus.MustNewConstMetric(machineSetReadyDesc, prometheus.GaugeValue, float64(ms.Status.ReadyReplicas), ms.Name, ms.Namespace)
		}
	}
}
