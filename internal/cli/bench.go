package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/bench"
	"github.com/capstan-dev/capstan/internal/mco"
)

func newBenchCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks on a fresh embedded control plane",
	}
	c.AddCommand(newBenchUpCommand(), newBenchMachinesCommand(), newBenchAutoscalerCommand(), newBenchCVOCommand(), newBenchMCOCommand(), newBenchEtcdCommand(), newBenchConsoleCommand(), newBenchScaleCommand(), newBenchServeCommand(), newBenchSimulateCommand())
	c.AddCommand(newBenchSchedulerCommands()...)
	return c
}

func newBenchUpCommand() *cobra.Command {
	o := bench.UpOptions{Nodes: 1000, Pods: 30000, Parallelism: 64, Timeout: 10 * time.Minute}
	var cpuProfile string
	c := &cobra.Command{
		Use:   "up",
		Short: "Seconds until N simulated nodes are Ready, pods/s until M pre-bound pods are Running, peak RSS",
		Long: `Starts a cluster with one master and no Machine API, launches --nodes
simulated nodes and waits for them to be Ready, then creates --pods pods
bound round-robin to them and waits until all are Running. Prints the time
to Ready and to Running, pods/s, the CPU all processes used per pod, the
peak and final resident size of each process and the Go heap left by a
collection at the end. --bare runs none of capstan's controllers (as
capstan up --bare): what the control plane, the simulated nodes and
monitoring alone cost at that size.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopProfile, err := bench.StartCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			res, err := bench.Up(ctx, o, c.OutOrStdout())
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "\nbench up: nodes=%d pods=%d fsync=%v\n", res.Nodes, res.Pods, !o.EtcdNoFsync)
			fmt.Fprintf(out, "  nodes Ready:   %.1f s\n", res.NodesReady.Seconds())
			if res.Pods > 0 {
				fmt.Fprintf(out, "  pods Running:  %.1f s (%.0f pods/s, %.1f ms of CPU a pod)\n", res.PodsRunning.Seconds(), res.PodsPerSecond, float64(res.CPUPerPod.Microseconds())/1000)
			}
			fmt.Fprintf(out, "  peak RSS:      %s\n", bench.GiB(res.PeakRSSBytes))
			fmt.Fprintf(out, "processes at the end (peak RSS, RSS at the end, CPU so far):\n")
			bench.PrintProcesses(out, res.Processes, res.HeapLive, res.HeapHeld)
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "simulated nodes")
	f.IntVar(&o.Pods, "pods", o.Pods, "pods bound round-robin to the nodes")
	f.BoolVar(&o.Bare, "bare", false, "run none of capstan's controllers, as capstan up --bare: the control plane, the simulated nodes and monitoring only")
	f.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "concurrent creators")
	f.StringVar(&o.DataDir, "data-dir", "", "data dir to use and keep (default: a temporary one)")
	f.BoolVar(&o.EtcdNoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on each phase after this long")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	return c
}

func newBenchMachinesCommand() *cobra.Command {
	o := bench.MachinesOptions{Replicas: 500, PodsPerNode: 1, Timeout: 10 * time.Minute}
	c := &cobra.Command{
		Use:   "machines",
		Short: "Machines/s scaling a MachineSet 0 -> N -> 0, draining pods on the way down",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := bench.Machines(ctx, o, c.OutOrStdout())
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "\nbench machines: replicas=%d pods drained=%d fsync=%v\n", res.Replicas, res.PodsEvicted, !o.EtcdNoFsync)
			fmt.Fprintf(out, "  scale up:    %.1f s (%.1f machines/s)\n", res.Up.Seconds(), res.UpPerSecond)
			fmt.Fprintf(out, "  scale down:  %.1f s (%.1f machines/s)\n", res.Down.Seconds(), res.DownPerSecond)
			fmt.Fprintf(out, "  peak RSS:    %s\n", bench.GiB(res.PeakRSSBytes))
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Replicas, "replicas", o.Replicas, "machines to scale the MachineSet to")
	f.IntVar(&o.PodsPerNode, "pods-per-node", o.PodsPerNode, "pods per machine (one Deployment) drained on the way down")
	f.BoolVar(&o.EtcdNoFsync, "etcd-no-fsync", false, "skip etcd's fsync (faster, unsafe)")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on a phase after this long")
	return c
}

// writeHeapProfile writes the live heap to path; an empty path writes
// nothing.
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

func newBenchCVOCommand() *cobra.Command {
	o := bench.CVOOptions{Operators: 40, Manifests: 800, Timeout: 10 * time.Minute}
	c := &cobra.Command{
		Use:   "cvo",
		Short: "The Cluster Version Operator's own time in an update of N manifests over M operators, and its apply throughput",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := bench.CVO(ctx, o, c.OutOrStdout())
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "\nbench cvo: operators=%d manifests=%d (the update's tasks, counted) run levels=%d fsync=%v; signed and verified, not forced\n",
				res.Operators, res.Manifests, res.RunLevels, !o.EtcdNoFsync)
			ms := func(d time.Duration) string { return fmt.Sprintf("%8.3f s", d.Seconds()) }
			fmt.Fprintf(out, "  update:        %s (request to the pass completed)\n", ms(res.Total))
			fmt.Fprintf(out, "  accept:        %s (retrieve, verify the signature, load, preconditions)\n", ms(res.Accept))
			fmt.Fprintf(out, "  applying:      %s (at least one of %d manifests being applied)\n", ms(res.Applying), res.Applied)
			fmt.Fprintf(out, "  waiting:       %s (only the %d operators being waited for)\n", ms(res.Waiting), res.Waits)
			fmt.Fprintf(out, "  between:       %s (accept included: no task running)\n", ms(res.Between))
			fmt.Fprintf(out, "  CVO time:      %s (update - waiting; target < 5 s)\n", ms(res.CVOTime))
			fmt.Fprintf(out, "  apply:         %.0f manifests/s per worker (%s of applies), %.0f manifests/s wall\n", res.ApplyPerSecond, strings.TrimSpace(ms(res.ApplySum)), res.ApplyWallPerSecond)
			fmt.Fprintf(out, "  process CPU:   %8.3f s\n", res.CPU.Seconds())
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Operators, "operators", o.Operators, "cluster operators in the release")
	f.IntVar(&o.Manifests, "manifests", o.Manifests, "manifests in the release (spread over the operators)")
	f.BoolVar(&o.EtcdNoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on each update after this long")
	return c
}

func newBenchMCOCommand() *cobra.Command {
	o := bench.MCOOptions{Nodes: 500, MaxUnavailable: "10%", Daemon: mco.DefaultDaemonOptions(), Parallelism: 32, Timeout: 20 * time.Minute}
	c := &cobra.Command{
		Use:   "mco",
		Short: "Rolls a MachineConfig over a worker pool of N nodes: rollout time against the ideal, and CPU",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := bench.MCO(ctx, o, c.OutOrStdout())
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "\nbench mco: nodes=%d maxUnavailable=%s (%d) fsync=%v\n", res.Nodes, o.MaxUnavailable, res.MaxUnavailable, !o.EtcdNoFsync)
			fmt.Fprintf(out, "  rollout:       %.1f s\n", res.Rollout.Seconds())
			fmt.Fprintf(out, "  per node:      %.1f s (targeted to done, mean)\n", res.PerNode.Seconds())
			fmt.Fprintf(out, "  ideal:         %.1f s (%d waves x per node); rollout/ideal %.2f\n", res.Ideal.Seconds(), (res.Nodes+res.MaxUnavailable-1)/res.MaxUnavailable, res.Rollout.Seconds()/res.Ideal.Seconds())
			fmt.Fprintf(out, "  process CPU:   %.1f s\n", res.CPU.Seconds())
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "worker nodes in the pool")
	f.StringVar(&o.MaxUnavailable, "max-unavailable", o.MaxUnavailable, "the pool's maxUnavailable (a number or a percentage)")
	f.DurationVar(&o.Daemon.RebootDuration, "reboot", o.Daemon.RebootDuration, "how long a simulated reboot keeps a node NotReady")
	f.DurationVar(&o.Daemon.ApplyDuration, "apply", o.Daemon.ApplyDuration, "how long writing a configuration takes")
	f.BoolVar(&o.EtcdNoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return c
}
