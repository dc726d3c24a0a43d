package cli

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/leader"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
)

func newMachineAPICommand() *cobra.Command {
	cf := &clientFlags{}
	rf := &runFlags{}
	var cloudKubeconfig string
	opts := machine.DefaultOptions()
	c := &cobra.Command{
		Use:   "machine-api",
		Short: "Run the Machine API controllers against a cluster",
		Long: `Runs the Machine, machine drain, nodelink, MachineSet and MachineHealthCheck
controllers on the machine.openshift.io/v1beta1 objects of --namespace,
creating instances in the cluster's simulated cloud. capstan up runs them
itself; run them standalone against another cluster (its CRDs installed),
with --leader-elect when several replicas run.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			client, cfg, err := cf.client()
			if err != nil {
				return err
			}
			// The cloud has credentials of its own, as a real one's
			// would: its instances are not the Machine API's to write.
			cloud := client
			if cloudKubeconfig != "" {
				if cloud, _, err = (&clientFlags{kubeconfig: cloudKubeconfig}).client(); err != nil {
					return fmt.Errorf("--cloud-kubeconfig: %w", err)
				}
			}
			opts.Actuator = &machine.SimActuator{Cloud: sim.NewAPICloud(cloud, sim.CloudOptions{})}
			mgr, err := machine.NewManager(cfg, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Machine API controllers running on namespace %s; Ctrl-C to stop\n", opts.Namespace)
			metrics := &machine.Metrics{Client: mgr.GetClient(), Namespace: opts.Namespace}
			return rf.run(c, "machine-api", client, leader.Config{Namespace: opts.Namespace, Name: machine.LeaderElectionID},
				[]prometheus.Gatherer{gathererOf(metrics)}, mgr.Start)
		},
	}
	cf.addComponent(c.Flags())
	fs := c.Flags()
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the Machine API objects")
	rf.add(fs, "NAMESPACE/"+machine.LeaderElectionID, ":8441")
	fs.StringVar(&cloudKubeconfig, "cloud-kubeconfig", "", "credentials of the simulated cloud, whose instances are ConfigMaps in "+sim.Namespace+" (default: --kubeconfig's)")
	fs.DurationVar(&opts.DrainTimeout, "drain-timeout", opts.DrainTimeout, "how long one drain attempt waits for pods to go")
	fs.DurationVar(&opts.DrainBackoffBase, "drain-backoff", opts.DrainBackoffBase, "first wait after a failed drain, doubled on each further failure")
	fs.DurationVar(&opts.DrainBackoffMax, "drain-backoff-max", opts.DrainBackoffMax, "longest wait between failed drains")
	fs.IntVar(&opts.Concurrency, "concurrency", opts.Concurrency, "machines each controller works on at once")
	return c
}
