package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/bench"
)

func newBenchSchedulerCommands() []*cobra.Command {
	o := bench.SchedulerOptions{Nodes: 5000, Pods: 10000, Parallelism: 64, Timeout: 15 * time.Minute}
	workload := "all"
	c := &cobra.Command{
		Use:   "scheduler",
		Short: "Compare capstan's scheduler with upstream kube-scheduler, side by side",
		Long: `For each workload, runs capstan's Policy scheduler (default policy) and then
upstream kube-scheduler (embedded, default configuration), each on a fresh
control plane in its own process with the same simulated nodes and pods,
and prints pods/s from creation to bound, the ratio, constraint violations
and the spread of pods per node. Workloads: ` + strings.Join(bench.Workloads, ", ") + `, or all.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			workloads := bench.Workloads
			if workload != "all" {
				workloads = strings.Split(workload, ",")
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var results [][2]*bench.SchedulerResult
			for _, w := range workloads {
				var pair [2]*bench.SchedulerResult
				for i, s := range []string{bench.SchedulerCapstan, bench.SchedulerKube} {
					r, err := runSchedulerChild(ctx, c.ErrOrStderr(), o, s, w)
					if err != nil {
						return err
					}
					pair[i] = r
				}
				results = append(results, pair)
			}
			printSchedulerResults(c.OutOrStdout(), o, results)
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "simulated nodes")
	f.IntVar(&o.Pods, "pods", o.Pods, "pods to schedule")
	f.StringVar(&workload, "workload", workload, "workload(s), comma-separated, or all")
	f.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "concurrent pod creators")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on a run after this long")
	f.IntVar(&o.KubeSchedulerQPS, "kube-scheduler-qps", 0, "override kube-scheduler's client QPS (default: its own default, 50)")

	var cpuProfile string
	run := &cobra.Command{
		Use:    "scheduler-run",
		Short:  "One run of the scheduler benchmark (used by bench scheduler)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			r, err := bench.RunScheduler(c.Context(), o, c.ErrOrStderr())
			if err != nil {
				return err
			}
			raw, _ := json.Marshal(r)
			fmt.Fprintf(c.OutOrStdout(), "RESULT %s\n", raw)
			return nil
		},
	}
	rf := run.Flags()
	rf.StringVar(&o.Scheduler, "scheduler", bench.SchedulerCapstan, "capstan or kube-scheduler")
	rf.StringVar(&o.Workload, "workload", "basic", "workload")
	rf.IntVar(&o.Nodes, "nodes", o.Nodes, "simulated nodes")
	rf.IntVar(&o.Pods, "pods", o.Pods, "pods")
	rf.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "concurrent pod creators")
	rf.DurationVar(&o.Timeout, "timeout", o.Timeout, "timeout")
	rf.IntVar(&o.KubeSchedulerQPS, "kube-scheduler-qps", 0, "kube-scheduler client QPS override")
	rf.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	return []*cobra.Command{c, run}
}

// runSchedulerChild runs one measurement in a child process, so that each
// scheduler gets a fresh control plane and process.
func runSchedulerChild(ctx context.Context, log io.Writer, o bench.SchedulerOptions, scheduler, workload string) (*bench.SchedulerResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"bench", "scheduler-run", "--scheduler", scheduler, "--workload", workload,
		"--nodes", strconv.Itoa(o.Nodes), "--pods", strconv.Itoa(o.Pods), "--parallelism", strconv.Itoa(o.Parallelism),
		"--timeout", o.Timeout.String(), "--kube-scheduler-qps", strconv.Itoa(o.KubeSchedulerQPS)}
	cmd := exec.CommandContext(ctx, self, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s on %s: %w", scheduler, workload, err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if raw, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			r := &bench.SchedulerResult{}
			if err := json.Unmarshal([]byte(raw), r); err != nil {
				return nil, err
			}
			fmt.Fprintf(log, "[%s/%s] %.0f pods/s\n", scheduler, workload, r.PodsPerSecond)
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s on %s printed no result", scheduler, workload)
}

func printSchedulerResults(out io.Writer, o bench.SchedulerOptions, results [][2]*bench.SchedulerResult) {
	qps := "default (50)"
	if o.KubeSchedulerQPS > 0 {
		qps = strconv.Itoa(o.KubeSchedulerQPS)
	}
	fmt.Fprintf(out, "\nbench scheduler: %d nodes, %d pods, kube-scheduler QPS %s\n", o.Nodes, o.Pods, qps)
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCAPSTAN pods/s\tKUBE-SCHEDULER pods/s\tRATIO\tVIOLATIONS (capstan/kube)\tPODS/NODE min-max, stddev (capstan | kube)")
	for _, p := range results {
		c, k := p[0], p[1]
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2fx\t%d/%d\t%d-%d, %.2f | %d-%d, %.2f\n", c.Workload, c.PodsPerSecond, k.PodsPerSecond,
			c.PodsPerSecond/k.PodsPerSecond, c.Violations, k.Violations, c.MinPerNode, c.MaxPerNode, c.StdDev, k.MinPerNode, k.MaxPerNode, k.StdDev)
	}
	tw.Flush()
}
