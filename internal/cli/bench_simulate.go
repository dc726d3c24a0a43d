package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/bench"
	"github.com/capstan-dev/capstan/internal/simulate"
)

func newBenchSimulateCommand() *cobra.Command {
	o := bench.SimulateOptions{}
	var cpuProfile string
	c := &cobra.Command{
		Use:   "simulate",
		Short: "Time capstan simulate run on a zone outage of a synthetic cluster",
		Long: `Builds the snapshot of an OpenShift cluster on AWS of --nodes four-CPU
workers in three zones (a MachineSet and a master per zone), each running
--pods-per-node one-CPU pods of one Deployment, and runs capstan simulate
run on it: a ClusterAutoscaler and MachineAutoscalers applied, then the
loss of the first zone, until nothing changes for --quiet. Prints the
real time to restore the snapshot and to run the outage, the speed the
run had, the CPU spent (this process and etcd's), and the outcome: nodes
lost, pods evicted and placed again, pods left pending, nodes added.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			out := c.OutOrStdout()
			stopProfile, err := bench.StartCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			res, err := bench.Simulate(c.Context(), o, c.ErrOrStderr())
			stopProfile()
			if err != nil {
				return err
			}
			r := res.Report
			reasons := map[string]int{}
			for _, rm := range r.Removed {
				reasons[rm.Reason]++
			}
			settled := "settled"
			if !r.Settled {
				settled = "not settled"
			}
			fmt.Fprintf(out, "bench simulate: %d nodes, %d pods, zone outage at %gx: %s in %s of real time (restore %s, outage %s; %s simulated); %.0f CPU s\n",
				r.Nodes, r.Pods, r.Speed, settled, res.Wall.Round(time.Second), r.RestoreTime, r.RunTime, r.Duration, res.CPUSeconds)
			fmt.Fprintf(out, "  %d nodes NotReady, %d pods removed %v, %d placed, %d pending, %d nodes added\n",
				len(r.NodesNotReady), len(r.Removed), reasons, len(r.Placed), len(r.Pending), len(r.NodesAdded))
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", 60, "workers, spread over three zones")
	f.IntVar(&o.PodsPerNode, "pods-per-node", 2, "one-CPU pods on each four-CPU worker (0-4)")
	f.IntVar(&o.PodsPerDeployment, "pods-per-deployment", 0, "pods of each Deployment, each with its disruption budget (0: one Deployment of them all)")
	f.Float64Var(&o.Speed, "speed", simulate.DefaultSpeed, "the simulation's speed (at most 100)")
	f.DurationVar(&o.Quiet, "quiet", 6*time.Minute, "simulated time without a change that ends the run")
	f.DurationVar(&o.For, "for", simulate.DefaultFor, "simulated time after the outage at which the run ends, settled or not")
	f.StringVar(&o.DataDir, "data-dir", "", "directory for the private cluster (default: a temporary one)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (restore and run) to this file")
	return c
}
