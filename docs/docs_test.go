// Package docs holds the user documentation that is not the README; its
// test keeps the documents honest about the code.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
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
	defined := definedTests(t)
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

// definedTests are the tests and fuzz targets of the repository, by
// name: the repository's test files read once, whichever tests ask.
func definedTests(t *testing.T) map[string]bool {
	t.Helper()
	defined, err := readDefinedTests()
	if err != nil {
		t.Fatal(err)
	}
	return defined
}

var readDefinedTests = sync.OnceValues(func() (map[string]bool, error) {
	defined := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
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
	return defined, err
})

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

// exampleMarker precedes every example of the README and the documents:
// the tests that run what it shows, or "illustrative" for one no test
// runs as written (output whose names and times vary, commands for
// another cluster).
var exampleMarker = regexp.MustCompile(`^<!-- example: (illustrative|(?:(?:Test|Fuzz)[A-Za-z0-9_]+)(?:, (?:Test|Fuzz)[A-Za-z0-9_]+)*) -->$`)

// docExample is a code block of a document: fenced, or indented after a
// blank line.
type docExample struct {
	line     int    // where it starts, from 1
	marker   string // the marker's text, or "" when none precedes it
	unclosed bool   // a fence without its closing line (exactly ```)
}

// examples finds the code blocks of a Markdown document and the marker
// before each (the last non-blank line before the block).
func examples(doc string) []docExample {
	lines := strings.Split(doc, "\n")
	indented := func(l string) bool { return strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t") }
	marker := func(i int) string {
		for j := i - 1; j >= 0; j-- {
			if strings.TrimSpace(lines[j]) != "" {
				return lines[j]
			}
		}
		return ""
	}
	var found []docExample
	for i := 0; i < len(lines); i++ {
		switch {
		case strings.HasPrefix(lines[i], "```"):
			ex := docExample{line: i + 1, marker: marker(i)}
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			}
			ex.unclosed = i == len(lines)
			found = append(found, ex)
		case indented(lines[i]) && strings.TrimSpace(lines[i]) != "" && (i == 0 || strings.TrimSpace(lines[i-1]) == ""):
			found = append(found, docExample{line: i + 1, marker: marker(i)})
			for i < len(lines) && (indented(lines[i]) || strings.TrimSpace(lines[i]) == "") {
				i++
			}
			i--
		}
	}
	return found
}

// Every example of the README and the documents (not the generated CLI
// reference) is run by a test it names, which exists, or is marked as
// illustrative.
func TestEveryExampleIsRunOrIllustrative(t *testing.T) {
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := definedTests(t)
	total, run := 0, 0
	for _, doc := range append([]string{"../README.md"}, docs...) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range examples(string(raw)) {
			total++
			if ex.unclosed {
				t.Errorf("%s:%d: a fenced block never closed by a line of exactly ```", doc, ex.line)
			}
			m := exampleMarker.FindStringSubmatch(ex.marker)
			if m == nil {
				t.Errorf("%s:%d: an example without a marker before it: <!-- example: TestName[, TestName...] --> naming the tests that run it, or <!-- example: illustrative -->", doc, ex.line)
				continue
			}
			if m[1] == "illustrative" {
				continue
			}
			run++
			for _, name := range strings.Split(m[1], ", ") {
				if !defined[name] {
					t.Errorf("%s:%d: the example names %s, which is not a test or fuzz target of the repository", doc, ex.line, name)
				}
			}
		}
	}
	if total < 40 {
		t.Errorf("only %d examples found in the README and docs/: the scan lost some", total)
	}
	t.Logf("%d examples, %d of them run by the tests they name", total, run)
}

// The scan finds fenced and indented blocks and the marker before each,
// and nothing in a fenced block's own indented lines; a fence closed by
// a line with more than its backquotes is not closed.
func TestExamplesAreFound(t *testing.T) {
	doc := "Text.\n\n<!-- example: TestA -->\n\n    cmd one\n\n    cmd two\n\nMore text.\n" +
		"<!-- example: illustrative -->\n```\nfenced\n\n    not a block of its own\n```\n\n    unmarked\n\n```\nnever closed\n``` text\n"
	got := examples(doc)
	want := []docExample{{5, "<!-- example: TestA -->", false}, {11, "<!-- example: illustrative -->", false}, {17, "```", false}, {19, "    unmarked", true}}
	if !slices.Equal(got, want) {
		t.Errorf("examples() = %v, want %v", got, want)
	}
}
