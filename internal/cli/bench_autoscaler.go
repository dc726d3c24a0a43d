package cli

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/bench"
)

func newBenchAutoscalerCommand() *cobra.Command {
	var nodes, podsPerNode, pending, underutilized, runs int
	var cpuProfile string
	c := &cobra.Command{
		Use:   "autoscaler",
		Short: "Time the autoscaler's loop at upstream's scalability target (1,000 nodes, 30 pods each)",
		Long: `Builds, in memory, a cluster of --nodes 8-core nodes in one autoscaled
MachineSet with --pods-per-node pods each, and times one autoscaler loop
(node groups, snapshot, decision) twice: a scale-up with --pending
unschedulable pods of mixed sizes, and a scale-down with --underutilized
nodes carrying 3 pods. Prints the median of --runs loops and the first
one (as in a running autoscaler, later loops reuse what the first worked
out for each pod that has not changed since), the nodes the
scale-up adds against the fewest that could hold the pods it adds them
for, and the process's peak memory. The decisions are the ones the
autoscaler makes in a cluster: the same code, with the default Policy.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runs < 1 {
				return fmt.Errorf("--runs must be at least 1, got %d", runs)
			}
			stop, err := bench.StartCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stop()
			cfg := autoscaler.DefaultConfig()
			out := c.OutOrStdout()
			up, err := autoscaler.NewBenchCluster(nodes, podsPerNode, 0, pending)
			if err != nil {
				return err
			}
			upRes, upTimes, err := timeLoops(runs, func() (autoscaler.BenchLoop, error) { return up.RunScaleUpLoop(&cfg) })
			if err != nil {
				return err
			}
			down, err := autoscaler.NewBenchCluster(nodes, podsPerNode, underutilized, 0)
			if err != nil {
				return err
			}
			downRes, downTimes, err := timeLoops(runs, func() (autoscaler.BenchLoop, error) { return down.RunScaleDownLoop(&cfg) })
			if err != nil {
				return err
			}
			rss, err := bench.PeakRSS()
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "bench autoscaler: %d nodes, %d pods per node, median of %d loops\n", nodes, podsPerNode, runs)
			fmt.Fprintf(out, "  scale-up loop, %d pending pods:        %s; %d nodes added, lower bound %d (%.2fx)\n",
				pending, loopTimes(upTimes), upRes.NodesAdded, upRes.LowerBound, float64(upRes.NodesAdded)/float64(max(1, upRes.LowerBound)))
			fmt.Fprintf(out, "  scale-down loop, %d underutilized nodes: %s; %d nodes found unneeded\n",
				underutilized, loopTimes(downTimes), downRes.Unneeded)
			fmt.Fprintf(out, "  peak RSS: %s\n", bench.MiB(rss))
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&nodes, "nodes", 1000, "nodes in the autoscaled MachineSet")
	f.IntVar(&podsPerNode, "pods-per-node", 30, "pods on each node")
	f.IntVar(&pending, "pending", 3000, "unschedulable pods of the scale-up loop")
	f.IntVar(&underutilized, "underutilized", 300, "nodes of the scale-down loop that carry 3 pods")
	f.IntVar(&runs, "runs", 5, "loops timed per scenario")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to this file")
	return c
}

// timeLoops runs loop n times and returns the last result and the
// durations, in the order of the loops.
func timeLoops(n int, loop func() (autoscaler.BenchLoop, error)) (autoscaler.BenchLoop, []time.Duration, error) {
	var last autoscaler.BenchLoop
	var times []time.Duration
	for range n {
		res, err := loop()
		if err != nil {
			return last, nil, err
		}
		last = res
		times = append(times, res.Duration.Round(time.Millisecond))
	}
	return last, times, nil
}

// loopTimes says the median of the loops' durations, the first loop's and
// the extremes.
func loopTimes(ds []time.Duration) string {
	sorted := slices.Sorted(slices.Values(ds))
	return fmt.Sprintf("%s (first %s, min %s, max %s)", sorted[len(sorted)/2], ds[0], sorted[0], sorted[len(sorted)-1])
}
