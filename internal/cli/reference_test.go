package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command reference in docs/cli is what the commands say now: a
// command, flag or help text changed without `go run ./hack/clidocs`
// fails here.
func TestTheCommandReferenceIsCurrent(t *testing.T) {
	t.Setenv("CAPSTAN_DATA_DIR", "")
	dir := filepath.Join("..", "..", ReferenceDir)
	pages := ReferencePages()
	if len(pages) < 50 {
		t.Fatalf("only %d reference pages", len(pages))
	}
	var stale []string
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			stale = append(stale, name)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := pages[filepath.Base(f)]; !ok {
			stale = append(stale, filepath.Base(f)+" (no such command)")
		}
	}
	if len(stale) > 0 {
		t.Errorf("docs/cli is out of date (run go run ./hack/clidocs): %s", strings.Join(stale, ", "))
	}
	// Every page links to its commands and back to its parent.
	up := string(pages["capstan_simulate_run.md"])
	for _, want := range []string{"# capstan simulate run\n", "capstan simulate run --snapshot FILE --change KIND=ARG ... [flags]", "update=VERSION", "--speed float", "Part of [capstan simulate](capstan_simulate.md)."} {
		if !strings.Contains(up, want) {
			t.Errorf("capstan_simulate_run.md has no %q:\n%s", want, up)
		}
	}
	if root := string(pages["capstan.md"]); !strings.Contains(root, "- [capstan up](capstan_up.md): ") {
		t.Errorf("capstan.md does not list capstan up:\n%s", root)
	}
}
