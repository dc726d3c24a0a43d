package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
)

func newMachineAPICommand() *cobra.Command {
	cf := &clientFlags{}
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
			cfg, err := cf.restConfig()
			if err != nil {
				return err
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			opts.Actuator = &machine.SimActuator{Cloud: sim.NewAPICloud(client, sim.CloudOptions{})}
			opts.LeaderElectionNamespace = opts.Namespace
			mgr, err := machine.NewManager(cfg, opts)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(c.OutOrStdout(), "Machine API controllers running on namespace %s; Ctrl-C to stop\n", opts.Namespace)
			return mgr.Start(ctx)
		},
	}
	cf.add(c.Flags())
	fs := c.Flags()
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the Machine API objects")
	fs.BoolVar(&opts.LeaderElect, "leader-elect", false, "hold the Lease NAMESPACE/"+machine.LeaderElectionID+" before acting")
	fs.DurationVar(&opts.DrainTimeout, "drain-timeout", opts.DrainTimeout, "how long one drain attempt waits for pods to go")
	fs.DurationVar(&opts.DrainBackoffBase, "drain-backoff", opts.DrainBackoffBase, "first wait after a failed drain, doubled on each further failure")
	fs.DurationVar(&opts.DrainBackoffMax, "drain-backoff-max", opts.DrainBackoffMax, "longest wait between failed drains")
	fs.IntVar(&opts.Concurrency, "concurrency", opts.Concurrency, "machines each controller works on at once")
	return c
}
