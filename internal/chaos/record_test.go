package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Each campaign's rows are appended to the record file, its header
// written once: the file accumulates every campaign run.
func TestRecordAccumulates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "campaigns.md")
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	first := &Report{Kills: 3, Runs: []*RunResult{
		{Scenario: "mco", Kills: make([]KillResult, 3)},
		{Scenario: "mco", Kills: make([]KillResult, 2), NotReached: []Kill{{After: time.Second}}},
		{Scenario: "etcd", Kills: make([]KillResult, 3), Violations: []Violation{{"watch", "x"}}},
	}}
	if err := first.Record(path, "abc123", 7, at); err != nil {
		t.Fatal(err)
	}
	second := &Report{EveryPoint: true, Runs: []*RunResult{{Scenario: "update", Kills: make([]KillResult, 4)}}}
	if err := second.Record(path, "def456", 8, at); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := RecordHeader +
		"| 2026-12-06 | abc123 | 7 | mco | 2 | 3 random | 5 | 1 | 0 |\n" +
		"| 2026-12-06 | abc123 | 7 | etcd | 1 | 3 random | 3 | 0 | 1 |\n" +
		"| 2026-12-06 | def456 | 8 | update | 1 | every point, 0 random | 4 | 0 | 0 |\n"
	if string(raw) != want {
		t.Fatalf("the record file:\n%s\nwant:\n%s", raw, want)
	}
	if err := first.Record(filepath.Join(t.TempDir(), "no", "such", "dir", "f.md"), "abc", 1, at); err == nil || !strings.Contains(err.Error(), "--record") {
		t.Errorf("a record file in a missing dir: %v", err)
	}
}

// A point armed again after a kill waits for the hit it planned, counted
// from the operation's start: the hits the earlier processes made count.
func TestArmWaitsForThePlannedHit(t *testing.T) {
	op := newOperation()
	op.enter("rollout")
	dir := t.TempDir()
	rn := &runner{r: &Run{op: op}, armFile: filepath.Join(dir, "arm"), opts: &Options{},
		kills: []Kill{{Point: "mcd/mid-apply", Hit: 3}, {After: 5 * time.Second}, {Point: "mcd/mid-reboot", Hit: 1}}}
	for _, tc := range []struct {
		hits map[string]int
		want string
	}{
		{nil, "mcd/mid-apply:3,mcd/mid-reboot:1\n"},
		{map[string]int{"mcd/mid-apply": 2}, "mcd/mid-apply:1,mcd/mid-reboot:1\n"},
		{map[string]int{"mcd/mid-apply": 5, "mcd/mid-reboot": 1}, "mcd/mid-apply:1,mcd/mid-reboot:1\n"},
	} {
		rn.hits = tc.hits
		if err := rn.arm(); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(rn.armFile); string(got) != tc.want {
			t.Errorf("with hits %v the arm file holds %q, want %q", tc.hits, got, tc.want)
		}
	}
}
