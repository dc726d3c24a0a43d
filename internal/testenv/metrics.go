package testenv

import (
	"strings"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The node lifecycle controller runs in the test process (inside the
// embedded controller manager) and reports through the process's metrics
// registry: these read what it says of zones and of its own passes.

// ZoneUnhealthy returns how many nodes of a zone the node lifecycle
// controller counted as not Ready in its last pass, and whether it
// reported the zone at all.
func ZoneUnhealthy(zone string) (float64, bool) {
	return zoneGauge("node_collector_unhealthy_nodes_in_zone", zone)
}

// ZoneHealth returns the percentage of Ready nodes of a zone in the node
// lifecycle controller's last pass.
func ZoneHealth(zone string) (float64, bool) {
	return zoneGauge("node_collector_zone_health", zone)
}

// ZoneEvictions counts the nodes of a zone the controller has tainted
// NoExecute since it started (node_collector_evictions_total).
func ZoneEvictions(zone string) float64 {
	v, _ := zoneGauge("node_collector_evictions_total", zone)
	return v
}

// NodeHealthPasses counts the node lifecycle controller's completed passes
// over every node (its monitorNodeHealth runs): waiting for it to grow by
// two is waiting until a whole pass started after a change and ended.
func NodeHealthPasses() uint64 {
	for _, mf := range gather() {
		if mf.GetName() == "node_collector_update_all_nodes_health_duration_seconds" {
			for _, m := range mf.GetMetric() {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// zoneGauge reads a gauge or counter labelled with a zone.
func zoneGauge(name, zone string) (float64, bool) {
	for _, mf := range gather() {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				// The controller's zone key is "<region>:\x00:<zone>".
				if l.GetName() == "zone" && strings.HasSuffix(l.GetValue(), ":\x00:"+zone) {
					if c := m.GetCounter(); c != nil {
						return c.GetValue(), true
					}
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func gather() []*dto.MetricFamily {
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return nil
	}
	return mfs
}
