package cli

import (
	"fmt"
	"github.com/spf13/pflag"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/leader"
)

func newAutoscalerCommand() *cobra.Command {
	cf := &clientFlags{}
	opts := autoscaler.DefaultOptions()
	rf := &runFlags{}
	var policyFile string
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
			client, cfg, err := cf.client()
			if err != nil {
				return err
			}
			run, err := autoscaler.NewComponent(cfg, client, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Cluster autoscaler running on namespace %s; Ctrl-C to stop\n", opts.Namespace)
			return rf.run(c, "autoscaler", client, leader.Config{Namespace: opts.Namespace, Name: autoscaler.LeaderElectionID},
				[]prometheus.Gatherer{autoscaler.Registry}, run)
		},
	}
	cf.addComponent(c.Flags())
	fs := c.Flags()
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the MachineSets, MachineAutoscalers and the autoscaler's ConfigMaps")
	fs.DurationVar(&opts.ScanInterval, "scan-interval", opts.ScanInterval, "time between loops when no pod becomes unschedulable")
	fs.StringVar(&policyFile, "policy", "", "the scheduler Policy file the cluster's scheduler runs (default: the default policy)")
	rf.add(fs, "NAMESPACE/"+autoscaler.LeaderElectionID, ":8085")
	fs.Uint64Var(&opts.Seed, "seed", 0, "seed of the random expander")
	addAutoscalerTimingFlags(fs, &opts, "")
	// Its old name, before every component served health beside metrics.
	fs.StringVar(&rf.healthAddress, "metrics-address", ":8085", "")
	_ = fs.MarkDeprecated("metrics-address", "use --health-address")
	return c
}

// addAutoscalerTimingFlags adds upstream's timing flags the
// ClusterAutoscaler does not set, under upstream's names (with prefix).
func addAutoscalerTimingFlags(fs *pflag.FlagSet, opts *autoscaler.Options, prefix string) {
	fs.DurationVar(&opts.MaxNodeStartupTime, prefix+"max-node-startup-time", opts.MaxNodeStartupTime, "how long a registered node that is not ready is taken to be starting (default 15m, upstream's)")
	fs.DurationVar(&opts.UnreadyTime, prefix+"scale-down-unready-time", opts.UnreadyTime, "how long an unready node must be unneeded before it is removed (default 20m, upstream's)")
	fs.DurationVar(&opts.Drain.MaxPodEvictionTime, prefix+"max-pod-eviction-time", opts.Drain.MaxPodEvictionTime, "how long refused evictions of a pod are tried again before a scale-down's drain fails")
}
