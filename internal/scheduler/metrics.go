package scheduler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a scheduling attempt, as kube-scheduler labels them.
const (
	resultScheduled     = "scheduled"
	resultUnschedulable = "unschedulable"
	resultError         = "error"
)

// schedulerMetrics are kube-scheduler's metrics for one scheduler, its
// name the profile label.
type schedulerMetrics struct {
	registry *prometheus.Registry
	attempts *prometheus.CounterVec
	duration *prometheus.HistogramVec
	tries    prometheus.Histogram
	profile  string

	preemptionAttempts prometheus.Counter
	preemptionVictims  prometheus.Histogram
}

const pendingHelp = "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated."

var pendingDesc = prometheus.NewDesc("scheduler_pending_pods", pendingHelp, []string{"queue"}, nil)

func newSchedulerMetrics(profile string, q *schedulingQueue) *schedulerMetrics {
	m := &schedulerMetrics{registry: prometheus.NewRegistry(), profile: profile,
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "scheduler", Name: "schedule_attempts_total",
			Help: "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem."},
			[]string{"result", "profile"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "scheduler", Name: "scheduling_attempt_duration_seconds",
			Help: "Scheduling attempt latency in seconds (scheduling algorithm + binding)", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)},
			[]string{"result", "profile"}),
		tries: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "scheduler", Name: "pod_scheduling_attempts",
			Help: "Number of attempts to successfully schedule a pod.", Buckets: prometheus.ExponentialBuckets(1, 2, 5)}),
	}
	m.preemptionAttempts = prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "scheduler", Name: "preemption_attempts_total",
		Help: "Total preemption attempts in the cluster till now"})
	m.preemptionVictims = prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "scheduler", Name: "preemption_victims",
		Help: "Number of selected preemption victims", Buckets: prometheus.ExponentialBuckets(1, 2, 7)})
	m.registry.MustRegister(m.attempts, m.duration, m.tries, m.preemptionAttempts, m.preemptionVictims, &pendingCollector{q: q})
	return m
}

// attempt records one attempt's result and how long it took since start.
func (m *schedulerMetrics) attempt(result string, start time.Time, now time.Time) {
	m.attempts.WithLabelValues(result, m.profile).Inc()
	m.duration.WithLabelValues(result, m.profile).Observe(now.Sub(start).Seconds())
}

// pendingCollector reads the queue's lengths when scraped.
type pendingCollector struct{ q *schedulingQueue }

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pendingDesc }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	c.q.mu.Lock()
	active, backoff, unschedulable, gated := len(c.q.active), len(c.q.backingOff), len(c.q.unschedulable), len(c.q.gated)
	c.q.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(active), "active")
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(backoff), "backoff")
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(unschedulable), "unschedulable")
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(gated), "gated")
}

// Metrics is the scheduler's registry: scheduler_schedule_attempts_total,
// scheduler_scheduling_attempt_duration_seconds,
// scheduler_pod_scheduling_attempts, scheduler_pending_pods,
// scheduler_preemption_attempts_total and scheduler_preemption_victims.
func (s *Scheduler) Metrics() prometheus.Gatherer { return s.metrics.registry }
