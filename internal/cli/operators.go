package cli

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	configclient "github.com/openshift/client-go/config/clientset/versioned"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1 "github.com/openshift/api/config/v1"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/leader"
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
			metrics := &cvo.Metrics{Client: config, Operator: op.Load, Upstream: opts.Upstream}
			lease := leader.Config{Namespace: cvo.Namespace, Name: CVOLease}
			return rf.run(c, "cvo", client, lease, []prometheus.Gatherer{gathererOf(metrics)}, func(ctx context.Context) error {
				o := cvo.New(config, opts)
				op.Store(o)
				return o.Run(ctx)
			})
		},
	}
	cf.add(c.Flags())
	rf.add(c.Flags(), cvo.Namespace+"/"+CVOLease, ":9099")
	fs := c.Flags()
	fs.StringVar(&releaseImage, "release-image", "", "the release the cluster runs, when it has no ClusterVersion yet")
	fs.StringVar(&opts.Upstream, "update-service", "", "the update service's graph URL, when the ClusterVersion's spec.upstream is empty")
	fs.StringVar(&opts.Channel, "channel", "", "spec.channel of the ClusterVersion the operator creates")
	fs.StringVar(&opts.PromQLURL, "promql-url", "", "Prometheus API (URL/api/v1/) that evaluates conditional updates' PromQL risks")
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
			lease := leader.Config{Namespace: mco.Namespace, Name: MCOLease}
			return rf.run(c, "mco", client, lease, []prometheus.Gatherer{gathererOf(ctrl.Metrics())}, ctrl.Run)
		},
	}
	cf.add(c.Flags())
	rf.add(c.Flags(), mco.Namespace+"/"+MCOLease, ":9001")
	fs := c.Flags()
	fs.BoolVar(&opts.FromRelease, "from-release", opts.FromRelease, "take the machine OS image from the release's machine-config-osimageurl ConfigMap, as the MCO does")
	fs.StringVar(&opts.OSImageURL, "os-image-url", "", "the machine OS image, with --from-release=false")
	fs.StringVar(&opts.ReleaseVersion, "release-version", "", "the release version written on rendered configurations, with --from-release=false")
	fs.DurationVar(&opts.Daemon.DrainTimeout, "drain-timeout", opts.Daemon.DrainTimeout, "how long the daemon's drain waits for pods to go")
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
