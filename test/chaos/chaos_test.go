// Package chaos runs, on every test run, what must never break unnoticed
// and needs no shared cluster: a fixed-seed fault campaign over every
// scenario of `capstan chaos`, and every `capstan bench` at a tiny size.
// Each starts `capstan up` (or the benchmark's clusters) in child
// processes: this test binary, acting as the capstan binary.
package chaos

import (
	"context"
	"fmt"
	"os"
	"regexp"
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

func TestMain(m *testing.M) {
	if os.Getenv(testenv.CLIEnv) == "1" {
		// This binary, standing in for capstan, is a test build: it
		// honours the planted bugs its environment names.
		if err := planted.Allow(); err != nil {
			fmt.Fprintln(os.Stderr, "capstan:", err)
			os.Exit(1)
		}
		os.Exit(cli.Run())
	}
	os.Exit(m.Run())
}

// campaignSeed fixes the kills of the campaign CI runs: the same points
// and instants on every run, so a failure replays with
// `capstan chaos --scenario NAME --seed SEED --every-point --kills N --runs 1`.
const campaignSeed = 20261124

// Every scenario, killed at each of its points (all armed at once, in
// whatever order the operation reaches them; scenarios without points at
// two random instants), settles with every invariant holding; every kill
// lands inside the operation, and every point is reached.
func TestCampaign(t *testing.T) {
	for _, s := range chaos.Scenarios() {
		t.Run(s.Name, func(t *testing.T) {
			kills := 0
			if len(s.Points) == 0 {
				kills = 2
			}
			rep, err := chaos.Campaign(context.Background(), chaos.Options{
				Scenarios: []*chaos.Scenario{s}, Runs: 1, Seed: campaignSeed, Kills: kills, EveryPoint: true,
				Command: testenv.CapstanProcess, Dir: t.TempDir(), Log: testWriter{t},
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
			}
		})
	}
}

// plantedKills are the kills a planted bug needs to show: none, unless
// it lives in a restart.
var plantedKills = map[string][]chaos.Kill{
	planted.UpdateTwice: {{Point: failpoint.CVOMidApply, Hit: 1}},
}

// The campaign catches every planted bug: run with the bug switched on,
// its scenario reports a violation of the invariant that promises to
// catch it.
func TestPlantedBugs(t *testing.T) {
	for _, bug := range planted.Bugs {
		t.Run(bug.Name, func(t *testing.T) {
			s, err := chaos.Find([]string{bug.Scenario})
			if err != nil {
				t.Fatal(err)
			}
			kills := plantedKills[bug.Name]
			if kills == nil {
				kills = []chaos.Kill{}
			}
			rep, err := chaos.Campaign(context.Background(), chaos.Options{
				Scenarios: s, Runs: 1, Seed: campaignSeed, Plan: kills, Env: []string{planted.Env + "=" + bug.Name},
				Command: testenv.CapstanProcess, Dir: t.TempDir(), Log: testWriter{t},
			})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, run := range rep.Runs {
				for _, v := range run.Violations {
					got = append(got, v.Invariant)
				}
			}
			if !slices.Contains(got, bug.Invariant) {
				t.Errorf("with %s planted, the %s scenario reported %v: not a violation of %q", bug.Name, bug.Scenario, got, bug.Invariant)
			}
		})
	}
}

// testWriter logs each line a campaign prints.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The capstan chaos command refuses what it cannot run, and lists what it
// can.
func TestChaosCommand(t *testing.T) {
	out := testenv.CLIOK(t, "chaos", "--list")
	for _, s := range chaos.Scenarios() {
		if !strings.Contains(out, s.Name+" ") {
			t.Errorf("--list does not show scenario %s:\n%s", s.Name, out)
		}
	}
	if !strings.Contains(out, "mcd/mid-reboot") {
		t.Errorf("--list does not show the kill points:\n%s", out)
	}
	for _, tc := range []struct{ args, want string }{
		{"--scenario nope", `--scenario: no scenario "nope" (known: update, autoscaler, machineset, machineset-cloud, pause, mco, mco-pause, eviction, etcd, etcd-two, etcd-failed, etcd-member, etcd-pause, etcd-partition, etcd-apiserver-cut, etcd-relabel, or all)`},
		{"--runs 0", "--runs 0 must be at least 1"},
		{"--kills -1", "--kills -1 must not be negative"},
		{"--seed -3", "--seed -3 must not be negative"},
	} {
		out, err := testenv.CLI(append([]string{"chaos"}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("capstan chaos %s: %v (%s), want an error with %q", tc.args, err, out, tc.want)
		}
	}
}

// tinyBenches run each benchmark at a size that takes seconds: enough to
// go through every step it measures.
var tinyBenches = map[string][]string{
	"up":         {"--nodes", "3", "--pods", "10"},
	"machines":   {"--replicas", "2", "--pods-per-node", "1", "--timeout", "3m"},
	"autoscaler": {"--nodes", "10", "--pending", "20", "--pods-per-node", "3", "--underutilized", "3", "--runs", "1"},
	"cvo":        {"--manifests", "20", "--operators", "4", "--timeout", "3m"},
	"etcd":       {"--members", "3", "--kills", "2", "--rest", "1s", "--timeout", "2m"},
	"mco":        {"--nodes", "3", "--max-unavailable", "2", "--apply", "0s", "--reboot", "1s", "--timeout", "3m"},
	"scheduler":  {"--nodes", "5", "--pods", "20", "--workload", "basic", "--timeout", "3m"},
}

// Every capstan bench runs to its report at a tiny size: a benchmark that
// breaks fails here, not in someone's hands. A benchmark added without a
// tiny size fails too.
func TestEveryBenchRuns(t *testing.T) {
	bench, _, err := cli.NewRootCommand(nil, nil).Find([]string{"bench"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range bench.Commands() {
		if !c.Hidden && c.Name() != "help" {
			names = append(names, c.Name())
		}
	}
	for name := range tinyBenches {
		if !slices.Contains(names, name) {
			t.Errorf("tinyBenches has %q, which is not a capstan bench (%v)", name, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			args, ok := tinyBenches[name]
			if !ok {
				t.Fatalf("capstan bench %s has no tiny size in tinyBenches: CI would not run it", name)
			}
			start := time.Now()
			code, out := testenv.RunCapstan(t, append([]string{"bench", name}, args...)...)
			if code != 0 {
				t.Fatalf("capstan bench %s %s exited %d:\n%s", name, strings.Join(args, " "), code, out)
			}
			if !regexp.MustCompile(`(?m)^bench ` + name + `: `).MatchString(out) {
				t.Errorf("capstan bench %s printed no report (a line \"bench %s: ...\"):\n%s", name, name, out)
			}
			t.Logf("capstan bench %s %s: %s\n%s", name, strings.Join(args, " "), time.Since(start).Round(time.Second), lastLines(out, 12))
		})
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
