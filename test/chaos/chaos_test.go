// Package chaos runs, on every test run, what must never break unnoticed
// and needs no shared cluster: a fixed-seed fault campaign over the
// scenarios of `capstan chaos` but the etcd ones (test/chaosetcd runs
// those, beside it), two of the planted bugs, and every `capstan bench`
// at a tiny size.
// Each starts `capstan up` (or the benchmark's clusters) in child
// processes: this test binary, acting as the capstan binary.
package chaos

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/chaos"
	"github.com/capstan-dev/capstan/internal/chaos/chaostest"
	"github.com/capstan-dev/capstan/internal/cli"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/testenv"
)

func TestMain(m *testing.M) { chaostest.Main(m) }

// Every scenario but the etcd ones (test/chaosetcd), killed at each of
// its points, settles with every invariant holding.
func TestCampaign(t *testing.T) {
	chaostest.Campaign(t, func(s *chaos.Scenario) bool { return !chaostest.Etcd(s) })
}

// The campaign catches the planted bugs of ChaosPackageBugs (test/chaosetcd
// runs the others).
func TestPlantedBugs(t *testing.T) {
	chaostest.PlantedBugs(t, func(b planted.Bug) bool { return slices.Contains(chaostest.ChaosPackageBugs, b.Name) })
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
		{"--scenario nope", `--scenario: no scenario "nope" (known: update, autoscaler, machineset, machineset-cloud, pause, power, mco, mco-pause, eviction, etcd, etcd-two, etcd-failed, etcd-member, etcd-pause, etcd-partition, etcd-bridge, etcd-minority, etcd-apiserver-cut, etcd-relabel, etcd-disk-full, etcd-remote, or all)`},
		{"--runs 0", "--runs 0 must be at least 1"},
		{"--kills -1", "--kills -1 must not be negative"},
		{"--seed -3", "--seed -3 must not be negative"},
		{"--timeout -1s", "--timeout -1s must not be negative"},
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
	"console":    {"--nodes", "60", "--edits", "2", "--churn", "5", "--timeout", "3m"},
	"mco":        {"--nodes", "3", "--max-unavailable", "2", "--apply", "0s", "--reboot", "1s", "--timeout", "3m"},
	"scheduler":  {"--nodes", "5", "--pods", "20", "--workload", "basic,topology-spread,preemption", "--timeout", "3m"},
	"scale":      {"--steps", "3/10,5/30", "--control-plane-nodes", "1", "--progress", "2s", "--timeout", "3m", "--runs", "1", "--baseline", "1s", "--idle", "2s"},
	"simulate":   {"--nodes", "6", "--pods-per-node", "2", "--speed", "20", "--quiet", "6m"},
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
