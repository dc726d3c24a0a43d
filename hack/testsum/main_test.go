package main

import (
	"strings"
	"testing"
)

// A stream with a passing package, a failed subtest that logged a log
// tail after its error, a panicking package and a build failure: the
// summary names each failure with its error lines, last.
func TestSummary(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p/ok"}`,
		`{"Action":"output","Package":"p/ok","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"pass","Package":"p/ok","Test":"TestA","Elapsed":61.5}`,
		`{"Action":"pass","Package":"p/ok","Test":"TestQuick","Elapsed":59.9}`,
		`{"Action":"output","Package":"p/ok","Output":"ok  \tp/ok\t0.1s\n"}`,
		`{"Action":"pass","Package":"p/ok"}`,
		`{"Action":"start","Package":"p/bad"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB/sub","Output":"    b_test.go:9: progress\n"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB/sub","Output":"    b_test.go:12: the write was lost:\n"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB/sub","Output":"        ack-000003\n"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB/sub","Output":"    process.go:180: last 2 lines of capstan.log:\n"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB/sub","Output":"        I1127 noise\n"}`,
		`{"Action":"fail","Package":"p/bad","Test":"TestB/sub"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB","Output":"=== RUN   TestB\n"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB","Output":"    process.go:179: last 1 lines of capstan up:\n"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestB","Output":"        parent noise\n"}`,
		`{"Action":"fail","Package":"p/bad","Test":"TestB","Elapsed":300}`,
		`{"Action":"output","Package":"p/bad","Output":"FAIL\tp/bad\t3s\n"}`,
		`{"Action":"fail","Package":"p/bad"}`,
		`{"Action":"start","Package":"p/panics"}`,
		`{"Action":"output","Package":"p/panics","Output":"panic: test timed out after 1m\n"}`,
		`{"Action":"fail","Package":"p/panics"}`,
		`{"ImportPath":"p/nobuild [p/nobuild.test]","Action":"build-output","Output":"x.go:1: undefined: y\n"}`,
		`{"ImportPath":"p/nobuild [p/nobuild.test]","Action":"build-fail"}`,
		`{"Action":"start","Package":"p/cut"}`,
	}, "\n")
	var out strings.Builder
	failed, err := run(strings.NewReader(in), &out)
	if err != nil || !failed {
		t.Fatalf("run: failed %v, err %v, want failed", failed, err)
	}
	got := out.String()
	_, summary, ok := strings.Cut(got, "=== 5 failure(s):\n")
	if !ok {
		t.Fatalf("no summary of 5 failures:\n%s", got)
	}
	for _, want := range []string{
		"--- p/bad TestB/sub\n    b_test.go:9: progress\n    b_test.go:12: the write was lost:\n        ack-000003\n",
		"--- p/bad TestB\n",
		"--- p/panics\npanic: test timed out after 1m\n",
		"--- p/nobuild [p/nobuild.test] (build)\n",
		"--- p/cut (no result: go test ended first)\n",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	if !strings.Contains(got, "=== slowest tests (60s or more):\n  300.0s  p/bad TestB\n   61.5s  p/ok TestA\n\n") {
		t.Errorf("the slowest tests are not listed, slowest first, before the failures:\n%s", got)
	}
	if strings.Contains(got, "TestQuick") {
		t.Errorf("a test under a minute is listed as slow:\n%s", got)
	}
	// A parent of a failed subtest has no lines of its own to summarize.
	if strings.Contains(summary, "noise") {
		t.Errorf("the summary holds a log tail:\n%s", summary)
	}
	if !strings.Contains(got, "ok  \tp/ok\t0.1s\n") || strings.Contains(got, "=== RUN   TestA") {
		t.Errorf("a passing package prints its ok line only:\n%s", got)
	}
	if !strings.Contains(got, "x.go:1: undefined: y\n") {
		t.Errorf("the build's output is not passed on:\n%s", got)
	}

	failed, err = run(strings.NewReader(strings.Join(strings.Split(in, "\n")[:6], "\n")), &strings.Builder{})
	if err != nil || failed {
		t.Errorf("a passing stream: failed %v, err %v", failed, err)
	}
}
