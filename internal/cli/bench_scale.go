package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/bench"
)

func newBenchScaleCommand() *cobra.Command {
	o := bench.ScaleOptions{ControlPlaneNodes: 3, Parallelism: 64, Timeout: 15 * time.Minute, Progress: 10 * time.Second,
		Runs: 3, Baseline: 30 * time.Second, Seed: 1}
	steps := "1000/30000,2000/60000"
	modes := bench.ModeFloor + "," + bench.ModeFull
	var doc string
	c := &cobra.Command{
		Use:   "scale",
		Short: "Grows the full cluster and the floor (upstream alone) side by side, step by step (nodes/pods), several runs each: time to Ready and Running, pods/s, CPU per pod over the idle cost, PSS, live heap, lease ages",
		Long: `Grows two clusters step by step, in turn, several times each:

  floor  upstream alone: kube-apiserver, kube-controller-manager, three etcd
         members, the simulated kubelets and monitoring; pods are bound to
         their nodes when they are made
  full   everything capstan up runs: three masters booted from their
         Machines, an etcd member on each, every component; capstan's
         scheduler places the pods

Each run's cluster runs in a process of its own (capstan bench serve); this
process makes the nodes and pods and watches them, so what is measured is
the cluster's alone. Each step reports the median of the runs and their
range, and the full cluster's cost as a multiple of the floor's.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var err error
			if o.Steps, err = bench.ParseScaleSteps(steps); err != nil {
				return fmt.Errorf("--steps: %w", err)
			}
			o.Modes = nil
			for _, m := range strings.Split(modes, ",") {
				if _, err := bench.ParseScaleCluster(m); err != nil {
					return fmt.Errorf("--modes: %w", err)
				}
				o.Modes = append(o.Modes, strings.TrimSpace(m))
			}
			if doc != "" {
				if _, err := os.Stat(doc); err != nil {
					return fmt.Errorf("--doc: %w", err)
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := c.OutOrStdout()
			res, err := bench.Scale(ctx, o, out)
			// What was measured is printed, a step that timed out or
			// failed included.
			if res != nil && len(res.Rows) > 0 {
				res.Settings.Machine = thisMachine()
				bench.PrintScale(out, res)
				fmt.Fprintf(out, "\n%s\n", res.Settings)
				if doc != "" {
					if werr := bench.WriteScaleDoc(doc, res); werr != nil {
						return werr
					}
					fmt.Fprintf(out, "\nwrote the table into %s\n", doc)
				}
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&steps, "steps", steps, "sizes to grow the clusters to, NODES/PODS each, comma-separated")
	f.StringVar(&modes, "modes", modes, "the clusters to run, in each round's order: floor, full, or both; MODE@PATH runs a mode with another capstan binary, to compare two builds")
	f.IntVar(&o.Runs, "runs", o.Runs, "runs of each cluster, interleaved (floor, full, floor, full, ...)")
	f.DurationVar(&o.Baseline, "baseline", o.Baseline, "before each step's pods, measure the cluster at rest this long: its CPU is taken off the pods'")
	f.DurationVar(&o.Idle, "idle", 0, "after the last step, hold the cluster idle this long, watching its nodes and leases")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "CAPSTAN_RANDOM_SEED of the clusters' processes")
	f.IntVar(&o.ControlPlaneNodes, "control-plane-nodes", o.ControlPlaneNodes, "masters of the full cluster (each an etcd member), and etcd members of the floor")
	f.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "concurrent creators of instances and pods")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on a step's nodes, or its pods, after this long")
	f.DurationVar(&o.Progress, "progress", o.Progress, "how often to print progress")
	f.StringVar(&o.DataDir, "data-dir", "", "a directory to keep each run's data dir in (default: temporary ones)")
	f.BoolVar(&o.EtcdNoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "write a CPU profile of the cluster's process over each step's pods and a heap profile at its end here")
	f.StringVar(&doc, "doc", "", "a Markdown file to write the tables into (between its bench scale markers), with the plot beside it as an SVG")
	return c
}

// newBenchServeCommand runs one cluster of a scale run in a process of
// its own.
func newBenchServeCommand() *cobra.Command {
	o := bench.ServeOptions{ControlPlaneNodes: 3, Timeout: 15 * time.Minute}
	c := &cobra.Command{
		Use:    "serve",
		Short:  "Runs one cluster of capstan bench scale, for it to load and measure",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.Serve(ctx, o, c.OutOrStdout())
		},
	}
	f := c.Flags()
	f.StringVar(&o.Mode, "mode", bench.ModeFull, "floor or full")
	f.IntVar(&o.ControlPlaneNodes, "control-plane-nodes", o.ControlPlaneNodes, "masters (full) or etcd members (floor)")
	f.StringVar(&o.DataDir, "data-dir", "", "the cluster's data dir")
	f.StringVar(&o.StatusFile, "status-file", "", "where to write how to reach the cluster once it serves")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up starting after this long")
	f.BoolVar(&o.EtcdNoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	return c
}

// thisMachine describes this machine: its CPU model, cores and memory.
func thisMachine() string {
	model, mem := "", ""
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(v), &kb)
				mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s", runtime.NumCPU(), model, mem)
}
