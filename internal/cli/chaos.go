package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/chaos"
	"github.com/capstan-dev/capstan/internal/failpoint"
)

func newChaosCommand() *cobra.Command {
	var (
		names  []string
		opts   = chaos.Options{Runs: 1, Kills: 3}
		seed   int64
		list   bool
		record string
	)
	c := &cobra.Command{
		Use:   "chaos",
		Short: "A fault campaign: kill capstan up in the middle of a scenario, again and again, then check what it did",
		Long: `Runs each scenario on a fresh capstan up child process, SIGKILLs it --kills
times (at instants of the operation drawn from the seed, or at named points of
capstan's code: between a decision and its write, mid-drain, mid-reboot,
mid-apply), starts it again each time, and once the scenario has settled
checks its invariants against the cluster's storage and API: the operation
completed, nothing was done twice, no limit was exceeded, no acknowledged
write was lost, history and conditions agree, and capstan started every time.

Kills land only once the scenario's operation has started: a named point is
armed then (its hits counted from then on), and a random instant is drawn
over the operation's measured time (OP in the table). Each kill records the
phase it landed in. --every-point arms every named point of a scenario at
once, kills at whichever the operation reaches first, arms the rest in the
next start, and so on, then kills --kills times at random instants: what CI
runs. There a point the operation never reaches is a violation.

Run i of a scenario uses seed --seed+i (--same-seed: --seed itself, every
run a replay of one); each violation prints the command that replays its
run. The exit status is 1 when any invariant was violated.
--list shows the scenarios and the kill points.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			out := c.OutOrStdout()
			if list {
				printChaosList(out)
				return nil
			}
			if seed < 0 {
				return fmt.Errorf("--seed %d must not be negative", seed)
			}
			if opts.Runs < 1 {
				return fmt.Errorf("--runs %d must be at least 1", opts.Runs)
			}
			if opts.Timeout < 0 {
				return fmt.Errorf("--timeout %s must not be negative", opts.Timeout)
			}
			if opts.Kills < 0 {
				return fmt.Errorf("--kills %d must not be negative", opts.Kills)
			}
			if !c.Flags().Changed("seed") {
				seed = time.Now().Unix()
			}
			opts.Seed = uint64(seed)
			var err error
			if opts.Scenarios, err = chaos.Find(splitNames(names)); err != nil {
				return fmt.Errorf("--scenario: %w", err)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding the capstan binary to run: %w", err)
			}
			opts.Command = func(args ...string) *exec.Cmd { return exec.Command(exe, args...) }
			opts.Log = out
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			kills := fmt.Sprintf("%d kills each", opts.Kills)
			if opts.EveryPoint {
				kills = fmt.Sprintf("a kill at every point and %d at random instants each", opts.Kills)
			}
			fmt.Fprintf(out, "capstan chaos: %d run(s) of %s, %s, seed %d\n", opts.Runs, strings.Join(scenarioNames(opts.Scenarios), ", "), kills, opts.Seed)
			rep, err := chaos.Campaign(ctx, opts)
			if rep != nil && len(rep.Runs) > 0 {
				fmt.Fprintln(out)
				rep.Print(out, replayCommand)
				if record != "" {
					if rerr := rep.Record(record, buildCommit(), opts.Seed, time.Now()); rerr != nil {
						return rerr
					}
				}
			}
			if err != nil {
				return err
			}
			if n := rep.Violations(); n > 0 {
				return fmt.Errorf("%d invariant violations", n)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&names, "scenario", []string{"all"}, "scenarios to run (comma-separated), or all")
	f.IntVar(&opts.Runs, "runs", opts.Runs, "runs of each scenario")
	f.BoolVar(&opts.SameSeed, "same-seed", false, "every run with --seed itself: --runs replays of one run, to see how often it reproduces")
	f.Int64Var(&seed, "seed", 0, "seed of the first run (default: the current time)")
	f.IntVar(&opts.Kills, "kills", opts.Kills, "SIGKILLs in each run (with --every-point: at random instants, after the points)")
	f.BoolVar(&opts.EveryPoint, "every-point", false, "kill once at every named point of a scenario, in the order the operation reaches them, then --kills times at random instants")
	f.StringVar(&opts.Dir, "dir", "", "where the runs' data dirs go (created if missing; default: the system's temp dir)")
	f.BoolVar(&opts.Keep, "keep", false, "keep every run's data dir (a run with a violation keeps its own anyway)")
	f.DurationVar(&opts.StartTimeout, "start-timeout", 3*time.Minute, "how long each start of capstan up may take")
	f.DurationVar(&opts.Timeout, "timeout", 0, "how long the operation may take to complete after the last kill (default: the scenario's own)")
	f.BoolVar(&list, "list", false, "list the scenarios and the kill points, and exit")
	f.StringVar(&record, "record", "", "append the campaign's table rows (seed, scenario, runs, kills, violations) to this markdown file")
	return c
}

func splitNames(names []string) []string {
	var out []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return []string{"all"}
	}
	return out
}

func scenarioNames(ss []*chaos.Scenario) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func replayCommand(scenario string, seed uint64, kills int, everyPoint bool) string {
	every := ""
	if everyPoint {
		every = " --every-point"
	}
	return fmt.Sprintf("capstan chaos --scenario %s --seed %d --kills %d%s --runs 1", scenario, seed, kills, every)
}

func printChaosList(out interface{ Write([]byte) (int, error) }) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tKILL POINTS\tWHAT IT CHECKS")
	for _, s := range chaos.Scenarios() {
		var points []string
		for _, p := range s.Points {
			points = append(points, p.Name)
		}
		if len(points) == 0 {
			points = []string{"(random instants only)"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, strings.Join(points, ","), s.Doc)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "KILL POINT\tWHERE")
	for _, p := range failpoint.Points {
		fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.Doc)
	}
	tw.Flush()
}

// buildCommit is the commit capstan was built from, as Go records it
// ("+dirty" when the tree had changes). A build without version control
// information (GOFLAGS=-buildvcs=false, go run) asks git for the checkout
// it runs in, and says so; else "unknown".
func buildCommit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return gitCommit()
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return gitCommit()
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// gitCommit is the commit of the git checkout capstan runs in, marked as
// read from the checkout, not the build ("unknown" outside one).
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out)) + " (checkout)"
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev = strings.TrimSuffix(rev, " (checkout)") + "+dirty (checkout)"
	}
	return rev
}
