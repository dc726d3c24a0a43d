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
	o := bench.ScaleOptions{ControlPlaneNodes: 3, Parallelism: 64, Timeout: 15 * time.Minute, Progress: 10 * time.Second}
	steps := "1000/30000,2000/60000,5000/150000"
	var doc string
	c := &cobra.Command{
		Use:   "scale",
		Short: "Grows a cluster run as capstan up runs it, step by step (nodes/pods), its pods placed by capstan's scheduler: time to Ready and Running, pods/s, CPU per pod, peak RSS per process",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var err error
			if o.Steps, err = bench.ParseScaleSteps(steps); err != nil {
				return fmt.Errorf("--steps: %w", err)
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
				bench.PrintScale(out, res)
				if doc != "" {
					if werr := bench.WriteScaleDoc(doc, res, thisMachine()); werr != nil {
						return werr
					}
					fmt.Fprintf(out, "\nwrote the table into %s\n", doc)
				}
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&steps, "steps", steps, "sizes to grow the cluster to, NODES/PODS each, comma-separated")
	f.IntVar(&o.ControlPlaneNodes, "control-plane-nodes", o.ControlPlaneNodes, "masters the cluster boots with (each an etcd member)")
	f.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "concurrent creators of instances and pods")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on a step's nodes, or its pods, after this long")
	f.DurationVar(&o.Progress, "progress", o.Progress, "how often to print progress")
	f.StringVar(&o.DataDir, "data-dir", "", "data dir to use and keep (default: a temporary one)")
	f.BoolVar(&o.EtcdNoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "write a CPU profile of capstan's process over each step and a heap profile at its end here")
	f.StringVar(&doc, "doc", "", "a Markdown file to write the table into (between its bench scale markers), with the plot beside it as an SVG")
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
