package mco

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// The machine config daemon's metrics, with upstream's names, help and
// types. Upstream's daemon runs on each node and the node label comes
// from its ServiceMonitor's relabeling; capstan's simulated daemons share
// one process, so each series carries node itself.
var (
	pivotErrDesc = prometheus.NewDesc("mcd_pivot_errors_total",
		"Total number of errors encountered during pivot.", []string{"node"}, nil)
	rebootErrDesc = prometheus.NewDesc("mcd_reboots_failed_total",
		"Total number of reboots that failed.", []string{"node"}, nil)
	stateDesc       = prometheus.NewDesc("mcd_state", "state of daemon on specified node", []string{"node", "state", "reason"}, nil)
	updateStateDesc = prometheus.NewDesc("mcd_update_state",
		"completed update config or error", []string{"node", "config", "err"}, nil)
)

// drainErrDesc is the machine config controller's, whose drain
// controller drains the nodes since OpenShift 4.14: 1 for a node whose
// drain failed, until it succeeds, and the series upstream initialises
// (node "initialize") at 0.
var drainErrDesc = prometheus.NewDesc("mcc_drain_err", "logs failed drain", []string{"node"}, nil)

// daemonMetrics are the simulated daemons' error counts. As the real
// daemon's, the pivot failures are a gauge and the reboot failures a
// counter, both from 0 again once an update completes (the real daemon
// starts afresh at the reboot); a drain error stands until a drain
// succeeds.
type daemonMetrics struct {
	mu       sync.Mutex
	drainErr map[string]bool
	pivot    map[string]int
	reboot   map[string]int
	nodes    corelisters.NodeLister
}

func newDaemonMetrics() *daemonMetrics {
	return &daemonMetrics{drainErr: map[string]bool{}, pivot: map[string]int{}, reboot: map[string]int{}}
}

func (m *daemonMetrics) drainFailed(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drainErr[node] = true
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
	for _, d := range []*prometheus.Desc{pivotErrDesc, rebootErrDesc, stateDesc, updateStateDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *daemonMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
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
		ch <- prometheus.MustNewConstMetric(rebootErrDesc, prometheus.CounterValue, float64(reboot[n.Name]), n.Name)
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

// ControllerMetrics are the machine config controller's (mcc_*).
func (c *Controller) ControllerMetrics() prometheus.Collector { return controllerMetrics{c.metrics} }

// controllerMetrics collects mcc_drain_err from the daemons' drains.
type controllerMetrics struct{ m *daemonMetrics }

// Describe implements prometheus.Collector.
func (c controllerMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- drainErrDesc }

// Collect implements prometheus.Collector.
func (c controllerMetrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(drainErrDesc, prometheus.GaugeValue, 0, "initialize")
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for node := range c.m.drainErr {
		ch <- prometheus.MustNewConstMetric(drainErrDesc, prometheus.GaugeValue, 1, node)
	}
}
