package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/kubestate"
	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/sim"
)

// MonitoringOptions configure the embedded Prometheus.
type MonitoringOptions struct {
	// Retention, RetentionSize, ScrapeInterval, EvaluationInterval,
	// ConfigFile and MaxAlertFor are monitoring.Options'.
	Retention          time.Duration
	RetentionSize      int64
	ScrapeInterval     time.Duration
	EvaluationInterval time.Duration
	ConfigFile         string
	MaxAlertFor        time.Duration
	// ThanosAddress serves the API over TLS to bearer tokens, as the
	// thanos-querier Route (what `oc adm upgrade status` reads alerts
	// from); empty serves none.
	ThanosAddress string
}

// Scrape jobs, named as OpenShift's ServiceMonitors name them.
const (
	JobAPIServer         = "apiserver"
	JobCVO               = "cluster-version-operator"
	JobKubeState         = "kube-state-metrics"
	JobScheduler         = "scheduler"
	JobMachineAPI        = "machine-api-operator"
	JobMachineConfig     = "machine-config-daemon"
	JobMachineConfigCtrl = "machine-config-controller"
	JobClusterAutoscaler = "cluster-autoscaler-default"
	JobEtcd              = "etcd"
	JobPrometheus        = "prometheus-k8s"
	// JobSimulator is capstan's own: the simulated kubelets' lease ages.
	JobSimulator = "capstan-simulator"
)

// monitoringDir is where the TSDB lives in the data dir.
const monitoringDir = "prometheus"

// jobRegistry is an in-process component's registry: its collectors are
// added when the component starts, after the monitor does.
type jobRegistry struct {
	mu         sync.Mutex
	collectors []prometheus.Collector
	gatherers  []prometheus.Gatherer
}

func (r *jobRegistry) add(c prometheus.Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
}

func (r *jobRegistry) addGatherer(g prometheus.Gatherer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gatherers = append(r.gatherers, g)
}

// Gather implements prometheus.Gatherer.
func (r *jobRegistry) Gather() ([]*dto.MetricFamily, error) {
	r.mu.Lock()
	reg := prometheus.NewRegistry()
	gs := prometheus.Gatherers{reg}
	for _, c := range r.collectors {
		if err := reg.Register(c); err != nil {
			r.mu.Unlock()
			return nil, err
		}
	}
	gs = append(gs, r.gatherers...)
	r.mu.Unlock()
	return gs.Gather()
}

// addMetrics adds a component's collector to its job, when the cluster
// is monitored.
func (c *Cluster) addMetrics(job string, col prometheus.Collector) {
	if r := c.jobs[job]; r != nil {
		r.add(col)
	}
}

// addGatherer adds a component's registry to its job, when the cluster
// is monitored.
func (c *Cluster) addGatherer(job string, g prometheus.Gatherer) {
	if r := c.jobs[job]; r != nil {
		r.addGatherer(g)
	}
}

// startMonitoring runs the embedded Prometheus over the cluster's
// components and serves its API beside /metrics at MetricsAddress.
func (c *Cluster) startMonitoring(ctx, runCtx context.Context) error {
	mo := c.opts.Monitoring
	c.jobs = map[string]*jobRegistry{}
	for _, job := range []string{JobCVO, JobKubeState, JobScheduler, JobMachineAPI, JobMachineConfig, JobMachineConfigCtrl} {
		c.jobs[job] = &jobRegistry{}
	}
	// kube-state reads the shared informers: each pod event is decoded
	// once in the process, not again for its own cache.
	ks := kubestate.NewShared(c.informers)
	if err := ks.Start(runCtx); err != nil {
		return err
	}
	c.jobs[JobKubeState].addGatherer(ks)
	// A component's endpoint is down once it stopped; before it starts,
	// its collectors already answer (they read the API), so what depends
	// on its series (the CVO's first risks) can wait for a scrape.
	healthy := func(name, what string) func() error {
		return func() error {
			c.compMu.Lock()
			defer c.compMu.Unlock()
			for _, comp := range c.components {
				if comp.name == name && comp.exited.Load() {
					return fmt.Errorf("%s has stopped", what)
				}
			}
			return nil
		}
	}
	targets := []monitoring.Target{
		{Job: JobAPIServer, Gatherer: legacyregistry.DefaultGatherer,
			Labels: map[string]string{"namespace": "default", "service": "kubernetes", "endpoint": "https"}},
		{Job: JobCVO, Gatherer: c.jobs[JobCVO], Healthy: func() error {
			if s := c.cvo.Load(); s != nil && s.stopped.Load() {
				return fmt.Errorf("the cluster version operator is stopped (%s)", CVOStoppedAnnotation)
			}
			return healthy("cluster-version-operator", "the cluster version operator")()
		},
			Labels: map[string]string{"namespace": "openshift-cluster-version", "service": "cluster-version-operator", "endpoint": "metrics"}},
		// Scraped straight from the collector: its series come sorted and
		// consistent, and checking 750,000 of them again at every scrape
		// (as merging registries does) cost 3 % of the CPU at 44,000 pods.
		{Job: JobKubeState, Gatherer: ks,
			Labels: map[string]string{"namespace": "openshift-monitoring", "service": "kube-state-metrics", "endpoint": "https-main"}},
		{Job: JobScheduler, Gatherer: c.jobs[JobScheduler], Healthy: healthy("scheduler", "the scheduler"),
			Labels: map[string]string{"namespace": "openshift-kube-scheduler", "service": "scheduler", "endpoint": "https"}},
		{Job: JobMachineAPI, Gatherer: c.jobs[JobMachineAPI], Healthy: healthy("machine API", "the Machine API"),
			Labels: map[string]string{"namespace": "openshift-machine-api", "service": "machine-api-operator", "endpoint": "https"}},
		{Job: JobMachineConfig, Gatherer: c.jobs[JobMachineConfig], Healthy: healthy("machine-config", "the machine config daemons"),
			Labels: map[string]string{"namespace": "openshift-machine-config-operator", "service": "machine-config-daemon", "endpoint": "metrics"}},
		{Job: JobMachineConfigCtrl, Gatherer: c.jobs[JobMachineConfigCtrl], Healthy: healthy("machine-config", "the machine config controller"),
			Labels: map[string]string{"namespace": "openshift-machine-config-operator", "service": "machine-config-controller", "endpoint": "metrics"}},
		{Job: JobClusterAutoscaler, Gatherer: whileAutoscaling{}, Healthy: healthy("autoscaler", "the cluster autoscaler"),
			Labels: map[string]string{"namespace": "openshift-machine-api", "service": "cluster-autoscaler-default", "endpoint": "metrics"}},
	}
	simMetrics := prometheus.NewRegistry()
	if err := simMetrics.Register(c.Sim.Metrics()); err != nil {
		return err
	}
	targets = append(targets, monitoring.Target{Job: JobSimulator, Gatherer: simMetrics,
		Labels: map[string]string{"namespace": sim.Namespace, "service": "capstan-simulator", "endpoint": "metrics"}})
	if e := c.ControlPlane.Etcd(); e != nil {
		// Every member, as the etcd operator adds and removes them.
		tls := e.TLS()
		targets = append(targets, monitoring.Target{Job: JobEtcd, Discover: e.MetricsURLs,
			TLS:    &monitoring.TLSFiles{CA: tls.MetricsCA, Cert: tls.MetricsClientCert, Key: tls.MetricsClientKey},
			Labels: map[string]string{"namespace": "openshift-etcd", "service": "etcd", "endpoint": "etcd-metrics"}})
	}
	m, err := monitoring.New(monitoring.Options{
		Dir:                c.ControlPlane.DataDir().Path(monitoringDir),
		Retention:          mo.Retention,
		RetentionSize:      mo.RetentionSize,
		ScrapeInterval:     mo.ScrapeInterval,
		EvaluationInterval: mo.EvaluationInterval,
		ConfigFile:         mo.ConfigFile,
		MaxAlertFor:        mo.MaxAlertFor,
	}, append(targets, monitoring.Target{Job: JobPrometheus, Gatherer: monitoringSelf{&c.monitor},
		Labels: map[string]string{"namespace": "openshift-monitoring", "service": "prometheus-k8s", "endpoint": "web"}}))
	if err != nil {
		return err
	}
	c.monitor = m
	srv, err := metrics.Listen(c.opts.MetricsAddress, m.Handler(), legacyregistry.DefaultGatherer, autoscaler.Registry,
		c.jobs[JobCVO], c.jobs[JobKubeState], c.jobs[JobScheduler], c.jobs[JobMachineAPI], c.jobs[JobMachineConfig], c.jobs[JobMachineConfigCtrl], simMetrics)
	if err != nil {
		_ = m.Stop()
		c.monitor = nil
		// Metrics are an extra: a busy port does not keep the cluster down.
		c.Warnings = append(c.Warnings, err.Error())
		return nil
	}
	if err := m.Run(runCtx); err != nil {
		_ = m.Stop()
		c.monitor = nil
		return err
	}
	c.MetricsURL = "http://" + srv.Addr() + "/metrics"
	c.PrometheusURL = "http://" + srv.Addr()
	if mo.ThanosAddress != "" {
		if err := c.startThanosQuerier(ctx, runCtx); err != nil {
			return err
		}
	}
	c.run(runCtx, "metrics", func(ctx context.Context) error {
		err := srv.Run(ctx)
		if serr := m.Stop(); err == nil {
			err = serr
		}
		return err
	})
	return nil
}

// whileAutoscaling gathers the autoscaler's metrics while a
// ClusterAutoscaler exists: upstream runs the autoscaler, and scrapes it,
// only then, and its gauges before a first loop (safe to autoscale 0)
// would raise alerts about nothing.
type whileAutoscaling struct{}

func (whileAutoscaling) Gather() ([]*dto.MetricFamily, error) {
	if !autoscaler.Active() {
		return nil, nil
	}
	return autoscaler.Registry.Gather()
}

// monitoringSelf gathers the monitor's own registry once it exists.
type monitoringSelf struct{ m **monitoring.Monitor }

func (s monitoringSelf) Gather() ([]*dto.MetricFamily, error) {
	if *s.m == nil {
		return nil, nil
	}
	return (*s.m).Registry().Gather()
}

// Monitor is the embedded Prometheus, nil when metrics are off.
func (c *Cluster) Monitor() *monitoring.Monitor { return c.monitor }
