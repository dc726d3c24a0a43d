// Package cluster assembles a capstan cluster: the embedded control plane,
// the simulated cloud and kubelets, and the nodes `capstan up` boots with.
// `capstan up`, the test harness and the benchmarks all start clusters
// through it.
package cluster

import (
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	operatorclient "github.com/openshift/client-go/operator/clientset/versioned"

	"context"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/mco"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/waitfor"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/console"
	"github.com/capstan-dev/capstan/internal/controlplane"
	"github.com/capstan-dev/capstan/internal/kubesched"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/resourcemetrics"
	"github.com/capstan-dev/capstan/internal/scheduler"
	"github.com/capstan-dev/capstan/internal/sim"
)

// Options describe a cluster.
type Options struct {
	ControlPlane controlplane.Config
	// ControlPlaneNodes and Workers are the nodes booted at start (and kept
	// at least that many on restart).
	ControlPlaneNodes int
	Workers           int
	MasterSpec        sim.InstanceSpec
	WorkerSpec        sim.InstanceSpec
	Cloud             sim.CloudOptions
	Sim               sim.Options
	// Scheduler configures the default-scheduler capstan runs; nil runs
	// none (pods then wait for an external scheduler).
	Scheduler *scheduler.Config
	// KubeScheduler, when set, runs upstream kube-scheduler as the
	// default-scheduler, with an OpenShift profile, in place of
	// capstan's (Scheduler must then be nil).
	KubeScheduler *KubeSchedulerOptions
	// MachineAPI configures the Machine API controllers; nil runs none.
	MachineAPI *machine.Options
	// Hooks are hook-implementing controllers to run beside the Machine
	// API (capstan up --hooks).
	Hooks []*hooks.Hook
	// Autoscaler configures the cluster autoscaler; nil runs none. It acts
	// once a ClusterAutoscaler exists.
	Autoscaler *autoscaler.Options
	// ResourceMetrics configures the resource metrics API (metrics.k8s.io,
	// what metrics-server serves) over the simulated kubelets' usage; nil
	// serves none.
	ResourceMetrics *resourcemetrics.Options
	// Releases configures the registry, update service and Cluster
	// Version Operator; nil runs none.
	Releases *ReleaseOptions
	// MachineConfig configures the Machine Config Operator's controllers
	// (pools, rendering, the node rollout, the simulated daemons); nil
	// runs none.
	MachineConfig *mco.Options
	// EtcdOperator runs etcd's operator with the Machine API: a member per
	// control-plane machine, the quorum guard hook, a replacement for a
	// deleted control-plane machine.
	EtcdOperator bool
	// MetricsAddress, when set, serves the Prometheus metrics of the
	// embedded components and capstan's own at http://ADDRESS/metrics,
	// and runs the embedded Prometheus over them, its API at
	// http://ADDRESS/api/v1/.
	MetricsAddress string
	// Monitoring configures that Prometheus.
	Monitoring MonitoringOptions
	// ConsoleAddress, when set, serves the web console there, logging in
	// with bearer tokens: plain HTTP on loopback, or HTTPS anywhere with
	// ConsoleTLSCertFile and ConsoleTLSKeyFile.
	ConsoleAddress                        string
	ConsoleTLSCertFile, ConsoleTLSKeyFile string
	// BootFromMachines boots the nodes from Machines and MachineSets, as
	// an OpenShift installer does; otherwise EnsureNodes launches
	// instances master-N and worker-N directly.
	BootFromMachines bool
}

// DefaultOptions is what `capstan up` runs without flags.
func DefaultOptions() Options {
	return Options{
		ControlPlane:      controlplane.DefaultConfig(),
		ControlPlaneNodes: 3,
		Workers:           3,
		MasterSpec: sim.InstanceSpec{
			CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"), Pods: 250, Role: "master",
		},
		WorkerSpec: sim.InstanceSpec{
			CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"), Pods: 250, Role: "worker",
		},
		Scheduler:        &scheduler.Config{Name: scheduler.DefaultSchedulerName},
		MachineAPI:       ptr.To(machine.DefaultOptions()),
		Autoscaler:       ptr.To(autoscaler.DefaultOptions()),
		ResourceMetrics:  ptr.To(resourcemetrics.DefaultOptions()),
		Releases:         ptr.To(DefaultReleaseOptions()),
		MachineConfig:    &mco.Options{Daemon: mco.DefaultDaemonOptions()},
		EtcdOperator:     true,
		BootFromMachines: true,
	}
}

// WithoutMachineAPI turns the Machine API off together with everything
// that acts through it: the autoscaler (it scales MachineSets), etcd's
// operator and the hook controllers (they hold Machines), and booting from
// Machines. The benchmarks that launch instances directly start this way.
func (o *Options) WithoutMachineAPI() {
	o.MachineAPI, o.Autoscaler, o.Hooks = nil, nil, nil
	o.EtcdOperator, o.BootFromMachines = false, false
}

// WithoutControllers turns off every capstan controller: the Machine API
// (and what depends on it), the scheduler, the CVO and its releases, the
// MCO and metrics-server. What is left is the control plane, the
// simulated nodes and monitoring (capstan up --bare).
func (o *Options) WithoutControllers() {
	o.WithoutMachineAPI()
	o.Scheduler, o.Releases, o.MachineConfig, o.ResourceMetrics = nil, nil, nil, nil
}

// Validate refuses options whose components depend on one that is off,
// naming both, before anything starts.
func (o *Options) Validate() error {
	var errs []error
	if o.MetricsAddress != "" {
		if err := ports.LoopbackOnly(o.MetricsAddress); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-address %s: %w: the metrics and the Prometheus API served there have no authentication; "+
				"reach them from elsewhere through the thanos-querier (--thanos-address), which authenticates", o.MetricsAddress, err))
		}
		mo := monitoring.Options{Dir: "-", Retention: o.Monitoring.Retention, ScrapeInterval: o.Monitoring.ScrapeInterval,
			EvaluationInterval: o.Monitoring.EvaluationInterval, MaxAlertFor: o.Monitoring.MaxAlertFor}
		if err := mo.Validate(); err != nil {
			errs = append(errs, err)
		}
		if o.Monitoring.ConfigFile != "" {
			if err := monitoring.CheckConfigFile(o.Monitoring.ConfigFile); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if o.ConsoleAddress != "" {
		if err := console.CheckAddress(o.ConsoleAddress, console.Options{TLSCertFile: o.ConsoleTLSCertFile, TLSKeyFile: o.ConsoleTLSKeyFile}); err != nil {
			errs = append(errs, fmt.Errorf("--console-address %s: %w", o.ConsoleAddress, err))
		}
	}
	if o.KubeScheduler != nil {
		if o.Scheduler != nil {
			errs = append(errs, errors.New("two default-schedulers: capstan's and kube-scheduler; run one"))
		}
		if _, err := kubesched.Config(o.KubeScheduler.Profile, "-", 0, 0, 0); err != nil {
			errs = append(errs, err)
		}
	}
	if o.ControlPlaneNodes < 0 || o.Workers < 0 {
		errs = append(errs, fmt.Errorf("node counts must not be negative (control-plane %d, workers %d)", o.ControlPlaneNodes, o.Workers))
	}
	if o.MachineAPI == nil {
		for _, d := range []struct {
			on   bool
			what string
		}{
			{o.Autoscaler != nil, "the autoscaler (it scales MachineSets)"},
			{o.EtcdOperator, "etcd's operator (it gives control-plane Machines their members)"},
			{o.BootFromMachines, "booting from Machines"},
			{len(o.Hooks) > 0, "hook controllers"},
		} {
			if d.on {
				errs = append(errs, fmt.Errorf("%s needs the Machine API, which is off", d.what))
			}
		}
	}
	return errors.Join(errs...)
}

// SetLeaseDuration defaults the simulated kubelets' lease duration to the
// kubelet's 40s, shortened to the node monitor grace period so that leases
// are renewed (at a quarter of their duration) well within it, and refuses
// a lease the node lifecycle controller would see expire between renewals.
func (o *Options) SetLeaseDuration() error {
	grace := o.ControlPlane.NodeMonitorGracePeriod
	if o.Sim.LeaseDuration == 0 {
		o.Sim.LeaseDuration = min(40*time.Second, grace)
	}
	if o.Sim.LeaseDuration/4 >= grace {
		return fmt.Errorf("--node-lease-duration %s is renewed every %s, not within --node-monitor-grace-period %s", o.Sim.LeaseDuration, o.Sim.LeaseDuration/4, grace)
	}
	return nil
}

// Cluster is a running capstan cluster.
type Cluster struct {
	ControlPlane *controlplane.ControlPlane
	Sim          *sim.Simulator
	Cloud        *sim.APICloud
	Client       kubernetes.Interface
	opts         Options
	// adminToken is the capstan-admin ServiceAccount's token, once made,
	// renewed before it expires.
	adminMu    sync.Mutex
	adminToken string
	console    *console.Server

	// MetricsURL is where the metrics are served, when they are;
	// PrometheusURL where the Prometheus API is (PrometheusURL/api/v1/).
	MetricsURL, PrometheusURL string
	// ThanosQuerierURL is where the Prometheus API is served over TLS to
	// bearer tokens (the thanos-querier Route), when it is.
	ThanosQuerierURL string
	// ConsoleURL is where the web console is served, when it is;
	// ConsoleLoginLink logs the admin in to it, once, within ten
	// minutes.
	ConsoleURL, ConsoleLoginLink string
	// ReleasesURL is where the registry, the update graph and the
	// signatures are served, when they are.
	ReleasesURL string
	// RegistryAuth is a Docker config (auth.json) with the credentials
	// pushes to the registry at ReleasesURL need.
	RegistryAuth string
	// Warnings are problems that did not stop the cluster.
	Warnings []string

	cancel  context.CancelFunc
	simDone chan error
	// informers are shared by the simulator, the scheduler and the
	// autoscaler (see sharedInformers).
	informers informers.SharedInformerFactory
	// machineConfig is the Machine Config Operator, when it runs.
	machineConfig *mco.Controller
	// monitor is the embedded Prometheus and jobs the registries of the
	// in-process components it scrapes, by job, when metrics are on.
	monitor *monitoring.Monitor
	jobs    map[string]*jobRegistry
	// cvo runs the cluster version operator, when releases are on.
	cvo atomic.Pointer[cvoSupervisor]
	// components run beside the simulator until the cluster stops, each
	// started by run; Stop waits for them in reverse order. compMu
	// guards the list: health checks read it while components start.
	compMu     sync.Mutex
	components []running
	// identities are the components' client configurations, by
	// component (see as).
	identMu    sync.Mutex
	identities map[string]*identity
}

// running is one of the cluster's controllers or servers, running in a
// goroutine of its own.
type running struct {
	name string
	done chan error
	// exited is set when the component's function has returned.
	exited *atomic.Bool
}

// run starts a component that runs until ctx ends.
func (c *Cluster) run(ctx context.Context, name string, fn func(context.Context) error) {
	done := make(chan error, 1)
	exited := &atomic.Bool{}
	c.compMu.Lock()
	c.components = append(c.components, running{name: name, done: done, exited: exited})
	c.compMu.Unlock()
	go func() {
		err := fn(ctx)
		exited.Store(true)
		if err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "A component of the cluster stopped", "component", name)
		}
		done <- err
	}()
}

// componentHealth says whether the component started as name runs.
func (c *Cluster) componentHealth(name, what string) func() (bool, string, string) {
	return func() (bool, string, string) {
		c.compMu.Lock()
		defer c.compMu.Unlock()
		for _, comp := range c.components {
			if comp.name == name {
				if comp.exited.Load() {
					return false, "NotRunning", what + " has stopped"
				}
				return true, "", ""
			}
		}
		return false, "NotRunning", what + " is not enabled in this cluster"
	}
}

// Start brings up the control plane and the simulator; it does not boot
// nodes (see EnsureNodes).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &Cluster{opts: opts, cancel: cancel, simDone: make(chan error, 1)}
	cpOpts := opts.ControlPlane
	// The webhooks serve before any controller writes (see
	// BeforeControllers).
	cpOpts.BeforeControllers = func(ctx context.Context, cp *controlplane.ControlPlane) error {
		client, err := kubernetes.NewForConfig(ProtobufConfig(cp.AdminConfig()))
		if err != nil {
			return err
		}
		c.ControlPlane, c.Client = cp, client
		if err := c.startAdmission(ctx, runCtx); err != nil {
			return fmt.Errorf("admission webhooks: %w", err)
		}
		return nil
	}
	cp, err := controlplane.Start(ctx, cpOpts)
	if err != nil {
		cancel()
		return nil, err
	}
	c.ControlPlane = cp
	simID, err := c.as(ctx, "sim")
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("the simulator's identity: %w", err)
	}
	if err := c.sharedInformers(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := ensureFlowSchemas(ctx, c.Client); err != nil {
		c.Stop()
		return nil, err
	}
	cloud := sim.NewAPICloud(simID.kube, opts.Cloud)
	// Its delays are the cloud's: a Machine API run as its own process
	// launches with them too.
	if err := cloud.PublishSettings(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	simOpts := opts.Sim
	simOpts.Cloud = cloud
	simOpts.Informers = c.informers
	// Each kubelet writes as its own node, system:node:NAME.
	nodeCfg := ProtobufConfig(cp.NodeClientConfig())
	nodeCfg.UserAgent = "kubelet"
	nodeCfg.Wrap(sim.NodeTransport(cp.NodeToken))
	if simOpts.NodeClient, err = kubernetes.NewForConfig(nodeCfg); err != nil {
		c.Stop()
		return nil, err
	}
	if opts.EtcdOperator && cp.Etcd() != nil {
		simOpts.Prober = etcdProber(cp.Etcd())
	}
	s := sim.New(simID.kube, simOpts)
	c.ControlPlane, c.Sim, c.Cloud = cp, s, cloud
	go func() { c.simDone <- s.Run(runCtx) }()
	if !s.WaitForSync(ctx) {
		c.Stop()
		return nil, fmt.Errorf("simulator did not start: %w", ctx.Err())
	}
	if opts.MetricsAddress != "" {
		if err := c.startMonitoring(ctx, runCtx); err != nil {
			c.Stop()
			return nil, fmt.Errorf("monitoring: %w", err)
		}
	}
	if opts.MachineAPI != nil {
		if err := c.startMachineAPI(ctx, runCtx); err != nil {
			c.Stop()
			return nil, fmt.Errorf("machine API: %w", err)
		}
	}
	if opts.Scheduler != nil {
		id, err := c.as(ctx, "scheduler")
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		so := *opts.Scheduler
		so.Informers = c.informers
		sched, err := scheduler.New(id.kube, so)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		c.addGatherer(JobScheduler, sched.Metrics())
		c.run(runCtx, "scheduler", sched.Run)
	}
	if opts.KubeScheduler != nil {
		if err := c.startKubeScheduler(ctx, runCtx); err != nil {
			c.Stop()
			return nil, fmt.Errorf("kube-scheduler: %w", err)
		}
	}
	if opts.Autoscaler != nil {
		if err := c.startAutoscaler(ctx, runCtx); err != nil {
			c.Stop()
			return nil, fmt.Errorf("autoscaler: %w", err)
		}
	}
	if opts.MachineConfig != nil {
		if err := c.startMachineConfig(ctx, runCtx); err != nil {
			c.Stop()
			return nil, fmt.Errorf("machine config operator: %w", err)
		}
	}
	if opts.Releases != nil {
		if err := c.startReleases(ctx, runCtx); err != nil {
			c.Stop()
			return nil, fmt.Errorf("releases: %w", err)
		}
	}
	if opts.ResourceMetrics != nil {
		mo := *opts.ResourceMetrics
		mo.Informers = c.informers
		if err := resourcemetrics.Preinstall(ctx, c.ControlPlane.AdminConfig()); err != nil {
			c.Stop()
			return nil, fmt.Errorf("metrics-server: %w", err)
		}
		id, err := c.as(ctx, "metrics-server")
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("metrics-server: %w", err)
		}
		kubeconfig, err := c.componentKubeconfig(ctx, "metrics-server")
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("metrics-server: %w", err)
		}
		c.run(runCtx, "metrics-server", func(ctx context.Context) error {
			return resourcemetrics.Run(ctx, id.cfg, kubeconfig, mo)
		})
	}
	if opts.ConsoleAddress != "" {
		if err := c.startConsole(ctx, runCtx); err != nil {
			c.Stop()
			return nil, fmt.Errorf("console: %w", err)
		}
	}
	return c, nil
}

// sharedInformers makes the informers the simulator, the scheduler and the
// autoscaler share: one cache of every pod and node in the process rather
// than one per component, which at 100,000 pods is gigabytes and the
// decoding of every watch event three times over. They read as their own
// identity (deploy/informers), as kube-controller-manager's shared
// informers read as it; each component still writes as itself. They run
// until the cluster stops; Stop shuts them down after every component.
func (c *Cluster) sharedInformers(ctx context.Context) error {
	id, err := c.as(ctx, "informers")
	if err != nil {
		return fmt.Errorf("the shared informers' identity: %w", err)
	}
	c.informers = informers.NewSharedInformerFactoryWithOptions(id.kube, 0, informers.WithTransform(crcache.TransformStripManagedFields()))
	return nil
}

// startMachineConfig creates the master and worker pools and runs the
// Machine Config Operator's controllers.
func (c *Cluster) startMachineConfig(ctx, runCtx context.Context) error {
	admin, err := mcfgclient.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	// The pools are the installer's.
	if err := mco.EnsurePools(ctx, admin); err != nil {
		return err
	}
	id, err := c.as(ctx, "mco")
	if err != nil {
		return err
	}
	mcfg, err := mcfgclient.NewForConfig(id.cfg)
	if err != nil {
		return err
	}
	o := *c.opts.MachineConfig
	// With a release, the machine OS comes from it, as in OpenShift.
	o.FromRelease = o.FromRelease || c.opts.Releases != nil
	ctrl := mco.New(id.kube, mcfg, o)
	op, err := operatorclient.NewForConfig(id.cfg)
	if err != nil {
		return err
	}
	ctrl.SetOperatorClient(op)
	c.machineConfig = ctrl
	c.addMetrics(JobMachineConfig, ctrl.Metrics())
	c.addMetrics(JobMachineConfigCtrl, ctrl.ControllerMetrics())
	c.run(runCtx, "machine-config", ctrl.Run)
	return nil
}

// ProtobufConfig returns a copy of cfg that speaks protobuf, which costs the
// apiserver and the client far less than JSON. Only built-in types speak
// it: use it for clientsets of core Kubernetes APIs, not custom resources.
func ProtobufConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return c
}

// ProtobufClient is the cluster's admin clientset speaking protobuf.
func ProtobufClient(c *Cluster) kubernetes.Interface { return c.Client }

// RESTConfig returns an admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return c.ControlPlane.AdminConfig() }

// Stop stops the simulator, then the control plane.
func (c *Cluster) Stop() error {
	c.cancel()
	var errs []error
	c.compMu.Lock()
	comps := append([]running(nil), c.components...)
	c.compMu.Unlock()
	for i := len(comps) - 1; i >= 0; i-- {
		comp := comps[i]
		select {
		case err := <-comp.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", comp.name, err))
			}
		case <-time.After(30 * time.Second):
			errs = append(errs, fmt.Errorf("%s did not stop within 30s", comp.name))
		}
	}
	select {
	case err := <-c.simDone:
		if err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	case <-time.After(30 * time.Second):
		errs = append(errs, errors.New("simulator did not stop within 30s"))
	}
	if c.informers != nil {
		c.informers.Shutdown()
	}
	errs = append(errs, c.ControlPlane.Stop())
	return errors.Join(errs...)
}

// BootNodeNames are the names of the nodes EnsureNodes boots.
func (c *Cluster) BootNodeNames() []string {
	var names []string
	for i := 0; i < c.opts.ControlPlaneNodes; i++ {
		names = append(names, fmt.Sprintf("master-%d", i))
	}
	for i := 0; i < c.opts.Workers; i++ {
		names = append(names, fmt.Sprintf("worker-%d", i))
	}
	return names
}

// EnsureNodes boots the cluster's nodes: from Machines and MachineSets
// when BootFromMachines is set (see ensureMachines), else as instances that
// do not exist yet: masters master-0.. and workers worker-0.., spread
// round-robin over the zones. On a restarted cluster it creates nothing.
func (c *Cluster) EnsureNodes(ctx context.Context) error {
	if c.opts.BootFromMachines {
		return c.ensureMachines(ctx)
	}
	existing, err := c.Cloud.ListInstances(ctx)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, inst := range existing {
		have[inst.Name()] = true
	}
	for i, name := range c.BootNodeNames() {
		if have[name] {
			continue
		}
		spec := c.opts.WorkerSpec
		idx := i - c.opts.ControlPlaneNodes
		if i < c.opts.ControlPlaneNodes {
			spec = c.opts.MasterSpec
			idx = i
		}
		spec.Name = name
		if spec.Zone == "" {
			spec.Zone = sim.DefaultZones[idx%len(sim.DefaultZones)]
		}
		if _, err := c.Cloud.CreateInstance(ctx, spec); err != nil {
			var ie *sim.InstanceError
			if errors.As(err, &ie) && ie.Reason == sim.ReasonAlreadyExists {
				continue
			}
			return fmt.Errorf("booting %s: %w", name, err)
		}
	}
	return nil
}

// WaitBootNodesReady waits until the nodes EnsureNodes booted are Ready.
func (c *Cluster) WaitBootNodesReady(ctx context.Context, timeout time.Duration) error {
	if c.opts.BootFromMachines {
		return c.WaitMachinesReady(ctx, c.opts.ControlPlaneNodes+c.opts.Workers, timeout)
	}
	return WaitNodesReady(ctx, c.Client, c.BootNodeNames(), timeout)
}

// WaitNodesReady waits until every named node exists and is Ready, except
// nodes an injected fault keeps from being Ready (a stopped kubelet,
// Ready=False): those are waited for only until they exist.
func WaitNodesReady(ctx context.Context, client kubernetes.Interface, names []string, timeout time.Duration) error {
	inf := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes().Informer()
	err := waitfor.Informed(ctx, inf, 200*time.Millisecond, timeout, func(objs []any) (bool, string) {
		ready := map[string]bool{}
		for _, o := range objs {
			n := o.(*corev1.Node)
			ready[n.Name] = nodes.Ready(n) || sim.FaultKeepsNotReady(n)
		}
		var notReady []string
		for _, n := range names {
			if !ready[n] {
				notReady = append(notReady, n)
			}
		}
		sort.Strings(notReady)
		return len(notReady) == 0, "not Ready: " + strings.Join(notReady, ", ")
	})
	if err != nil {
		return fmt.Errorf("waiting for nodes: %w", err)
	}
	return nil
}

// WaitForServiceAccount waits until the service-account controller made the
// default ServiceAccount of ns; pods cannot be created before.
func WaitForServiceAccount(ctx context.Context, client kubernetes.Interface, ns string, timeout time.Duration) error {
	return waitfor.Poll(ctx, 100*time.Millisecond, timeout, func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, "no default service account in " + ns, nil
		case err != nil:
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}
