package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	configclient "github.com/openshift/client-go/config/clientset/versioned"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	operatorclient "github.com/openshift/client-go/operator/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1 "github.com/openshift/api/config/v1"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/leader"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/release"
)

// CVOLease and MCOLease are where the operators hold their leases, as in
// OpenShift.
const (
	CVOLease = "version"
	MCOLease = "machine-config-controller"
)

func newCVOCommand() *cobra.Command {
	cf := &clientFlags{}
	rf := &runFlags{}
	opts := cvo.DefaultOptions()
	var releaseImage, registryConfig string
	c := &cobra.Command{
		Use:   "cvo",
		Short: "Run the Cluster Version Operator against a cluster",
		Long: `Runs the Cluster Version Operator: it keeps the ClusterVersion's available and
conditional updates from the update service, verifies and applies the
release the ClusterVersion desires, run level by run level, and waits on
the ClusterOperators. capstan up runs it itself; run it standalone against
another cluster (the config.openshift.io CRDs installed), with
--leader-elect when several replicas run.

A cluster with no ClusterVersion yet needs --release-image: the release it
runs, which the operator's new ClusterVersion then names.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			client, cfg, err := cf.client()
			if err != nil {
				return err
			}
			config, err := configclient.NewForConfig(cfg)
			if err != nil {
				return err
			}
			_, err = config.ConfigV1().ClusterVersions().Get(c.Context(), cvo.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) && releaseImage == "":
				return fmt.Errorf("the cluster has no ClusterVersion %q: say which release it runs with --release-image", cvo.Name)
			case err != nil && !apierrors.IsNotFound(err):
				return fmt.Errorf("reading the ClusterVersion: %w", err)
			}
			if releaseImage != "" {
				ctx, err := registryContext(c.Context(), registryConfig)
				if err != nil {
					return err
				}
				ref, err := release.ParseRef(releaseImage)
				if err != nil {
					return fmt.Errorf("--release-image: %w", err)
				}
				img, err := release.Read(ctx, ref)
				if err != nil {
					return fmt.Errorf("--release-image: %w", err)
				}
				opts.Current = configv1.Release{Version: img.Payload.Metadata.Version, Image: img.Ref.ByDigest(img.Digest.String()).String()}
			}
			opts.Kube = client
			if opts.Applier, err = cvo.NewApplier(cfg); err != nil {
				return err
			}
			var op atomic.Pointer[cvo.Operator]
			metrics, err := cvo.NewMetrics(c.Context(), config, op.Load, opts.Upstream)
			if err != nil {
				return err
			}
			lease := leader.Config{Namespace: cvo.Namespace, Name: CVOLease}
			return rf.run(c, "cvo", client, lease, []prometheus.Gatherer{gathererOf(metrics)}, func(ctx context.Context) error {
				o := cvo.New(config, opts)
				op.Store(o)
				return o.Run(ctx)
			})
		},
	}
	cf.addComponent(c.Flags())
	rf.add(c.Flags(), cvo.Namespace+"/"+CVOLease, ":9099")
	fs := c.Flags()
	fs.StringVar(&releaseImage, "release-image", "", "the release the cluster runs, when it has no ClusterVersion yet")
	fs.StringVar(&opts.Upstream, "update-service", "", "the update service's graph URL, when the ClusterVersion's spec.upstream is empty")
	fs.StringVar(&opts.Channel, "channel", "", "spec.channel of the ClusterVersion the operator creates")
	fs.StringVar(&opts.PromQLURL, "promql-url", "", "base URL of the Prometheus API that evaluates conditional updates' PromQL risks (the client asks URL/api/v1/query), such as the thanos-querier's")
	fs.StringVar(&opts.PromQLHTTP.TLSConfig.CAFile, "promql-ca-file", "", "CA bundle that signs --promql-url's certificate (default: the system's roots)")
	fs.StringVar(&opts.PromQLHTTP.BearerTokenFile, "promql-bearer-token-file", "", "file whose bearer token --promql-url is asked with, read at each query (a ServiceAccount token the thanos-querier accepts)")
	fs.StringVarP(&registryConfig, "registry-config", "a", "", "Docker config (auth.json) with credentials to read releases")
	return c
}

func newMCOCommand() *cobra.Command {
	cf := &clientFlags{}
	rf := &runFlags{}
	opts := mco.Options{Daemon: mco.DefaultDaemonOptions(), FromRelease: true}
	c := &cobra.Command{
		Use:   "mco",
		Short: "Run the Machine Config Operator's controllers against a cluster",
		Long: `Runs the Machine Config Operator's controllers: they render each
MachineConfigPool's configuration from its MachineConfigs and roll it out
to the pool's nodes, at most maxUnavailable at a time, with the simulated
machine-config daemon on each node (cordon, drain, apply, reboot). capstan
up runs them itself; run them standalone against another cluster (the
machineconfiguration.openshift.io CRDs installed, its pools made), with
--leader-elect when several replicas run.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if !opts.FromRelease && opts.OSImageURL == "" {
				return errors.New("--os-image-url is required with --from-release=false")
			}
			client, cfg, err := cf.client()
			if err != nil {
				return err
			}
			mcfg, err := mcfgclient.NewForConfig(cfg)
			if err != nil {
				return err
			}
			ctrl := mco.New(client, mcfg, opts)
			op, err := operatorclient.NewForConfig(cfg)
			if err != nil {
				return err
			}
			ctrl.SetOperatorClient(op)
			lease := leader.Config{Namespace: mco.Namespace, Name: MCOLease}
			return rf.run(c, "mco", client, lease, []prometheus.Gatherer{gathererOf(ctrl.Metrics(), ctrl.ControllerMetrics())}, ctrl.Run)
		},
	}
	cf.addComponent(c.Flags())
	rf.add(c.Flags(), mco.Namespace+"/"+MCOLease, ":9001")
	fs := c.Flags()
	fs.BoolVar(&opts.FromRelease, "from-release", opts.FromRelease, "take the machine OS image from the release's machine-config-osimageurl ConfigMap, as the MCO does")
	fs.StringVar(&opts.OSImageURL, "os-image-url", "", "the machine OS image, with --from-release=false")
	fs.StringVar(&opts.ReleaseVersion, "release-version", "", "the release version written on rendered configurations, with --from-release=false")
	fs.DurationVar(&opts.Daemon.DrainTimeout, "drain-timeout", opts.Daemon.DrainTimeout, "how long the daemon's drain waits for pods to go")
	return c
}

// EtcdOperatorLease is the etcd operator's lease, as OpenShift's
// cluster-etcd-operator names it.
const EtcdOperatorLease = "openshift-cluster-etcd-operator-lock"

func newEtcdOperatorCommand() *cobra.Command {
	cf := &clientFlags{}
	rf := &runFlags{}
	var remote etcd.RemoteConfig
	op := &etcd.Operator{Namespace: machine.Namespace, InstallReplicas: 3}
	c := &cobra.Command{
		Use:   "etcd-operator --etcd-endpoints URL,...",
		Short: "Run the etcd operator against a cluster whose etcd members run on their hosts",
		Long: `Runs the etcd operator on an etcd capstan does not run, through etcd's API
alone (with its client certificate):

  - it reports the etcd ClusterOperator: Available while a quorum of the
    members is healthy, Degraded naming an unhealthy member, Progressing
    while a learner catches up;
  - it puts the quorum guard, the preDrain hook EtcdQuorumOperator (owner
    clusteroperator/etcd), on every control-plane Machine, and releases a
    deleted machine's drain only once its member has left the cluster;
  - it changes the membership by the etcd operator's rules: a learner is
    promoted once it has caught up; a deleted control-plane machine's
    member leaves once a replacement votes (or, if it is unhealthy, once
    the rest is a quorum); a member never started, or a learner that
    never caught up, is given up.

A member is named after its machine or its node. The operator starts and
stops no process, and adds no member: a new control-plane host adds its
own (kubeadm join --control-plane, as an etcd static pod does), and the
operator says it waits for it. capstan up runs the operator itself, with
the member processes it owns.

The control plane's size is the ControlPlaneMachineSet's replicas, or,
without one, --control-plane-replicas.`,
		Example: `  capstan etcd-operator --kubeconfig admin.kubeconfig \
    --etcd-endpoints https://10.0.0.10:2379,https://10.0.0.11:2379,https://10.0.0.12:2379 \
    --etcd-cacert /etc/kubernetes/pki/etcd/ca.crt \
    --etcd-cert /etc/kubernetes/pki/apiserver-etcd-client.crt --etcd-key /etc/kubernetes/pki/apiserver-etcd-client.key`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if op.InstallReplicas < 1 {
				return fmt.Errorf("--control-plane-replicas %d: must be at least 1", op.InstallReplicas)
			}
			members, err := etcd.DialRemote(remote)
			if err != nil {
				return err
			}
			defer members.Close()
			client, cfg, err := cf.client()
			if err != nil {
				return err
			}
			if op.Machines, err = machineclient.NewForConfig(cfg); err != nil {
				return err
			}
			if op.Config, err = configclient.NewForConfig(cfg); err != nil {
				return err
			}
			op.Kube, op.Remote = client, members
			guard, err := hooks.NewManager(cfg, hooks.Options{Namespace: op.Namespace}, op.QuorumGuard())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "etcd operator on the members at %s; machines in %s\n", strings.Join(remote.Endpoints, ", "), op.Namespace)
			lease := leader.Config{Namespace: etcd.EventNamespace, Name: EtcdOperatorLease}
			return rf.run(c, "etcd-operator", client, lease, nil, func(ctx context.Context) error {
				g, ctx := errgroup.WithContext(ctx)
				g.Go(func() error { return op.Run(ctx) })
				g.Go(func() error { return guard.Start(ctx) })
				return g.Wait()
			})
		},
	}
	cf.addComponent(c.Flags())
	rf.add(c.Flags(), etcd.EventNamespace+"/"+EtcdOperatorLease, ":9980")
	fs := c.Flags()
	fs.StringSliceVar(&remote.Endpoints, "etcd-endpoints", nil, "client URLs of etcd's members (comma-separated)")
	fs.StringVar(&remote.CA, "etcd-cacert", "", "CA bundle that verifies the members' serving certificates")
	fs.StringVar(&remote.Cert, "etcd-cert", "", "client certificate the members trust")
	fs.StringVar(&remote.Key, "etcd-key", "", "key of --etcd-cert")
	fs.BoolVar(&remote.Insecure, "etcd-insecure", false, "allow http:// endpoints and members whose serving certificates go unchecked (tests only)")
	fs.StringVar(&op.Namespace, "namespace", op.Namespace, "namespace of the Machines")
	fs.IntVar(&op.InstallReplicas, "control-plane-replicas", op.InstallReplicas, "the control plane's size when there is no ControlPlaneMachineSet")
	return c
}

// gathererOf registers collectors in a registry of their own.
func gathererOf(cs ...prometheus.Collector) prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		reg.MustRegister(c)
	}
	return reg
}
