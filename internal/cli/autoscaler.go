package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/leader"
	"github.com/capstan-dev/capstan/internal/metrics"
)

func newAutoscalerCommand() *cobra.Command {
	cf := &clientFlags{}
	opts := autoscaler.DefaultOptions()
	var (
		policyFile, metricsAddress string
		leaderElect                bool
	)
	c := &cobra.Command{
		Use:   "autoscaler",
		Short: "Run the cluster autoscaler and the MachineAutoscaler controller against a cluster",
		Long: `Runs capstan's cluster autoscaler: once the ClusterAutoscaler "default"
exists, it grows the MachineSets that a MachineAutoscaler made node groups
when pods are unschedulable, and shrinks them when nodes are unneeded,
simulating placement with the scheduler's predicates under --policy (give
it the Policy the cluster's scheduler runs). It also runs the
MachineAutoscaler controller, which writes each MachineAutoscaler's bounds
onto its MachineSet. capstan up runs both itself.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := loadPolicy(policyFile)
			if err != nil {
				return err
			}
			opts.Policy = p
			cfg, err := cf.restConfig()
			if err != nil {
				return err
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			run, err := autoscaler.NewComponent(cfg, client, opts)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if metricsAddress != "" {
				srv, err := metrics.Listen(metricsAddress, nil, autoscaler.Registry)
				if err != nil {
					return err
				}
				go func() { _ = srv.Run(ctx) }()
				fmt.Fprintf(c.OutOrStdout(), "Metrics: http://%s/metrics\n", srv.Addr())
			}
			fmt.Fprintf(c.OutOrStdout(), "Cluster autoscaler running on namespace %s; Ctrl-C to stop\n", opts.Namespace)
			if leaderElect {
				return leader.Run(ctx, client, leader.Config{Namespace: opts.Namespace, Name: autoscaler.LeaderElectionID}, run)
			}
			return run(ctx)
		},
	}
	cf.add(c.Flags())
	fs := c.Flags()
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the MachineSets, MachineAutoscalers and the autoscaler's ConfigMaps")
	fs.DurationVar(&opts.ScanInterval, "scan-interval", opts.ScanInterval, "time between loops when no pod becomes unschedulable")
	fs.StringVar(&policyFile, "policy", "", "the scheduler Policy file the cluster's scheduler runs (default: the default policy)")
	fs.BoolVar(&leaderElect, "leader-elect", false, "hold the Lease NAMESPACE/"+autoscaler.LeaderElectionID+" before acting")
	fs.Uint64Var(&opts.Seed, "seed", 0, "seed of the random expander")
	fs.StringVar(&metricsAddress, "metrics-address", ":8085", "address of the Prometheus metrics endpoint (/metrics); empty: none")
	return c
}
