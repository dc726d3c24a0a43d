// Package chaostest runs capstan chaos in tests: the fixed-seed campaign
// CI runs over every scenario, split in two test packages (test/chaos
// and test/chaosetcd) so that the two run side by side, and the planted
// bugs the campaign must catch.
package chaostest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/chaos"
	"github.com/capstan-dev/capstan/internal/cli"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// Seed fixes the kills of the campaign CI runs: the same points and
// instants on every run, so a failure replays with
// `capstan chaos --scenario NAME --seed SEED --every-point --kills N --runs 1`.
const Seed = 20261124

// Main is a chaos test package's TestMain: the test binary stands in for
// capstan (testenv.CapstanProcess) as a test build, which honours the
// planted bugs its environment names.
func Main(m *testing.M) {
	if os.Getenv(testenv.CLIEnv) == "1" {
		if err := planted.Allow(); err != nil {
			fmt.Fprintln(os.Stderr, "capstan:", err)
			os.Exit(1)
		}
		os.Exit(cli.Run())
	}
	os.Exit(m.Run())
}

// Etcd tells the scenarios of a three-master control plane (test/chaosetcd
// runs them) from the others (test/chaos).
func Etcd(s *chaos.Scenario) bool {
	i := slices.Index(s.Args, "--control-plane-nodes")
	return i >= 0 && i+1 < len(s.Args) && s.Args[i+1] == "3"
}

// Campaign runs each scenario that keep selects, killed at each of its
// points (all armed at once, in whatever order the operation reaches
// them; scenarios without points at two random instants): it settles with
// every invariant holding, every kill lands inside the operation, and
// every point is reached.
//
// The runs go one at a time: two at once in a package, beside the other
// package's, starved etcd on two cores (a member unhealthy for minutes).
func Campaign(t *testing.T, keep func(*chaos.Scenario) bool) {
	n := 0
	for _, s := range chaos.Scenarios() {
		if !keep(s) {
			continue
		}
		n++
		t.Run(s.Name, func(t *testing.T) {
			if s.Requires != nil {
				if err := s.Requires(); err != nil {
					t.Skipf("this machine cannot run the %s scenario: %v", s.Name, err)
				}
			}
			kills := 0
			if len(s.Points) == 0 {
				kills = 2
			}
			rep, err := chaos.Campaign(context.Background(), chaos.Options{
				Scenarios: []*chaos.Scenario{s}, Runs: 1, Seed: Seed, Kills: kills, EveryPoint: true,
				Command: testenv.CapstanProcess, Dir: t.TempDir(), Log: Writer{t},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, run := range rep.Runs {
				// Every point lands (one not reached is a violation too); a
				// random instant may come after the operation ended, but
				// one at least must land.
				points, instants := 0, 0
				for _, k := range run.Kills {
					if k.Kill.Point != "" {
						points++
					} else {
						instants++
					}
				}
				if points != len(s.Points) || (kills > 0 && instants == 0) {
					t.Errorf("%d kills at points and %d at instants landed, want %d and at least one of %d: %v (not reached: %v)",
						points, instants, len(s.Points), kills, run.Kills, run.NotReached)
				}
				for _, k := range run.Kills {
					if k.Phase == "setup" {
						t.Errorf("kill %s landed before the operation started", k)
					}
				}
				for _, v := range run.Violations {
					t.Errorf("%s\n  replay: capstan chaos --scenario %s --seed %d --every-point --kills %d --runs 1", v, run.Scenario, run.Seed, kills)
				}
				if len(run.Violations) > 0 {
					logTails(t, run.DataDir)
				}
			}
		})
	}
	if n == 0 {
		t.Fatal("no scenario selected")
	}
}

// logTails logs the end of each log of a run's data dir, which the
// test's temporary dir takes with it: what a failure in CI leaves to
// read.
func logTails(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		raw, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		t.Logf("last %d lines of %s:\n%s", min(40, len(lines)), filepath.Base(l), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// plantedKills are the kills a planted bug needs to show: none, unless
// it lives in a restart.
var plantedKills = map[string][]chaos.Kill{
	planted.UpdateTwice:    {{Point: failpoint.CVOMidApply, Hit: 1}},
	planted.RestoreOnStart: {{Point: failpoint.MachineSetCreate, Hit: 1}},
	// A power cut drops what was not synced.
	planted.GraphDataUnsynced: {{Point: failpoint.MachineSetCreate, Hit: 1}},
}

// plantedTimeout bounds a planted bug's operation (after its kill, if it
// has one): some bugs keep the operation from ever completing (a machine
// with ten instances never settles), which would otherwise wait out the
// scenario's own timeout, and the invariants are checked on what the
// cluster did, complete or not. Every bug shows well within it: the
// longest operation of a planted run, the update, takes about 50s in all,
// and its bug shows at the first start after its kill.
const plantedTimeout = 45 * time.Second

// ChaosPackageBugs are the planted bugs test/chaos runs, test/chaosetcd
// the others: their runs even out the two packages' times (test/chaosetcd
// also runs the eleven etcd scenarios), so that the two test slots of a CI
// run free up about together for test/cvo and test/e2e.
var ChaosPackageBugs = []string{planted.UpdateTwice, planted.RestoreOnStart, planted.StaleReads, planted.WatchResumesAtHead,
	planted.RebootInTwoWrites, planted.UnavailableInMemory, planted.UpcomingInMemory}

// PlantedBugs runs, for every planted bug keep selects, its scenario
// with the bug switched on: the campaign must report a violation of the
// invariant that promises to catch it.
func PlantedBugs(t *testing.T, keep func(planted.Bug) bool) {
	n := 0
	for _, bug := range planted.Bugs {
		if !keep(bug) {
			continue
		}
		n++
		t.Run(bug.Name, func(t *testing.T) {
			s, err := chaos.Find([]string{bug.Scenario})
			if err != nil {
				t.Fatal(err)
			}
			kills := plantedKills[bug.Name]
			if kills == nil {
				kills = []chaos.Kill{}
			}
			opts := chaos.Options{Scenarios: s, Runs: 1, Seed: Seed, Plan: kills, Timeout: plantedTimeout,
				Command: testenv.CapstanProcess, Log: Writer{t}}
			if bug.InCampaign {
				// In the campaign's own checks: planted here.
				undo, err := planted.Plant(bug.Name)
				if err != nil {
					t.Fatal(err)
				}
				defer undo()
			} else {
				opts.Env = []string{planted.Env + "=" + bug.Name}
			}
			if bug.Window {
				// A window bug is no bug without its kill: the run
				// without kills is clean, the every-point run is not.
				opts.Dir = t.TempDir()
				if got := violations(t, opts); len(got) > 0 {
					t.Errorf("with %s planted and no kill, the %s scenario reported %v: the bug shows without a kill in its window", bug.Name, bug.Scenario, got)
				}
				opts.Plan, opts.EveryPoint = nil, true
			}
			opts.Dir = t.TempDir()
			if got := violations(t, opts); !slices.Contains(got, bug.Invariant) {
				t.Errorf("with %s planted, the %s scenario reported %v: not a violation of %q", bug.Name, bug.Scenario, got, bug.Invariant)
			}
		})
	}
	if n == 0 {
		t.Fatal("no planted bug selected")
	}
}

// violations runs a campaign and returns the invariants its runs
// reported.
func violations(t *testing.T, opts chaos.Options) []string {
	t.Helper()
	rep, err := chaos.Campaign(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, run := range rep.Runs {
		for _, v := range run.Violations {
			got = append(got, v.Invariant)
		}
	}
	return got
}

// Writer logs each line a campaign prints.
type Writer struct{ T *testing.T }

func (w Writer) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
