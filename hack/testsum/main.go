// Command testsum reads `go test -json` on standard input and prints what
// `go test` prints without -v (each package's result, the whole output of
// each test that failed), then, last, a summary of the failures: each
// failed test with its error lines. A CI log cut to its end still names
// what failed and why, not only the tail of a failed test's logs. Before
// it come the slowest tests (those of a minute or more, at most 20), the
// parents beside their subtests, to show where a run's minutes go.
//
// It exits 1 when a test, a package or a build failed, or when the stream
// ended with a package still running (go test died).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
	Elapsed    float64
}

// slowTest is a test that ran for a minute or more.
type slowTest struct {
	name    string
	elapsed float64
}

// errorLine is a t.Error or t.Fatal line: an indented "file.go:N: ".
var errorLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// Lines of a failed test the summary keeps, and of a failed package's own
// output (a panic, a timeout).
const (
	maxLinesPerTest    = 12
	maxPackageTail     = 40
	maxSummaryLineSize = 400
	slowSeconds        = 60
	maxSlow            = 20
)

type failure struct {
	name  string
	lines []string
}

func main() {
	failed, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) (bool, error) {
	// output holds each running test's output, by package and test; a
	// package's own under the test "".
	output := map[string]map[string][]string{}
	running := map[string]bool{}
	var failures []failure
	var slow []slowTest
	anyFailed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (a build error printed as text): pass it on.
			fmt.Fprintln(out, string(line))
			continue
		}
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
			continue
		case "build-fail":
			anyFailed = true
			failures = append(failures, failure{name: e.ImportPath + " (build)"})
			continue
		}
		if output[e.Package] == nil {
			output[e.Package] = map[string][]string{}
		}
		switch e.Action {
		case "start":
			running[e.Package] = true
		case "output":
			output[e.Package][e.Test] = append(output[e.Package][e.Test], e.Output)
		}
		if (e.Action == "pass" || e.Action == "fail") && e.Test != "" && e.Elapsed >= slowSeconds {
			slow = append(slow, slowTest{name: e.Package + " " + e.Test, elapsed: e.Elapsed})
		}
		switch e.Action {
		case "pass", "skip":
			if e.Test == "" {
				delete(running, e.Package)
				printPackageResult(out, output[e.Package][""])
				delete(output, e.Package)
			} else {
				delete(output[e.Package], e.Test)
			}
		case "fail":
			anyFailed = true
			if e.Test != "" {
				lines := output[e.Package][e.Test]
				fmt.Fprint(out, strings.Join(lines, ""))
				summary := errorLines(lines)
				if len(summary) == 0 && !hasTestFailure(failures, e.Package+" "+e.Test+"/") {
					// No error line: a panic, or a timeout; its start says why.
					summary = head(lines, maxPackageTail)
				}
				failures = append(failures, failure{name: e.Package + " " + e.Test, lines: summary})
				delete(output[e.Package], e.Test)
				continue
			}
			delete(running, e.Package)
			own := output[e.Package][""]
			fmt.Fprint(out, strings.Join(own, ""))
			if !hasTestFailure(failures, e.Package+" ") {
				failures = append(failures, failure{name: e.Package, lines: tail(own, maxPackageTail)})
			}
			delete(output, e.Package)
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	var unfinished []string
	for pkg := range running {
		unfinished = append(unfinished, pkg)
	}
	sort.Strings(unfinished)
	for _, pkg := range unfinished {
		anyFailed = true
		failures = append(failures, failure{name: pkg + " (no result: go test ended first)", lines: tail(output[pkg][""], maxPackageTail)})
	}
	printSlowest(out, slow)
	if len(failures) > 0 {
		fmt.Fprintf(out, "\n=== %d failure(s):\n", len(failures))
		for _, f := range failures {
			fmt.Fprintf(out, "--- %s\n", f.name)
			for _, l := range f.lines {
				l = strings.TrimRight(l, "\n")
				if len(l) > maxSummaryLineSize {
					l = l[:maxSummaryLineSize] + " ..."
				}
				fmt.Fprintln(out, l)
			}
		}
	}
	return anyFailed, nil
}

// printSlowest prints the slowest tests, slowest first.
func printSlowest(out io.Writer, slow []slowTest) {
	if len(slow) == 0 {
		return
	}
	sort.SliceStable(slow, func(i, j int) bool { return slow[i].elapsed > slow[j].elapsed })
	fmt.Fprintf(out, "\n=== slowest tests (%ds or more):\n", slowSeconds)
	for _, s := range head(slow, maxSlow) {
		fmt.Fprintf(out, "%7.1fs  %s\n", s.elapsed, s.name)
	}
}

// printPackageResult prints the lines go test prints of a package that
// passed: its "ok" (or "?") line.
func printPackageResult(out io.Writer, lines []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?  ") || strings.HasPrefix(l, "ok\t") || strings.HasPrefix(l, "?\t") {
			fmt.Fprint(out, l)
		}
	}
}

// errorLines are the last of a failed test's t.Error, t.Fatal and t.Log
// lines (the output cannot tell them apart), each with its continuation
// lines, but not the log tails a helper printed (which start "last N
// lines").
func errorLines(lines []string) []string {
	var out []string
	keep := false
	for _, l := range lines {
		switch {
		case errorLine.MatchString(l):
			msg := errorLine.ReplaceAllString(l, "")
			keep = !strings.HasPrefix(msg, "last ") && !strings.HasPrefix(msg, "log and goroutine dump")
		case strings.HasPrefix(l, "=== ") || strings.HasPrefix(strings.TrimSpace(l), "--- "):
			keep = false
		}
		if keep {
			out = append(out, l)
		}
	}
	// t.Log lines look as t.Error lines do; the errors tend to come last.
	return tail(out, maxLinesPerTest)
}

// hasTestFailure reports whether a failure recorded so far is named with
// prefix ("PKG " for any test of a package, "PKG TEST/" for a subtest).
func hasTestFailure(failures []failure, prefix string) bool {
	for _, f := range failures {
		if strings.HasPrefix(f.name, prefix) {
			return true
		}
	}
	return false
}

func head[T any](lines []T, n int) []T {
	if len(lines) > n {
		return lines[:n]
	}
	return lines
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}
