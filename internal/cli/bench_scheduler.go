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
	"slices"
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
	var withDefaults bool
	var legacyKubeQPS int
	c := &cobra.Command{
		Use:   "scheduler",
		Short: "Compare capstan's scheduler with upstream kube-scheduler, side by side",
		Long: `For each workload, runs capstan's Policy scheduler (default policy) and then
upstream kube-scheduler (default configuration), each on a fresh control
plane with the same simulated nodes and pods. Each scheduler runs in a
process of its own, with the same client rate limit (--qps and --burst;
unlimited by default), and the clock starts once it has synced. Printed per
scheduler: pods/s from the first pod created to the last bound, the CPU
seconds its process used per 1,000 pods, its peak memory, the rate limit its
client really had, how busy the machine was over the window (the scheduler
and the rest of the run together, as a share of every core: near 100%, the
machine rather than the scheduler set the pace), constraint violations and
the spread of pods per node. Each run's outcome (pods bound and left Pending,
pods preempted, the largest zone skew of a spread group) must be
kube-scheduler's: a difference fails the command.
--with-kube-scheduler-defaults adds a row for kube-scheduler at its own
default client limit (QPS 50, burst 100). Workloads: ` + strings.Join(bench.Workloads, ", ") + `, or all.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("kube-scheduler-qps") && !c.Flags().Changed("qps") {
				o.QPS = float32(legacyKubeQPS)
			}
			if o.QPS < 0 || o.Burst < 0 {
				return fmt.Errorf("--qps %g and --burst %d must not be negative (--qps 0 is unlimited)", o.QPS, o.Burst)
			}
			if o.QPS > 0 && o.Burst == 0 {
				o.Burst = int(2 * o.QPS)
			}
			workloads := bench.Workloads
			if workload != "all" {
				workloads = strings.Split(workload, ",")
			}
			for _, w := range workloads {
				if !slices.Contains(bench.Workloads, w) {
					return fmt.Errorf("workload %q: want one of %s, or all", w, strings.Join(bench.Workloads, ", "))
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			type run struct {
				scheduler   string
				qps         float32
				burst       int
				kubeDefault bool
			}
			runs := []run{{bench.SchedulerCapstan, o.QPS, o.Burst, false}, {bench.SchedulerKube, o.QPS, o.Burst, false}}
			if withDefaults {
				runs = append(runs, run{bench.SchedulerKube, 50, 100, true})
			}
			var rows []schedulerRow
			for _, w := range workloads {
				for _, r := range runs {
					ro := o
					ro.QPS, ro.Burst = r.qps, r.burst
					res, err := runSchedulerChild(ctx, c.ErrOrStderr(), ro, r.scheduler, w)
					if err != nil {
						return err
					}
					rows = append(rows, schedulerRow{res: res, kubeDefault: r.kubeDefault})
				}
			}
			printSchedulerResults(c.OutOrStdout(), o, rows)
			return compareOutcomes(rows)
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "simulated nodes")
	f.IntVar(&o.Pods, "pods", o.Pods, "pods to schedule")
	f.StringVar(&workload, "workload", workload, "workload(s), comma-separated, or all")
	f.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "concurrent pod creators")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on a run after this long")
	f.Float32Var(&o.QPS, "qps", 0, "client QPS of both schedulers (0: unlimited)")
	f.IntVar(&o.Burst, "burst", 0, "client burst of both schedulers (default: twice --qps)")
	f.BoolVar(&withDefaults, "with-kube-scheduler-defaults", false, "add a row for kube-scheduler at its default client limit (QPS 50, burst 100)")
	f.IntVar(&legacyKubeQPS, "kube-scheduler-qps", 0, "client QPS of both schedulers")
	_ = f.MarkDeprecated("kube-scheduler-qps", "use --qps, which sets the same limit for both schedulers")

	var cpuProfile string
	run := &cobra.Command{
		Use:    "scheduler-run",
		Short:  "One run of the scheduler benchmark (used by bench scheduler)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			o.ProcessCommand = []string{self, "bench", "scheduler-proc"}
			o.CPUProfile = cpuProfile
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
	rf.Float32Var(&o.QPS, "qps", 0, "client QPS of the scheduler (0: unlimited)")
	rf.IntVar(&o.Burst, "burst", 0, "client burst of the scheduler")
	rf.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the scheduler process to this file")
	rf.StringVar(&o.MemProfile, "memprofile", "", "write a heap profile of the scheduler process to this file when it stops")
	rf.StringVar(&o.ControlPlaneProfile, "controlplane-cpuprofile", "", "write a CPU profile of the control plane, simulator and pod creators over the measured window")

	var po bench.SchedulerProcessOptions
	var procProfile, memProfile string
	proc := &cobra.Command{
		Use:    "scheduler-proc",
		Short:  "Run one scheduler for the scheduler benchmark (used by bench scheduler-run)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopProfile, err := bench.StartCPUProfile(procProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			err = bench.RunSchedulerProcess(ctx, po, os.Stdout)
			if werr := writeHeapProfile(memProfile); werr != nil {
				return werr
			}
			if ctx.Err() != nil {
				return nil // stopped by the benchmark
			}
			return err
		},
	}
	pf := proc.Flags()
	pf.StringVar(&po.Scheduler, "scheduler", bench.SchedulerCapstan, "capstan or kube-scheduler")
	pf.StringVar(&po.Kubeconfig, "kubeconfig", "", "kubeconfig of the cluster")
	pf.Float32Var(&po.QPS, "qps", 0, "client QPS (0: unlimited)")
	pf.IntVar(&po.Burst, "burst", 0, "client burst")
	pf.StringVar(&procProfile, "cpuprofile", "", "write a CPU profile of this process to this file")
	pf.StringVar(&memProfile, "memprofile", "", "write a heap profile of this process to this file when it stops")
	return []*cobra.Command{c, run, proc}
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
		"--timeout", o.Timeout.String(), "--qps", strconv.FormatFloat(float64(o.QPS), 'g', -1, 32), "--burst", strconv.Itoa(o.Burst)}
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
			fmt.Fprintf(log, "[%s/%s] %.0f pods/s, %.2f CPU s per 1000 pods\n", scheduler, workload, r.PodsPerSecond, r.CPUPer1000Pods)
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s on %s printed no result", scheduler, workload)
}

// schedulerRow is one line of the table.
type schedulerRow struct {
	res         *bench.SchedulerResult
	kubeDefault bool
}

func clientLimit(qps float32, burst int) string {
	if qps <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g/%d", qps, burst)
}

func printSchedulerResults(out io.Writer, o bench.SchedulerOptions, rows []schedulerRow) {
	fmt.Fprintf(out, "\nbench scheduler: %d nodes, %d pods; client QPS/burst asked for both: %s\n", o.Nodes, o.Pods, clientLimit(o.QPS, o.Burst))
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSCHEDULER\tCLIENT QPS/BURST\tPODS/S\tCPU S/1000 PODS\tPEAK RSS\tMACHINE BUSY\tVIOLATIONS\tPODS/NODE min-max, stddev")
	var capstanRes *bench.SchedulerResult
	for _, r := range rows {
		res := r.res
		name := res.Scheduler
		if r.kubeDefault {
			name += " (its defaults)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.2f\t%s\t%.0f%%\t%d\t%d-%d, %.2f\n", res.Workload, name, clientLimit(res.ClientQPS, res.ClientBurst),
			res.PodsPerSecond, res.CPUPer1000Pods, bench.MiB(res.PeakRSSBytes), 100*res.MachineBusy, res.Violations, res.MinPerNode, res.MaxPerNode, res.StdDev)
	}
	tw.Flush()
	fmt.Fprintln(out, "\nOutcomes (each workload's must be the same for both schedulers):")
	tw = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSCHEDULER\tBOUND\tPENDING\tPREEMPTED\tMAX GROUP SKEW")
	for _, r := range rows {
		if !r.kubeDefault {
			res := r.res
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", res.Workload, res.Scheduler, res.Bound, res.Pending, res.Preempted, res.MaxGroupSkew)
		}
	}
	tw.Flush()
	fmt.Fprintln(out, "\nRatios, capstan / kube-scheduler at the same client limit (pods/s: higher is better; CPU per pod: kube-scheduler's over capstan's):")
	tw = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tPODS/S\tCPU PER POD")
	for _, r := range rows {
		switch {
		case r.res.Scheduler == bench.SchedulerCapstan:
			capstanRes = r.res
		case !r.kubeDefault && capstanRes != nil && capstanRes.Workload == r.res.Workload:
			fmt.Fprintf(tw, "%s\t%.2fx\t%.2fx\n", r.res.Workload, capstanRes.PodsPerSecond/r.res.PodsPerSecond, r.res.CPUPer1000Pods/capstanRes.CPUPer1000Pods)
		}
	}
	tw.Flush()
}

// compareOutcomes fails when capstan decided a workload otherwise than
// kube-scheduler at the same client limit: a difference is a bug.
func compareOutcomes(rows []schedulerRow) error {
	byWorkload := map[string]*bench.SchedulerResult{}
	var diffs []string
	for _, r := range rows {
		if r.kubeDefault {
			continue
		}
		other, ok := byWorkload[r.res.Workload]
		if !ok {
			byWorkload[r.res.Workload] = r.res
			continue
		}
		if other.Outcome != r.res.Outcome {
			diffs = append(diffs, fmt.Sprintf("%s: %s %+v, %s %+v", r.res.Workload, other.Scheduler, other.Outcome, r.res.Scheduler, r.res.Outcome))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("capstan's outcome differs from kube-scheduler's:\n  %s", strings.Join(diffs, "\n  "))
	}
	return nil
}
