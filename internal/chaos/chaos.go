// Package chaos is capstan's fault campaign: it runs a scenario (an
// update, an autoscaler cycle, a MachineSet scaled up and down, a pool's
// rollout, a node's pods evicted) on a fresh `capstan up` child process,
// kills that process with SIGKILL at instants chosen from a seed, or at
// named points of its code (see package failpoint), starts it again each
// time, and once the scenario has settled checks invariants: the
// operation completed, nothing was done twice, no limit was exceeded, no
// acknowledged write was lost, history and conditions agree, and the
// process started every time.
//
// The invariants read what the cluster did from its own storage (every
// etcd revision of the objects concerned, across the kills) and from the
// API, never from capstan's bookkeeping. A run is reproduced by its seed:
// the same kills at the same points and delays.
package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/grpclog"
)

// Scenario is an operation a campaign kills capstan in the middle of.
type Scenario struct {
	Name string
	// Doc says what the scenario does and what it checks.
	Doc string
	// Args are `capstan up` flags beyond the campaign's own (data dir and
	// ports).
	Args []string
	// Span is the shortest the operation takes, as measured (the OP
	// column of `capstan chaos`): a kill at a random instant lands at an
	// instant of the operation's time (capstan's time up since the
	// operation started) drawn over it, so that every instant drawn
	// comes while the operation still runs.
	Span time.Duration
	// Points are the named points a kill may land at, with the most
	// hits after which the kill comes, counted from the operation's start
	// (or the start of capstan during it), in the order the operation
	// reaches them.
	Points []Point
	// Timeout bounds the wait for the operation to complete after the
	// last kill.
	Timeout time.Duration
	// Progress drives the operation, from the first start of capstan on,
	// every half second until it reports that it is complete (or why
	// not): it creates what the operation needs and takes its next step
	// once the cluster shows the last one done. It reads where the
	// operation is from the cluster, never from memory, and each of its
	// writes may be made twice: a kill can land anywhere in it. It names
	// the operation's phase as it goes (phase and setPhase, or Run.enter):
	// the first phase other than setup starts the operation, and kills
	// land only after that.
	Progress func(ctx context.Context, r *Run) (done bool, why string, err error)
	// SampleMembers has the run sample the etcd membership (Run.Members).
	SampleMembers bool
	// CheckMembers, with SampleMembers, returns the violations the
	// membership samples show. It needs nothing from the API, so it runs
	// even when the cluster's history cannot be read: a bug that loses
	// the quorum for good is reported as the lost quorum it is.
	CheckMembers func(r *Run) []Violation
	// Faults are lasting faults injected in every start of the run
	// (failpoint.FaultEnv).
	Faults string
	// MaxOutage bounds how long the API may refuse writes while capstan
	// is up (DefaultMaxOutage when zero).
	MaxOutage time.Duration
	// MaxRecovery bounds how long after each kill the API may take to
	// take a write again (DefaultMaxRecovery when zero).
	MaxRecovery time.Duration
	// Prepare, when set, readies the run's data dir (r.DataDir) before
	// capstan's first start (a filesystem mounted in it), and returns what
	// undoes it after the run.
	Prepare func(r *Run) (undo func(), err error)
	// AfterKill, when set, runs after each kill, once the killed
	// capstan's processes are gone and before the next start (the power
	// scenario cuts the disk's power there).
	AfterKill func(dataDir string) error
	// Requires, when set, says why this machine cannot run the scenario
	// (nil when it can).
	Requires func() error
	// Check returns the scenario's invariant violations once the
	// operation is complete.
	Check func(ctx context.Context, r *Run) []Violation
	// Target, when set, is the process the kills land in instead of
	// capstan up, which then serves the whole run and is never killed.
	Target *Target
}

// Target is a process of its own that a scenario's kills land in: an
// operator run against the cluster as on an existing one, while capstan
// up, that cluster, serves throughout. Its kill points, lasting faults
// and planted bugs are the target's; capstan up runs without them.
type Target struct {
	// Setup runs once capstan up serves and the run's clients are
	// connected, before the target's first start (it starts what the
	// target acts on): it returns what undoes it after the run.
	Setup func(ctx context.Context, r *Run) (undo func(), err error)
	// Args is the target's command line at each start (a capstan
	// subcommand and its flags), as its admin would write it then.
	Args func(r *Run) ([]string, error)
	// UpLine is what the target prints once it acts.
	UpLine string
}

// The bounds of a scenario that sets none: an outage while up is a
// leader election or a member's restart (seconds), with room for a loaded
// machine; a recovery is capstan starting again, which takes 3 to 6
// seconds here.
const (
	DefaultMaxOutage   = 30 * time.Second
	DefaultMaxRecovery = time.Minute
)

// bounds are the scenario's outage and recovery bounds, defaults filled.
func (s *Scenario) bounds() (outage, recovery time.Duration) {
	outage, recovery = s.MaxOutage, s.MaxRecovery
	if outage == 0 {
		outage = DefaultMaxOutage
	}
	if recovery == 0 {
		recovery = DefaultMaxRecovery
	}
	return outage, recovery
}

// Point is a named kill point of a scenario.
type Point struct {
	Name string
	// MaxHit is the latest hit a kill may wait for (at least 1).
	MaxHit int
}

// Kill is one planned kill.
type Kill struct {
	// Point is the named point it lands at, on its Hit-th hit once armed;
	// "" means a random instant.
	Point string
	Hit   int
	// After is the random instant: the operation's time at which it
	// lands.
	After time.Duration
}

func (k Kill) String() string {
	if k.Point != "" {
		return fmt.Sprintf("at %s#%d", k.Point, k.Hit)
	}
	return fmt.Sprintf("at %.1fs of the operation", k.After.Seconds())
}

// PlanKills draws a run's kills from its seed: half of them at named
// points (when the scenario has any), half at random instants of the
// operation. The points keep the order the operation reaches them in,
// the instants come in time order, and the two are interleaved as drawn.
func PlanKills(s *Scenario, seed uint64, n int) []Kill {
	rnd := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	kills := make([]Kill, n)
	// order is each kill's place in its kind: a point's index, or the
	// instant.
	order := make([]int64, n)
	var points, instants []int
	taken := map[Kill]bool{}
	for i := range kills {
		if len(s.Points) > 0 && rnd.IntN(2) == 0 {
			j := rnd.IntN(len(s.Points))
			if k, at, ok := untakenHit(s.Points, j, 1+rnd.IntN(max(1, s.Points[j].MaxHit)), taken); ok {
				taken[k] = true
				kills[i], order[i] = k, int64(at)*1000+int64(k.Hit)
				points = append(points, i)
				continue
			}
		}
		kills[i] = Kill{After: time.Duration(rnd.Int64N(int64(max(s.Span, time.Second))))}
		order[i] = int64(kills[i].After)
		instants = append(instants, i)
	}
	for _, idx := range [][]int{points, instants} {
		sorted := slices.Clone(idx)
		sort.SliceStable(sorted, func(a, b int) bool { return order[sorted[a]] < order[sorted[b]] })
		planned := make([]Kill, len(idx))
		for i, k := range sorted {
			planned[i] = kills[k]
		}
		for i, k := range idx {
			kills[k] = planned[i]
		}
	}
	return kills
}

// untakenHit is the kill at point j's hit, or, when a kill is planned
// there already (the operation reaches it once: the second would never
// land), the next hit of a point not planned yet, in the points' order
// from there; false when every hit of every point is planned.
func untakenHit(points []Point, j, hit int, taken map[Kill]bool) (Kill, int, bool) {
	for n := range len(points) {
		at := (j + n) % len(points)
		from := 1
		if n == 0 {
			from = hit
		}
		for h := from; h <= max(1, points[at].MaxHit); h++ {
			if k := (Kill{Point: points[at].Name, Hit: h}); !taken[k] {
				return k, at, true
			}
		}
	}
	for h := 1; h < hit; h++ {
		if k := (Kill{Point: points[j].Name, Hit: h}); !taken[k] {
			return k, j, true
		}
	}
	return Kill{}, 0, false
}

// PlanEveryPoint plans a kill at the first hit of each of the scenario's
// points, then n kills at random instants drawn from seed: what CI runs,
// so that every (scenario, point) pair is reached (a point not reached is
// then a violation). The points are armed together, and land in the
// order the operation reaches them.
func PlanEveryPoint(s *Scenario, seed uint64, n int) []Kill {
	rnd := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	var kills []Kill
	for _, p := range s.Points {
		kills = append(kills, Kill{Point: p.Name, Hit: 1})
	}
	var instants []Kill
	for range n {
		instants = append(instants, Kill{After: time.Duration(rnd.Int64N(int64(max(s.Span, time.Second))))})
	}
	sort.Slice(instants, func(i, j int) bool { return instants[i].After < instants[j].After })
	return append(kills, instants...)
}

// Violation is an invariant that did not hold.
type Violation struct {
	Invariant string
	Detail    string
}

func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// Options configure a campaign.
type Options struct {
	Scenarios []*Scenario
	// Runs per scenario; run i uses seed Seed+i (Seed itself with
	// SameSeed: the runs replay one run).
	Runs     int
	Seed     uint64
	SameSeed bool
	Kills    int
	// EveryPoint plans a kill at each of a scenario's points, armed
	// together, before the Kills at random instants (PlanEveryPoint).
	EveryPoint bool
	// Plan, when set, is every run's kills, instead of kills drawn from
	// the seed.
	Plan []Kill
	// Env is added to the environment of every capstan up (a planted
	// bug, say).
	Env []string
	// Command returns the command that runs capstan with args: the
	// capstan binary, or a test binary standing in for it.
	Command func(args ...string) *exec.Cmd
	// Dir holds the runs' data dirs (default: the system's temp dir).
	Dir string
	// Keep keeps every run's data dir; a run with a violation keeps its
	// own anyway.
	Keep bool
	// StartTimeout bounds each start of capstan up.
	StartTimeout time.Duration
	// Timeout, when set, replaces the scenarios' bound on the wait for
	// the operation to complete (a run with a planted bug that keeps it
	// from completing need not wait long to report it).
	Timeout time.Duration
	// Log receives a line per run.
	Log io.Writer
}

// RunResult is what one run found.
type RunResult struct {
	Scenario string
	Seed     uint64
	Kills    []KillResult
	// NotReached are the planned kills that never landed: a point the
	// operation did not reach (also a violation), or a random instant
	// after the operation completed.
	NotReached []Kill
	Recoveries []time.Duration
	Violations []Violation
	// Changes counts the changes of stored objects the invariants read.
	Changes int
	// Operations counts the linearizability clients' operations checked.
	Operations int
	// Completed is when, from the run's start, the operation was seen
	// complete; Operation is the operation's time then (from its start,
	// capstan's downtime left out).
	Completed, Operation time.Duration
	// Outage is the longest the API refused writes while capstan was up
	// (a kill's own outage is a recovery, not counted here).
	Outage time.Duration
	// MaxOutage and MaxRecovery are the scenario's bounds.
	MaxOutage, MaxRecovery time.Duration
	// DataDir is kept when the run found a violation.
	DataDir  string
	Duration time.Duration
}

// Report is a campaign's results.
type Report struct {
	Kills      int
	EveryPoint bool
	Runs       []*RunResult
}

// Campaign runs every scenario opts.Runs times.
func Campaign(ctx context.Context, opts Options) (*Report, error) {
	if opts.Runs < 1 || opts.Kills < 0 || len(opts.Scenarios) == 0 || opts.Command == nil {
		return nil, fmt.Errorf("a campaign needs scenarios, at least one run, a non-negative number of kills and a command (have %d scenarios, %d runs, %d kills)", len(opts.Scenarios), opts.Runs, opts.Kills)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	// The storage client's connection attempts to a killed cluster are
	// expected, not news.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	// A scenario this machine cannot run is an error when it is the one
	// asked for, and skipped, saying so, among others.
	var runnable []*Scenario
	for _, s := range opts.Scenarios {
		if s.Requires != nil {
			if err := s.Requires(); err != nil {
				if len(opts.Scenarios) == 1 {
					return nil, fmt.Errorf("this machine cannot run the %s scenario: %w", s.Name, err)
				}
				fmt.Fprintf(opts.Log, "%s: skipped: %v\n", s.Name, err)
				continue
			}
		}
		runnable = append(runnable, s)
	}
	rep := &Report{Kills: opts.Kills, EveryPoint: opts.EveryPoint}
	for _, s := range runnable {
		for i := range opts.Runs {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			seed := opts.Seed + uint64(i)
			if opts.SameSeed {
				seed = opts.Seed
			}
			res, err := runOnce(ctx, &opts, s, seed)
			if err != nil {
				return rep, fmt.Errorf("%s, seed %d: %w", s.Name, seed, err)
			}
			rep.Runs = append(rep.Runs, res)
			status := "ok"
			if n := len(res.Violations); n > 0 {
				status = fmt.Sprintf("%d VIOLATIONS (data in %s)", n, res.DataDir)
			}
			fmt.Fprintf(opts.Log, "%s run %d/%d seed %d: %s; recovered in %s; longest API outage while up %.1fs; complete at %.0fs, the operation's %.0fs; %d changes and %d client operations checked; %.0fs\n", s.Name, i+1, opts.Runs, seed,
				status, durations(res.Recoveries), res.Outage.Seconds(), res.Completed.Seconds(), res.Operation.Seconds(), res.Changes, res.Operations, res.Duration.Seconds())
			for i, k := range res.Kills {
				fmt.Fprintf(opts.Log, "  kill %d %s\n", i+1, k)
			}
			for _, k := range res.NotReached {
				fmt.Fprintf(opts.Log, "  not reached: %s\n", k)
			}
			for _, v := range res.Violations {
				fmt.Fprintf(opts.Log, "  %s\n", indent(v.String()))
			}
		}
	}
	return rep, nil
}

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.1fs", d.Seconds())
	}
	return strings.Join(parts, "/")
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }

// Violations counts the violations of every run.
func (r *Report) Violations() int {
	n := 0
	for _, run := range r.Runs {
		n += len(run.Violations)
	}
	return n
}

// Print writes the table of the campaign, scenario by scenario, then each
// violation with the command that replays its run.
func (r *Report) Print(w io.Writer, replay func(scenario string, seed uint64, kills int, everyPoint bool) string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tRUNS\tKILLS\tNOT REACHED\tVIOLATIONS\tOP p50\tRECOVER p50\tRECOVER p99\tOUTAGE p50\tOUTAGE p99\tOUTAGE max\tBOUNDS\tKILLS BY PHASE")
	var order []string
	byScenario := map[string][]*RunResult{}
	for _, run := range r.Runs {
		if byScenario[run.Scenario] == nil {
			order = append(order, run.Scenario)
		}
		byScenario[run.Scenario] = append(byScenario[run.Scenario], run)
	}
	for _, name := range order {
		runs := byScenario[name]
		notReached, violations := 0, 0
		var kills []KillResult
		var rec, outages, ops []time.Duration
		for _, run := range runs {
			kills = append(kills, run.Kills...)
			notReached += len(run.NotReached)
			violations += len(run.Violations)
			rec = append(rec, run.Recoveries...)
			outages = append(outages, run.Outage)
			if run.Operation > 0 {
				ops = append(ops, run.Operation)
			}
		}
		bounds := fmt.Sprintf("outage %.0fs, recover %.0fs", runs[0].MaxOutage.Seconds(), runs[0].MaxRecovery.Seconds())
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, len(runs), len(kills), notReached, violations, quantile(ops, 0.5),
			quantile(rec, 0.5), quantile(rec, 0.99), quantile(outages, 0.5), quantile(outages, 0.99), quantile(outages, 1), bounds, phaseCounts(kills))
	}
	tw.Flush()
	for _, run := range r.Runs {
		for _, v := range run.Violations {
			fmt.Fprintf(w, "\n%s seed %d: %s\n  replay: %s\n", run.Scenario, run.Seed, indent(v.String()), replay(run.Scenario, run.Seed, r.Kills, r.EveryPoint))
			if run.DataDir != "" {
				fmt.Fprintf(w, "  data:   %s\n", run.DataDir)
			}
		}
	}
}

// quantile is the q-quantile of ds (nearest rank), "-" when empty.
func quantile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	i = min(max(i, 0), len(s)-1)
	return fmt.Sprintf("%.1fs", s[i].Seconds())
}

// Find returns the named scenarios ("all": every one).
func Find(names []string) ([]*Scenario, error) {
	var out []*Scenario
	for _, n := range names {
		if n == "all" {
			return Scenarios(), nil
		}
		i := slices.IndexFunc(Scenarios(), func(s *Scenario) bool { return s.Name == n })
		if i < 0 {
			known := make([]string, 0, len(Scenarios()))
			for _, s := range Scenarios() {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("no scenario %q (known: %s, or all)", n, strings.Join(known, ", "))
		}
		out = append(out, Scenarios()[i])
	}
	return out, nil
}

// tempDir is where a run's data dir goes.
func tempDir(opts *Options, scenario string, seed uint64) (string, error) {
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return "", fmt.Errorf("--dir: %w", err)
		}
	}
	return os.MkdirTemp(opts.Dir, fmt.Sprintf("capstan-chaos-%s-%d-", scenario, seed))
}

// RecordHeader is the header of a record file's table.
const RecordHeader = "| DATE | COMMIT | SEED | SCENARIO | RUNS | PLAN | KILLS | NOT REACHED | VIOLATIONS |\n|---|---|---|---|---|---|---|---|---|\n"

// Record appends the campaign's rows to the record file at path, one per
// scenario, as a markdown table (its header when the file is new or
// empty): runs accumulate across campaigns, and the table says how many
// kills each seed landed. commit names the capstan that ran them.
func (r *Report) Record(path, commit string, seed uint64, at time.Time) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("--record: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("--record: %w", err)
	}
	var b strings.Builder
	if st.Size() == 0 {
		b.WriteString(RecordHeader)
	}
	plan := fmt.Sprintf("%d random", r.Kills)
	if r.EveryPoint {
		plan = fmt.Sprintf("every point, %d random", r.Kills)
	}
	var order []string
	byScenario := map[string][]*RunResult{}
	for _, run := range r.Runs {
		if byScenario[run.Scenario] == nil {
			order = append(order, run.Scenario)
		}
		byScenario[run.Scenario] = append(byScenario[run.Scenario], run)
	}
	for _, name := range order {
		kills, notReached, violations := 0, 0, 0
		for _, run := range byScenario[name] {
			kills += len(run.Kills)
			notReached += len(run.NotReached)
			violations += len(run.Violations)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %s | %d | %d | %d |\n", at.UTC().Format("2006-01-02"), commit, seed, name,
			len(byScenario[name]), plan, kills, notReached, violations)
	}
	_, werr := f.WriteString(b.String())
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("--record %s: %w", path, werr)
	}
	return nil
}
