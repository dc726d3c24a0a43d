package mco

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// The machine config daemon's metrics, with upstream's names and help.
// Upstream's daemon runs on each node and the node label comes from its
// ServiceMonitor's relabeling; capstan's simulated daemons share one
// process, so each series carries node itself.
var (
	drainErrDesc = prometheus.NewDesc("mcd_drain_err", "errors from failed drain", []string{"node", "err"}, nil)
	pivotErrDesc = prometheus.NewDesc("mcd_pivot_errors_total",
		"Total number of errors encountered during pivot.", []string{"node"}, nil)
	rebootErrDesc = prometheus.NewDesc("mcd_reboots_failed_total",
		"Total number of reboots that failed.", []string{"node"}, nil)
	stateDesc       = prometheus.NewDesc("mcd_state", "state of daemon on specified node", []string{"node", "state", "reason"}, nil)
	updateStateDesc = prometheus.NewDesc("mcd_update_state",
		"completed update config or error", []string{"node", "config", "err"}, nil)
)

// daemonMetrics are the simulated daemons' error counts. Like the real
// daemon's, the pivot and reboot failures are gauges, reset once an
// update completes; a drain error stands until a drain succeeds.
type daemonMetrics struct {
	mu       sync.Mutex
	drainErr map[string]string
	pivot    map[string]int
	reboot   map[string]int
	nodes    corelisters.NodeLister
}

func newDaemonMetrics() *daemonMetrics {
	return &daemonMetrics{drainErr: map[string]string{}, pivot: map[string]int{}, reboot: map[string]int{}}
}

func (m *daemonMetrics) drainFailed(node, err string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drainErr[node] = err
}

func (m *daemonMetrics) drained(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.drainErr, node)
}

func (m *daemonMetrics) stepFailed(node, step string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch step {
	case FailAtPivot:
		m.pivot[node]++
	case FailAtReboot:
		m.reboot[node]++
	}
}

func (m *daemonMetrics) updated(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pivot[node], m.reboot[node] = 0, 0
}

// Describe implements prometheus.Collector.
func (m *daemonMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{drainErrDesc, pivotErrDesc, rebootErrDesc, stateDesc, updateStateDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *daemonMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	for node, err := range m.drainErr {
		ch <- prometheus.MustNewConstMetric(drainErrDesc, prometheus.GaugeValue, 1, node, err)
	}
	nodesLister := m.nodes
	pivot, reboot := map[string]int{}, map[string]int{}
	for n, v := range m.pivot {
		pivot[n] = v
	}
	for n, v := range m.reboot {
		reboot[n] = v
	}
	m.mu.Unlock()
	if nodesLister == nil {
		return
	}
	nodes, _ := nodesLister.List(labels.Everything())
	for _, n := range nodes {
		a := n.Annotations
		if a[StateAnnotation] == "" {
			continue
		}
		ch <- prometheus.MustNewConstMetric(pivotErrDesc, prometheus.GaugeValue, float64(pivot[n.Name]), n.Name)
		ch <- prometheus.MustNewConstMetric(rebootErrDesc, prometheus.GaugeValue, float64(reboot[n.Name]), n.Name)
		ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, 1, n.Name, a[StateAnnotation], a[ReasonAnnotation])
		errText := ""
		if a[StateAnnotation] == StateDegraded || a[StateAnnotation] == StateUnreconcilable {
			errText = a[ReasonAnnotation]
		}
		ch <- prometheus.MustNewConstMetric(updateStateDesc, prometheus.GaugeValue, 1, n.Name, a[CurrentConfigAnnotation], errText)
	}
}

// Metrics are the simulated daemons' metrics (mcd_*), to be scraped.
func (c *Controller) Metrics() prometheus.Collector { return c.metrics }
