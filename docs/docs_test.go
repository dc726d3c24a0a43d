// Package docs holds the user documentation that is not the README; its
// test keeps the documents honest about the code.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/planted"
)

// Every test and fuzz target the bad-input table names exists, and every
// row names at least one.
func TestBadInputTableNamesRealTests(t *testing.T) {
	checkTableTests(t, "bad-input.md", "| Input ", 30)
}

// So does the threat model: every boundary names the tests that attack
// it.
func TestSecurityTableNamesRealTests(t *testing.T) {
	checkTableTests(t, "security.md", "| Boundary ", 14)
}

// So does the metrics document: every family and every alert has a test.
func TestMetricsTablesNameRealTests(t *testing.T) {
	checkTableTests(t, "metrics.md", "| Family ", 40)
	raw, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, alert := range []string{"ClusterOperatorDown", "ClusterOperatorDegraded", "ClusterVersionOperatorDown", "CannotRetrieveUpdates",
		"UpdateAvailable", "KubeNodeNotReady", "KubeNodeUnreachable", "MachineWithNoRunningPhase", "MachineNotYetDeleted",
		"MCCDrainError", "MCDRebootError", "MCDPivotError", "ClusterAutoscalerUnschedulablePods", "ClusterAutoscalerNodeCountNearLimit",
		"etcdMembersDown", "etcdNoLeader", "etcdInsufficientMembers"} {
		if !strings.Contains(string(raw), "| `"+alert+"` |") {
			t.Errorf("metrics.md has no row for the alert %s", alert)
		}
	}
}

// checkTableTests checks that every row of the tables of a document
// (rows starting "| ", but the headers, which start with header) names a
// test or fuzz target that exists; the document has at least minRows.
func checkTableTests(t *testing.T, doc, header string, minRows int) {
	t.Helper()
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")
	rows := 0
	for i, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, header) || strings.HasPrefix(line, "| Alert ") {
			continue
		}
		rows++
		names := named.FindAllStringSubmatch(line, -1)
		if len(names) == 0 {
			t.Errorf("%s:%d names no test", doc, i+1)
		}
		for _, n := range names {
			if !defined[n[1]] {
				t.Errorf("%s:%d names %s, which is not a test or fuzz target of the repository", doc, i+1, n[1])
			}
		}
	}
	if rows < minRows {
		t.Errorf("%s has %d rows; it lost some", doc, rows)
	}
}

// Every gate of the etcd document names the test that shows it.
func TestEtcdGatesNameRealTests(t *testing.T) {
	raw, err := os.ReadFile("etcd.md")
	if err != nil {
		t.Fatal(err)
	}
	_, gates, ok := strings.Cut(string(raw), "| Gate |")
	if !ok {
		t.Fatal("etcd.md has no table of gates")
	}
	gates, _, _ = strings.Cut(gates, "\n\n")
	tmp := filepath.Join(t.TempDir(), "gates.md")
	if err := os.WriteFile(tmp, []byte("| Gate |"+gates+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkTableTests(t, tmp, "| Gate ", 10)
}

// docs/chaos.md's table of planted bugs has a row for every bug that can
// be planted, with the scenario and the invariant the test holds it to.
func TestChaosTableListsEveryPlantedBug(t *testing.T) {
	raw, err := os.ReadFile("chaos.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if name, _, ok := strings.Cut(strings.TrimPrefix(line, "| `"), "`"); ok && strings.HasPrefix(line, "| `") {
			rows[name] = line
		}
	}
	for _, b := range planted.Bugs {
		row, ok := rows[b.Name]
		if !ok {
			t.Errorf("chaos.md has no row for the planted bug %s", b.Name)
			continue
		}
		if !strings.Contains(row, "| "+b.Scenario+" |") || !strings.Contains(row, "`"+b.Invariant+"`") {
			t.Errorf("chaos.md's row for %s does not name its scenario %s and invariant %s: %s", b.Name, b.Scenario, b.Invariant, row)
		}
	}
}

// The README is a landing page: short, the two set-up commands, nothing
// outside the repository; the rest is here, one page per area.
func TestTheReadmeIsALandingPage(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; a landing page has at most 250 (move the detail to docs/)", n)
	}
	for _, want := range []string{"\n    go run ./cmd/capstan up\n", "\n    make test\n", "## A five-minute tour", "## What-if: capstan simulate"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md has no %q", want)
		}
	}
	if strings.Contains(readme, "../shared") {
		t.Error("README.md points outside the repository")
	}
	for _, page := range []string{"scheduling", "taints", "machines", "autoscaler", "updates", "mco", "etcd", "metrics", "console",
		"existing-cluster", "chaos", "simulate", "benchmarks", "security", "bad-input", "architecture"} {
		if !strings.Contains(readme, "](docs/"+page+".md)") {
			t.Errorf("README.md does not link docs/%s.md", page)
		}
	}
}

// Every relative link of the README and the documents leads to a file of
// the repository.
func TestEveryLinkResolves(t *testing.T) {
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := filepath.Glob("cli/*.md")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, doc := range append(append([]string{"../README.md"}, docs...), cli...) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", doc, m[1])
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d links checked", checked)
	}
}
