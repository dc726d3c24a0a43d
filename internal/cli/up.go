package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"

	"github.com/alecthomas/units"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/sim"
)

type upOptions struct {
	schedulerPolicy         string
	clusterNodeSelector     string
	projectNodeSelectors    []string
	opts                    cluster.Options
	workerCPU, workerMemory string
	nodeReadyTimeout        time.Duration
	etcdReadyTimeout        time.Duration
	hooks                   []string
	hookFlags               hookFlags
	bare, noAuditLog        bool
	baselineCapabilities    string
	additionalCapabilities  []string
}

func newUpCommand() *cobra.Command {
	o := &upOptions{opts: cluster.DefaultOptions()}
	cp := &o.opts.ControlPlane
	c := &cobra.Command{
		Use:   "up",
		Short: "Start (or resume) a cluster: control plane, simulated machines and nodes",
		Long: `Starts embedded etcd, kube-apiserver and kube-controller-manager with their
data in --data-dir, the simulated cloud and kubelets, and boots the
control-plane and worker nodes. Run again on the same data dir, it resumes
the same cluster. Stop it with Ctrl-C (SIGINT) or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return o.run(c) },
	}
	fs := c.Flags()
	fs.StringVar(&cp.DataDir, "data-dir", defaultDataDir(), "directory holding the cluster's state")
	fs.IntVar(&o.opts.Workers, "nodes", o.opts.Workers, "simulated worker nodes")
	fs.IntVar(&o.opts.ControlPlaneNodes, "control-plane-nodes", o.opts.ControlPlaneNodes, "simulated control-plane nodes")
	fs.IntVar(&cp.Port, "port", cp.Port, "kube-apiserver secure port")
	fs.StringVar(&cp.BindAddress, "bind-address", cp.BindAddress, "address kube-apiserver listens on")
	fs.StringVar(&o.workerCPU, "worker-cpu", "4", "CPU of each worker node")
	fs.StringVar(&o.workerMemory, "worker-memory", "16Gi", "memory of each worker node")
	fs.DurationVar(&o.opts.Cloud.BootDelay, "boot-delay", 0, "how long a new simulated instance takes to boot")
	fs.DurationVar(&o.opts.Cloud.TerminateDelay, "terminate-delay", 0, "how long a deleted simulated instance takes to shut down")
	fs.DurationVar(&cp.NodeMonitorPeriod, "node-monitor-period", cp.NodeMonitorPeriod, "node lifecycle controller: how often node health is checked")
	fs.DurationVar(&cp.NodeMonitorGracePeriod, "node-monitor-grace-period", cp.NodeMonitorGracePeriod, "node lifecycle controller: how long a silent node stays Ready")
	fs.DurationVar(&cp.NodeStartupGracePeriod, "node-startup-grace-period", cp.NodeStartupGracePeriod, "node lifecycle controller: grace for a starting node")
	fs.Float32Var(&cp.NodeEvictionRate, "node-eviction-rate", cp.NodeEvictionRate, "nodes per second whose pods are evicted in a healthy zone")
	fs.Float32Var(&cp.SecondaryNodeEvictionRate, "secondary-node-eviction-rate", cp.SecondaryNodeEvictionRate, "nodes per second evicted in an unhealthy zone of a large cluster")
	fs.Int32Var(&cp.LargeClusterSizeThreshold, "large-cluster-size-threshold", cp.LargeClusterSizeThreshold, "clusters with more nodes than this use the secondary eviction rate in unhealthy zones")
	fs.Float32Var(&cp.UnhealthyZoneThreshold, "unhealthy-zone-threshold", cp.UnhealthyZoneThreshold, "fraction of not-Ready nodes that makes a zone unhealthy")
	fs.Int64Var(&cp.DefaultNotReadyTolerationSeconds, "default-not-ready-toleration-seconds", cp.DefaultNotReadyTolerationSeconds, "tolerationSeconds DefaultTolerationSeconds adds for node.kubernetes.io/not-ready")
	fs.Int64Var(&cp.DefaultUnreachableTolerationSeconds, "default-unreachable-toleration-seconds", cp.DefaultUnreachableTolerationSeconds, "tolerationSeconds DefaultTolerationSeconds adds for node.kubernetes.io/unreachable")
	fs.DurationVar(&o.opts.Sim.LeaseDuration, "node-lease-duration", 0, "simulated kubelets' node lease duration, renewed at a quarter of it (default: 40s, or --node-monitor-grace-period if shorter)")
	fs.IntVar(&cp.LogVerbosity, "v", 0, "log verbosity of DATA_DIR/logs/capstan.log")
	fs.StringVar(&o.schedulerPolicy, "scheduler-policy", "", "Policy file of the default-scheduler (default: the default policy)")
	fs.StringVar(&o.clusterNodeSelector, "cluster-default-node-selector", "", "PodNodeSelector: node selector of namespaces without one (overrides admission/podnodeselector.yaml)")
	fs.StringArrayVar(&o.projectNodeSelectors, "project-node-selector", nil, "PodNodeSelector: NAMESPACE=SELECTOR whitelist of a namespace (repeatable; added to admission/podnodeselector.yaml)")
	fs.DurationVar(&o.opts.Autoscaler.ScanInterval, "autoscaler-scan-interval", o.opts.Autoscaler.ScanInterval, "time between cluster autoscaler loops when no pod becomes unschedulable")
	addAutoscalerTimingFlags(fs, o.opts.Autoscaler, "autoscaler-")
	fs.StringVar(&o.opts.Releases.Address, "release-address", o.opts.Releases.Address, "address of the release registry (/v2/), update service (/api/upgrades_info/v1/graph) and signature store (/signatures/)")
	fs.StringVar(&o.opts.Releases.PromQLURL, "promql-url", "", "Prometheus-compatible query endpoint the cluster version operator evaluates PromQL update risks on")
	fs.BoolVar(&o.opts.EtcdOperator, "etcd-operator", o.opts.EtcdOperator, "run etcd's operator: a member per control-plane machine, guarded by the EtcdQuorumOperator hook (false: the bootstrap member serves alone)")
	fs.StringVar(&o.opts.MetricsAddress, "metrics-address", "127.0.0.1:8085", "address of the metrics endpoint (/metrics: every component's) and of the embedded Prometheus's HTTP API (/api/v1/: query, query_range, series, labels, alerts, rules, targets; what the CVO evaluates update risks on); empty: none")
	mon := &o.opts.Monitoring
	fs.DurationVar(&mon.Retention, "metrics-retention", 15*24*time.Hour, "how long the embedded Prometheus keeps samples (DATA_DIR/prometheus)")
	fs.Var(&bytesFlag{&mon.RetentionSize}, "metrics-retention-size", "the most bytes the embedded Prometheus's blocks may take, the oldest removed first, as Prometheus's storage.tsdb.retention.size (512MB, 10GB: powers of 2); 0: no bound")
	fs.DurationVar(&mon.ScrapeInterval, "scrape-interval", 15*time.Second, "how often the embedded Prometheus scrapes every component")
	fs.DurationVar(&mon.EvaluationInterval, "rule-evaluation-interval", 15*time.Second, "how often the embedded Prometheus evaluates its alerting rules")
	fs.StringVar(&mon.ConfigFile, "prometheus-config", "", "a Prometheus configuration file: its scrape_configs (static_configs, file_sd_configs) are scraped and its rule_files evaluated beside capstan's own")
	fs.StringVar(&o.opts.ConsoleAddress, "console-address", "127.0.0.1:9000", "address of the web console (it logs in with bearer tokens and makes every call as the user): plain HTTP on loopback, HTTPS anywhere with --console-tls-cert-file; empty: none")
	fs.StringVar(&o.opts.ConsoleTLSCertFile, "console-tls-cert-file", "", "PEM certificate the console serves HTTPS (and HSTS) with, which it needs off loopback")
	fs.StringVar(&o.opts.ConsoleTLSKeyFile, "console-tls-key-file", "", "PEM private key of --console-tls-cert-file")
	fs.StringVar(&mon.ThanosAddress, "thanos-address", "127.0.0.1:9091", "address of the Prometheus API over TLS for bearer tokens, published as the Route openshift-monitoring/thanos-querier (where oc adm upgrade status reads alerts); empty: none")
	fs.DurationVar(&mon.MaxAlertFor, "alert-for-max", 0, "shorten every alerting rule's 'for' to at most this (a demo sees alerts fire in seconds); 0: as OpenShift writes them")
	fs.DurationVar(&o.nodeReadyTimeout, "node-ready-timeout", 5*time.Minute, "how long to wait for the nodes to become Ready")
	fs.DurationVar(&o.etcdReadyTimeout, "etcd-ready-timeout", 0, "how long to wait for etcd to tolerate the loss of a master (the bootstrap member gone, every control-plane machine's member voting and healthy) before giving up; 0: as long as it takes, saying what it waits for (the API serves meanwhile: a broken master's Machine can be deleted)")
	daemon := &o.opts.MachineConfig.Daemon
	fs.DurationVar(&daemon.ApplyDuration, "mcd-apply-duration", daemon.ApplyDuration, "how long a simulated machine-config-daemon takes to write a node's new configuration")
	fs.DurationVar(&daemon.RebootDuration, "mcd-reboot-duration", daemon.RebootDuration, "how long a node the machine-config-daemon reboots stays down")
	fs.BoolVar(&o.bare, "bare", false, "run the control plane and the simulated nodes only, none of capstan's controllers (scheduler, Machine API, autoscaler, CVO, MCO, etcd operator, metrics-server): a stand-in for an existing cluster to run them on as their own processes")
	fs.BoolVar(&cp.KubernetesOnly, "kubernetes-only", false, "with --bare: serve Kubernetes' own APIs alone, without the OpenShift CRDs (a plain Kubernetes cluster, for tools that read one)")
	fs.BoolVar(&o.noAuditLog, "no-audit-log", false, "do not write the API server's audit log (DATA_DIR/logs/audit.log: who did what, and what RBAC refused)")
	fs.StringSliceVar(&o.hooks, "hooks", nil, "example hook controllers to run: "+strings.Join(hooks.ExampleNames(), ", "))
	fs.BoolVar(&cp.EtcdPartitionable, "etcd-partitionable", false, "serve each etcd member's peer port through a proxy that DATA_DIR/"+etcd.PartitionFile+" (member names, one a line) cuts from the others: capstan chaos partitions members with it")
	_ = fs.MarkHidden("etcd-partitionable")
	fs.StringVar(&o.baselineCapabilities, "baseline-capability-set", "", "a new cluster's ClusterVersion spec.capabilities.baselineCapabilitySet, as the install configuration's (None, v4.11 ... vCurrent; default: vCurrent); manifests of the release that need a capability left out are not applied")
	fs.StringSliceVar(&o.additionalCapabilities, "additional-enabled-capabilities", nil, "a new cluster's spec.capabilities.additionalEnabledCapabilities (comma-separated, e.g. MachineAPI,Console)")
	o.hookFlags.add(fs)
	return c
}

func (o *upOptions) run(c *cobra.Command) error {
	out := c.OutOrStdout()
	cpu, err := resource.ParseQuantity(o.workerCPU)
	if err != nil {
		return fmt.Errorf("--worker-cpu %q: %w", o.workerCPU, err)
	}
	mem, err := resource.ParseQuantity(o.workerMemory)
	if err != nil {
		return fmt.Errorf("--worker-memory %q: %w", o.workerMemory, err)
	}
	o.opts.WorkerSpec.CPU, o.opts.WorkerSpec.Memory = cpu, mem
	if err := o.opts.WorkerSpec.Validate(); err != nil {
		return fmt.Errorf("worker node spec: %w", err)
	}

	if d := o.opts.MachineConfig.Daemon; d.ApplyDuration < 0 || d.RebootDuration <= 0 {
		return fmt.Errorf("--mcd-apply-duration (%s) must not be negative and --mcd-reboot-duration (%s) must be positive", d.ApplyDuration, d.RebootDuration)
	}
	if c.Flags().Changed("cluster-default-node-selector") {
		o.opts.ControlPlane.Admission.ClusterDefaultNodeSelector = &o.clusterNodeSelector
	}
	for _, p := range o.projectNodeSelectors {
		ns, sel, ok := strings.Cut(p, "=")
		if !ok || ns == "" {
			return fmt.Errorf("--project-node-selector %q is not NAMESPACE=SELECTOR", p)
		}
		if o.opts.ControlPlane.Admission.ProjectNodeSelectors == nil {
			o.opts.ControlPlane.Admission.ProjectNodeSelectors = map[string]string{}
		}
		o.opts.ControlPlane.Admission.ProjectNodeSelectors[ns] = sel
	}
	o.opts.ControlPlane.DisableAuditLog = o.noAuditLog
	if o.opts.ControlPlane.KubernetesOnly && !o.bare {
		return errors.New("--kubernetes-only needs --bare: capstan's controllers work on the OpenShift APIs it leaves out")
	}
	if o.bare {
		if len(o.hooks) > 0 {
			return errors.New("--bare runs no controllers, --hooks neither")
		}
		o.opts.WithoutControllers()
	}
	if len(o.hooks) > 0 {
		if o.opts.Hooks, err = o.hookFlags.build(o.hooks); err != nil {
			return fmt.Errorf("--hooks: %w", err)
		}
	}
	caps, err := cvo.ParseCapabilities(o.baselineCapabilities, o.additionalCapabilities)
	switch {
	case err != nil:
		return fmt.Errorf("--baseline-capability-set or --additional-enabled-capabilities: %w", err)
	case caps != nil && o.opts.Releases == nil:
		return errors.New("--baseline-capability-set and --additional-enabled-capabilities choose what the CVO installs, and --bare runs no CVO")
	case o.opts.Releases != nil:
		o.opts.Releases.CVO.Capabilities = caps
	}
	if err := loadSchedulerPolicy(o.schedulerPolicy, &o.opts); err != nil {
		return err
	}
	if err := o.opts.SetLeaseDuration(); err != nil {
		return err
	}
	o.opts.ControlPlane.RedirectStderr = true
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	fmt.Fprintf(out, "Starting capstan in %s ...\n", o.opts.ControlPlane.DataDir)
	plantedRestore(o.opts.ControlPlane.DataDir)
	cl, err := cluster.Start(ctx, o.opts)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while starting")
		}
		return err
	}
	defer func() {
		fmt.Fprintln(out, "Stopping capstan ...")
		if err := cl.Stop(); err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "capstan: error while stopping: %s\n", oneLine(err))
			return
		}
		fmt.Fprintln(out, "capstan stopped; run `capstan up` again to resume this cluster")
	}()
	for _, w := range append(cl.ControlPlane.Warnings, cl.Warnings...) {
		fmt.Fprintf(c.ErrOrStderr(), "capstan: warning: %s\n", w)
	}
	if err := cl.EnsureNodes(ctx); err != nil {
		return err
	}
	if err := cl.WaitBootNodesReady(ctx, o.nodeReadyTimeout); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := cl.ControlPlane.WaitWritable(ctx, time.Minute); err != nil {
		return err
	}
	// Up means fault-tolerant: a master may fail the moment this is said.
	etcdState, err := cl.WaitEtcdFaultTolerant(ctx, o.etcdReadyTimeout, func(waiting string) {
		fmt.Fprintf(out, "Waiting for etcd to tolerate the loss of a master: %s\n", waiting)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	simNodes, err := cl.Sim.Nodes()
	if err != nil {
		return err
	}
	masters, workers, faulted := 0, 0, 0
	for _, n := range simNodes {
		switch master := nodes.IsControlPlane(n); {
		case !nodes.Ready(n):
			faulted++
		case master:
			masters++
		default:
			workers++
		}
	}
	summary := fmt.Sprintf("capstan is up: Kubernetes %s at %s, %d control-plane and %d worker nodes Ready",
		sim.KubeletVersion, cl.ControlPlane.ServerURL(), masters, workers)
	if faulted > 0 {
		summary += fmt.Sprintf(" (%d not Ready by injected fault)", faulted)
	}
	summary += ", " + etcdSummary(etcdState, time.Since(began))
	fmt.Fprintf(out, "export KUBECONFIG=%s\n", cl.ControlPlane.KubeconfigPath())
	plantedSave(ctx, cl.ControlPlane.DataDir())
	fmt.Fprintf(out, "%s, data in %s\n", summary, cl.ControlPlane.DataDir().Root)
	if !o.noAuditLog {
		fmt.Fprintf(out, "Audit log: %s (each component acts as its own ServiceAccount, with the rights of deploy/COMPONENT/rbac.yaml)\n", cl.ControlPlane.DataDir().AuditLogPath())
	}
	if cl.ReleasesURL != "" {
		fmt.Fprintf(out, "Releases: %s/v2/%s (update graph: %s/api/upgrades_info/v1/graph)\n", cl.ReleasesURL, "ocp/release", cl.ReleasesURL)
		fmt.Fprintf(out, "Registry credentials for pushes: %s\n", cl.RegistryAuth)
	}
	if cl.MetricsURL != "" {
		fmt.Fprintf(out, "Metrics: %s (Prometheus API: %s/api/v1/, alerts: %s/api/v1/alerts)\n", cl.MetricsURL, cl.PrometheusURL, cl.PrometheusURL)
	}
	if cl.ThanosQuerierURL != "" {
		fmt.Fprintf(out, "Alerts for oc adm upgrade status: Route openshift-monitoring/thanos-querier at %s (a CA oc trusts: export SSL_CERT_FILE=%s)\n",
			cl.ThanosQuerierURL, filepath.Join(cl.ControlPlane.DataDir().PKIDir(), "ca.crt"))
	}
	if cl.ConsoleURL != "" {
		fmt.Fprintf(out, "Console: %s (log in as the admin, once, within 10 minutes: %s)\n", cl.ConsoleURL, cl.ConsoleLoginLink)
	}
	<-ctx.Done()
	stop()
	return nil
}

// etcdSummary words etcd's state for the line that says capstan is up.
func etcdSummary(st cluster.EtcdState, took time.Duration) string {
	took = took.Round(time.Second)
	switch {
	case st.Waiting != "" && !st.FaultTolerant:
		return "etcd: " + st.Waiting + ", not fault-tolerant"
	case len(st.Stopped) > 0:
		return fmt.Sprintf("etcd: %d of %d voting members healthy (%s stopped by an injected fault) after %s", st.Healthy, st.Desired, strings.Join(st.Stopped, ", "), took)
	case st.Desired == 1:
		return fmt.Sprintf("etcd: 1 voting member (a control plane of one machine tolerates no loss) after %s", took)
	}
	return fmt.Sprintf("etcd: %d of %d voting members healthy, the bootstrap member gone: fault-tolerant after %s", st.Healthy, st.Desired, took)
}

// bytesFlag is a size in bytes written as Prometheus writes its sizes: a
// number and a unit, B, KB, MB, GB, TB, PB or EB, in powers of 2.
type bytesFlag struct{ v *int64 }

func (f *bytesFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return "0"
	}
	return units.Base2Bytes(*f.v).String()
}

func (f *bytesFlag) Set(s string) error {
	if s == "0" {
		*f.v = 0
		return nil
	}
	b, err := units.ParseBase2Bytes(s)
	if err != nil {
		return fmt.Errorf("%q is not a size such as 512MB or 10GB", s)
	}
	if b < 0 {
		return fmt.Errorf("%q: a size must not be negative", s)
	}
	*f.v = int64(b)
	return nil
}

func (f *bytesFlag) Type() string { return "bytes" }
