package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// ruleTests is the part of a promtool rule test file the coverage check
// reads.
type ruleTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTests []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// Every alert of the embedded rule files is unit-tested as upstream tests
// its rules: rules/tests holds a promtool rule test file per rule file
// (input series, evaluation times, the alerts expected then, with their
// labels and rendered annotations), run here by promtool itself (the
// go.mod tool github.com/prometheus/prometheus/cmd/promtool), and each
// alert is expected both firing and not firing somewhere in them.
func TestAlertRulesAsPromtoolTestsThem(t *testing.T) {
	tests, err := filepath.Glob("rules/tests/*_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(tests)
	firing, silent, covered := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, f := range tests {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rt ruleTests
		if err := yaml.Unmarshal(raw, &rt); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, rf := range rt.RuleFiles {
			covered[filepath.Base(rf)] = true
		}
		for _, tg := range rt.Tests {
			for _, a := range tg.AlertRuleTests {
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname] = true
				} else {
					silent[a.Alertname] = true
				}
			}
		}
	}
	for _, name := range ruleFileNames() {
		base := filepath.Base(name)
		if !covered[base] {
			t.Errorf("no rule test file reads %s", base)
		}
		raw, err := RuleFile(base)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := yaml.Unmarshal(raw, &rf); err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				if !firing[r.Alert] {
					t.Errorf("%s (%s): no rule test expects it firing", r.Alert, base)
				}
				if !silent[r.Alert] {
					t.Errorf("%s (%s): no rule test expects it silent", r.Alert, base)
				}
			}
		}
	}

	promtool := filepath.Join(t.TempDir(), "promtool")
	// Without the service discovery plugins, which pull in every cloud's
	// SDK and which rule tests do not use.
	build := exec.Command("go", "build", "-tags", "remove_all_sd", "-o", promtool, "github.com/prometheus/prometheus/cmd/promtool")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building promtool: %v\n%s", err, out)
	}
	names := make([]string, len(tests))
	for i, f := range tests {
		names[i] = filepath.Base(f)
	}
	run := exec.Command(promtool, append([]string{"test", "rules"}, names...)...)
	run.Dir = "rules/tests"
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "SUCCESS"); n != len(tests) {
		t.Errorf("promtool passed %d files of %d:\n%s", n, len(tests), out)
	}
}
