package autoscaler

import (
	"github.com/capstan-dev/capstan/internal/simclock"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the autoscaler's Prometheus metrics, with upstream's names
// (namespace cluster_autoscaler), in a registry of their own.
var (
	Registry = prometheus.NewRegistry()

	mSafeToAutoscale = gauge("cluster_safe_to_autoscale", "Whether or not cluster is healthy enough for autoscaling. 1 if it is, 0 otherwise.")
	mNodesCount      = gaugeVec("nodes_count", "Number of nodes in cluster.", "state")
	mUnschedulable   = gaugeVec("unschedulable_pods_count", "Number of unschedulable pods in the cluster.", "type")
	mNodeGroups      = gaugeVec("node_groups_count", "Number of node groups managed by CA.", "node_group_type")
	mMaxNodes        = gauge("max_nodes_count", "Maximum number of nodes in all node groups")
	mCPUCurrent      = gauge("cluster_cpu_current_cores", "Current number of cores in the cluster, minus deleting nodes.")
	mCPULimits       = gaugeVec("cpu_limits_cores", "Minimum and maximum number of cores in the cluster.", "direction")
	mMemCurrent      = gauge("cluster_memory_current_bytes", "Current number of bytes of memory in the cluster, minus deleting nodes.")
	mMemLimits       = gaugeVec("memory_limits_bytes", "Minimum and maximum number of bytes of memory in cluster.", "direction")
	mLastActivity    = gaugeVec("last_activity", "Last time certain part of CA logic executed.", "activity")
	mUnneeded        = gauge("unneeded_nodes_count", "Number of nodes currently considered unneeded by CA.")
	mUnremovable     = gaugeVec("unremovable_nodes_count", "Number of nodes currently considered unremovable by CA.", "reason")
	mCooldown        = gauge("scale_down_in_cooldown", "Whether or not the scale down is in cooldown. 1 if its, 0 otherwise.")
	mScaledUp        = counter("scaled_up_nodes_total", "Number of nodes added by CA.")
	mScaledDown      = counterVec("scaled_down_nodes_total", "Number of nodes removed by CA.", "reason")
	mFailedScaleUps  = counterVec("failed_scale_ups_total", "Number of times scale-up operation has failed.", "reason")
	mSkippedScale    = counterVec("skipped_scale_events_count", "Count of scaling events that the CA has chosen to skip.", "direction", "reason")
	mErrors          = counterVec("errors_total", "The number of CA loops failed due to an error.", "type")
	mDuration        = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cluster_autoscaler", Name: "function_duration_seconds",
		Help:    "Time taken by various parts of CA main loop.",
		Buckets: prometheus.ExponentialBuckets(0.01, 1.5, 30),
	}, []string{"function"})
)

func init() { Registry.MustRegister(mDuration) }

func gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "cluster_autoscaler", Name: name, Help: help})
	Registry.MustRegister(g)
	return g
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "cluster_autoscaler", Name: name, Help: help}, labels)
	Registry.MustRegister(g)
	return g
}

func counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cluster_autoscaler", Name: name, Help: help})
	Registry.MustRegister(c)
	return c
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cluster_autoscaler", Name: name, Help: help}, labels)
	Registry.MustRegister(c)
	return c
}

// active says whether a ClusterAutoscaler exists, as the last loop saw:
// upstream's autoscaler runs, and exports its metrics, only then.
var active atomic.Bool

// Active reports whether the autoscaler acts on a ClusterAutoscaler; its
// metrics are worth scraping only then (see Registry).
func Active() bool { return active.Load() }

// unregisteredMachines counts the machines of the node groups whose
// instance exists and has no node yet: registered within
// maxNodeProvisionTime of their creation (unregistered), or not
// (longUnregistered), as upstream's cluster state splits them.
func unregisteredMachines(st *clusterState, now time.Time) (unregistered, long int) {
	for _, g := range st.groups {
		for _, m := range g.Machines {
			if !m.DeletionTimestamp.IsZero() || m.Status.NodeRef != nil || m.Spec.ProviderID == nil {
				continue
			}
			if simclock.Elapsed(st.clock, m.CreationTimestamp.Time, now) > st.cfg.MaxNodeProvisionTime {
				long++
			} else {
				unregistered++
			}
		}
	}
	return unregistered, long
}

// observe records how long a part of the loop took, from start.
func observe(function string, start time.Time) {
	mDuration.WithLabelValues(function).Observe(time.Since(start).Seconds())
}

// recordState sets the gauges that describe the cluster as a loop saw it.
func recordState(st *clusterState, cfg *Config, up *ScaleUpPlan, down *ScaleDownPlan, cooldown string, now time.Time) {
	mSafeToAutoscale.Set(1)
	notStarted, upcoming := st.notStartedAndUpcoming()
	counts := countNodes(st.nodes, notStarted, upcoming)
	// Upstream's states; a node being deleted is in none of them.
	unregistered, long := unregisteredMachines(st, now)
	mNodesCount.WithLabelValues("ready").Set(float64(counts.Registered.Ready))
	mNodesCount.WithLabelValues("unready").Set(float64(counts.Registered.Unready.Total))
	mNodesCount.WithLabelValues("notStarted").Set(float64(counts.Registered.NotStarted))
	mNodesCount.WithLabelValues("unregistered").Set(float64(unregistered))
	mNodesCount.WithLabelValues("longUnregistered").Set(float64(long))
	mNodeGroups.WithLabelValues("autoscaled").Set(float64(len(st.groups)))
	// As upstream: the --max-nodes-total the operator passes
	// (resourceLimits.maxNodesTotal), 0 without a limit.
	mMaxNodes.Set(float64(cfg.MaxNodesTotal))
	mUnschedulable.WithLabelValues("unschedulable").Set(float64(len(st.pending)))
	mUnschedulable.WithLabelValues("scheduler_unprocessed").Set(float64(st.unprocessed))
	var u Usage
	for _, n := range st.nodes {
		if !hasToBeDeletedTaint(n) {
			u.Add(n, 1)
		}
	}
	mCPUCurrent.Set(float64(u.Cores))
	mMemCurrent.Set(float64(u.MemoryBytes))
	mCPULimits.WithLabelValues("minimum").Set(float64(st.cfg.Cores.Min))
	mCPULimits.WithLabelValues("maximum").Set(float64(st.cfg.Cores.Max))
	mMemLimits.WithLabelValues("minimum").Set(float64(st.cfg.MemoryGiB.Min * gib))
	mMemLimits.WithLabelValues("maximum").Set(float64(st.cfg.MemoryGiB.Max * gib))
	if cooldown != "" {
		mCooldown.Set(1)
	} else {
		mCooldown.Set(0)
	}
	if up != nil {
		for _, code := range up.Skipped {
			mSkippedScale.WithLabelValues("up", code).Inc()
		}
	}
	if down == nil {
		return
	}
	unremovable := map[string]int{}
	for _, v := range down.Verdicts {
		if v.Code != "" && !v.Remove {
			unremovable[v.Code]++
		}
	}
	mUnremovable.Reset()
	for r, n := range unremovable {
		mUnremovable.WithLabelValues(r).Set(float64(n))
	}
	mUnneeded.Set(float64(down.Unneeded()))
}
