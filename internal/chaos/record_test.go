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
